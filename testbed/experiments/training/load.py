"""The training experiment's load model for `testbed plan` (testbed/experiments/load.py):
each job on each fabric and link rate at its busiest, its ring's (or its pushes to the
parameter servers') flows all at once, every process a trainer, communicating what the
analytical model says an iteration takes."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from testbed.config.capacity import Capacity
from testbed.config.spec import Spec
from testbed.config.units import tcp_payload_fraction
from topologies.model import Topology, at_rate

from ..load import Flow, Load, rated
from ..trainers.load import step_time
from ..trainers.model import host_link
from .model import place_on, predict, ring_link_load, spread
from .spec import Training, TrainingJob, job_batch, job_hosts_needed, training_topologies


def _ring(hosts: list[str]) -> list[Flow]:
    return [(a, b) for a, b in zip(hosts, hosts[1:] + hosts[:1]) if a != b] \
        if len(hosts) > 1 else []


def training_flows(job: TrainingJob, hosts: list[str]) -> list[Flow]:
    """A job's flows at once on these hosts: its ring, or its workers' pushes."""
    pl = place_on(job, hosts)
    if job.sync == "ps":  # the pushes, every worker to every shard at once
        return [(w, s) for w in pl.workers for s in pl.servers if w != s]
    return _ring(pl.workers)


def _payload(job: TrainingJob, grad: int) -> int:
    """The bytes a worker's gradient takes on the wire, compressed as the job says (torch is
    loaded already: the step was timed)."""
    if job.compression == "none":
        return grad
    from testbed.workloads.compression import make
    return make(job.compression, ratio=job.topk_ratio,
                levels=job.qsgd_levels).expected_nbytes(grad // 4)


def training_comm(job: TrainingJob, n: int, grad: int, where: Topology, hosts: list[str],
                  mtu: int, cap: Capacity) -> tuple[float, float, int]:
    """The training model's communication per iteration at the links' full rate, and the MB
    a training process sends and its messages (parameter servers: the mean over workers and
    servers, each a process)."""
    pl = place_on(job, hosts)
    rate = min(host_link(where, h).rate_mbps for h in hosts)
    server_rate = min((host_link(where, h).rate_mbps for h in pl.servers), default=rate)
    payload = _payload(job, grad)
    fraction = tcp_payload_fraction(mtu)
    bandwidth = rate * 1e6 * fraction / ring_link_load(where, pl.workers)
    messages = max(1.0, grad / (job.bucket_mb * 1e6))
    comm, sent = predict(job, n, grad, payload, messages, bandwidth, cap.latency_s,
                         server_rate * 1e6 * fraction)
    every = job.local_steps if job.sync == "local" else 1
    if job.sync != "ps":
        return comm / every, sent / 1e6 / every, 2 * (n - 1) * round(messages) // every
    # the mean over the n workers and k servers: a worker pushes its gradient to the k
    # shards and pulls it back, a shard answers all n workers
    k = job.ps_shards
    return comm, 2 * n * payload / (n + k) / 1e6, 4 * n * k // (n + k)


def processes(job: TrainingJob) -> int:
    """A training job's processes: its workers and its parameter servers."""
    return job.workers + (job.ps_shards if job.sync == "ps" else 0)


def loads(spec: Spec, topo: Topology, exp: Training, cap: Capacity) -> Iterator[Load]:
    """Every job, with each of its worker counts, on each fabric and link rate, in the
    order the runner runs them."""
    mtu = spec.links.mtu_bytes
    for fabric in training_topologies(exp, rated(spec, topo)):
        for rate in exp.rates_mbps or [None]:
            where = at_rate(fabric, rate) if rate else fabric
            names = [h.name for h in where.hosts]
            for job in exp.jobs:
                step, grad = step_time(exp.model, exp.width, exp.depth, job_batch(exp, job),
                                       exp.data)
                for n in exp.workers or [job.workers]:
                    job_n = dataclasses.replace(job, workers=n)
                    hosts = spread(names, job_hosts_needed(job_n, n))
                    comm, sent, steps = training_comm(job_n, n, grad, where, hosts, mtu, cap)
                    yield Load(f"{where.kind} {job_n.label()}"
                               f"{f' at {rate:g} Mb/s' if rate else ''}", where, mtu,
                               training_flows(job_n, hosts), trainers=processes(job_n),
                               step_s=step, comm_s=comm, sent_mb=sent, steps=steps,
                               links_judged=job.sync != "ps")
