"""RDMA over the emulated lossless fabric: RoCEv2 WRITEs between hosts, carried by the
testbed's RoCE engine (testbed/workloads/roce) through the switches' lossless class with
PFC and ECN, once per congestion-control scheme. Every flow's completion time against
its ideal (the path's base RTT plus its bytes on the wire at the path's slowest link),
the engines' counters, each flow's rate over time, pauses and drops."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from testbed.config.capacity import ENGINE_PACE_LOST_MAX, Capacity
from testbed.config.loader import SpecError
from testbed.config.qos import (
    INT_RATES,
    EcnProfile,
    PfcConfig,
    QosConfig,
    TrafficClass,
    check_pfc_thresholds,
    int_rate_table,
)
from testbed.config.qos import validate as validate_qos
from testbed.config.spec import ExperimentSpec, Spec
from testbed.core.errors import TestbedError
from testbed.results.plots import pyplot, save, several_experiments, title
from testbed.results.verdict import CPU_BOUND, engine_late, steal_note
from testbed.workloads.model.flowgen import load_cdf, poisson_flows
from testbed.workloads.model.rdma import (
    INT_LEN,
    IRN_WIN,
    MAX_SPRAY_ENTROPIES,
    ROCE_MTUS,
    ROCE_OVERHEAD,
    TCP_OVERHEAD,
    WIRE_OVERHEAD,
    Dcqcn,
    DcqcnPlus,
    Hpcc,
    Irn,
    Nscc,
    Timely,
    UserCc,
    bdp_packets,
    ideal_fct_us,
    split_bytes,
    spray_reorder,
    wire_bytes,
)
from topologies import patterns
from topologies.graph import shortest_paths
from topologies.kinds import own_routing
from topologies.model import Topology, ifname

from . import qos_common as qc
from .base import Context, Experiment, Outcome, Phase
from .load import Load, rated

# none: at the line rate; user: the spec's user_cc (a C header compiled into the engine)
RDMA_CCS = ("none", "dcqcn", "dcqcn_plus", "timely", "hpcc", "nscc", "user")
# after the congestion control, "+"-joined: w, at most one BDP in flight per QP (the HPCC
# paper's "+w" variants); irn, IRN's selective recovery instead of go-back-N; lossy, no
# PFC for this scheme
RDMA_MODIFIERS = ("w", "irn", "lossy")
RDMA_SCHEMES = ("none", "dcqcn", "dcqcn+w", "timely", "timely+w", "hpcc")   # the default


# TCP on the same flows: `tcp-<algorithm>` (tcp-dctcp, tcp-cubic, ...), the hosts' own
# congestion control with ECN, its segments the size of the RoCE packets; of the
# modifiers only lossy
TCP_PREFIX = "tcp-"


class Scheme(NamedTuple):
    cc: str             # one of RDMA_CCS, or "tcp"
    window: bool
    irn: bool
    lossy: bool
    tcp: str = ""       # the hosts' TCP congestion control, for "tcp"


def parse_scheme(name: str) -> Scheme:
    """`dcqcn+irn+lossy` -> its parts; ValueError naming what is wrong."""
    cc, *mods = name.split("+")
    if cc.startswith(TCP_PREFIX):
        alg = cc[len(TCP_PREFIX):]
        if not alg.isidentifier() or any(m != "lossy" for m in mods) or len(mods) > 1:
            raise ValueError(f"tcp-<algorithm> (such as tcp-dctcp), then at most +lossy "
                             f"(got {name!r})")
        return Scheme("tcp", False, False, bool(mods), alg)
    if cc not in RDMA_CCS:
        raise ValueError(f"a congestion control first, one of {', '.join(RDMA_CCS)} "
                         f"or tcp-<algorithm> (got {name!r})")
    for m in mods:
        if m not in RDMA_MODIFIERS or mods.count(m) > 1:
            raise ValueError(f"after {cc!r}, each of {', '.join(RDMA_MODIFIERS)} at most "
                             f"once (got {name!r})")
    if cc in ("hpcc", "nscc") and "w" in mods:
        raise ValueError(f"{cc} has its own window (got {name!r})")
    return Scheme(cc, "w" in mods, "irn" in mods, "lossy" in mods)


@dataclass(frozen=True, kw_only=True)
class RdmaFlow:
    """One RDMA WRITE of `size_bytes` from `src` to `dst`, posted `start_ms` after the
    engines start (all hosts start together)."""
    src: str
    dst: str
    size_bytes: int
    start_ms: float = 0.0
    incast: bool = False        # part of an incast (a generated workload marks its own)


@dataclass(frozen=True, kw_only=True)
class RdmaIncast:
    """Incasts at Poisson times, `share` of the workload's load: `senders` hosts at once,
    each writing `size_bytes` to one receiver."""
    senders: int
    size_bytes: int
    share: float = 0.02


@dataclass(frozen=True, kw_only=True)
class RdmaWorkload:
    """Flows as the HPCC code generates them: sizes from a CDF (`websearch`, `fb_hadoop`
    or a file) times `size_scale`, Poisson arrivals at every host for `duration_ms` at
    `load` of its link, each to a host drawn uniformly among the others (`pattern`
    random), or to its peers in a traffic pattern (`randbij`, `stride:4`, ...: the
    permutation families), or, with `all_to_all`, to every other host in turn."""
    cdf: str = "websearch"
    load: float = 0.3
    duration_ms: float = 1000.0
    size_scale: float = 1.0
    pattern: str = "random"
    incast: RdmaIncast | None = None
    seed: int = 1


@dataclass(frozen=True, kw_only=True)
class RdmaFanIn:
    """One incast: the first `senders` hosts (in the topology's order, the receiver left
    out) each write `size_bytes` on each of `flows_per_sender` queue pairs to `receiver`
    (default: the last host) at `start_ms`: senders x flows_per_sender congested flows."""
    senders: int
    size_bytes: int
    flows_per_sender: int = 1
    receiver: str | None = None
    start_ms: float = 0.0


def fan_in_flows(fan: RdmaFanIn, topo: Topology) -> list[RdmaFlow]:
    hosts = [h.name for h in topo.hosts]
    receiver = fan.receiver or hosts[-1]
    return [RdmaFlow(src=h, dst=receiver, size_bytes=fan.size_bytes, start_ms=fan.start_ms,
                     incast=True) for h in [h for h in hosts if h != receiver][:fan.senders]
            for _ in range(fan.flows_per_sender)]


def workload_flows(w: RdmaWorkload, topo: Topology) -> list[RdmaFlow]:
    """A workload's flows on `topo` (seeded)."""
    hosts = [h.name for h in topo.hosts]
    dst_of: dict[str, list[str]] | None = None
    if w.pattern == "all_to_all":
        dst_of = {h: hosts[i + 1:] + hosts[:i] for i, h in enumerate(hosts)}
    elif w.pattern != "random":
        dst_of = {}
        for src, dst in patterns.generate(w.pattern, topo, w.seed):
            dst_of.setdefault(src, []).append(dst)
    rates = {h: topo.link_at(h, 0).rate_mbps for h in hosts}
    inc = w.incast
    flows = poisson_flows(hosts, rates, load_cdf(w.cdf), w.load, w.duration_ms, w.seed,
                          w.size_scale, dst_of, w.pattern == "all_to_all",
                          inc.senders if inc else 0, inc.size_bytes if inc else 0,
                          inc.share if inc else 0.0)
    return [RdmaFlow(src=f.src, dst=f.dst, size_bytes=f.size_bytes, start_ms=f.start_ms,
                     incast=f.incast) for f in flows]


