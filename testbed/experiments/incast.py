"""TCP incast (Phanishayee 2008, Vasudevan 2009): N synchronized senders return a fixed
block split N ways to one reader through a shallow buffer; goodput and TCP timeouts vs N for
a lossy fabric, ECN marking, PFC on a lossless class, and a lower RTO minimum."""
from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.config.capacity import Capacity
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.network import positive
from testbed.config.qos import EcnProfile, PfcConfig, QosConfig, TrafficClass, check_pfc_thresholds
from testbed.config.qos import validate as validate_qos
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import tcp_payload_fraction
from testbed.results.plots import mark_cpu_bound, pyplot, save, several_experiments, tagged, title
from topologies import dumbbell
from topologies.model import Topology

from . import qos_common as qc
from .base import Context, Experiment, Outcome, ecn_congestion_control
from .load import Load, into_one

INCAST_VARIANTS = ("lossy", "ecn", "pfc", "rto")


@dataclass(frozen=True, kw_only=True)
class Incast(ExperimentSpec):
    """TCP incast (Phanishayee 2008, Vasudevan 2009): N synchronized senders return a fixed
    block split N ways to one reader through a shallow buffer; goodput and TCP timeouts vs N,
    for a lossy fabric, ECN marking, PFC on a lossless class, and a lower RTO minimum."""
    type: Literal["incast"] = "incast"
    senders: list[int] = field(default_factory=lambda: [1, 2, 4, 6, 8, 10, 12, 15])
    variants: list[str] = field(default_factory=lambda: list(INCAST_VARIANTS))
    rate_mbps: float = 100.0
    buffer_pkts: int = 32
    block_bytes: int = 1_000_000
    rounds: int = 20
    burst_us: int = 1000  # HTB catch-up allowance on switch ports, see docs/FIDELITY.md
    k_pkts: float = 8.0
    rto_min_us: int = 5000
    xoff_bytes: int = 12000
    xon_bytes: int = 6000
    headroom_bytes: int = 64000  # in flight while the pause takes effect (ms here, FIDELITY.md)
    dscp: int = 26
    # links, switches or the controller failing during every traffic phase (as a
    # permutation's, config/faults.py); at_s counts from the phase's traffic start
    faults: list[FabricFault] = field(default_factory=list)

    def fabric(self) -> Topology:
        return dumbbell(senders=max(self.senders or [1]), receivers=1,
                        access_rate_mbps=self.rate_mbps, bottleneck_rate_mbps=self.rate_mbps)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if not self.senders or min(self.senders) < 1 or max(self.senders) > 63:
            raise SpecError(f"{path}.senders: sender counts in 1..63 (got {self.senders})")
        check_faults(self.faults, path, self.fabric())  # on the fabric the senders make
        for j, v in enumerate(self.variants):
            if v not in INCAST_VARIANTS:
                raise SpecError(f"{path}.variants[{j}]: one of {', '.join(INCAST_VARIANTS)} "
                                f"(got {v!r})")
        for name in ("buffer_pkts", "block_bytes", "rounds", "k_pkts", "rto_min_us"):
            positive(getattr(self, name), f"{path}.{name}")
        if self.k_pkts >= self.buffer_pkts:
            raise SpecError(f"{path}.k_pkts: must be below buffer_pkts")
        if not 0 <= self.dscp <= 63:
            raise SpecError(f"{path}.dscp: DSCP must be in 0..63 (got {self.dscp})")
        check_pfc_thresholds(self.xoff_bytes, self.xon_bytes, self.headroom_bytes, 1500, path)
        validate_qos(incast_qos(self, "pfc"), path, 1500, self.buffer_pkts, None)


