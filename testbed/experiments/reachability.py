"""Reachability: every host pings every other host; loss and round-trip times per pair.
Then, on the idle fabric, one pair at the longest distance pings alone: its path's round
trip beside the physical floor (each hop's serialisation and configured delay), and the
all-pairs phase gets the same CPU-bound verdict as a throughput phase: a latency measured
while the emulator waited for a core is the machine's, not the fabric's."""
from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

from testbed.config.capacity import Capacity
from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import ETHERNET_HEADER_BYTES
from topologies.graph import distances_to, shortest_paths
from topologies.model import Topology

from .base import Context, Experiment, Outcome, Phase
from .load import Load, rated


@dataclass(frozen=True, kw_only=True)
class Reachability(ExperimentSpec):
    type: Literal["reachability"] = "reachability"
    on_cluster: ClassVar[bool] = True
    count: int = 3
    interval_s: float = 0.2

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if self.count < 1:
            raise SpecError(f"{path}.count: must be >= 1 (got {self.count})")


HEADER = ["src", "dst", "sent_pkts", "received_pkts", "loss_pct", "rtt_avg_ms", "rtt_max_ms",
          "rtt_min_ms"]


PING_PAYLOAD_BYTES = 56  # ping's default: ICMP 8 + IP 20 on top
IDLE_PINGS = 10


def ping_frame_bytes(payload: int = PING_PAYLOAD_BYTES) -> int:
    return payload + 8 + 20 + ETHERNET_HEADER_BYTES


def farthest_pair(topo: Topology) -> tuple[str, str]:
    """The first host and the host farthest from it (the longest path a ping takes)."""
    src = topo.hosts[0].name
    dist = distances_to(topo, src)
    dst = max((h.name for h in topo.hosts[1:]), key=lambda h: (dist.get(h, -1), h))
    return src, dst


def rtt_floor_ms(topo: Topology, src: str, dst: str, frame_bytes: int, delay_us: int,
                 rate_mbps: float | None = None) -> float:
    """The round trip a frame of `frame_bytes` (there and back) cannot beat on real
    hardware: serialisation on every link of a shortest path (at `rate_mbps` when the spec
    overrides the topology's rates) plus the configured delay at every switch egress."""
    path = shortest_paths(topo, src, dst)[0]
    one_way = 0.0
    for u, v in zip(path, path[1:]):
        link = topo.link_between(u, v)
        assert link is not None  # consecutive nodes of a path
        one_way += frame_bytes * 8 / ((rate_mbps or link.rate_mbps) * 1e6)
        if not topo.is_host(u):
            one_way += delay_us / 1e6
    return round(2 * one_way * 1000, 4)


# A source's pings, all at once, from one shell in the host: one process started per source
# instead of one per pair (on another server each start is an ssh session).
PING_MANY = 'for ip in "$@"; do ping -n -q -c "$C" -i "$I" -W 2 "$ip" & done; wait'


def ping_all(fab: Phase, count: int = 3, interval_s: float = 0.2,
             among: list[str] | None = None) -> list[list]:
    """Every host pings every other host (or every one of `among` each other; a source's
    pings all at once, one source after another): the rows of reachability.csv (HEADER)."""
    rows = []
    hosts = [h for h in fab.topo.hosts if among is None or h.name in among]
    for src in hosts:
        dsts = [dst for dst in hosts if dst is not src]
        argv = ["env", f"C={count}", f"I={interval_s:g}", "sh", "-c", PING_MANY, "sh",
                *(dst.ip for dst in dsts)]
        blocks = ping_blocks(fab.popen(src.name, argv).communicate(timeout=60)[0])
        for dst in dsts:
            rows.append([src.name, dst.name, *parse_ping(blocks.get(dst.ip, ""), count)])
    return rows


def ping_blocks(text: str) -> dict[str, str]:
    """Concurrent pings' output, by destination: each one's summary ("--- IP ping
    statistics ---" and the lines after it, which ping writes at once when it ends)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("--- ") and line.endswith(" ping statistics ---"):
            current = blocks.setdefault(line.split()[1], [])
        elif line.startswith("PING ") or not line.strip():
            current = None
        if current is not None:
            current.append(line)
    return {ip: "\n".join(lines) for ip, lines in blocks.items()}


def run(ctx: Context, exp: Reachability) -> Outcome:
    topo = ctx.topo
    out = Outcome()
    with ctx.fabric(topo, ctx.spec.controller.routing, "reachability") as fab:
        with ctx.traffic_phase(fab, out, "reachability") as checks:
            rows = ping_all(fab, exp.count, exp.interval_s)
        a, b = farthest_pair(topo)
        argv = ["ping", "-n", "-q", "-c", str(IDLE_PINGS), "-i", "0.2", "-W", "2",
                topo.host(b).ip]
        idle = parse_ping(fab.popen(a, argv).communicate(timeout=60)[0], IDLE_PINGS)
    ctx.write_csv("reachability.csv", HEADER, rows)
    links = ctx.spec.links
    floor = rtt_floor_ms(topo, a, b, ping_frame_bytes(), links.delay_us, links.rate_mbps)
    return analyse(rows, out, checks["cpu"]["cpu_bound"], (a, b, idle[5], floor))


def analyse(rows: list[list], out: Outcome | None = None, cpu_bound: bool = False,
            idle: tuple[str, str, float | None, float] | None = None) -> Outcome:
    """Headline and warnings from the rows of reachability.csv, the phase's CPU-bound verdict
    and the idle pair's probe (src, dst, minimum RTT in ms, physical floor in ms)."""
    from testbed.measure.cpu import OVS_DELAY_LIMIT_MS  # runtime side: not at import
    out = out or Outcome()
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
                    "rtt_min_median_ms": round(statistics.median(rtt_mins), 3) if rtt_mins else None,
                    "cpu_bound": cpu_bound}
    if failed:  # no fault is ever injected here: a lost ping is a broken fabric
        out.warnings.append(f"reachability: {len(failed)} pairs lost pings, e.g. {failed[:3]}")
        out.degraded.append(f"reachability: {len(failed)} of {len(rows)} pairs lost pings "
                            f"({100 * (sent - received) / max(1, sent):.1f}% of "
                            f"{sent}), e.g. {', '.join(failed[:3])}")
    if cpu_bound:
        out.warnings.append("reachability: the round-trip times above were measured while the "
                            "emulation was CPU-bound; they are the machine's, not the fabric's")
    if idle is not None:
        src, dst, rtt, floor = idle
        added = round(rtt - floor, 3) if rtt is not None else None
        out.headline.update({"idle_pair": f"{src}->{dst}", "idle_rtt_min_ms": rtt,
                             "rtt_floor_ms": floor, "emulator_added_ms": added})
        if rtt is None:
            out.warnings.append(f"reachability: {src}->{dst} did not answer on the idle fabric")
        elif added is not None and added > OVS_DELAY_LIMIT_MS:
            out.warnings.append(
                f"reachability: on the idle fabric {src}->{dst} took {rtt} ms, {added} ms above "
                f"its physical floor ({floor} ms): the emulator's forwarding adds more than "
                f"{OVS_DELAY_LIMIT_MS:g} ms, so latencies are not faithful")
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


def loads(spec: Spec, topo: Topology, exp: Reachability, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: pings, a packet per pair now and then (no flows to price)."""
    yield Load("reachability", rated(spec, topo), spec.links.mtu_bytes)


EXPERIMENT = Experiment(spec=Reachability, run=run, load=loads)