@dataclass(frozen=True, kw_only=True)
class Rdma(ExperimentSpec):
    """RoCEv2 WRITEs on the spec's fabric, once per scheme in `schemes`: data in the
    lossless class (`dscp`, PFC when `pfc` and the scheme is not lossy), ECN-marked when
    the scheme reacts to it (DCQCN, DCQCN+): every packet above `ecn_k_bytes` queued, or,
    with `ecn_kmax_bytes`, RED-like (probability rising from 0 at K to `ecn_pmax` at Kmax,
    1 above); ACKs, NAKs and CNPs in `ctrl_dscp`, served first. Each scheme's parameters
    are in its paper's units at its reference rate (`dcqcn`, `dcqcn_plus`, `timely`,
    `hpcc`, `irn`), scaled to the hosts' links; HPCC's T, the "+w" window's BDP and IRN's
    in-flight cap come from the flows' measured base round trip."""
    type: Literal["rdma"] = "rdma"
    flows: list[RdmaFlow] = field(default_factory=list)
    workload: RdmaWorkload | None = None      # generated flows, besides `flows`
    fan_in: RdmaFanIn | None = None           # and an incast
    schemes: list[str] = field(default_factory=lambda: list(RDMA_SCHEMES))
    roce_mtu: int = 1024
    dscp: int = 26
    ctrl_dscp: int = 48
    pfc: bool = True
    xoff_bytes: int = 36000
    xon_bytes: int = 18000
    headroom_bytes: int = 160000
    ecn_k_bytes: int = 20000
    ecn_kmax_bytes: int | None = None
    ecn_pmax: float = 1.0
    tcp_ecn_k_bytes: int | None = None   # TCP schemes: a step here (DCTCP's K); None: as RoCE
    # TCP schemes' initial window; None: one BDP (base_rtt), as HPCC's DCTCP starts
    tcp_initial_window_pkts: int | None = None
    buffer_pkts: int = 64           # the lossy class's buffer per port
    burst_us: int = 1000
    rto_us: int = 100000            # the engine's retransmission timeout
    sample_us: int = 5000           # each flow's rate, this often
    queue_sample_hz: float = 50.0   # every switch port's RoCE queue, this often (0: not)
    timeout_s: float = 120.0
    dcqcn: Dcqcn = field(default_factory=Dcqcn)
    timely: Timely = field(default_factory=Timely)
    hpcc: Hpcc = field(default_factory=Hpcc)
    nscc: Nscc = field(default_factory=Nscc)   # UEC-like ("nscc+irn" sprayed: UEC-like mode)
    dcqcn_plus: DcqcnPlus = field(default_factory=DcqcnPlus)
    irn: Irn = field(default_factory=Irn)
    user_cc: UserCc | None = None   # the scheme "user" (and its "+" variants)
    # RoCE engines' UDP source port: fixed, every queue pair from 4791 (a host pair's
    # queue pairs share one ECMP path); per_qp, from each connection's own port as a NIC
    # derives it from the QP numbers, so ECMP can spread them
    source_port: Literal["fixed", "per_qp"] = "fixed"
    # queue pairs a flow is carried on (NCCL's channels, the multi-QP connections of RoCE
    # fabrics): its bytes split evenly, all posted at its start; it completes with the last
    qps_per_flow: int = 1
    # packet spraying (UEC's way: the sender varies the source port per packet, the fabric's
    # ECMP hashes it): each data packet from one of this many ports of its QP in turn (0:
    # off); needs source_port per_qp and IRN (+irn) on every RoCE scheme, whose loss
    # detection then waits for spray_reorder_pkts acknowledged beyond a hole
    spray_entropies: int = 0
    spray_reorder_pkts: int = 8

    def all_flows(self, topo: Topology) -> list[RdmaFlow]:
        """`flows`, the incast's, then the workload's (seeded: the same every time), on
        `topo` at the rates the fabric runs (`rated`)."""
        return (self.flows + (fan_in_flows(self.fan_in, topo) if self.fan_in else [])
                + (workload_flows(self.workload, topo) if self.workload else []))

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if self.workload is not None:
            check_workload(self.workload, f"{path}.workload", topo)
        if self.fan_in is not None:
            names = [h.name for h in topo.hosts]
            if self.fan_in.receiver is not None and self.fan_in.receiver not in names:
                raise SpecError(f"{path}.fan_in.receiver: no host {self.fan_in.receiver!r} "
                                f"in the topology")
            if (not 1 <= self.fan_in.senders < len(names) or self.fan_in.size_bytes < 1
                    or self.fan_in.flows_per_sender < 1):
                raise SpecError(f"{path}.fan_in: senders in 1..{len(names) - 1}, "
                                f"size_bytes and flows_per_sender >= 1 (got "
                                f"{self.fan_in.senders}, {self.fan_in.size_bytes}, "
                                f"{self.fan_in.flows_per_sender})")
        if not self.flows and self.workload is None and self.fan_in is None:
            raise SpecError(f"{path}.flows: at least one flow (or a workload or fan_in)")
        flows = self.all_flows(rated(spec, topo))
        per_host: dict[str, int] = {}
        for f in flows:
            for h in (f.src, f.dst):
                per_host[h] = per_host.get(h, 0) + 1
        busiest = max(per_host.items(), key=lambda kv: kv[1], default=("", 0))
        self.check_transport(path, spec, topo)
        if busiest[1] * self.qps_per_flow > MAX_QPS:
            raise SpecError(f"{path}: {busiest[0]} would hold "
                            f"{busiest[1] * self.qps_per_flow} queue pairs (a flow is "
                            f"qps_per_flow at each end); its engine holds {MAX_QPS}")
        hosts = {h.name for h in topo.hosts}
        for i, f in enumerate(flows):
            for end in ("src", "dst"):
                if getattr(f, end) not in hosts:
                    raise SpecError(f"{path}.flows[{i}].{end}: no host {getattr(f, end)!r} "
                                    f"in the topology")
            if f.src == f.dst:
                raise SpecError(f"{path}.flows[{i}]: src and dst are the same host")
            if f.size_bytes < 1 or f.start_ms < 0:
                raise SpecError(f"{path}.flows[{i}]: size_bytes >= 1 and start_ms >= 0")

    def check_transport(self, path: str, spec: Spec, topo: Topology) -> None:
        """Everything but the flows: the schemes, the transport's settings and the classes
        (the parallel experiment's `roce` is checked with this alone)."""
        if not 1 <= self.qps_per_flow <= MAX_QPS_PER_FLOW:
            raise SpecError(f"{path}.qps_per_flow: 1..{MAX_QPS_PER_FLOW} (got "
                            f"{self.qps_per_flow})")
        if not self.schemes:
            raise SpecError(f"{path}.schemes: at least one, such as "
                            f"{', '.join(RDMA_SCHEMES)}")
        for j, s in enumerate(self.schemes):
            try:
                parse_scheme(s)
            except ValueError as exc:
                raise SpecError(f"{path}.schemes[{j}]: {exc}") from None
            if s in self.schemes[:j]:
                raise SpecError(f"{path}.schemes[{j}]: {s!r} twice")
        if not 0 <= self.spray_entropies <= MAX_SPRAY_ENTROPIES:
            raise SpecError(f"{path}.spray_entropies: 0 (off) to {MAX_SPRAY_ENTROPIES} (got "
                            f"{self.spray_entropies})")
        if not 0 <= self.spray_reorder_pkts < IRN_WIN:
            raise SpecError(f"{path}.spray_reorder_pkts: 0..{IRN_WIN - 1} (got "
                            f"{self.spray_reorder_pkts})")
        mode = own_routing(topo.kind, spec.controller.routing)
        if self.source_port == "per_qp" and mode not in ("ecmp", "single", "hedera"):
            raise SpecError(f"{path}.source_port: per_qp has the switches hash UDP ports, "
                            f"which routing ecmp, single and hedera do ({mode} does not)")
        if self.spray_entropies and self.source_port != "per_qp":
            raise SpecError(f"{path}.spray_entropies: spraying varies each QP's own source "
                            f"port: set source_port: per_qp")
        no_irn = [s for s in self.schemes
                  if not parse_scheme(s).tcp and not parse_scheme(s).irn]
        if self.spray_entropies and no_irn:
            raise SpecError(f"{path}.spray_entropies: sprayed packets arrive out of order, "
                            f"which go-back-N drops: add +irn to {no_irn[0]!r}")
        tcp_schemes = [s for s in self.schemes if parse_scheme(s).tcp]
        if self.qps_per_flow > 1 and tcp_schemes:
            raise SpecError(f"{path}.qps_per_flow: a TCP scheme ({tcp_schemes[0]}) carries "
                            f"each flow on one connection; run it with qps_per_flow 1")
        hpcc = any(telemetry(self, s) for s in self.schemes)
        user = [s for s in self.schemes if parse_scheme(s).cc == "user"]
        if user and self.user_cc is None:
            raise SpecError(f"{path}.user_cc: the scheme {user[0]!r} needs user_cc.source, "
                            f"a C header (docs/RDMA.md)")
        if self.roce_mtu not in ROCE_MTUS:
            raise SpecError(f"{path}.roce_mtu: a RoCE MTU, one of "
                            f"{', '.join(map(str, ROCE_MTUS))} (got {self.roce_mtu})")
        tcp = any(parse_scheme(s).cc == "tcp" for s in self.schemes)
        headers = max(ROCE_OVERHEAD + (INT_LEN if hpcc else 0), TCP_OVERHEAD if tcp else 0)
        if self.roce_mtu + headers > spec.links.mtu_bytes:
            raise SpecError(f"{path}.roce_mtu: {self.roce_mtu} B of payload and "
                            f"{headers} B of headers"
                            f"{' (with HPCC telemetry)' if hpcc else ''}"
                            f"{' (TCP, with timestamps)' if headers == TCP_OVERHEAD else ''}"
                            f" do not fit "
                            f"links.mtu_bytes {spec.links.mtu_bytes}")
        if hpcc and len({link.rate_mbps for link in topo.links}) > INT_RATES:
            raise SpecError(f"{path}.schemes: the in-band telemetry (hpcc, user_cc.telemetry) "
                            f"names at most {INT_RATES} "
                            f"link rates; the topology has more")
        if not 0 <= self.queue_sample_hz <= 2000:
            raise SpecError(f"{path}.queue_sample_hz: 0 (none) to 2000 (got "
                            f"{self.queue_sample_hz})")
        for name in ("dscp", "ctrl_dscp"):
            if not 0 <= getattr(self, name) <= 63 or getattr(self, name) == 0:
                raise SpecError(f"{path}.{name}: a DSCP in 1..63 (got {getattr(self, name)})")
        if self.dscp == self.ctrl_dscp:
            raise SpecError(f"{path}.ctrl_dscp: must differ from dscp")
        for name in ("ecn_k_bytes", "buffer_pkts", "rto_us", "sample_us", "timeout_s",
                     "tcp_ecn_k_bytes", "tcp_initial_window_pkts"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise SpecError(f"{path}.{name}: must be > 0")
        if self.ecn_kmax_bytes is not None and self.ecn_kmax_bytes <= self.ecn_k_bytes:
            raise SpecError(f"{path}.ecn_kmax_bytes: above ecn_k_bytes ({self.ecn_k_bytes})")
        if not 0 < self.ecn_pmax <= 1:
            raise SpecError(f"{path}.ecn_pmax: in (0, 1] (got {self.ecn_pmax})")
        try:
            self.dcqcn.check(f"{path}.dcqcn")
            self.timely.check(f"{path}.timely")
            self.hpcc.check(f"{path}.hpcc")
            self.nscc.check(f"{path}.nscc")
            self.dcqcn_plus.check(f"{path}.dcqcn_plus")
            self.irn.check(f"{path}.irn")
            if self.user_cc is not None:
                self.user_cc.check(f"{path}.user_cc")
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        check_pfc_thresholds(self.xoff_bytes, self.xon_bytes, self.headroom_bytes,
                             spec.links.mtu_bytes, path)
        validate_qos(rdma_qos(self, "dcqcn"), path, spec.links.mtu_bytes, self.buffer_pkts,
                     None)


MAX_QPS = 4096        # an engine's queue pairs (engine.c)
MAX_QPS_PER_FLOW = 64


def check_workload(w: RdmaWorkload, path: str, topo: Topology) -> None:
    try:
        load_cdf(w.cdf, f"{path}.cdf")
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    if not 0 < w.load < 1:
        raise SpecError(f"{path}.load: a share of the host links in (0, 1) (got {w.load})")
    if not w.duration_ms > 0 or not w.size_scale > 0:
        raise SpecError(f"{path}: duration_ms and size_scale must be > 0")
    n = len(topo.hosts)
    if w.pattern not in ("random", "all_to_all"):
        try:
            patterns.parse(w.pattern, n, f"{path}.pattern")
        except patterns.PatternError as exc:
            raise SpecError(str(exc)) from None
    if w.incast is not None:
        if not 1 <= w.incast.senders < n:
            raise SpecError(f"{path}.incast.senders: 1..{n - 1} (got {w.incast.senders})")
        if w.incast.size_bytes < 1 or not 0 < w.incast.share < 1:
            raise SpecError(f"{path}.incast: size_bytes >= 1 and share in (0, 1)")


def reacts_to_ecn(exp: Rdma, scheme: str) -> bool:
    """Whether the switches mark a scheme's packets: DCQCN(+), TCP, and a user's control
    that asks for it."""
    cc = parse_scheme(scheme).cc
    return cc in ("dcqcn", "dcqcn_plus", "nscc", "tcp") or (
        cc == "user" and exp.user_cc is not None and exp.user_cc.ecn)


def telemetry(exp: Rdma, scheme: str) -> bool:
    """Whether a scheme's data packets collect HPCC's per-hop records."""
    cc = parse_scheme(scheme).cc
    return cc == "hpcc" or (cc == "user" and exp.user_cc is not None
                            and exp.user_cc.telemetry)


def rdma_qos(exp: Rdma, scheme: str) -> QosConfig:
    """The classes a scheme runs with: the rest (DSCP 0), the RoCE data (lossless when
    `pfc` and the scheme is not lossy, ECN-marked when it reacts to marks) and the control
    packets above both."""
    ecn = EcnProfile(k=exp.ecn_k_bytes, kmax=exp.ecn_kmax_bytes, pmax=exp.ecn_pmax,
                     unit="bytes") if reacts_to_ecn(exp, scheme) else None
    if parse_scheme(scheme).tcp and exp.tcp_ecn_k_bytes is not None:
        ecn = EcnProfile(k=exp.tcp_ecn_k_bytes, unit="bytes")
    lossless = exp.pfc and not parse_scheme(scheme).lossy
    classes = [TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts),
               TrafficClass(name="roce", dscp=[exp.dscp], priority=3, lossless=lossless,
                            ecn=ecn),
               TrafficClass(name="control", dscp=[exp.ctrl_dscp], priority=6)]
    pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                    headroom_bytes=exp.headroom_bytes) if lossless else None
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def bottleneck_mbps(topo: Topology, src: str, dst: str) -> float:
    """The slowest link on the first shortest path (equal-cost paths of these fabrics have
    equal rates)."""
    return path_bottleneck_mbps(topo, shortest_paths(topo, src, dst)[0])


