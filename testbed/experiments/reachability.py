"""Reachability: every host pings every other host; loss and round-trip times per pair."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec
from topologies.model import Topology

from .base import Context, Experiment, Outcome


@dataclass(frozen=True, kw_only=True)
class Reachability(ExperimentSpec):
    type: Literal["reachability"] = "reachability"
    count: int = 3
    interval_s: float = 0.2

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if self.count < 1:
            raise SpecError(f"{path}.count: must be >= 1 (got {self.count})")


HEADER = ["src", "dst", "sent_pkts", "received_pkts", "loss_pct", "rtt_avg_ms", "rtt_max_ms",
          "rtt_min_ms"]


def run(ctx: Context, exp: Reachability) -> Outcome:
    topo = ctx.topo
    rows = []
    with ctx.fabric(topo, ctx.spec.controller.routing, "reachability") as fab:
        for src in topo.hosts:
            procs = []
            for dst in topo.hosts:
                if dst is src:
                    continue
                argv = ["ping", "-n", "-q", "-c", str(exp.count), "-i", f"{exp.interval_s:g}",
                        "-W", "2", dst.ip]
                procs.append((dst, fab.popen(src.name, argv)))
            for dst, proc in procs:
                text = proc.communicate(timeout=60)[0]
                rows.append([src.name, dst.name, *parse_ping(text, exp.count)])
    ctx.write_csv("reachability.csv", HEADER, rows)
    return analyse(rows)


def analyse(rows: list[list]) -> Outcome:
    """Headline and warnings from the rows of reachability.csv."""
    out = Outcome()
    sent = sum(r[2] for r in rows)
    received = sum(r[3] for r in rows)
    failed = [f"{r[0]}->{r[1]}" for r in rows if r[3] < r[2]]
    rtts = [r[5] for r in rows if r[5] is not None]
    # A pair's first ping also waits for ARP through the controller (all pairs start at
    # once); its minimum is the path's own round trip.
    rtt_mins = [r[7] for r in rows if r[7] is not None]
    out.headline = {"pairs": len(rows), "pings_sent": sent, "pings_received": received,
                    "loss_pct": round(100 * (sent - received) / max(1, sent), 3),
                    "pairs_with_loss": len(failed),
                    "rtt_median_ms": round(statistics.median(rtts), 3) if rtts else None,
                    "rtt_max_ms": round(max(rtts), 3) if rtts else None,
                    "rtt_min_median_ms": round(statistics.median(rtt_mins), 3) if rtt_mins else None}
    if failed:
        out.warnings.append(f"reachability: {len(failed)} pairs lost pings, e.g. {failed[:3]}")
    return out


def parse_ping(text: str, count: int) -> list:
    """[sent, received, loss %, rtt avg, rtt max, rtt min] from ping's summary."""
    sent, received, avg, mx, mn = count, 0, None, None, None
    for line in text.splitlines():
        if "packets transmitted" in line:
            parts = line.split(",")
            sent = int(parts[0].split()[0])
            received = int(parts[1].split()[0])
        if line.startswith("rtt") or line.startswith("round-trip"):
            vals = line.split("=")[1].split()[0].split("/")
            mn, avg, mx = float(vals[0]), float(vals[1]), float(vals[2])
    loss = round(100 * (sent - received) / max(1, sent), 2)
    return [sent, received, loss, avg, mx, mn]


EXPERIMENT = Experiment(spec=Reachability, run=run)
