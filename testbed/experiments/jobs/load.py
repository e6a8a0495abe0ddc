"""The jobs experiment's load model for `testbed plan` (testbed/experiments/load.py): in
each placement, every job at once, each priced by its own kind's model (a training
worker's, testbed/experiments/training/load.py, or a parallel job's,
testbed/experiments/parallel/load.py)."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from testbed.config.capacity import Capacity
from testbed.config.spec import Spec
from testbed.workloads.model.rdma import ROCE_OVERHEAD
from topologies.model import Topology

from ..load import Flow, Load, rated
from ..parallel.load import parallel_flows, parallel_timing
from ..trainers.load import step_time
from ..training.load import processes, training_comm, training_flows
from .spec import JOB_DSCPS, Jobs, placements


def loads(spec: Spec, topo: Topology, exp: Jobs, cap: Capacity) -> Iterator[Load]:
    """All jobs at once: their flows together, the longest communication and compute."""
    mtu = spec.links.mtu_bytes
    fabric = rated(spec, exp.fabric_topology(topo))
    for placement in exp.placements:
        flows: list[Flow] = []
        trainers = steps = 0
        step = comm = idle = sent = 0.0
        for j, (job, hosts) in enumerate(zip(exp.jobs, placements(exp, fabric, placement))):
            t = job.training
            if t is not None:
                n = job.worker_count
                job_step, grad = step_time(t.model, t.width, t.depth, t.batch, t.data)
                job_comm, job_sent, job_steps = training_comm(t, n, grad, fabric, hosts, mtu,
                                                              cap)
                flows += training_flows(t, hosts)
                trainers += processes(dataclasses.replace(t, workers=n))
                step = max(step, job_step)
                comm, sent = max(comm, job_comm), max(sent, job_sent)
                steps = max(steps, job_steps)
                idle = max(idle, t.compute_ms / 1000)
            else:
                pexp, pjob = job.as_parallel(exp, JOB_DSCPS[j])
                job_comm, job_idle, job_sent, job_steps = parallel_timing(
                    pexp, pjob, fabric, hosts, mtu, cap)
                sent, steps = max(sent, job_sent), max(steps, job_steps)
                flows += parallel_flows(job.layout, hosts)
                trainers += len(hosts)
                comm, idle = max(comm, job_comm), max(idle, job_idle)
        roce = exp.transport == "roce"   # every job's packets the RoCE MTU's
        yield Load(f"{placement}, all jobs{' over RoCE' if roce else ''}", fabric,
                   exp.roce.roce_mtu + ROCE_OVERHEAD if roce else mtu, flows,
                   trainers=trainers, step_s=step, comm_s=comm, idle_s=idle, sent_mb=sent,
                   steps=steps, parallel=any(job.training is None for job in exp.jobs),
                   roce=roce)