def incast_qos(exp: Incast, variant: str) -> QosConfig:
    """The classes an incast variant runs with (also used by the experiment)."""
    ecn = EcnProfile(k=exp.k_pkts) if variant == "ecn" else None
    classes = [TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts, ecn=ecn)]
    pfc = None
    if variant == "pfc":
        classes.append(TrafficClass(name="lossless", dscp=[exp.dscp], priority=3,
                                    lossless=True))
        pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                        headroom_bytes=exp.headroom_bytes)
    else:
        classes[0] = dataclasses.replace(classes[0], dscp=sorted({0, exp.dscp}))
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def run(ctx: Context, exp: Incast) -> Outcome:
    out = Outcome()
    n_max = max(exp.senders)
    topo = exp.fabric()
    reader = f"h{n_max + 1}"
    ecn_cc = ecn_congestion_control(ctx.congestion_controls())
    rows, summary, queue_rows = [], {}, []
    for variant in exp.variants:
        cfg = incast_qos(exp, variant)
        hosts = dataclasses.replace(
            ctx.spec.hosts, ecn=variant == "ecn",
            congestion_control=ecn_cc if variant == "ecn" else ctx.spec.hosts.congestion_control,
            rto_min_us=exp.rto_min_us if variant == "rto" else None)
        label = f"incast {variant}"
        with ctx.fabric(topo, "single", label, qos=cfg, hosts=hosts, burst_us=exp.burst_us,
                        buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
            dp = fab.dataplane()
            sampler = ctx.class_sampler(dp, qc.switch_slots(dp))
            sampler.start()
            servers = [fab.start_process(f"h{i + 1}", [sys.executable, "-m",
                                     "testbed.workloads.incast", "serve", "--port", "7000",
                                     "--dscp", str(exp.dscp)], f"incast server h{i + 1}",
                                     ctx.out_dir / "flows" /
                                     ctx.raw_name(f"incast-{variant}-server-h{i + 1}.log"))
                       for i in range(n_max)]
            try:
                fab.wait_listening([(f"h{i + 1}", 7000) for i in range(n_max)])
                for n in exp.senders:
                    senders = [f"h{i + 1}" for i in range(n)]
                    t_before = sum(fab.netstat(h, "TCPTimeouts") for h in senders)
                    drops_before = qc.fabric_drops(dp)
                    t_ns = time.monotonic_ns()
                    with ctx.traffic_phase(fab, out, f"{label} N={n}") as checks, \
                            ctx.faults(fab, exp.faults, f"{label} N={n}") as checks["faults"]:
                        res = fab.run_process(reader, [
                            sys.executable, "-m", "testbed.workloads.incast", "read",
                            "--servers", ",".join(f"{topo.host(h).ip}:7000" for h in senders),
                            "--block-bytes", str(exp.block_bytes), "--rounds", str(exp.rounds),
                            "--dscp", str(exp.dscp)], timeout=exp.rounds * 30 + 30)
                    t_end_ns = time.monotonic_ns()
                    drops = {k: v - drops_before[k] for k, v in qc.fabric_drops(dp).items()}
                    timeouts = sum(fab.netstat(h, "TCPTimeouts") for h in senders) - t_before
                    rounds = json.loads(res)["round_s"][1:]  # the first round opens cwnd
                    goodput = [exp.block_bytes * 8 / t / 1e6 for t in rounds]
                    pfc = qc.pfc_summary(fab.qos_status_dir, t_ns, t_end_ns)
                    row = {"variant": variant, "senders": n,
                           "goodput_mbps": round(statistics.mean(goodput), 3),
                           "goodput_min_mbps": round(min(goodput), 3),
                           "round_p50_ms": round(statistics.median(rounds) * 1000, 2),
                           "round_max_ms": round(max(rounds) * 1000, 2),
                           "tcp_timeouts": timeouts, **drops,
                           "pauses": pfc["pauses"],
                           "pause_applied_p50_us": pfc.get("reaction_applied_us", {}).get("p50"),
                           "cpu_bound": checks["cpu"]["cpu_bound"],
                           "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"]}
                    rows.append(row)
                    ctx.log(f"  {label} N={n}: {row['goodput_mbps']} Mb/s, "
                            f"{timeouts} timeouts, {drops['switch_drops']} drops, "
                            f"{drops['lossless_overflow']} headroom overflows, "
                            f"{pfc['pauses']} pauses")
                summary[variant] = qc.pfc_summary(fab.qos_status_dir)
            finally:
                fab.stop_processes(servers)
                sampler.stop()
                queue_rows += qc.class_queue_rows(dp, sampler.samples, label)
                dp.close()
    ctx.write_csv("incast.csv", list(rows[0]), [list(r.values()) for r in rows])
    ctx.write_csv(qc.CLASS_QUEUES, qc.CLASS_QUEUES_HEADER, queue_rows)
    payload = exp.rate_mbps * tcp_payload_fraction(ctx.spec.links.mtu_bytes)
    out.headline, warnings = analyse(rows, exp, summary, payload)
    out.warnings += warnings
    return out


