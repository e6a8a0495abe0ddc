"""DCTCP's queue-occupancy experiment: drop-tail TCP vs ECN marking at K on one bottleneck
(Alizadeh et al. 2010; Mininet-HiFi's reproduction)."""
from __future__ import annotations

import dataclasses
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.config.capacity import Capacity
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.network import check_cc_names, positive
from testbed.config.qos import EcnProfile, QosConfig, TrafficClass, threshold_bytes
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import frame_bytes
from testbed.results.plots import pyplot, save, several_experiments, tagged, title
from testbed.results.stats import percentile
from testbed.workloads.model.flows import Flow
from topologies import dumbbell
from topologies.model import Topology, ifname

from .base import Context, Experiment, Outcome, check_cc, require_congestion_controls
from .load import Load, into_one
from .qos_common import time_weights


@dataclass(frozen=True, kw_only=True)
class EcnQueue(ExperimentSpec):
    """DCTCP's queue-occupancy experiment (Alizadeh et al. 2010, as reproduced on
    Mininet-HiFi): `senders` long flows into one receiver through a `rate_mbps` bottleneck
    with `buffer_pkts`, once with drop-tail TCP and once with marking at `k_pkts`."""
    type: Literal["ecn_queue"] = "ecn_queue"
    senders: int = 2
    rate_mbps: float = 100.0
    access_rate_mbps: float = 1000.0
    buffer_pkts: int = 425
    k_pkts: float = 20.0
    duration_s: float = 20.0
    omit_s: float = 3.0
    sample_hz: float = 1000.0
    # the senders' congestion control in the phases with marking, one phase each: DCTCP as
    # the paper ran (the testbed's BPF program where the kernel has none), and, to compare,
    # any other (cubic: ECN-enabled cubic, which halves its window on a mark)
    ecn_congestion_controls: list[str] = field(default_factory=lambda: ["dctcp"])
    # links, switches or the controller failing during every traffic phase (as a
    # permutation's, config/faults.py); at_s counts from the phase's traffic start
    faults: list[FabricFault] = field(default_factory=list)

    def fabric(self) -> Topology:
        return dumbbell(senders=self.senders, receivers=1,
                        access_rate_mbps=self.access_rate_mbps, bottleneck_rate_mbps=self.rate_mbps)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_faults(self.faults, path, self.fabric(), self.omit_s + self.duration_s)
        if not 1 <= self.senders <= 64:
            raise SpecError(f"{path}.senders: must be in 1..64 (got {self.senders})")
        positive(self.buffer_pkts, f"{path}.buffer_pkts")
        positive(self.k_pkts, f"{path}.k_pkts")
        if self.k_pkts >= self.buffer_pkts:
            raise SpecError(f"{path}.k_pkts: must be below buffer_pkts ({self.k_pkts:g} >= "
                            f"{self.buffer_pkts}); nothing would ever be marked")
        if self.access_rate_mbps <= self.rate_mbps:
            raise SpecError(f"{path}.access_rate_mbps: must exceed rate_mbps")
        if self.sample_hz > 5000:
            raise SpecError(f"{path}.sample_hz: at most 5000 (got {self.sample_hz})")
        if not self.ecn_congestion_controls:
            raise SpecError(f"{path}.ecn_congestion_controls: one or more names")
        check_cc_names(self.ecn_congestion_controls, f"{path}.ecn_congestion_controls")


