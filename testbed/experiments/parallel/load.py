"""The parallel experiment's load model for `testbed plan` (testbed/experiments/load.py):
each job on each fabric and link rate at its busiest, the collective type whose flows carry
the most at once, every rank a trainer, with the analytical model's communication and
emulated compute per iteration."""
from __future__ import annotations

from collections.abc import Iterator

from testbed.config.capacity import Capacity
from testbed.config.spec import Spec
from testbed.workloads.model.parallel.cost import KINDS, Network, sent_bytes
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.schedule import ASYNC
from testbed.workloads.model.rdma import ROCE_OVERHEAD
from topologies.model import Topology, at_rate

from ..load import Flow, Load
from ..trainers.load import step_time
from ..trainers.model import host_link
from .model import job_config, kind_flows, network, prediction
from .spec import Parallel, ParallelJob, job_hosts, parallel_topologies


def parallel_flows(layout: Layout, hosts: list[str]) -> list[Flow]:
    """The collective type whose flows carry the most at once (the types take turns)."""
    best: list[Flow] = []
    for kind in KINDS:
        flows = list(dict.fromkeys((a, b) for a, b, _ in kind_flows(layout, hosts, kind)
                                   if a != b))
        if len(flows) > len(best):
            best = flows
    return best


def parallel_timing(exp: Parallel, job: ParallelJob, where: Topology, hosts: list[str],
                    mtu: int, cap: Capacity) -> tuple[float, float, float, int]:
    """(communication, emulated compute, MB the busiest rank sends, its collectives' steps)
    of an iteration in the parallel model."""
    rate = min(host_link(where, h).rate_mbps for h in hosts)
    cfg = job_config(exp, job, rate)
    net, _ = network(where, job.layout, hosts, rate, mtu,
                     dict.fromkeys(KINDS, 2 * cap.latency_s))
    plan = cfg.plan()
    pred = prediction(plan, net, cfg.s_per_flop, cfg.profile)
    compute = pred["compute_s"] if exp.compute == "emulated" else 0.0
    sent = max(sum(sent_bytes(plan, r).values()) for r in range(len(hosts)))
    # the steps of its collectives on the critical path: the model's communication on a
    # network of infinite bandwidth and one second per step
    counted = prediction(plan, Network(dict.fromkeys(KINDS, float("inf")),
                                       dict.fromkeys(KINDS, 1.0)), 0.0, {})
    steps = round(sum(counted["comm_s"].values()))
    comm = max(0.0, pred["iteration_s"] - pred["compute_s"])
    if job.schedule in ASYNC:
        # the time flows run: without a flush the transfers overlap the compute, so every
        # one of them counts (not only what the iteration waits for), the rest is compute
        comm = min(pred["iteration_s"], sum(pred["comm_s"].values()))
        compute = max(0.0, pred["iteration_s"] - comm) if exp.compute == "emulated" else 0.0
    return comm, compute, sent / 1e6, steps


def _layout(layout: Layout) -> str:
    return " ".join(f"{k}={getattr(layout, k)}" for k in ("dp", "tp", "pp", "ep")
                    if getattr(layout, k) > 1) or "one rank"


def loads(spec: Spec, topo: Topology, exp: Parallel, cap: Capacity) -> Iterator[Load]:
    """Every job on each fabric and link rate; with real compute, a rank's share of the
    real model's step (its tensor- and pipeline-parallel split)."""
    mtu = spec.links.mtu_bytes
    roce = exp.transport == "roce"
    # as the runner builds them: every fabric at each rate, or at the spec's links' rate
    for fabric in parallel_topologies(exp, topo):
        for rate in exp.rates_mbps or [spec.links.rate_mbps]:
            where = at_rate(fabric, rate)
            for job in exp.jobs:
                hosts = job_hosts(job, where)
                comm, idle, sent, steps = parallel_timing(exp, job, where, hosts, mtu, cap)
                real = exp.compute == "real"
                step = step_time("mlp", exp.real.width, exp.real.depth, exp.real.batch,
                                 exp.real.data)[0] / max(1, job.layout.tp * job.layout.pp) \
                    if real else 0.0
                yield Load(f"{where.kind} {_layout(job.layout)}"
                           f"{f' at {rate:g} Mb/s' if rate else ''}"
                           f"{' over RoCE' if roce else ''}", where,
                           exp.roce.roce_mtu + ROCE_OVERHEAD if roce else mtu,
                           parallel_flows(job.layout, hosts), trainers=len(hosts),
                           step_s=step, comm_s=comm, idle_s=idle, sent_mb=sent,
                           steps=steps, parallel=True, roce=roce)
