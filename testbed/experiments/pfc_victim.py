"""PFC congestion spreading (Guo et al. 2016; DCQCN, Zhu et al. 2015): a victim flow that
shares one uplink with an incast loses throughput when PFC pauses that uplink."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.config.capacity import Capacity
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.qos import EcnProfile, PfcConfig, QosConfig, TrafficClass, check_pfc_thresholds
from testbed.config.qos import validate as validate_qos
from testbed.config.spec import ExperimentSpec, Spec
from testbed.results.plots import mark_cpu_bound, pyplot, save, several_experiments, tagged, title
from testbed.workloads.model.flows import Flow
from topologies import leafspine
from topologies.model import Topology

from . import qos_common as qc
from .base import Context, Experiment, Outcome, ecn_congestion_control
from .load import Load

VICTIM_PHASES = ("no-incast", "lossy", "pfc", "pfc+ecn")


@dataclass(frozen=True, kw_only=True)
class PfcVictim(ExperimentSpec):
    """PFC congestion spreading (Guo et al. 2016; DCQCN, Zhu et al. 2015) on a leaf-spine with
    one spine: `incast_senders` on leaf 2 send to one receiver on leaf 1; a victim flow from
    leaf 2 to an idle receiver on leaf 3 shares only leaf 2's uplink with them. Victim
    goodput and pauses per link for each phase."""
    type: Literal["pfc_victim"] = "pfc_victim"
    phases: list[str] = field(default_factory=lambda: list(VICTIM_PHASES))
    host_rate_mbps: float = 100.0
    uplink_rate_mbps: float = 300.0
    incast_senders: int = 3
    duration_s: float = 15.0
    omit_s: float = 3.0
    mtu_bytes: int = 9000  # 4 switch hops at 200 Mb/s: jumbo frames keep OVS below CPU limit
    buffer_pkts: int = 32  # the lossy phase's buffer per port
    xoff_bytes: int = 36000
    xon_bytes: int = 18000
    headroom_bytes: int = 160000
    k_bytes: int = 20000
    burst_us: int = 1000
    dscp: int = 26
    # links, switches or the controller failing during every traffic phase (as a
    # permutation's, config/faults.py); at_s counts from the phase's traffic start
    faults: list[FabricFault] = field(default_factory=list)

    def fabric(self) -> Topology:
        return leafspine(spines=1, leaves=3, hosts_per_leaf=self.incast_senders + 1,
                         host_rate=self.host_rate_mbps, uplink_rate=self.uplink_rate_mbps)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_faults(self.faults, path, self.fabric(), self.omit_s + self.duration_s)
        for j, ph in enumerate(self.phases):
            if ph not in VICTIM_PHASES:
                raise SpecError(f"{path}.phases[{j}]: one of {', '.join(VICTIM_PHASES)} "
                                f"(got {ph!r})")
        if not 1 <= self.incast_senders <= 16:
            raise SpecError(f"{path}.incast_senders: must be in 1..16")
        if not 576 <= self.mtu_bytes <= 9000:
            raise SpecError(f"{path}.mtu_bytes: must be in 576..9000")
        check_pfc_thresholds(self.xoff_bytes, self.xon_bytes, self.headroom_bytes,
                             self.mtu_bytes, path)
        validate_qos(victim_qos(self, "pfc+ecn"), path, self.mtu_bytes, self.buffer_pkts, None)


def victim_qos(exp: PfcVictim, phase: str) -> QosConfig:
    lossless = phase.startswith("pfc")
    ecn = EcnProfile(k=exp.k_bytes, unit="bytes") if phase == "pfc+ecn" else None
    data = TrafficClass(name="data", dscp=[0] if lossless else sorted({0, exp.dscp}),
                        buffer_pkts=exp.buffer_pkts)
    classes = [data]
    pfc = None
    if lossless:
        classes.append(TrafficClass(name="lossless", dscp=[exp.dscp], priority=3,
                                    lossless=True, ecn=ecn))
        pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                        headroom_bytes=exp.headroom_bytes)
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def run(ctx: Context, exp: PfcVictim) -> Outcome:
    out = Outcome()
    hpl = exp.incast_senders + 1
    topo = exp.fabric()
    leaf = {i: [f"h{i * hpl + j + 1}" for j in range(hpl)] for i in range(3)}
    receiver = leaf[0][0]
    senders = leaf[1][:exp.incast_senders]
    victim_src, victim_dst = leaf[1][exp.incast_senders], leaf[2][0]
    ecn_cc = ecn_congestion_control(ctx.congestion_controls())
    rows, queue_rows = [], []
    for phase in exp.phases:
        cfg = victim_qos(exp, phase)
        hosts = dataclasses.replace(ctx.spec.hosts, ecn=phase == "pfc+ecn",
                                    congestion_control=ecn_cc if phase == "pfc+ecn"
                                    else ctx.spec.hosts.congestion_control)
        label = f"pfc victim {phase}"
        with ctx.fabric(topo, "single", label, qos=cfg, hosts=hosts, mtu_bytes=exp.mtu_bytes,
                        burst_us=exp.burst_us, buffer_pkts=exp.buffer_pkts,
                        buffer_bytes=None) as fab:
            flows = [Flow(src=victim_src, dst=victim_dst, duration_s=exp.duration_s,
                          omit_s=exp.omit_s, port=5201, dscp=exp.dscp)]
            if phase != "no-incast":
                flows += [Flow(src=s, dst=receiver, duration_s=exp.duration_s,
                               omit_s=exp.omit_s, port=5202 + i, dscp=exp.dscp)
                          for i, s in enumerate(senders)]
            dp = fab.dataplane()
            before = qc.fabric_drops(dp)
            sampler = ctx.class_sampler(dp, qc.switch_slots(dp))
            t_ns = time.monotonic_ns()
            with ctx.traffic_phase(fab, out, label) as checks, \
                    ctx.faults(fab, exp.faults, label) as checks["faults"]:
                sampler.start()
                res = fab.run_flows(flows, f"victim-{phase}")
                sampler.stop()
            queue_rows += qc.class_queue_rows(dp, sampler.samples, label)
            drops = {k: v - before[k] for k, v in qc.fabric_drops(dp).items()}
            residual = qc.ingress_residual(dp)
            dp.close()
            pfc = qc.pfc_summary(fab.qos_status_dir, t_ns)
        victim, incast_flows = res[0], res[1:]
        hops = sorted(pfc.get("paused_links", {}))
        rows.append({"phase": phase, "victim_mbps": round(victim.goodput_mbps, 3),
                     "incast_mbps": round(sum(r.goodput_mbps for r in incast_flows), 3),
                     "victim_retransmits": victim.retransmits, **drops, **residual,
                     "pauses": pfc["pauses"], "paused_links": " ".join(hops),
                     "pause_applied_p50_us": pfc.get("reaction_applied_us", {}).get("p50"),
                     "pause_applied_p90_us": pfc.get("reaction_applied_us", {}).get("p90"),
                     "last_arrival_after_xoff_p90_us":
                         pfc.get("reaction_last_arrival_us", {}).get("p90"),
                     "cpu_bound": checks["cpu"]["cpu_bound"],
                     "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"]})
        ctx.log(f"  {label}: victim {rows[-1]['victim_mbps']} Mb/s, incast "
                f"{rows[-1]['incast_mbps']} Mb/s, {pfc['pauses']} pauses on {len(hops)} links")
    ctx.write_csv("pfc_victim.csv", list(rows[0]), [list(r.values()) for r in rows])
    ctx.write_csv(qc.CLASS_QUEUES, qc.CLASS_QUEUES_HEADER, queue_rows)
    out.headline, warnings = analyse(rows, f"{victim_src}->{victim_dst}",
                                     f"{senders}->{receiver}")
    out.warnings += warnings
    return out


def analyse(rows: list[dict], victim: str, incast: str) -> tuple[dict, list[str]]:
    """Headline and warnings from pfc_victim.csv's rows: the victim's goodput per phase and
    the links PFC paused."""
    by = {r["phase"]: r for r in rows}
    headline = {"victim": victim, "incast": incast,
                **{f"victim_mbps_{p}": r["victim_mbps"] for p, r in by.items()},
                **{f"paused_links_{p}": r["paused_links"] for p, r in by.items()
                   if p.startswith("pfc")}}
    warnings = []
    if "pfc" in by and by["pfc"]["switch_drops"]:
        warnings.append("pfc victim: the fabric dropped packets with PFC on")
    return headline, warnings


def plot(rows: list[dict], plots: Path) -> Path:
    """The victim flow's goodput per phase (bar, with the pauses PFC sent) beside the incast's
    aggregate; CPU-bound phases marked, experiments named when there are several."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.3))
    several = several_experiments(rows)
    x = list(range(len(rows)))
    victim = [float(r["victim_mbps"]) for r in rows]
    ax.bar(x, victim, color="tab:blue", label="victim")
    ax.plot(x, [float(r["incast_mbps"]) for r in rows], "ks", label="incast (aggregate)")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['pauses']} pauses", (i, victim[i]), xytext=(0, 14),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8)
    mark_cpu_bound(ax, rows, victim)
    ax.set_xticks(x, [tagged(r["phase"], r, several) for r in rows])
    ax.set_xlabel("phase")
    ax.set_ylabel("goodput (Mb/s)")
    ax.set_title(title("PFC victim", "the victim flow's goodput as PFC spreads congestion",
                       rows), fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, plots / "pfc_victim.png")


def loads(spec: Spec, topo: Topology, exp: PfcVictim, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: the incast senders on leaf 2 into leaf 1, and the victim flow
    from leaf 2 to leaf 3, at the experiment's own MTU."""
    fabric = exp.fabric()
    hosts = [h.name for h in fabric.hosts]
    n = exp.incast_senders + 1
    leaf1, leaf2, leaf3 = hosts[:n], hosts[n:2 * n], hosts[2 * n:]
    flows = [(s, leaf1[0]) for s in leaf2[:exp.incast_senders]] + [(leaf2[-1], leaf3[0])]
    yield Load("incast and victim", fabric, exp.mtu_bytes, flows)


EXPERIMENT = Experiment(spec=PfcVictim, run=run, load=loads,
                        plots={"pfc_victim.csv": plot, **qc.PLOTS}, dir_plots=qc.DIR_PLOTS)
