"""What the models expect of a parallel job before it runs and beside its measurement: the
analytical model's iteration (per-collective times on a fluid fabric) and the path-aware
model's (every connection on a path its routing gives it, the collectives of all stages
sharing the links while they overlap). The runner calls it with the round trips it
measured; `testbed plan` with the reference machine's latency, so that a placement, a
number of queue pairs or spraying can be compared before a run."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from controllers.routing import plan as routing_plan
from testbed.config.capacity import Capacity
from testbed.config.network import HostConfig
from testbed.config.qos import QosConfig
from testbed.config.spec import Spec
from testbed.config.units import tcp_payload_fraction
from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network
from testbed.workloads.model.parallel.schedule import ASYNC
from testbed.workloads.model.rdma import INT_LEN
from topologies.kinds import own_routing
from topologies.model import Topology, at_rate

from ..load import Expectation
from ..permutation.model import UNMODELLED
from ..rdma import rdma_qos, telemetry
from ..trainers.model import host_link
from .model import (
    class_of_kind,
    compute_time,
    entropy_of,
    job_config,
    link_burst,
    network,
    parallel_qos,
    path_model,
    prediction,
    roce_wire,
)
from .spec import Parallel, ParallelJob, job_hosts, parallel_topologies


@dataclass(frozen=True)
class Expected:
    """A job's models: the analytical model's `pred` on the network `net` (each type's
    busiest-link load in `loads`), and the path-aware model's `paths` (None with real
    compute, or a routing whose paths change as it runs). `share`, `wire`: RoCE's payload
    share of a link and wire bytes per payload byte (None over Gloo)."""
    plan: JobShape
    net: Network
    loads: dict[str, float]
    pred: dict
    paths: dict | None
    share: float | None
    wire: float | None


def transport_label(hosts: HostConfig, scheme: str | None) -> str:
    """Which transport carried a job, as result tables say it: `roce SCHEME`, or `gloo CC`
    with the hosts' TCP congestion control."""
    return f"roce {scheme}" if scheme is not None else f"gloo {hosts.cc_label()}"


def roce_share(exp: Parallel, scheme: str | None) -> tuple[float | None, float | None]:
    """(payload share of a link, wire bytes per payload byte) of the job's RoCE packets
    under `scheme`; (None, None) over Gloo."""
    if scheme is None:
        return None, None
    return roce_wire(exp.roce.roce_mtu, INT_LEN if telemetry(exp.roce, scheme) else 0)


def expected(exp: Parallel, job: ParallelJob, topo: Topology, hosts: list[str],
             rate_mbps: float, mtu: int, rtt_s: dict[str, float], routing: str,
             qos: QosConfig | None, burst_us: int, scheme: str | None) -> Expected:
    """The job's models on `topo` with its ranks on `hosts`, each collective type's step
    latency half its round trip in `rtt_s`, the fabric routed by `routing` and served by
    `qos` (its classes), over Gloo or RoCE `scheme`."""
    cfg = job_config(exp, job, rate_mbps)
    host_rate = min(host_link(topo, h).rate_mbps for h in hosts)
    share, wire = roce_share(exp, scheme)
    net, loads = network(topo, job.layout, hosts, host_rate, mtu, rtt_s, share)
    plan = cfg.plan()
    pred = prediction(plan, net, cfg.s_per_flop, cfg.profile)
    payload = share if share is not None else tcp_payload_fraction(mtu)
    # (real compute's time is not the model's to know, and the path model replays the
    # synchronous schedules only: no path model)
    paths = None if exp.compute != "emulated" or job.schedule in ASYNC else path_model(
        plan, compute_time(plan, cfg.s_per_flop, cfg.profile), topo,
        None if routing in UNMODELLED else routing_plan(topo, routing), hosts, payload,
        net.latency_s, class_of_kind(exp, qos) if scheme is None else None,
        entropy_of(exp, scheme), exp.roce.qps_per_flow if scheme is not None else 1,
        exp.roce.spray_entropies if scheme is not None else 0,
        burst=link_burst(topo, burst_us, mtu, payload) if scheme is None else None,
        seed=exp.seed)
    return Expected(plan, net, loads, pred, paths, share, wire)


def expectations(spec: Spec, topo: Topology, exp: Parallel, cap: Capacity
                 ) -> Iterator[Expectation]:
    """Every job of the experiment as the runner would run it (its fabrics, rates, routings
    and schemes), each step's latency the reference machine's (`cap.latency_s`)."""
    schemes: list[str | None] = list(exp.roce.schemes) if exp.transport == "roce" else [None]
    rtt = dict.fromkeys(KINDS, 2 * cap.latency_s)
    mtu = spec.links.mtu_bytes
    # as the runner builds them: every fabric at each rate, or at the spec's links' rate
    for fabric in parallel_topologies(exp, topo):
        for rate in exp.rates_mbps or [spec.links.rate_mbps]:
            where = at_rate(fabric, rate)
            link_rate = rate or min(link.rate_mbps for link in where.links)
            for routing in exp.routings or [spec.controller.routing]:
                routing = own_routing(where.kind, routing)
                for scheme in schemes:
                    qos = parallel_qos(exp, spec.qos, spec.links.buffer_pkts) \
                        if scheme is None else rdma_qos(exp.roce, scheme)
                    for job in exp.jobs:
                        e = expected(exp, job, where, job_hosts(job, where), link_rate, mtu,
                                     rtt, routing, qos, spec.links.burst_us, scheme)
                        yield Expectation(
                            f"{where.kind}{f' at {rate:g} Mb/s' if rate else ''}"
                            f"{f'/{routing}' if len(exp.routings) > 1 else ''} {job.label()}",
                            transport_label(spec.hosts, scheme),
                            e.pred["iteration_s"],
                            e.paths["iteration_s"] if e.paths else None,
                            e.paths["p10_s"] if e.paths else None,
                            e.paths["p90_s"] if e.paths else None)
