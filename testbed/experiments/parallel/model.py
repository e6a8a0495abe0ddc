"""The parallel experiment's pure decisions: the job each rank is told, the bandwidth each
collective type gets on this fabric with this placement, the model's volumes and times,
the bytes the model expects to cross the core, and the switch classes."""
from __future__ import annotations

import random
import re
import statistics
from collections.abc import Callable

from controllers import trace
from controllers.plans import IP_PROTO_TCP, IP_PROTO_UDP
from testbed.config.qos import QosConfig, TrafficClass
from testbed.config.units import (
    ETHERNET_HEADER_BYTES,
    IP_TCP_HEADER_BYTES,
    frame_bytes,
    htb_burst_bytes,
    htb_default_burst,
    tcp_payload_fraction,
)
from testbed.results.stats import percentile
from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network, predict, sent_bytes
from testbed.workloads.model.parallel.fluid import (
    Compute,
    UsageOf,
    flops_time,
    profile_time,
    replay,
)
from testbed.workloads.model.parallel.job import JobConfig
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.pipemare import PipeMare
from testbed.workloads.model.rdma import WIRE_OVERHEAD
from topologies.graph import link_shares, shortest_paths
from topologies.model import Topology

from .spec import Parallel, ParallelJob

CORE_ROLES = ("core", "spine")
GROUP_OF_KIND = {"tp": "tp", "pp": "pp", "dp": "dp", "ep": "ep", "fsdp": "dp"}


def time_scale(exp: Parallel, rate_mbps: float) -> float:
    """How much longer emulated compute takes than on the stated device: 1, or (to keep the
    communication/computation ratio of a `reference_link_gbps` fabric at this rate) the
    reference rate over this one. The FLOPs are already times `scale`."""
    if exp.reference_link_gbps is None:
        return 1.0
    return exp.reference_link_gbps * 1000 / rate_mbps


def s_per_flop(exp: Parallel, rate_mbps: float) -> float:
    if exp.compute != "emulated" or exp.device_tflops is None:
        return 0.0
    return time_scale(exp, rate_mbps) / (exp.device_tflops * 1e12)


def job_config(exp: Parallel, job: ParallelJob, rate_mbps: float) -> JobConfig:
    emulated = exp.compute == "emulated"
    profile = {}
    if emulated and exp.layer_fwd_s is not None and exp.layer_bwd_s is not None:
        scale = time_scale(exp, rate_mbps) * exp.scale
        profile = {"fwd_s": exp.layer_fwd_s * scale, "bwd_s": exp.layer_bwd_s * scale}
    return JobConfig(layout=job.layout, schedule=job.schedule,
                     micro_batches=job.micro_batches, zero=job.zero, iters=exp.iters,
                     seed=exp.seed, compute=exp.compute,
                     model=exp.describe_model() if emulated else None,
                     scale=exp.scale, s_per_flop=s_per_flop(exp, rate_mbps), profile=profile,
                     real=exp.real, dscp=dict(exp.dscp), timeout_s=exp.timeout_s,
                     pipemare=job.pipemare or PipeMare(), **fault_fields(exp))


def fault_fields(exp: Parallel) -> dict[str, int]:
    f = exp.fault
    if f is None:
        return {}
    if f.kind == "crash":
        return {"crash_rank": f.rank, "crash_iter": f.at_iter}
    return {"hang_rank": f.rank, "crash_iter": f.at_iter}


def unanswered(errors: dict[int, str]) -> list[int]:
    """The ranks the failed ranks were waiting for when they gave up (named in their error
    as "with ranks [...]") that did not fail themselves: a hung rank."""
    waited_for: set[int] = set()
    for text in errors.values():
        m = re.search(r"with ranks \[([\d, ]*)\]", text)
        if m:
            waited_for |= {int(x) for x in m.group(1).split(",") if x.strip()}
    return sorted(waited_for - set(errors))


