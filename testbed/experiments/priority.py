"""Two traffic classes on one saturated port: strict priority and weighted round robin."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.config.capacity import Capacity
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.qos import QosConfig, TrafficClass
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import udp_payload_fraction
from testbed.results.plots import mark_cpu_bound, pyplot, save, several_experiments, tagged, title
from testbed.workloads.model.flows import Flow
from topologies import dumbbell
from topologies.model import Topology

from .base import Context, Experiment, Outcome
from .load import Load, into_one


@dataclass(frozen=True, kw_only=True)
class PriorityQueues(ExperimentSpec):
    """Two classes share one bottleneck port, saturated with UDP: strict priority (the high
    class keeps its offered load) and weighted round robin (shares follow the weights)."""
    type: Literal["priority"] = "priority"
    rate_mbps: float = 20.0
    high_load: float = 0.6  # offered load of the high class, fraction of the bottleneck
    low_load: float = 1.0
    weights: list[int] = field(default_factory=lambda: [3, 1])
    duration_s: float = 10.0
    omit_s: float = 2.0
    # links, switches or the controller failing during every traffic phase (as a
    # permutation's, config/faults.py); at_s counts from the phase's traffic start
    faults: list[FabricFault] = field(default_factory=list)

    def fabric(self) -> Topology:
        return dumbbell(senders=2, receivers=1, access_rate_mbps=max(100.0, 4 * self.rate_mbps),
                        bottleneck_rate_mbps=self.rate_mbps)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_faults(self.faults, path, self.fabric(), self.omit_s + self.duration_s)
        for name in ("high_load", "low_load"):
            if not 0 < getattr(self, name) <= 2:
                raise SpecError(f"{path}.{name}: a fraction of the bottleneck in (0, 2]")
        if len(self.weights) != 2 or min(self.weights) < 1:
            raise SpecError(f"{path}.weights: two integers >= 1 (got {self.weights})")


def run(ctx: Context, exp: PriorityQueues) -> Outcome:
    """Two UDP classes over one bottleneck: strict priority (the high class offers part of
    the port, the low class saturates it), then weighted round robin (both saturate)."""
    out = Outcome()
    topo = exp.fabric()
    classes = [TrafficClass(name="low", dscp=[0], priority=0, weight=exp.weights[1]),
               TrafficClass(name="high", dscp=[46], priority=7, weight=exp.weights[0])]
    rows = []
    for sched in ("strict", "wrr"):
        cfg = QosConfig(classes=classes, scheduler=sched, ecn_enabled=False)
        with ctx.fabric(topo, "single", f"priority {sched}", qos=cfg) as fab:
            # strict: the high class offers `high_load`; wrr: both classes saturate the port,
            # so that the shares are the scheduler's, not the offered loads'
            high_load = exp.high_load if sched == "strict" else exp.low_load
            flows = [Flow(src="h1", dst="h3", duration_s=exp.duration_s, omit_s=exp.omit_s,
                          port=5201, dscp=46, udp_mbps=high_load * exp.rate_mbps),
                     Flow(src="h2", dst="h3", duration_s=exp.duration_s, omit_s=exp.omit_s,
                          port=5202, dscp=0, udp_mbps=exp.low_load * exp.rate_mbps)]
            with ctx.traffic_phase(fab, out, f"priority {sched}") as checks, \
                    ctx.faults(fab, exp.faults, f"priority {sched}") as checks["faults"]:
                res = fab.run_flows(flows, f"prio-{sched}")
        high, low = res
        rows.append([sched, round(high.sent_mbps, 3), round(high.goodput_mbps, 3),
                     round(low.sent_mbps, 3), round(low.goodput_mbps, 3),
                     checks["cpu"]["cpu_bound"]])
    ctx.write_csv("priority.csv", ["scheduler", "high_offered_mbps", "high_received_mbps",
                                   "low_offered_mbps", "low_received_mbps", "cpu_bound"], rows)
    strict, wrr = rows
    payload = udp_payload_fraction(ctx.spec.links.mtu_bytes)
    w_hi, w_lo = exp.weights
    wrr_share = wrr[2] / (wrr[2] + wrr[4]) if wrr[2] + wrr[4] else 0.0
    out.headline = {
        "strict_high_kept": round(strict[2] / strict[1], 4) if strict[1] else None,
        "strict_low_received_mbps": strict[4],
        "wrr_high_share": round(wrr_share, 4),
        "wrr_expected_share": round(w_hi / (w_hi + w_lo), 4),
        "wrr_share_error": round(abs(wrr_share - w_hi / (w_hi + w_lo)) / (w_hi / (w_hi + w_lo)), 4),
        "bottleneck_payload_mbps": round(exp.rate_mbps * payload, 3),
    }
    if out.headline["strict_high_kept"] is not None and out.headline["strict_high_kept"] < 0.9:
        out.warnings.append("priority: the strict-priority class kept less than 90% of its load")
    return out


def plot(rows: list[dict], plots: Path) -> Path:
    """What each class received per scheduler (filled) inside what it offered (outline);
    CPU-bound phases marked, experiments named when there are several."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.3))
    several = several_experiments(rows)
    x = range(len(rows))
    for shift, cls, colour in ((-0.2, "high", "tab:blue"), (0.2, "low", "tab:orange")):
        xs = [i + shift for i in x]
        ax.bar(xs, [float(r[f"{cls}_received_mbps"]) for r in rows], 0.4, color=colour,
               label=f"{cls} class received")
        ax.bar(xs, [float(r[f"{cls}_offered_mbps"]) for r in rows], 0.4, fill=False,
               edgecolor=colour, ls="--", label=f"{cls} class offered")
    mark_cpu_bound(ax, rows, [max(float(r["high_offered_mbps"]), float(r["high_received_mbps"]))
                              for r in rows], [i - 0.2 for i in x])
    ax.set_xticks(list(x), [tagged(r["scheduler"], r, several) for r in rows])
    ax.set_xlabel("scheduler")
    ax.set_ylabel("rate (Mb/s)")
    ax.set_title(title("Priority queues", "two classes on one saturated port", rows),
                 fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, plots / "priority.png")


def loads(spec: Spec, topo: Topology, exp: PriorityQueues, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: a high and a low class sender into the receiver."""
    yield into_one(exp.fabric(), spec.links.mtu_bytes, 2)


EXPERIMENT = Experiment(spec=PriorityQueues, run=run, load=loads, plots={"priority.csv": plot})