def run(ctx: Context, exp: EcnQueue) -> Outcome:
    """Drop-tail TCP vs ECN marking at K on one bottleneck (DCTCP paper, Fig. 1 / 13;
    Mininet-HiFi's reproduction: TCP mean queue ~331-345 packets, DCTCP ~19-20 at K = 20)."""
    out = Outcome()
    topo = exp.fabric()
    bottleneck = ifname("s1", exp.senders + 1)
    receiver = f"h{exp.senders + 1}"
    receiver_ip = next(h.ip for h in topo.hosts if h.name == receiver)
    require_congestion_controls(ctx, exp.ecn_congestion_controls, "ecn_queue")
    frame = frame_bytes(ctx.spec.links.mtu_bytes)
    k_bytes = threshold_bytes(exp.k_pkts, "pkts", frame, exp.rate_mbps)  # the marker's K
    phases = [("drop-tail", None, dataclasses.replace(ctx.spec.hosts, ecn=False))] + [
        (f"ecn-{cc}", EcnProfile(k=exp.k_pkts, unit="pkts"),
         dataclasses.replace(ctx.spec.hosts, ecn=True, congestion_control=cc))
        for cc in exp.ecn_congestion_controls]
    rows, summary = [], []
    for label, profile, hosts in phases:
        cfg = QosConfig(classes=[TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts,
                                              ecn=profile)],
                        ecn_enabled=profile is not None)
        with ctx.fabric(topo, "single", f"ecn queue {label}", qos=cfg, hosts=hosts,
                        buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
            dp = fab.dataplane()
            port = dp.by_name[bottleneck]["id"]
            sampler = ctx.class_sampler(dp, [(port, 0)], rate_hz=exp.sample_hz,
                                        paired=(port, 0))
            before = dp.queue(port, 0)
            flows = [Flow(src=f"h{i + 1}", dst=receiver, duration_s=exp.duration_s,
                          omit_s=exp.omit_s, port=5201 + i) for i in range(exp.senders)]
            with ctx.traffic_phase(fab, out, f"ecn queue {label}") as checks, \
                    ctx.faults(fab, exp.faults, f"ecn queue {label}") as checks["faults"]:
                sampler.start()
                t_flows = time.time()
                res = fab.run_flows(flows, f"ecn-{label}")
                sampler.stop()
            after = dp.queue(port, 0)
            dp.close()
        cc = check_cc(res, hosts.congestion_control, out, f"ecn queue {label}")
        t0 = sampler.samples[0].t if sampler.samples else 0.0
        # the steady state: after the omitted start, before the flows end
        lo = t0 + exp.omit_s + 1.0
        hi = t0 + exp.omit_s + exp.duration_s - 1.0
        segs = sampler.time_weighted(port, 0, lo, hi)
        total = sum(d for d, _, _ in segs) or 1.0
        mean_pkts = sum(d * p for d, p, _ in segs) / total
        durations = [d for d, _, _ in segs]
        pkts = [p for _, p, _ in segs]
        rows += [[label, round(s.t, 4), s.pkts, s.bytes, s.marks - before.marks,
                  s.drops - before.drops] for s in sampler.samples]
        below = _marks_below_k(sampler.pairs, k_bytes, frame, lo, hi)
        # the senders' own state (a BPF congestion control's trace, e.g. DCTCP's alpha) in
        # the steady state, against the fraction of packets the switch marked
        steady = [r for r in ctx.cc_trace(t_flows + exp.omit_s + 1.0,
                                          t_flows + exp.omit_s + exp.duration_s - 1.0)
                  if r[6] == "alpha" and r[2].split(">")[1].split(":")[0] == receiver_ip]
        forwarded = after.deq_pkts - before.deq_pkts
        summary.append({
            "phase": label, "sender_cc": cc, "ecn": hosts.ecn,
            "queue_mean_pkts": round(mean_pkts, 1),
            "queue_p50_pkts": percentile(pkts, 50, durations) if segs else 0,
            "queue_p90_pkts": percentile(pkts, 90, durations) if segs else 0,
            "queue_max_pkts": max((p for _, p, _ in segs), default=0),
            "marks_pkts": after.marks - before.marks,
            "drops_pkts": after.drops - before.drops,
            "goodput_mbps": round(sum(r.goodput_mbps for r in res), 3),
            "goodput_of_link": round(sum(r.goodput_mbps for r in res) / exp.rate_mbps, 4),
            "jain_fairness": round(jain([r.goodput_mbps for r in res]), 4),
            "retransmits_pkts": sum(r.retransmits for r in res),
            "marks_with_real_queue_below_k": below,
            "marked_fraction": round((after.marks - before.marks) / forwarded, 4)
            if forwarded else None,
            "alpha_mean": round(sum(r[7] for r in steady) / len(steady) / 1024, 4)
            if steady else None,
            "sample_rate_hz": round(sampler.achieved_rate_hz(), 1),
            "cpu_bound": checks["cpu"]["cpu_bound"],
            # the whole machine's CPU (switches, hosts' TCP and congestion control, the
            # testbed) per megabyte delivered: an algorithm's cost, phase against phase
            "cpu_core_ms_per_mb": cpu_per_mb(checks["cpu"], sum(r.goodput_mbps for r in res)),
            "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
        })
    ctx.write_csv("ecn_queue_depth.csv", ["phase", "t_s", "qlen_pkts", "qlen_bytes",
                                          "marks_cum_pkts", "drops_cum_pkts"], rows)
    ctx.write_csv("ecn_queue_summary.csv", list(summary[0]), [list(s.values()) for s in summary])
    tail, ecn, *others = summary
    out.headline = {"buffer_pkts": exp.buffer_pkts, "k_pkts": exp.k_pkts,
                    "rate_mbps": exp.rate_mbps, "senders": exp.senders,
                    "ecn_sender_cc": exp.ecn_congestion_controls[0],
                    "droptail": tail, "ecn": ecn,
                    # every phase with marking, by its congestion control (ecn is the first)
                    "ecn_phases": {s["phase"].removeprefix("ecn-"): s for s in [ecn, *others]},
                    "droptail_mean_over_buffer": round(tail["queue_mean_pkts"] / exp.buffer_pkts, 3),
                    "ecn_mean_over_k": round(ecn["queue_mean_pkts"] / exp.k_pkts, 3)}
    if tail["queue_mean_pkts"] < 0.6 * exp.buffer_pkts:
        out.warnings.append(f"ecn queue: drop-tail mean queue {tail['queue_mean_pkts']} is below "
                            f"60% of the {exp.buffer_pkts}-packet buffer")
    for s in [ecn, *others]:
        # DCTCP holds the queue near K (paper: ~20 packets at K = 20); a window-halving
        # sender with ECN holds it lower and below the link's rate, within 2 K
        low = 0.8 if s["sender_cc"] == ["dctcp"] else 0.0
        if not low * exp.k_pkts <= s["queue_mean_pkts"] <= 2 * exp.k_pkts:
            out.warnings.append(f"ecn queue {s['phase']}: mean queue {s['queue_mean_pkts']} is "
                                f"outside {low:g}-2 K")
    return out


def cpu_per_mb(cpu: dict, goodput_mbps: float) -> float | None:
    """Core-milliseconds the machine spent per megabyte delivered in a phase: its CPU
    monitor's mean busy share over the phase's traffic, at the phase's goodput."""
    idle = cpu.get("machine_idle_mean")
    if idle is None or goodput_mbps <= 0:
        return None
    return round((1 - idle) * (os.cpu_count() or 1) * 1000 / (goodput_mbps / 8), 2)


def jain(xs: list[float]) -> float:
    """Jain's fairness index of the flows' goodputs: 1 when equal, 1/n when one has all."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs and any(xs) else 0.0


def _marks_below_k(pairs: list[tuple], k_bytes: int, frame: int, lo: float, hi: float) -> dict:
    """Whether the marker's count of the queue agrees with the qdisc's own where marking is
    decided. Marks are decided on the BPF's count of the class queue (bytes from enqueue
    until the far end of the link receives them: it marks while the count is above K); at
    every tick the sampler read the qdisc's own backlog between two readings of that count.

    `fraction`: of the ticks at which the marker's count was above K at both readings (it
    then marks every ECN-capable arrival), the share at which the qdisc held K or less, a
    marker reading the qdisc itself would then not mark; `ticks_marking_qdisc_below_k`:
    those at which it held less than K. None when nothing was marked or no tick found the
    marker above K.

    `interval_bound`: the marks taken between two ticks whose qdisc readings were both at
    or below K. The queue may cross K and come back within the millisecond, so this bounds
    the disagreement only loosely; `interval_bound_own_view` is the same count against the
    marker's own readings, which by construction never mark at or below K: what the 1 ms
    sampling alone puts into the bound."""
    pairs = [p for p in pairs if lo <= p[0] <= hi]
    if len(pairs) < 2:
        return {"fraction": None, "marks": 0}
    diffs = [abs((b0 + b1) / 2 - real) / frame for _, b0, real, b1, _, _ in pairs]
    marking = [real for _, b0, real, b1, _, _ in pairs if min(b0, b1) > k_bytes]
    at_or_below = sum(1 for real in marking if real <= k_bytes)
    below_k = sum(1 for real in marking if real < k_bytes)
    below = own = total = 0
    for a, b in zip(pairs, pairs[1:]):
        delta = b[5] - a[5]
        total += delta
        if a[2] <= k_bytes and b[2] <= k_bytes:
            below += delta
        if max(a[1], a[3], b[1], b[3]) <= k_bytes:
            own += delta
    return {"fraction": round(at_or_below / len(marking), 4) if marking and total else None,
            "ticks_marking": len(marking), "ticks_marking_qdisc_at_or_below_k": at_or_below,
            "ticks_marking_qdisc_below_k": below_k,
            "marks": total, "marks_below_k": below, "ticks": len(pairs),
            "interval_bound": round(below / total, 4) if total else None,
            "interval_bound_own_view": round(own / total, 4) if total else None,
            "bpf_minus_qdisc_p50_pkts": round(percentile(diffs, 50), 2),
            "bpf_minus_qdisc_p99_pkts": round(percentile(diffs, 99), 2)}


def plot(rows: list[dict], plots: Path) -> Path:
    """Queue depth over a 2 s window of each phase, and its histogram (time-weighted)."""
    plt = pyplot()
    several = several_experiments(rows)
    by = defaultdict(list)  # a phase of one experiment -> its samples
    for r in rows:
        by[tagged(r["phase"], r, several)].append((float(r["t_s"]), int(r["qlen_pkts"])))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.3))
    for phase, pts in by.items():
        t0 = pts[0][0] + 5.0
        window = [(t - t0, q) for t, q in pts if t0 <= t <= t0 + 2.0]
        ax.step([t for t, _ in window], [q for _, q in window], where="post", lw=0.8,
                label=phase)
        weights = time_weights(pts)
        qs = list(weights)
        acc, cdf = 0.0, []
        for q in qs:
            acc += weights[q]
            cdf.append(acc)
        ax2.plot(qs, cdf, label=phase)
    ax.set_xlabel("time (s, 2 s of the steady state)")
    ax.set_ylabel("bottleneck queue (packets)")
    ax.set_title("queue occupancy", fontsize=9)
    ax.legend()
    ax2.set_xscale("symlog", linthresh=10)
    ax2.set_xlabel("queue (packets)")
    ax2.set_ylabel("fraction of time at or below (CDF)")
    ax2.set_title("queue depth CDF (time-weighted)", fontsize=9)
    ax2.legend()
    fig.suptitle(title("ECN queue", "bottleneck queue, drop-tail vs ECN marking", rows),
                 fontsize=10)
    return save(fig, plots / "ecn_queue.png")


def loads(spec: Spec, topo: Topology, exp: EcnQueue, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: the senders' long flows into the receiver at once."""
    yield into_one(exp.fabric(), spec.links.mtu_bytes, exp.senders)


EXPERIMENT = Experiment(spec=EcnQueue, run=run, load=loads, plots={"ecn_queue_depth.csv": plot})