def path_bottleneck_mbps(topo: Topology, path: list[str]) -> float:
    return min(link.rate_mbps for a, b in zip(path, path[1:])
               if (link := topo.link_between(a, b)) is not None)


def run(ctx: Context, exp: Rdma) -> Outcome:
    from testbed.workloads import roce  # runtime side: not at import

    out = Outcome()
    flows = exp.all_flows(rated(ctx.spec, ctx.topo))     # at the rates the fabric runs
    rows: list[dict] = []
    rate_rows: list[list] = []
    queue_rows: list[list] = []
    params: dict[str, dict] = {}
    binaries = ready_schemes(ctx, exp)      # before any fabric: a bad one stops the run here
    for scheme in exp.schemes:
        label = f"rdma {scheme}"
        parts = parse_scheme(scheme)
        hosts = None
        if parts.tcp:
            hosts = replace(ctx.spec.hosts, ecn=True, congestion_control=parts.tcp)
        with ctx.fabric(ctx.topo, ctx.spec.controller.routing, label, qos=rdma_qos(exp, scheme),
                        hosts=hosts, burst_us=exp.burst_us, buffer_pkts=exp.buffer_pkts,
                        buffer_bytes=None, udp_hash=exp.source_port == "per_qp") as fab:
            topo = fab.topo
            rtts = path_rtts(fab, topo, flows)
            folder = ctx.out_dir / "flows" / ctx.raw_name(f"rdma-{scheme}")
            folder.mkdir(parents=True, exist_ok=True)
            base_rtt_us = base_rtt(exp, flows, topo, rtts, scheme)
            if parts.tcp:
                if not exp.tcp_initial_window_pkts and base_rtt_us <= 0:
                    raise TestbedError(f"{label}: no base round trip measured (no ping "
                                       f"answered) for the initial window")
                window = exp.tcp_initial_window_pkts or bdp_packets(
                    base_rtt_us, max(topo.link_at(f.src, 0).rate_mbps for f in flows),
                    exp.roce_mtu + 14 + TCP_OVERHEAD)
                fab.set_initial_window(window)
                # every process started (a Python process each, one after another), listening,
                # its connections open
                hosts_n = len({h for f in flows for h in (f.src, f.dst)})
                start_at = time.time() + 2.0 + 0.3 * hosts_n
                argvs = tcp_processes(exp, flows, topo, start_at, folder)
                params[scheme] = {**parts._asdict(), "base_rtt_us": base_rtt_us,
                                  "mss": exp.roce_mtu, "initial_window_pkts": window,
                                  "ecn_k_bytes": exp.tcp_ecn_k_bytes or exp.ecn_k_bytes,
                                  "paced_mbps": {h: tcp_pace_mbps(exp, topo, h)
                                                 for h in sorted({f.src for f in flows})}}
                what = "tcp flows"
            else:
                start_at = time.time() + 2.0      # every engine started and bound by then
                engines = engines_for(exp, flows, topo, scheme, start_at, base_rtt_us)
                params[scheme] = scheme_record(exp, flows, topo, scheme, base_rtt_us)
                binary = binaries[parts.cc == "user"]
                argvs = {h: [str(binary), str(e.save(folder / f"{h}.conf")),
                             str(folder / f"{h}.json")] for h, e in engines.items()}
                what = "roce engine"
            dp = fab.dataplane()
            before = qc.fabric_drops(dp)
            ports = switch_ports(dp, topo)
            enq = ({p: dp.queue(p, ROCE_CLASS).enq_bytes for p in ports}
                   if exp.queue_sample_hz else {})     # the queue rows' bytes sent
            sampler = None
            t_ns = time.monotonic_ns()
            with ctx.traffic_phase(fab, out, label) as checks:
                if exp.queue_sample_hz:     # its rate counts from here: made, then started
                    sampler = ctx.class_sampler(dp, [(p, ROCE_CLASS) for p in ports],
                                                rate_hz=exp.queue_sample_hz)
                    sampler.start()
                procs = {h: fab.start_process(h, argv, f"{what} {h}", folder / f"{h}.log")
                         for h, argv in argvs.items()}
                try:
                    timed_out = wait_done(fab, procs, folder, {f.src for f in flows},
                                          start_at + exp.timeout_s, f"{label}: the {what} of")
                finally:
                    if sampler is not None:
                        sampler.stop()
            if sampler is not None:
                queue_rows += port_queue_rows(sampler, ports, scheme, start_at, {
                    p: dp.queue(p, ROCE_CLASS).enq_bytes - enq[p] for p in ports})
                if sampler.achieved_rate_hz() < 0.8 * exp.queue_sample_hz:
                    out.warnings.append(f"{label}: queues sampled at "
                                        f"{sampler.achieved_rate_hz():.0f} Hz of "
                                        f"{exp.queue_sample_hz:g}")
            drops = {k: v - before[k] for k, v in qc.fabric_drops(dp).items()}
            dp.close()
            pfc = qc.pfc_summary(fab.qos_status_dir, t_ns)
        if parts.tcp:
            scheme_rows = tcp_flow_rows(exp, flows, topo, scheme, folder, rtts)
            if late := max((r["late_us"] for r in scheme_rows if r["late_us"]), default=0):
                if late > 10_000:
                    out.warnings.append(f"{label}: a flow started {late / 1e3:.0f} ms late")
            if failed := [r for r in scheme_rows if r["tcp_error"]]:
                out.warnings.append(f"{label}: {len(failed)} connections failed (flow "
                                    f"{failed[0]['flow']}: {failed[0]['tcp_error']})")
        else:
            results = {h: roce.read_result(folder / f"{h}.json") for h in engines}
            t0 = min(r.t0_unix for r in results.values())
            scheme_rows = flow_rows(exp, flows, topo, scheme, results, rtts)
            for host in {f.src for f in flows}:
                res = results[host]
                rate_rows += [[scheme, flow, round(res.t0_unix - t0 + t_us / 1e6, 6),
                               round(rate, 4), round(tx, 4)]
                              for flow, t_us, rate, tx in flow_samples(res.samples,
                                                                       exp.qps_per_flow)]
        set_ideals(scheme_rows)         # for the log; again over every scheme's rows below
        if late := late_engines(scheme_rows, checks["cpu"].get("machine_steal_mean")):
            checks["cpu"]["cpu_bound"] = True   # the phase's record in events.jsonl too
            out.warnings.append(f"{label}: {CPU_BOUND} ({late}); its numbers are not faithful")
        for r in scheme_rows:
            r.update({"switch_drops": drops.get("switch_drops", 0), "pauses": pfc["pauses"],
                      "timed_out": timed_out, "cpu_bound": checks["cpu"]["cpu_bound"]})
        rows += scheme_rows
        done = [r for r in scheme_rows if r["fct_us"] is not None]
        ctx.log(f"  {label}: {len(done)}/{len(scheme_rows)} flows complete, slowdown median "
                f"{median(r['slowdown'] for r in done)}, {pfc['pauses']} pauses, "
                f"{drops.get('switch_drops', 0)} drops")
        if timed_out:
            out.warnings.append(f"{label}: flows still running after {exp.timeout_s} s")
    set_ideals(rows)                    # one base round trip per path length, all schemes
    (ctx.out_dir / "rdma_params.json").write_text(json.dumps(params, indent=1))
    columns = list(dict.fromkeys(k for r in rows for k in r))  # TCP's rows have more
    ctx.write_csv("rdma_flows.csv", columns, [[r.get(k) for k in columns] for r in rows])
    ctx.write_csv("rdma_rates.csv", RATE_HEADER, rate_rows)
    buckets = fct_table(rows)
    if buckets:
        ctx.write_csv("rdma_fct.csv", FCT_HEADER, buckets)
    if queue_rows:
        ctx.write_csv("rdma_queues.csv", QUEUE_HEADER, queue_rows)
    # shares of a bottleneck mean something for a few flows meant to share one
    out.headline, warnings = analyse(rows, rate_rows if exp.workload is None else None)
    out.headline.update(queue_headline(queue_rows))
    out.warnings += warnings
    return out