def kind_flows(layout: Layout, hosts: list[str], kind: str,
               forward_only: bool = False) -> list[tuple[str, str, float]]:
    """The flows every group of one collective type runs at once, each rank sending one
    unit: rings (TP, DP, FSDP allreduce / all-gather / reduce-scatter) to the next rank,
    pipeline stages to the next stage (and back, on the other direction of the links),
    all-to-all (EP) to every other member, 1/(n-1) each."""
    flows: list[tuple[str, str, float]] = []
    for g in layout.groups(GROUP_OF_KIND[kind]):
        n = len(g)
        if n < 2:
            continue
        if kind == "ep":
            flows += [(hosts[a], hosts[b], 1 / (n - 1)) for a in g for b in g if a != b]
        elif kind == "pp":
            flows += [(hosts[a], hosts[b], 1.0) for a, b in zip(g, g[1:])]
            if not forward_only:
                flows += [(hosts[b], hosts[a], 1.0) for a, b in zip(g, g[1:])]
        else:
            flows += [(hosts[g[i]], hosts[g[(i + 1) % n]], 1.0) for i in range(n)]
    return flows


def link_load(topo: Topology, flows: list[tuple[str, str, float]], rate_mbps: float) -> float:
    """How many times a host's rate the busiest link is asked to carry (at least 1)."""
    shares = link_shares(topo, flows)
    return max(1.0, rate_mbps * max(shares.values())) if shares else 1.0


def network(topo: Topology, layout: Layout, hosts: list[str], rate_mbps: float, mtu: int,
            rtt_s: dict[str, float], payload_share: float | None = None
            ) -> tuple[Network, dict[str, float]]:
    """The model's network for this placement (with the RTT measured between two members of
    each type's first group), and each type's busiest-link load. `payload_share`: the
    payload's share of a link (None: TCP's at `mtu`)."""
    share = tcp_payload_fraction(mtu) if payload_share is None else payload_share
    payload_bps = rate_mbps * 1e6 * share / 8
    # a pipeline transfer runs alone on its stage's link (the replay serialises a stage's
    # sends); the other types' flows all run at once
    loads = {k: link_load(topo, kind_flows(layout, hosts, k, forward_only=k == "pp"),
                          rate_mbps) for k in KINDS}
    return (Network({k: payload_bps / loads[k] for k in KINDS},
                    {k: v / 2 for k, v in rtt_s.items()}), loads)


def probe_pairs(layout: Layout, hosts: list[str]) -> dict[str, tuple[str, str]]:
    """For each collective type the job runs, two hosts of its first group's first flow
    (whose RTT stands for the type's step latency)."""
    out = {}
    for k in KINDS:
        flows = kind_flows(layout, hosts, k)
        if flows:
            out[k] = flows[0][:2]
    return out


def roce_wire(roce_mtu: int, telemetry_bytes: int) -> tuple[float, float]:
    """RoCE's (payload share of a link, bytes on the wire per payload byte): every packet's
    Ethernet, IP, UDP, BTH and ICRC (and HPCC's telemetry room). The ACKs go the other way,
    in their own class, and are not counted, as the ranks count data alone."""
    per_packet = roce_mtu + WIRE_OVERHEAD + telemetry_bytes
    return roce_mtu / per_packet, per_packet / roce_mtu


def wire_factor(mtu: int) -> float:
    """Bytes a host sends per payload byte: every full segment's Ethernet, IP and TCP
    headers, and the ACKs it returns for what it receives (one per two segments, and a
    rank of these collectives receives about what it sends)."""
    mss = mtu - IP_TCP_HEADER_BYTES
    per_segment = ETHERNET_HEADER_BYTES + IP_TCP_HEADER_BYTES
    return 1 + per_segment / mss + per_segment / (2 * mss)


def core_fraction(topo: Topology, src: str, dst: str) -> float:
    """The share of a flow's (evenly split) shortest paths that go through a core or spine
    switch."""
    paths = shortest_paths(topo, src, dst)
    roles = {s.name: s.role for s in topo.switches}
    through = sum(1 for p in paths if any(roles.get(n) in CORE_ROLES for n in p))
    return through / len(paths) if paths else 0.0


def core_bytes(plan: JobShape, topo: Topology, hosts: list[str]) -> dict[str, float]:
    """Payload bytes per iteration the model expects to cross the core, per collective type:
    each rank's volume split over its flows of that type, times the share of each flow's
    paths through the core."""
    out = dict.fromkeys(KINDS, 0.0)
    for kind in KINDS:
        flows = kind_flows(plan.layout, hosts, kind)
        by_src: dict[str, list[tuple[str, float]]] = {}
        for s, d, w in flows:
            by_src.setdefault(s, []).append((d, w))
        for rank, host in enumerate(hosts):
            vol = sent_bytes(plan, rank)[kind]
            peers = by_src.get(host, [])
            total_w = sum(w for _, w in peers)
            for d, w in peers:
                out[kind] += vol * w / total_w * core_fraction(topo, host, d)
    return out


