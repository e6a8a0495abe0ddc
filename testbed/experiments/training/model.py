"""The training experiment's pure decisions: where each rank runs, what the analytical
model says a synchronisation costs, and which classes a fabric runs with. (When a job's
numbers are the machine's rather than the network's, every trainer experiment decides
alike: testbed/experiments/trainers/model.py.)"""
from __future__ import annotations

import dataclasses
import random

from controllers import trace
from controllers.routing import plan as routing_plan
from testbed.config.qos import QosConfig, TrafficClass
from testbed.workloads.model import commmodel
from topologies.graph import distances_to, link_shares
from topologies.model import Topology

from ..trainers.model import host_link
from .spec import Training, TrainingJob, job_hosts_needed

# ---- placement and fabric ------------------------------------------------------------------

def spread(hosts: list[str], k: int) -> list[str]:
    """k hosts spread evenly over the list (so that jobs cross the fabric, not one edge)."""
    n = len(hosts)
    return [hosts[i * n // k] for i in range(k)]


@dataclasses.dataclass(frozen=True)
class RankPlacement:
    servers: list[str]   # host of each server rank (PS), ranks 0..S-1
    workers: list[str]   # host of each worker, ranks after the servers

    @property
    def ranks(self) -> list[tuple[int, str, str]]:
        """(rank, host, role) in rank order."""
        return ([(r, h, "server") for r, h in enumerate(self.servers)]
                + [(len(self.servers) + i, h, "worker") for i, h in enumerate(self.workers)])


def place_on(job: TrainingJob, chosen: list[str]) -> RankPlacement:
    """A job's ranks on these hosts (job_hosts_needed of them): servers first (colocated:
    on the first workers' hosts)."""
    if job.sync != "ps":
        return RankPlacement([], list(chosen))
    if job.ps_placement == "colocated":
        return RankPlacement(chosen[:job.ps_shards], list(chosen))
    # servers every (n + S) / S slots, so that shards sit in different parts of the fabric
    step = len(chosen) // job.ps_shards
    servers = [chosen[j * step] for j in range(job.ps_shards)]
    return RankPlacement(servers, [h for h in chosen if h not in servers])


def place(topo: Topology, job: TrainingJob, n: int) -> RankPlacement:
    return place_on(job, spread([h.name for h in topo.hosts], job_hosts_needed(job, n)))


def ingress_spread(topo: Topology, host: str, senders: list[str]) -> float:
    """How many of `host`'s links the traffic from `senders` arrives on, as a capacity factor
    (1.0 for a single-port host). A BCube server has one port per level: a sender reaches it
    on each port whose switch lies on a shortest path, split evenly (a fluid view of the
    hash-based multipath), and the busiest port sets the pace: factor = senders / the
    busiest port's share."""
    ports = topo.ports_of(host)
    others = [s for s in senders if s != host]
    if len(ports) < 2 or not others:
        return 1.0
    load = {port: 0.0 for port, _, _ in ports}
    for sender in others:
        dist = distances_to(topo, sender)
        hops = dist[host]
        eligible = [port for port, switch, _ in ports if dist.get(switch) == hops - 1]
        for port in eligible:
            load[port] += 1 / len(eligible)
    return len(others) / max(load.values())


RING_DRAWS = 500  # hash draws of the ring flows' paths (ring_link_load with a routing)


def ring_link_load(topo: Topology, hosts: list[str], routing: str | None = None) -> float:
    """The busiest link's load when every host of the ring sends one unit to the next
    (rank order), in units of the slowest host link's rate: 1.0 when every ring flow has
    its links to itself, more when ring flows share a link (the ring runs at its slowest
    flow's pace).

    Without `routing`: each flow split evenly over its shortest paths (a fluid view). With
    it: each flow on one of the paths that routing's plan gives it, drawn with the plan's
    hash shares, and the mean busiest load over RING_DRAWS draws. A hashed routing puts a
    flow on one path, not a fluid share of each: on BCube(4, 1) with ECMP, 12 ring flows
    put two on one relay link in 88% of draws (mean 1.88), which is why BCube's rings
    measured about twice the fluid model."""
    if len(hosts) < 2:
        return 1.0
    base = min(host_link(topo, h).rate_mbps for h in hosts)
    flows = list(zip(hosts, hosts[1:] + hosts[:1]))
    if routing is None or routing == "hedera":
        shares = link_shares(topo, [(a, b, 1.0) for a, b in flows])
        return max(1.0, base * max(shares.values()))
    # c-Through: the packet fabric's paths (its circuits, which follow demand, can only take
    # load off them)
    plan = routing_plan(topo, "ecmp" if routing == "cthrough" else routing)
    choices = [trace.paths(topo, plan, a, b) for a, b in flows]
    rng = random.Random(0)
    draws = 1 if all(len(c) == 1 for c in choices) else RING_DRAWS
    total = 0.0
    for _ in range(draws):
        load: dict[tuple[str, str], float] = {}
        for c in choices:
            path = rng.choices(list(c), weights=list(c.values()))[0]
            for u, v in zip(path, path[1:]):
                link = topo.link_between(u, v)
                assert link is not None  # consecutive nodes of a path
                load[(u, v)] = load.get((u, v), 0.0) + base / link.rate_mbps
        total += max(1.0, max(load.values()))
    return total / draws


def training_qos(exp: Training, spec_qos: QosConfig | None,
                 buffer_pkts: int | None) -> QosConfig:
    """The classes a training fabric runs with: the spec's when it has some; strict priority
    for P3 jobs; otherwise one best-effort class. The class dataplane is always there, so
    that every switch queue can be sampled (its counters are in shared memory)."""
    if spec_qos is not None:
        return spec_qos
    if any(job.priority != "none" for job in exp.jobs):
        return priority_qos(exp, buffer_pkts)
    return QosConfig(classes=[TrafficClass(name="best-effort", dscp=[0],
                                           buffer_pkts=buffer_pkts)],
                     ecn_enabled=False)


def priority_qos(exp: Training, buffer_pkts: int | None) -> QosConfig:
    """Strict priority: the P3 levels above best effort (background traffic and FIFO jobs)."""
    classes = [TrafficClass(name="best-effort", dscp=[0], priority=0, buffer_pkts=buffer_pkts)]
    for i, dscp in enumerate(exp.p3_dscp):
        classes.append(TrafficClass(name=f"p3-level{i}", dscp=[dscp],
                                    priority=len(exp.p3_dscp) - i, buffer_pkts=buffer_pkts))
    return QosConfig(classes=classes, scheduler="strict", ecn_enabled=False)


def predict(job: TrainingJob, n: int, grad_bytes: int, payload_bytes: float, messages: float,
            bandwidth_bps: float, latency_s: float,
            server_bandwidth_bps: float | None = None) -> tuple[float, float]:
    """(model communication seconds per synchronisation, expected payload bytes a worker's
    host sends per synchronisation, mean over the worker hosts). `bandwidth_bps`: the slowest worker's link;
    `server_bandwidth_bps`: the slowest server's."""
    if job.sync == "ps":
        pull = grad_bytes + 4 * job.ps_shards  # dense fp32 shards and their versions
        # A colocated shard's host link carries the n-1 other workers' slices and its own
        # worker's slices to and from the k-1 other shards: (n + k - 2) slices each way.
        k = job.ps_shards
        remote = n + k - 2 if job.ps_placement == "colocated" else n
        sent = payload_bytes
        if job.ps_placement == "colocated":
            # a shard's host also sends the replies to the n-1 other workers, and its worker
            # pushes only the k-1 remote slices: the mean over the n worker hosts
            sent = ((n - k) * payload_bytes
                    + k * ((k - 1) / k * payload_bytes + (n - 1) * pull / k)) / n
        return (commmodel.parameter_server_s(payload_bytes, remote, k,
                                             server_bandwidth_bps or bandwidth_bps, latency_s,
                                             pull_bytes=pull,
                                             worker_bandwidth_bps=bandwidth_bps),
                sent)
    if job.compression not in ("none", "fp16"):  # gathered, not summed (additive)
        return (commmodel.allgather_s(payload_bytes, n, bandwidth_bps, latency_s),
                (n - 1) * payload_bytes)
    size = payload_bytes if job.compression == "fp16" else grad_bytes
    buckets = max(1, round(messages))
    return (commmodel.ring_allreduce_s(size, n, bandwidth_bps, latency_s, buckets),
            2 * (n - 1) / n * size if n > 1 else 0.0)


def job_with(job: TrainingJob, n: int) -> TrainingJob:
    return dataclasses.replace(job, workers=n)