ROCE_CLASS = 1      # rdma_qos's classes: data, roce, control


def switch_ports(dp: Any, topo: Topology) -> dict[int, str]:
    """Every switch port of the fabric: its dataplane id -> its interface."""
    by_name = dp.by_name
    return {by_name[name]["id"]: name for link in topo.links for node, port in link.ends()
            if not topo.is_host(node) and (name := ifname(node, port)) in by_name}


# a queue's occupancy in whole packets: bins from these lower edges (the last open)
QUEUE_BINS_PKTS = (0, 1, 2, 4, 8, 16, 32, 64)
QUEUE_HEADER = ["scheme", "port", "sent_bytes", "sampled_s", "mean_bytes", "p50_bytes",
                "p95_bytes", "p99_bytes", "max_bytes",
                *[f"share_{lo}_pkts" if hi == lo + 1 else f"share_{lo}_{hi - 1}_pkts"
                  if hi else f"share_{lo}_up_pkts"
                  for lo, hi in zip(QUEUE_BINS_PKTS, [*QUEUE_BINS_PKTS[1:], 0])]]


def queue_stats(segs: list[tuple[float, int, int]]) -> list:
    """One queue's time-weighted occupancy from (duration_s, pkts, bytes) segments: the
    time sampled, the mean, median, 95th and 99th percentiles and the most (bytes), and
    the share of the time in each QUEUE_BINS_PKTS bin (the packets it held)."""
    total = sum(d for d, _, _ in segs)
    if total <= 0:
        return [0.0, 0, 0, 0, 0, 0] + [0.0] * len(QUEUE_BINS_PKTS)
    by_size = sorted(segs, key=lambda x: x[2])

    def quantile(q: float) -> int:
        acc = 0.0
        for d, _, b in by_size:
            acc += d
            if acc >= q * total - 1e-12:
                return b
        return by_size[-1][2]

    shares = [0.0] * len(QUEUE_BINS_PKTS)
    for d, pkts, _ in segs:
        shares[max(i for i, lo in enumerate(QUEUE_BINS_PKTS) if pkts >= lo)] += d / total
    return [round(total, 3), round(sum(d * b for d, _, b in segs) / total),
            quantile(0.5), quantile(0.95), quantile(0.99), max(b for _, _, b in segs),
            *[round(x, 5) for x in shares]]


def port_queue_rows(sampler: Any, ports: dict[int, str], scheme: str,
                    start_at: float, sent: dict[int, int]) -> list[list]:
    """Each switch port's RoCE bytes sent in the phase (`sent`) and its RoCE queue from the
    flows' start to the sampler's stop (a ClassQueueSampler: testbed/measure/queues.py)."""
    t0, t_end = sampler.t0, sampler.t_end
    return [[scheme, name, sent[p], *queue_stats(
        sampler.time_weighted(p, ROCE_CLASS, start_at - t0, t_end - t0))]
            for p, name in sorted(ports.items(), key=lambda kv: kv[1])]


def queue_headline(queue_rows: list[list]) -> dict:
    """Per scheme, the busiest switch port's 99th-percentile and largest RoCE queue."""
    out: dict = {}
    for scheme in dict.fromkeys(r[0] for r in queue_rows):
        mine = [r for r in queue_rows if r[0] == scheme]
        out[f"{scheme}_queue_p99_bytes"] = max(r[QUEUE_HEADER.index("p99_bytes")] for r in mine)
        out[f"{scheme}_queue_max_bytes"] = max(r[QUEUE_HEADER.index("max_bytes")] for r in mine)
    return out


