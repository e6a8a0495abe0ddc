"""Calibration of the emulated links and queues: does a link deliver its rate (as TCP
payload), does a bottleneck queue fill to its buffer and drop there, and only there."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.config.capacity import Capacity
from testbed.config.loader import SpecError
from testbed.config.network import positive
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import tcp_payload_fraction
from testbed.results.plots import (
    mark_cpu_bound,
    pyplot,
    save,
    several_experiments,
    tagged,
    title,
)
from testbed.results.stats import percentile
from testbed.workloads.model.flows import assign_ports
from topologies import dumbbell, nonblocking
from topologies.model import Topology, at_rate, ifname

from .base import Context, Experiment, Outcome, check_cc
from .load import Load, rated


@dataclass(frozen=True, kw_only=True)
class LinkCalibration(ExperimentSpec):
    type: Literal["link_calibration"] = "link_calibration"
    rates_mbps: list[float] = field(default_factory=lambda: [10.0, 50.0, 100.0])
    duration_s: float = 10.0
    omit_s: float = 2.0

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if not self.rates_mbps:
            raise SpecError(f"{path}.rates_mbps: at least one rate")
        for j, r in enumerate(self.rates_mbps):
            positive(r, f"{path}.rates_mbps[{j}]")


@dataclass(frozen=True, kw_only=True)
class QueueCalibration(ExperimentSpec):
    type: Literal["queue_calibration"] = "queue_calibration"
    rate_mbps: float = 20.0
    access_rate_mbps: float = 100.0
    buffer_pkts: int = 100
    duration_s: float = 15.0
    sample_hz: float = 200.0

    def fabric(self) -> Topology:
        return dumbbell(senders=1, receivers=1, access_rate_mbps=self.access_rate_mbps,
                        bottleneck_rate_mbps=self.rate_mbps)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        positive(self.buffer_pkts, f"{path}.buffer_pkts")
        if self.access_rate_mbps <= self.rate_mbps:
            raise SpecError(f"{path}.access_rate_mbps: must exceed rate_mbps so that the "
                            "queue builds at the switch, not in the sender")
        if self.sample_hz > 2000:
            raise SpecError(f"{path}.sample_hz: at most 2000 (got {self.sample_hz})")


# ---- link calibration ----------------------------------------------------------------------

def run_links(ctx: Context, exp: LinkCalibration) -> Outcome:
    out = Outcome()
    rows = []
    for rate in exp.rates_mbps:
        topo = nonblocking(hosts=2, rate_mbps=rate)
        label = f"link {rate:g} Mb/s"
        with ctx.fabric(topo, "single", label) as fab:
            with ctx.traffic_phase(fab, out, label) as checks:
                res = fab.run_flows(assign_ports([("h1", "h2")], exp.duration_s, exp.omit_s),
                                    f"link-{rate:g}")[0]
        ratio = res.goodput_mbps / rate
        rows.append([rate, round(res.goodput_mbps, 3), round(ratio, 4),
                     round(tcp_payload_fraction(ctx.spec.links.mtu_bytes), 4), res.retransmits,
                     res.sender_cc, checks["conservation"]["lost_in_switches"],
                     checks["cpu"]["cpu_bound"]])
        check_cc([res], ctx.spec.hosts.congestion_control, out, label)
        if res.error:
            out.warnings.append(f"{label}: iperf3 failed: {res.error}")
    ctx.write_csv("link_calibration.csv",
                  ["rate_mbps", "goodput_mbps", "goodput_over_rate", "tcp_payload_limit",
                   "retransmits_pkts", "sender_cc", "lost_in_switches_pkts", "cpu_bound"], rows)
    out.headline = {f"goodput_over_rate_{r[0]:g}mbps": r[2] for r in rows}
    return out


def plot_links(rows: list[dict], plots: Path) -> Path:
    """Goodput against the configured rate, beside the rate and its model, the TCP payload
    the frames leave room for (a line per experiment when there are several)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    several = several_experiments(rows)
    limit = sorted({(float(r["rate_mbps"]), float(r["tcp_payload_limit"])) for r in rows})
    ax.plot([x for x, _ in limit], [x for x, _ in limit], "k--", lw=0.8,
            label="configured rate")
    ax.plot([x for x, _ in limit], [x * f for x, f in limit], ":", color="gray",
            label="model (TCP payload limit)")
    for exp in dict.fromkeys(r.get("experiment") for r in rows):
        mine = sorted((r for r in rows if r.get("experiment") == exp),
                      key=lambda r: float(r["rate_mbps"]))
        ax.plot([float(r["rate_mbps"]) for r in mine], [float(r["goodput_mbps"]) for r in mine],
                "o-", label=tagged("measured goodput", mine[0], several))
    mark_cpu_bound(ax, rows, [float(r["goodput_mbps"]) for r in rows],
                   [float(r["rate_mbps"]) for r in rows])
    ax.set_xlabel("configured link rate (Mb/s)")
    ax.set_ylabel("iperf3 goodput (Mb/s)")
    ax.set_title(title("Link calibration", "goodput vs configured rate", rows), fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, plots / "link_calibration.png")