def analyse(rows: list[dict], exp: Incast, pfc_reaction: dict,
            payload_mbps: float) -> tuple[dict, list[str]]:
    """Headline and warnings from incast.csv's rows: per variant the goodput at the largest
    N, its collapse from the best N, drops, timeouts and headroom overflows there."""
    n_max = max(exp.senders)
    headline: dict = {"link_payload_mbps": round(payload_mbps, 2), "burst_us": exp.burst_us,
                      "buffer_pkts": exp.buffer_pkts, "block_bytes": exp.block_bytes,
                      "pfc_reaction": pfc_reaction.get("pfc")}
    for variant in exp.variants:
        vr = [r for r in rows if r["variant"] == variant]
        best = max(r["goodput_mbps"] for r in vr)
        at_max = [r for r in vr if r["senders"] == n_max][0]
        headline[variant] = {
            "goodput_at_max_n_mbps": at_max["goodput_mbps"],
            "collapse_from_best": round(1 - at_max["goodput_mbps"] / best, 3) if best else None,
            "drops_at_max_n": at_max["switch_drops"], "timeouts_at_max_n": at_max["tcp_timeouts"],
            "lossless_overflow_at_max_n": at_max["lossless_overflow"]}
    warnings = []
    if "pfc" in exp.variants and (headline["pfc"]["drops_at_max_n"]
                                  or headline["pfc"]["lossless_overflow_at_max_n"]):
        warnings.append("incast: the fabric dropped packets with PFC on the lossless class "
                        "(headroom too small for the measured pause reaction time?)")
    return headline, warnings


def plot(rows: list[dict], plots: Path) -> Path:
    """Goodput and TCP timeouts against the number of synchronised senders, per variant
    (and experiment, when there are several); CPU-bound points marked."""
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.3))
    several = several_experiments(rows)
    by = defaultdict(list)  # a variant of one experiment -> its rows
    for r in rows:
        by[tagged(r["variant"], r, several)].append(r)
    for variant, rs in by.items():
        n = [int(r["senders"]) for r in rs]
        ax.plot(n, [float(r["goodput_mbps"]) for r in rs], "o-", label=variant)
        ax2.plot(n, [int(r["tcp_timeouts"]) for r in rs], "o-", label=variant)
    mark_cpu_bound(ax, rows, [float(r["goodput_mbps"]) for r in rows],
                   [int(r["senders"]) for r in rows])
    ax.set_xlabel("synchronized senders N (count)")
    ax.set_ylabel("goodput (Mb/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("goodput of a fixed block split N ways", fontsize=9)
    ax.legend(fontsize=8)
    ax2.set_xlabel("synchronized senders N (count)")
    ax2.set_ylabel("TCP timeouts (count, all senders)")
    ax2.legend(fontsize=8)
    fig.suptitle(title("TCP incast", "goodput and timeouts vs senders", rows), fontsize=10)
    return save(fig, plots / "incast.png")


def loads(spec: Spec, topo: Topology, exp: Incast, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: the most senders it runs, all answering the receiver at once."""
    yield into_one(exp.fabric(), spec.links.mtu_bytes, max(exp.senders))


EXPERIMENT = Experiment(spec=Incast, run=run, load=loads, plots={"incast.csv": plot, **qc.PLOTS},
                        dir_plots=qc.DIR_PLOTS)