def ready_schemes(ctx: Context, exp: Rdma) -> dict[bool, Path]:
    """Before any fabric: every TCP scheme's algorithm available, and the engines the
    schemes need built (keyed by whether it carries the user's control; a header that does
    not compile stops the run here, with the compiler's message)."""
    from testbed.workloads import roce

    out: dict[bool, Path] = {}
    for j, scheme in enumerate(exp.schemes):
        parts = parse_scheme(scheme)
        if parts.tcp:
            if parts.tcp not in (available := ctx.congestion_controls()):
                raise TestbedError(f"rdma: schemes[{j}] {scheme!r}: congestion control "
                                   f"{parts.tcp} is not available here "
                                   f"({' '.join(available)})")
            continue
        user = parts.cc == "user"
        if user not in out:
            out[user] = roce.build(exp.user_cc.source if user and exp.user_cc else None)
    return out


def tcp_pace_mbps(exp: Rdma, topo: Topology, host: str) -> float:
    """The rate a host's TCP connections are paced at: its line rate on the wire. The
    kernel paces the segments' payload, so the payload's share of a full segment's wire
    bytes."""
    mtu = exp.roce_mtu
    return topo.link_at(host, 0).rate_mbps * mtu / (mtu + 14 + TCP_OVERHEAD)


def wait_done(fab: Phase, procs: dict, folder: Path, requesters: set[str], deadline: float,
              what: str) -> bool:
    """Until every requester's process has said "done" in its log (True: the deadline came
    first), then stops them all; a process that ended by itself failed."""
    while time.time() < deadline and not all(
            "done" in (folder / f"{h}.log").read_text().split() for h in requesters):
        dead = [h for h, p in procs.items() if p.poll() is not None]
        if dead:       # they serve until stopped: one that ended failed
            fab.stop_processes(list(procs.values()))
            log = (folder / f"{dead[0]}.log").read_text().strip()[-500:]
            raise TestbedError(f"{what} {dead[0]} ended early: {log}")
        time.sleep(0.1)
    timed_out = time.time() >= deadline
    time.sleep(0.05)               # the last ACKs' way back
    fab.stop_processes(list(procs.values()))
    return timed_out


TCP_PORT = 5400


def tcp_processes(exp: Rdma, flows: list[RdmaFlow], topo: Topology, start_at: float,
                  folder: Path) -> dict[str, list[str]]:
    """The TCP schemes' workload (testbed/workloads/tcpflows.py): one process per host
    that sends or receives, each flow a connection of its own; data in the RoCE class,
    ACKs in the control class, segments of `roce_mtu` bytes."""
    cfgs: dict[str, dict] = {}
    for i, f in enumerate(flows):
        for h in (f.src, f.dst):
            cfgs.setdefault(h, {"bind": topo.host(h).ip, "port": TCP_PORT,
                                "start_at_unix": start_at, "dscp": exp.dscp,
                                "ack_dscp": exp.ctrl_dscp, "mss": exp.roce_mtu, "flows": []})
        cfgs[f.src]["pace_mbps"] = tcp_pace_mbps(exp, topo, f.src)
        cfgs[f.src]["flows"].append({"id": i, "dst": topo.host(f.dst).ip, "port": TCP_PORT,
                                     "size": f.size_bytes,
                                     "start_us": round(f.start_ms * 1000)})
    argvs = {}
    for h, cfg in cfgs.items():
        (folder / f"{h}.conf.json").write_text(json.dumps(cfg))
        argvs[h] = [sys.executable, "-m", "testbed.workloads.tcpflows",
                    str(folder / f"{h}.conf.json"), str(folder / f"{h}.json")]
    return argvs


def tcp_flow_rows(exp: Rdma, flows: list[RdmaFlow], topo: Topology, scheme: str,
                  folder: Path, rtts: dict) -> list[dict]:
    """One row per flow of a TCP scheme, with the RoCE rows' columns (the engines' own
    counters empty) and the connection's: segments, retransmissions, deliveries with
    their CE mark echoed."""
    sent: dict[int, dict] = {}
    got: dict[int, int] = {}
    cpu: dict[str, float] = {}
    for h in {h for f in flows for h in (f.src, f.dst)}:
        res = json.loads((folder / f"{h}.json").read_text())
        sent.update({s["id"]: s for s in res["sent"]})
        got.update({int(k): int(v) for k, v in res["received"]})
        cpu[h] = res["cpu_s"]
    rows = []
    for i, f in enumerate(flows):
        s = sent.get(i, {})
        rows.append({
            **flow_row(exp, scheme, i, f, topo, rtts, s.get("fct_us"), TCP_OVERHEAD, None),
            "rx_bytes": got.get(i, 0), "tx_pkts": s.get("segs_out"),
            "retx_pkts": s.get("retx"), "timeouts": None, "naks": None, "ooo_drops": None,
            "ce_marked": s.get("delivered_ce"), "cnps": None, "rate_cuts": None,
            "rate_updates": None, "rtt_mean_us": None, "rtt_max_us": None, "int_hops": None,
            "ooo_kept": None, "reordered": None, "reorder_max": None, "pace_lost_us": None,
            "pace_lost_cpu_us": None,
            "engine_cpu_s": round(cpu[f.src], 4),
            "dst_engine_cpu_s": round(cpu[f.dst], 4),
            "tcp_cc": s.get("cc"), "tcp_min_rtt_us": s.get("min_rtt_us"),
            "late_us": s.get("late_us"), "tcp_error": s.get("error")})
    return rows


RATE_HEADER = ["scheme", "flow", "t_s", "rate_mbps", "tx_mbps"]


def path_rtts(fab: Phase, topo: Topology, flows: list[RdmaFlow]) -> dict:
    """(src, dst) -> the base round trip (s) of every flow's pair, from one ping per path
    length (the emulated paths of one length have the same base delay); None for a pair
    whose ping went unanswered."""
    by_length: dict[int, tuple[str, str]] = {}
    for f in flows:
        by_length.setdefault(len(shortest_paths(topo, f.src, f.dst)[0]), (f.src, f.dst))
    rtt = {n: fab.ping_rtt_s(*pair) for n, pair in by_length.items()}
    return {(f.src, f.dst): rtt[len(shortest_paths(topo, f.src, f.dst)[0])] for f in flows}


def base_rtt(exp: Rdma, flows: list[RdmaFlow], topo: Topology, rtts: dict,
             scheme: str) -> float:
    """HPCC's T and the BDP of the "+w" window, in us: the longest of the flows' base round
    trips as a data packet of a line-rate flow sees it, a ping's plus the packet's
    transmission at the path's slowest link. (HPCC's code adds the transmission at every
    hop; the emulated links let a lone packet through at once, from their token bucket's
    burst, so a paced flow's packet waits for one transmission, measured.) 0 when no ping
    answered."""
    packet = exp.roce_mtu + WIRE_OVERHEAD + (INT_LEN if telemetry(exp, scheme) else 0)
    longest = 0.0
    for f in flows:
        rtt = rtts.get((f.src, f.dst))
        if rtt is not None:
            longest = max(longest, rtt * 1e6 + packet * 8 / bottleneck_mbps(topo, f.src, f.dst))
    return round(longest, 1)


def scheme_record(exp: Rdma, flows: list[RdmaFlow], topo: Topology, scheme: str,
                  base_rtt_us: float) -> dict:
    """What a scheme ran with: its parameters in the paper's units and scaled to each host
    link rate of the flows, and the base round trip it was given."""
    parts = parse_scheme(scheme)
    ccs: dict[str, Dcqcn | DcqcnPlus | Timely | Hpcc | Nscc] = {
        "dcqcn": exp.dcqcn, "timely": exp.timely, "hpcc": exp.hpcc, "nscc": exp.nscc,
        "dcqcn_plus": exp.dcqcn_plus}
    cc = ccs.get(parts.cc)
    rates = sorted({topo.link_at(h, 0).rate_mbps for f in flows for h in (f.src, f.dst)})
    out: dict = {"base_rtt_us": base_rtt_us, **parts._asdict(),
                 "source_port": exp.source_port, "qps_per_flow": exp.qps_per_flow,
                 "spray_entropies": exp.spray_entropies,
                 "spray_reorder_pkts": exp.spray_reorder_pkts}
    if cc is not None:
        out["params"] = [cc.record(rate) for rate in rates]
    if parts.cc == "user" and exp.user_cc is not None:   # as written: the user's units
        out["user_cc"] = {**dataclasses.asdict(exp.user_cc), "sha1": hashlib.sha1(
            Path(exp.user_cc.source).read_bytes()).hexdigest()}
    if parts.irn:
        out["irn"] = [exp.irn.record(rate) for rate in rates]
    if exp.spray_entropies and parts.irn:     # the reordering IRN waits out, per host rate
        out["spray_reorder_pkts_used"] = [spray_reorder(exp.spray_reorder_pkts, bdp_packets(
            base_rtt_us, rate, exp.roce_mtu + WIRE_OVERHEAD)) for rate in rates]
    return out