def seconds_per_flop(plan: JobShape, spf: float, profile: dict[str, float]) -> float:
    """The compute speed the models take: `spf`, or with a measured per-layer profile the
    seconds per FLOP that make a whole layer's forward take the profiled time."""
    if profile:
        work = plan.layers()[0]
        flops = work.fwd_flops * plan.layout.tp
        return profile["fwd_s"] / flops if flops else 0.0
    return spf


def compute_time(plan: JobShape, spf: float, profile: dict[str, float]) -> Compute:
    """A layer's emulated compute, as the worker waits it (emulated.py): the profiled
    layer time split over the TP group, or its FLOPs at `spf`."""
    if profile:
        return profile_time(profile["fwd_s"], profile["bwd_s"], plan.layout.tp)
    return flops_time(spf)


def prediction(plan: JobShape, net: Network, spf: float, profile: dict[str, float]) -> dict:
    """The model's iteration for the job."""
    return predict(plan, net, seconds_per_flop(plan, spf, profile))


PATH_DRAWS = 10   # hash draws of every connection's path for the path-aware model
PATH_ITERS = 4    # iterations each replay runs (the first and the last not counted)
# how a job's connections meet the fabric's ECMP: a Gloo (TCP) connection per group and
# pair, each hashed on its ports; RoCE queue pairs all from one UDP port (a host pair's
# traffic on one path); each queue pair from its own port (a flow split over its
# `channels`, each hashed); or every packet sprayed over all paths
ENTROPY = ("tcp", "host", "qp", "spray")


def entropy_of(exp: Parallel, scheme: str | None) -> str:
    if scheme is None:
        return "tcp"
    r = exp.roce
    if r.spray_entropies:
        return "spray"
    return "qp" if r.source_port == "per_qp" else "host"


def usage_draw(topo: Topology, route_plan, hosts: list[str], entropy: str, channels: int,
               rng: random.Random, entropies: int = 0) -> UsageOf:
    """One draw of every connection's links (the path model's `usage`): each connection (or
    queue pair) on one path its routing's hash could give it, drawn by the paths' shares
    (controllers/trace.py); sprayed, each queue pair's packets evenly over the paths of its
    `entropies` source ports, each port hashed."""
    proto = IP_PROTO_TCP if entropy == "tcp" else IP_PROTO_UDP
    choices: dict[tuple[str, str], dict[tuple[str, ...], float]] = {}
    drawn: dict[tuple, tuple[str, ...]] = {}

    def paths(a: str, b: str) -> dict[tuple[str, ...], float]:
        if (a, b) not in choices:
            choices[(a, b)] = trace.paths(topo, route_plan, a, b, proto) if a != b else {}
        return choices[(a, b)]

    def one(key: tuple, a: str, b: str) -> tuple[str, ...]:
        if key not in drawn:
            c = paths(a, b)
            drawn[key] = rng.choices(list(c), weights=list(c.values()))[0]
        return drawn[key]

    def usage(src: int, dst: int, via: str) -> dict[tuple[str, str], float]:
        a, b = hosts[src], hosts[dst]
        if a == b:
            return {}
        if entropy == "spray":
            weighted = [(one((src, dst, via, c, port), a, b), 1 / (channels * entropies))
                        for c in range(channels) for port in range(entropies)]
        elif entropy == "host":
            weighted = [(one((a, b), a, b), 1.0)]
        elif entropy == "qp":
            weighted = [(one((src, dst, via, c), a, b), 1 / channels) for c in range(channels)]
        else:
            weighted = [(one((src, dst, via), a, b), 1.0)]
        out: dict[tuple[str, str], float] = {}
        for path, share in weighted:
            for e in zip(path, path[1:]):
                out[e] = out.get(e, 0.0) + share
        return out
    return usage