# ---- queue calibration ---------------------------------------------------------------------

def run_queue(ctx: Context, exp: QueueCalibration) -> Outcome:
    out = Outcome()
    topo = exp.fabric()
    bottleneck = ifname("s1", 2)  # s1's egress toward s2
    with ctx.fabric(topo, "single", "queue calibration",
                    buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
        sampler = ctx.qdisc_sampler([bottleneck], rate_hz=exp.sample_hz)
        with ctx.traffic_phase(fab, out, "queue calibration") as checks:
            sampler.start()
            res = fab.run_flows(assign_ports([("h1", "h2")], exp.duration_s, 0.0), "queue")[0]
            sampler.stop()
    samples = sampler.samples
    d0 = samples[0].drops if samples else 0
    ctx.write_csv("queue_depth.csv", ["t_s", "port", "qlen_pkts", "backlog_bytes", "drops_pkts"],
                  [[round(s.t, 4), s.ifname, s.qlen_pkts, s.backlog_bytes, s.drops - d0]
                   for s in samples])
    qlens = sorted(s.qlen_pkts for s in samples) or [0]
    port_drops = checks["conservation"]["per_switch"]["s1"]["qdisc_drops"]
    cc = check_cc([res], ctx.spec.hosts.congestion_control, out, "queue calibration")
    out.headline = {
        "buffer_pkts": exp.buffer_pkts, "rate_mbps": exp.rate_mbps,
        "queue_max_pkts": qlens[-1], "queue_p50_pkts": percentile(qlens, 50),
        "queue_p90_pkts": percentile(qlens, 90),
        "drops_at_bottleneck_pkts": samples[-1].drops - d0 if samples else 0,
        "qdisc_drops_s1_pkts": port_drops,
        "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
        "sender_cc": cc, "goodput_mbps": round(res.goodput_mbps, 3),
        "retransmits_pkts": res.retransmits,
        "sample_rate_hz": round(sampler.achieved_rate_hz(), 1),
    }
    if qlens[-1] < 0.8 * exp.buffer_pkts:
        out.warnings.append(f"queue calibration: queue peaked at {qlens[-1]} of "
                            f"{exp.buffer_pkts} packets")
    return out


def plot_queue(rows: list[dict], plots: Path) -> Path:
    """The bottleneck's queue and its cumulative drops over time (a line per experiment and
    port when there are several)."""
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    several = several_experiments(rows)
    keys = list(dict.fromkeys((r.get("experiment"), r["port"]) for r in rows))
    for key in keys:
        mine = [r for r in rows if (r.get("experiment"), r["port"]) == key]
        label = tagged(key[1], mine[0], several)
        t = [float(r["t_s"]) for r in mine]
        ax.plot(t, [int(r["qlen_pkts"]) for r in mine], lw=0.8, label=label)
        ax2.plot(t, [int(r["drops_pkts"]) for r in mine], lw=0.8, label=label)
    ax.set_ylabel("queue depth (packets)")
    ax.set_title(title("Queue calibration", "bottleneck egress queue and its drops", rows,
                       ("port",)), fontsize=10)
    ax2.set_ylabel("drops (packets, cumulative)")
    ax2.set_xlabel("time (s)")
    if len(keys) > 1:
        ax.legend(fontsize=8)
    return save(fig, plots / "queue_depth.png")


def link_loads(spec: Spec, topo: Topology, exp: LinkCalibration, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: one flow between the first two hosts, at each rate."""
    fabric = rated(spec, topo)
    a, b = (h.name for h in fabric.hosts[:2])
    for rate in exp.rates_mbps:
        yield Load(f"{rate:g} Mb/s", at_rate(fabric, rate), spec.links.mtu_bytes, [(a, b)])


def queue_loads(spec: Spec, topo: Topology, exp: QueueCalibration, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: one flow into the bottleneck."""
    fabric = exp.fabric()
    hosts = [h.name for h in fabric.hosts]
    yield Load(f"{exp.rate_mbps:g} Mb/s", fabric, spec.links.mtu_bytes,
               [(hosts[0], hosts[-1])])


LINKS = Experiment(spec=LinkCalibration, run=run_links, load=link_loads,
                   plots={"link_calibration.csv": plot_links})
QUEUE = Experiment(spec=QueueCalibration, run=run_queue, load=queue_loads,
                   plots={"queue_depth.csv": plot_queue})