def flow_qpns(i: int, per_flow: int) -> range:
    """The queue pairs of flow i (the same numbers at both ends)."""
    return range(i * per_flow + 1, (i + 1) * per_flow + 1)


def host_engine(exp: Rdma, scheme: str, ip: str, rate_mbps: float, int_rates: list[float],
                start_at: float = 0.0, base_rtt_us: float = 0.0):
    """A host's engine for `scheme` (no queue pairs yet): the spec's transport settings and
    the scheme's congestion control at the host's link rate."""
    from testbed.workloads import roce
    parts = parse_scheme(scheme)
    cc = parts.cc
    if (cc in ("hpcc", "nscc", "user") or parts.window or parts.irn) and base_rtt_us <= 0:
        raise TestbedError(f"rdma {scheme}: no base round trip measured (no ping answered)")
    return roce.Engine(
        bind=ip, mtu=exp.roce_mtu, dscp=exp.dscp,
        ctrl_dscp=exp.ctrl_dscp, rto_us=exp.rto_us, sample_us=exp.sample_us,
        # a user's control hears CNPs as DCQCN does: one per QP per its interval
        cnp_interval_us=round(exp.dcqcn.scaled(rate_mbps)["cnp_interval_us"]),
        start_at_unix=start_at, exit_when_done=False, link_mbps=rate_mbps,
        dcqcn=exp.dcqcn if cc == "dcqcn" else None,
        timely=exp.timely if cc == "timely" else None,
        hpcc=exp.hpcc if cc == "hpcc" else None,
        nscc=exp.nscc if cc == "nscc" else None,
        dcqcn_plus=exp.dcqcn_plus if cc == "dcqcn_plus" else None,
        user_cc=exp.user_cc if cc == "user" else None,
        base_rtt_us=base_rtt_us, window=parts.window,
        irn=exp.irn if parts.irn else None,
        spray_entropies=exp.spray_entropies, reorder_pkts=exp.spray_reorder_pkts,
        int_rates=int_rate_table(int_rates) if telemetry(exp, scheme) else [])


def engines_for(exp: Rdma, flows: list[RdmaFlow], topo: Topology, scheme: str,
                start_at: float, base_rtt_us: float = 0.0) -> dict:
    """One engine per host that sends or receives: flow i is queue pairs `flow_qpns` at
    both ends, its bytes split among them (those given none post nothing)."""
    from testbed.workloads import roce

    engines: dict[str, roce.Engine] = {}
    rates = [link.rate_mbps for link in topo.links]

    def engine(host: str) -> roce.Engine:
        if host not in engines:
            engines[host] = host_engine(exp, scheme, topo.host(host).ip,
                                        topo.link_at(host, 0).rate_mbps, rates, start_at,
                                        base_rtt_us)
        return engines[host]

    for i, f in enumerate(flows):
        src, dst = engine(f.src), engine(f.dst)
        sizes = split_bytes(f.size_bytes, exp.qps_per_flow)
        for qpn, nbytes in zip(flow_qpns(i, exp.qps_per_flow), sizes):
            sport = roce.qp_source_port(qpn, qpn) if exp.source_port == "per_qp" else 0
            src.qp(qpn, peer=topo.host(f.dst).ip, peer_qpn=qpn,
                   line_mbps=topo.link_at(f.src, 0).rate_mbps, sport=sport)
            dst.qp(qpn, peer=topo.host(f.src).ip, peer_qpn=qpn,
                   line_mbps=topo.link_at(f.dst, 0).rate_mbps, sport=sport)
            if nbytes:
                src.write(qpn, start_us=round(f.start_ms * 1000), nbytes=nbytes)
    return engines


def flow_row(exp: Rdma, scheme: str, i: int, f: RdmaFlow, topo: Topology, rtts: dict,
             fct_us: float | None, headers: int, rtt_min_us: float | None) -> dict:
    """A flow's columns every scheme's row starts with: the flow, its path (one shortest
    path: its slowest link and its length), its completion (ideal and slowdown:
    `set_ideals`), its bytes on the wire with `headers` per packet."""
    path = shortest_paths(topo, f.src, f.dst)[0]
    rtt = rtts.get((f.src, f.dst))
    return {
        "scheme": scheme, "flow": i, "src": f.src, "dst": f.dst, "incast": f.incast,
        "size_bytes": f.size_bytes, "start_ms": f.start_ms, "roce_mtu": exp.roce_mtu,
        "headers": headers, "fct_us": fct_us, "ideal_fct_us": None, "slowdown": None,
        "goodput_mbps": None if not fct_us else round(f.size_bytes * 8 / fct_us, 3),
        "bottleneck_mbps": path_bottleneck_mbps(topo, path), "path_links": len(path) - 1,
        "ping_rtt_us": None if rtt is None else round(rtt * 1e6),
        "rtt_min_us": rtt_min_us, "base_rtt_us": None,
        "wire_bytes": wire_bytes(f.size_bytes, exp.roce_mtu, headers)}