def link_capacity(topo: Topology, payload_share: float) -> dict[tuple[str, str], float]:
    """Payload bytes per second each direction of every link carries."""
    out = {}
    for link in topo.links:
        bps = link.rate_mbps * 1e6 / 8 * payload_share
        out[(link.a, link.b)] = out[(link.b, link.a)] = bps
    return out


def link_burst(topo: Topology, burst_us: int, mtu: int,
               payload_share: float) -> dict[tuple[str, str], float]:
    """The payload bytes each direction of a link lets through at once after idling: its
    sender's HTB bucket (a switch port's `burst_us` allowance, units.htb_burst_bytes; a
    host's NIC tc's default), plus one frame, since HTB sends a packet whenever its tokens
    are not negative and charges it whole."""
    out = {}
    for link in topo.links:
        for a, b in ((link.a, link.b), (link.b, link.a)):
            bucket = (htb_default_burst(int(link.rate_mbps * 1e6 / 8)) if topo.is_host(a)
                      else htb_burst_bytes(link.rate_mbps, burst_us, mtu))
            out[(a, b)] = (bucket + frame_bytes(mtu)) * payload_share
    return out


def class_of_kind(exp: Parallel, qos: QosConfig | None) -> Callable[[str], str] | None:
    """The switch class each collective type is served in, when the port serves classes
    round-robin with equal weights (the default: one class per type); None when the
    types share one class or strict priority decides (each flow then on its own)."""
    if qos is None or qos.scheduler != "wrr" or qos.port_schedulers or \
            len({c.weight for c in qos.classes}) > 1:
        return None
    by_dscp = {d: c.name for c in qos.classes for d in c.dscp}
    named = {k: by_dscp.get(d, "") for k, d in exp.dscp.items()}
    if len(set(named.values())) <= 1:
        return None
    return lambda kind: named.get(kind, "")


def path_model(plan: JobShape, compute: Compute, topo: Topology, route_plan,
               hosts: list[str], payload_share: float, latency_s: dict[str, float],
               class_of: Callable[[str], str] | None, entropy: str, channels: int = 1,
               entropies: int = 0, burst: dict[tuple[str, str], float] | None = None,
               seed: int = 0, draws: int = PATH_DRAWS) -> dict | None:
    """The path-aware model's iteration (fluid.replay) over `draws` draws of the
    connections' paths: its mean, 10th and 90th percentiles (one run is one draw), and
    the mean pipeline and synchronisation phases. `burst`: the links' HTB buckets, for
    senders that can draw on them (TCP: Gloo, whose sends also wait for a posted
    receive; not the RoCE engine, paced at its line rate, whose WRITEs need none).
    None without a routing plan (a scheduler whose paths change as it runs)."""
    if route_plan is None:
        return None
    rng = random.Random(seed)
    capacity = link_capacity(topo, payload_share)
    got = [replay(plan, compute, capacity,
                  usage_draw(topo, route_plan, hosts, entropy, channels, rng, entropies),
                  latency_s, class_of, PATH_ITERS, burst, posted_recv=entropy == "tcp")
           for _ in range(draws)]
    its = [g["iteration_s"] for g in got]
    return {"iteration_s": statistics.mean(its), "p10_s": percentile(its, 10),
            "p90_s": percentile(its, 90),
            "pipeline_s": statistics.mean(g["pipeline_s"] for g in got),
            "sync_s": statistics.mean(g["sync_s"] for g in got)}


def parallel_qos(exp: Parallel, spec_qos: QosConfig | None,
                 buffer_pkts: int | None) -> QosConfig:
    """The spec's classes when it has some; otherwise one class per collective type (its
    DSCP), served round-robin with equal weights, beside best effort: the switch counts
    each type's bytes per port, and no type is favoured."""
    if spec_qos is not None:
        return spec_qos
    classes = [TrafficClass(name="best-effort", dscp=[0], buffer_pkts=buffer_pkts)]
    by_dscp: dict[int, list[str]] = {}
    for kind, d in exp.dscp.items():
        if d:
            by_dscp.setdefault(d, []).append(kind)
    for d, kinds in sorted(by_dscp.items()):
        classes.append(TrafficClass(name="+".join(kinds), dscp=[d], buffer_pkts=buffer_pkts))
    return QosConfig(classes=classes, scheduler="wrr", ecn_enabled=False)