def flow_samples(samples: list[tuple[int, float, float, float]],
                 per_flow: int) -> list[tuple[int, float, float, float]]:
    """An engine's (qpn, t_us, rate, sent) samples as (flow, t_us, rate, sent): a flow's
    queue pairs summed at each sampling time (`flow_qpns`)."""
    acc: dict[tuple[int, float], list[float]] = {}
    for qpn, t_us, rate, tx in samples:
        both = acc.setdefault(((qpn - 1) // per_flow, t_us), [0.0, 0.0])
        both[0] += rate
        both[1] += tx
    return [(flow, t_us, rate, tx) for (flow, t_us), (rate, tx) in acc.items()]


QP_SUMMED = ("rx_bytes", "tx_pkts", "retx_pkts", "timeouts", "naks_tx", "ooo_drops",
             "ce_rx", "cnps_tx", "rate_cuts", "rate_updates", "ooo_kept", "rtt_samples",
             "reordered")


def merged(qps: list[dict]) -> dict:
    """A flow's counters over its queue pairs (an engine's, per QP): counts summed, round
    trips over every sample, the most telemetry hops."""
    if len(qps) == 1:
        return qps[0]
    out: dict = {k: sum(q[k] for q in qps) for k in QP_SUMMED}
    timed = [q for q in qps if q["rtt_samples"]]
    out["rtt_min_us"] = min((q["rtt_min_us"] for q in timed), default=0.0)
    out["rtt_max_us"] = max((q["rtt_max_us"] for q in timed), default=0.0)
    out["rtt_mean_us"] = (sum(q["rtt_mean_us"] * q["rtt_samples"] for q in timed)
                          / out["rtt_samples"] if timed else 0.0)
    out["int_hops"] = max(q["int_hops"] for q in qps)
    out["reorder_max"] = max(q["reorder_max"] for q in qps)
    # one late wake-up costs every QP that was due: the flow lost what its worst QP did
    out["pace_lost_us"] = max(q["pace_lost_us"] for q in qps)
    out["pace_lost_cpu_us"] = max(q["pace_lost_cpu_us"] for q in qps)
    return out


def flow_fct_us(messages: list) -> float | None:
    """A flow's completion over its queue pairs' WRITEs: from the first posted to the last
    acknowledged (None: one never was)."""
    if any(m.end_us is None for m in messages):
        return None
    return max(m.end_us for m in messages) - min(m.start_us for m in messages)


def flow_rows(exp: Rdma, flows: list[RdmaFlow], topo: Topology, scheme: str,
              results: dict, rtts: dict) -> list[dict]:
    """One row per flow: its completion and both ends' counters (its ideal and slowdown:
    `set_ideals`)."""
    rows = []
    scheme_cc = parse_scheme(scheme).cc
    for i, f in enumerate(flows):
        res = results[f.src]
        qpns = flow_qpns(i, exp.qps_per_flow)
        sent = merged([res.qps[q] for q in qpns])
        got = merged([results[f.dst].qps[q] for q in qpns])
        fct = flow_fct_us([m for m in res.messages if m.qpn in qpns])
        rows.append({
            **flow_row(exp, scheme, i, f, topo, rtts, None if fct is None else round(fct, 1),
                       ROCE_OVERHEAD, sent["rtt_min_us"] if sent["rtt_samples"] else None),
            "rx_bytes": got["rx_bytes"], "tx_pkts": sent["tx_pkts"],
            "retx_pkts": sent["retx_pkts"], "timeouts": sent["timeouts"],
            "naks": got["naks_tx"], "ooo_drops": got["ooo_drops"], "ce_marked": got["ce_rx"],
            "cnps": got["cnps_tx"],
            # a user's control: the engine cannot tell what counts as a cut or an update
            "rate_cuts": None if scheme_cc == "user" else sent["rate_cuts"],
            "rate_updates": None if scheme_cc == "user" else sent["rate_updates"],
            "rtt_mean_us": sent["rtt_mean_us"], "rtt_max_us": sent["rtt_max_us"], "int_hops": sent["int_hops"],
            "ooo_kept": got["ooo_kept"],
            # arrivals behind a higher PSN (reordered by spraying, or resent) and how far
            "reordered": got["reordered"], "reorder_max": got["reorder_max"],
            # sending time its engine lost by waking past the limiter's burst credit
            "pace_lost_us": round(sent["pace_lost_us"], 1),
            # the part of it the engine spent running or waiting for a core since it last
            # slept (the rest: it slept past its timer)
            "pace_lost_cpu_us": round(sent["pace_lost_cpu_us"], 1),
            "engine_cpu_s": round(res.cpu_s, 4),
            "dst_engine_cpu_s": round(results[f.dst].cpu_s, 4)})
    return rows


def late_engines(rows: list[dict], steal: float | None = None) -> str | None:
    """What says the engines fell behind their pace (`engine_late`): the flow that lost the
    largest share of its completion to late wake-ups, if any lost too much, with how much of
    that its engine spent running or waiting for a core and the hypervisor's share of the
    cores over the phase (`steal`, its steal)."""
    late = [r for r in rows if engine_late(r.get("pace_lost_us"), r.get("fct_us"))]
    if not late:
        return None
    r = max(late, key=lambda r: r["pace_lost_us"] / r["fct_us"])
    cpu = r.get("pace_lost_cpu_us")
    return (f"the RoCE engine on {r['src']} woke late: flow {r['flow']} lost "
            f"{r['pace_lost_us'] / 1e3:.1f} ms of sending, {r['pace_lost_us'] / r['fct_us']:.0%} "
            f"of its completion"
            + (f" ({cpu / 1e3:.1f} ms of it running or waiting for a core)" if cpu is not None
               else "")
            + f", and {len(late)} flow(s) more than {ENGINE_PACE_LOST_MAX:.0%}"
            + steal_note(steal))


def set_ideals(rows: list[dict]) -> None:
    """Each flow's ideal completion and slowdown. The base round trip of a path length is
    the least any packet of these rows took on such a path, by the engines' own clocks
    (a flow's first packet finds the links' token buckets full and empty queues), or the
    ping's when no packet was timed: ICMP through the hosts' stacks took 10-20% longer
    than the engines' packets, which would put short flows' slowdowns below 1."""
    base: dict[int, float] = {}
    for r in rows:
        if r["rtt_min_us"]:
            base[r["path_links"]] = min(base.get(r["path_links"], math.inf), r["rtt_min_us"])
    for r in rows:
        rtt_us = base.get(r["path_links"], r["ping_rtt_us"])
        ideal = ideal_fct_us(r["size_bytes"], r["roce_mtu"], r["bottleneck_mbps"],
                             None if rtt_us is None else rtt_us / 1e6, r["headers"])
        r["base_rtt_us"] = None if rtt_us is None else round(rtt_us, 1)
        r["ideal_fct_us"] = round(ideal, 1)
        r["slowdown"] = None if r["fct_us"] is None else round(r["fct_us"] / ideal, 4)


def median(values: Iterator[float] | list[float]) -> float | None:
    v = list(values)
    return round(statistics.median(v), 4) if v else None


def shared_period(rows: list[dict], scheme: str
                  ) -> tuple[list[dict], float, float, float] | None:
    """A scheme's flows, from when the last joined to when the first finished (seconds
    from the engines' start), and an equal split of the slowest bottleneck among them;
    None for fewer than two flows or one unfinished (it would change the others' share)."""
    mine = [r for r in rows if r["scheme"] == scheme]
    if len(mine) < 2 or any(r["fct_us"] is None for r in mine):
        return None
    join = max(float(r["start_ms"]) / 1e3 for r in mine)
    end = min(float(r["start_ms"]) / 1e3 + float(r["fct_us"]) / 1e6 for r in mine)
    return mine, join, end, min(float(r["bottleneck_mbps"]) for r in mine) / len(mine)


def convergence_s(rates: list[list], rows: list[dict], scheme: str, window_s: float = 0.1,
                  tolerance: float = 0.1) -> float | None:
    """How long after the last flow joined every flow's sending rate, averaged over
    windows of `window_s`, came within `tolerance` of an equal share of the bottleneck and
    stayed there until the first flow finished: the start of the first such window (0:
    from the first window on, to this resolution); None when they never settled or never
    ran together. Meant for flows that share one bottleneck (the slowest
    `bottleneck_mbps` of the flows)."""
    together = shared_period(rows, scheme)
    if together is None:
        return None
    mine, join, end, share = together
    n_windows = int((end - join) / window_s + 1e-9)
    if n_windows < 1:
        return None
    ok = []
    for k in range(n_windows):
        lo, hi = join + k * window_s, join + (k + 1) * window_s
        means = []
        for r in mine:
            tx = [x[4] for x in rates if x[0] == scheme and x[1] == r["flow"]
                  and lo <= x[2] < hi]
            means.append(sum(tx) / len(tx) if tx else 0.0)
        ok.append(all(abs(m - share) <= tolerance * share for m in means))
    for k in range(n_windows):
        if all(ok[k:]):
            return round(k * window_s, 3)
    return None


def shared_rates(rates: list[list], rows: list[dict], scheme: str,
                 skip: float = 0.0) -> list[float]:
    """Each flow's mean sending rate (Mb/s) while every flow ran, leaving out the first
    `skip` share of that time (a control's settling); empty when they never ran
    together."""
    together = shared_period(rows, scheme)
    if together is None:
        return []
    mine, join, end, _ = together
    start = join + skip * (end - join)
    out = []
    for r in mine:
        tx = [x[4] for x in rates if x[0] == scheme and x[1] == r["flow"] and start <= x[2] < end]
        if not tx:
            return []
        out.append(sum(tx) / len(tx))
    return out


def shared_shares(rates: list[list], rows: list[dict], scheme: str) -> list[float]:
    """Each flow's mean sending rate while every flow ran, as a share of an equal split of
    the bottleneck (1.0: its fair share); empty when they never ran together."""
    together = shared_period(rows, scheme)
    if together is None:
        return []
    return [round(m / together[3], 3) for m in shared_rates(rates, rows, scheme)]


def percentile(values: list[float | None], q: float) -> float | None:
    """The nearest-rank `q`th percentile; a None (a flow that did not complete) counts as
    slower than any, and a percentile that falls on one is None (not reached)."""
    v = sorted(values, key=lambda x: math.inf if x is None else x)
    if not v:
        return None
    at = v[max(0, math.ceil(q / 100 * len(v)) - 1)]
    return None if at is None else round(at, 4)


def slowdowns(rows: list[dict]) -> list[float | None]:
    return [None if r["slowdown"] is None else float(r["slowdown"]) for r in rows]


FCT_HEADER = ["scheme", "size_from", "size_to", "flows", "done", "slowdown_p50",
              "slowdown_p95", "slowdown_p99"]
SHORT_SHARE = 0.5       # "short" flows: the smaller half by size


def fct_table(rows: list[dict], buckets: int = 10) -> list[list]:
    """Per scheme and flow-size bucket (the sizes' deciles, the same for every scheme: they
    run the same flows), the flows' slowdown percentiles (a flow that did not complete is
    the slowest: a percentile on it is empty), as the HPCC paper's Fig. 11 plots them;
    empty for fewer than 2 * `buckets` flows a scheme."""
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    sizes = sorted(int(r["size_bytes"]) for r in rows if r["scheme"] == schemes[0])
    if len(sizes) < 2 * buckets:
        return []
    edges = sorted({sizes[math.ceil(k / buckets * len(sizes)) - 1]
                    for k in range(1, buckets + 1)})
    out = []
    for scheme in schemes:
        lo = 0
        for hi in edges:
            mine = [r for r in rows if r["scheme"] == scheme and lo < int(r["size_bytes"]) <= hi]
            slow = slowdowns(mine)
            done = sum(x is not None for x in slow)
            out.append([scheme, lo + 1, hi, len(mine), done, percentile(slow, 50),
                        percentile(slow, 95), percentile(slow, 99)])
            lo = hi
    return out


def analyse(rows: list[dict], rates: list[list] | None = None) -> tuple[dict, list[str]]:
    """Per scheme: how many flows completed, their slowdowns (with many flows, the 95th and
    99th percentiles, and the 95th of the short ones: the smaller half by size), pauses and
    drops; a warning for a flow that lost bytes or did not complete."""
    headline: dict = {}
    warnings = []
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = [r for r in rows if r["scheme"] == scheme]
        done = [r for r in mine if r["fct_us"] is not None]
        headline[f"{scheme}_complete"] = f"{len(done)}/{len(mine)}"
        headline[f"{scheme}_slowdown_median"] = median(r["slowdown"] for r in done)
        headline[f"{scheme}_slowdown_max"] = max((r["slowdown"] for r in done), default=None)
        headline[f"{scheme}_pauses"] = mine[0]["pauses"]
        headline[f"{scheme}_switch_drops"] = mine[0]["switch_drops"]
        if reorder := [r["reorder_max"] for r in mine if r.get("reorder_max")]:
            headline[f"{scheme}_reorder_max"] = max(reorder)
        if len(mine) >= 20:
            slow = slowdowns(mine)             # the unfinished count as slowest
            cut = sorted(int(r["size_bytes"]) for r in mine)[
                math.ceil(SHORT_SHARE * len(mine)) - 1]
            headline[f"{scheme}_slowdown_p95"] = percentile(slow, 95)
            headline[f"{scheme}_slowdown_p99"] = percentile(slow, 99)
            headline[f"{scheme}_short_slowdown_p95"] = percentile(
                slowdowns([r for r in mine if int(r["size_bytes"]) <= cut]), 95)
        shares = shared_shares(rates, rows, scheme) if rates is not None else []
        if shares:
            headline[f"{scheme}_share_of_fair"] = shares
            # in Mb/s, and once settled: the second half of the time they ran together
            headline[f"{scheme}_together_mbps"] = [
                round(m, 2) for m in shared_rates(rates or [], rows, scheme)]
            headline[f"{scheme}_together_second_half_mbps"] = [
                round(m, 2) for m in shared_rates(rates or [], rows, scheme, skip=0.5)]
        conv = convergence_s(rates, rows, scheme) if rates is not None else None
        if conv is not None:
            # one packet's time at the bottleneck: the time in the units of a scaled fabric
            pkt_s = (int(mine[0]["roce_mtu"]) + WIRE_OVERHEAD) * 8 / (
                min(float(r["bottleneck_mbps"]) for r in mine) * 1e6)
            headline[f"{scheme}_converged_s"] = conv
            headline[f"{scheme}_converged_pkt_times"] = round(conv / pkt_s)
        for r in mine:
            if r["rx_bytes"] != r["size_bytes"]:
                warnings.append(f"rdma {scheme}: flow {r['flow']} received {r['rx_bytes']} "
                                f"of {r['size_bytes']} bytes")
    return headline, warnings


def size_label(n: float) -> str:
    for unit, div in (("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def plot_fct(rows: list[dict], plots: Path) -> Path:
    """The 95th-percentile slowdown per flow-size bucket, a line per scheme (the HPCC
    paper's Fig. 11)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = [r for r in rows if r["scheme"] == scheme]
        ax.plot(range(len(mine)), [float(r["slowdown_p95"] or "nan") for r in mine], "o-",
                label=scheme, ms=3)
    first = [r for r in rows if r["scheme"] == rows[0]["scheme"]]
    ax.set_xticks(range(len(first)), [size_label(float(r["size_to"])) for r in first],
                  fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("flow size (bucket's largest, bytes)")
    ax.set_ylabel("95th-percentile FCT slowdown")
    ax.legend(fontsize=7)
    ax.set_title(title("RDMA", "FCT slowdown by flow size", rows), fontsize=10)
    return save(fig, plots / "rdma_fct.png")


RATE_PLOT_FLOWS = 16


def plot_rates(rows: list[dict], plots: Path) -> Path | None:
    """Each flow's rate (the limiter's, line) and what it sent (dots) over time, one panel
    per scheme; none for more than RATE_PLOT_FLOWS flows (a workload's: rdma_fct.png)."""
    if len({int(r["flow"]) for r in rows}) > RATE_PLOT_FLOWS:
        return None
    plt = pyplot()
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    fig, axes = plt.subplots(len(schemes), 1, figsize=(8, 1.4 + 2.6 * len(schemes)),
                             squeeze=False)
    several = several_experiments(rows)
    for ax, scheme in zip(axes[:, 0], schemes):
        mine = [r for r in rows if r["scheme"] == scheme]
        for flow in sorted({int(r["flow"]) for r in mine}):
            pts = [r for r in mine if int(r["flow"]) == flow]
            t = [float(r["t_s"]) for r in pts]
            line, = ax.plot(t, [float(r["rate_mbps"]) for r in pts], label=f"flow {flow}")
            ax.plot(t, [float(r["tx_mbps"]) for r in pts], ".", ms=2, color=line.get_color())
        ax.set_ylabel(f"{scheme}\nMb/s")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].set_title(title("RDMA", "each flow's rate (line) and what it sent (dots)",
                               rows) + (" (several experiments)" if several else ""),
                         fontsize=10)
    return save(fig, plots / "rdma_rates.png")


def plot_queues(rows: list[dict], plots: Path) -> Path:
    """Per scheme, the share of all switch ports' time their RoCE queue held each number
    of packets (the HPCC paper's "queue near empty"), a bar group per bin."""
    plt = pyplot()
    bins = [c for c in QUEUE_HEADER if c.startswith("share_")]
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(schemes)
    for k, scheme in enumerate(schemes):
        mine = [r for r in rows if r["scheme"] == scheme]
        time = sum(float(r["sampled_s"]) for r in mine) or 1.0
        shares = [sum(float(r[b]) * float(r["sampled_s"]) for r in mine) / time for b in bins]
        ax.bar([i + k * width for i in range(len(bins))], shares, width, label=scheme)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(bins))],
                  [b[len("share_"):-len("_pkts")].replace("_up", "+").replace("_", "-")
                   for b in bins], fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("RoCE queue at a switch port (packets)")
    ax.set_ylabel("share of the ports' time")
    ax.legend(fontsize=7)
    ax.set_title(title("RDMA", "switch queues", rows), fontsize=10)
    return save(fig, plots / "rdma_queues.png")


def loads(spec: Spec, topo: Topology, exp: Rdma, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: the explicit flows at once, and a workload as the rates it
    offers (each host `load` of its link, spread over its destinations), in RoCE-MTU
    packets, with the engines' CPU per packet (and, for TCP schemes, the same flows in
    the hosts' TCP)."""
    fabric = rated(spec, topo)
    pairs = [(f.src, f.dst) for f in exp.flows + (fan_in_flows(exp.fan_in, fabric)
                                                   if exp.fan_in else [])]
    demands = [math.inf] * len(pairs)
    if exp.workload is not None:
        w = exp.workload
        hosts = [h.name for h in fabric.hosts]
        if w.pattern in ("random", "all_to_all"):
            dst_of = {h: [d for d in hosts if d != h] for h in hosts}
        else:
            dst_of = {}
            for src, dst in patterns.generate(w.pattern, fabric, w.seed):
                dst_of.setdefault(src, []).append(dst)
        for src, dsts in dst_of.items():
            offered = w.load * fabric.link_at(src, 0).rate_mbps
            pairs += [(src, d) for d in dsts]
            demands += [offered / len(dsts)] * len(dsts)
    kinds = {parse_scheme(s).cc == "tcp" for s in exp.schemes}
    if False in kinds:
        yield Load("rdma flows", fabric, exp.roce_mtu + ROCE_OVERHEAD, pairs, roce=True,
                   demands_mbps=demands)
    if True in kinds:       # the same flows as the hosts' TCP: the kernel's cost per packet
        yield Load("rdma flows over tcp", fabric, exp.roce_mtu + TCP_OVERHEAD, pairs,
                   demands_mbps=demands)


EXPERIMENT = Experiment(spec=Rdma, run=run, load=loads,
                        plots={"rdma_rates.csv": plot_rates, "rdma_fct.csv": plot_fct,
                               "rdma_queues.csv": plot_queues})
