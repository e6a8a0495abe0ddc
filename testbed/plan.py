"""`testbed plan SPEC`: the CPU a spec's experiments need at their link rates and MTU, from
the costs measured on the reference machine (testbed/config/capacity.py), before anything
is built. Offline like `testbed validate` (no root, no fabric); a spec
with real-compute trainers has their step timed here, on one core of this machine.

Each experiment offers the fabric a load at its busiest: the TCP flows it runs at once (a
permutation's pairs, a training job's ring or pushes, an incast's senders) and the trainers
that compute at once. Every flow gets its max-min fair share of the links on its shortest
paths, split evenly over equal-cost paths (ECMP's fluid view: the most the fabric carries),
which makes data segments per second through each switch on the path and, with the ACKs,
the packets entering switches per second. The runner's CPU verdict is then predicted:

- Open vSwitch forwards all of a server's switches in one thread: past the packet rate at
  which the reference machine's permutations became CPU-bound, its queues grow. Training,
  jobs and parallel runs are not held to it (their phases are mostly the workers' start,
  their bursts short: docs/FIDELITY.md);
- trainers (training processes, parameter servers, parallel ranks) share the cores the
  fabric leaves them: their CPU per iteration is their compute, the bytes they send and
  their collectives' steps; when more want a core at once than there are, each waits, and
  past 10% of an iteration waiting the job is CPU-bound (the runner's limit; from 5%:
  marginal);
- the machine's mean busy cores against the runner's 10% idle floor.

The packet rate is an upper bound (ECMP's hashing carried 0.44-0.70 of the fluid view in
the benchmark's permutations), held against the rates the reference machine carried
(scripts/bench_capacity.py): the plan errs towards more servers. Servers: the smallest
count over which the load, split evenly (a placement by pods does that on the symmetric
fabrics), meets every limit on each. The tunnels' encapsulation and the one controller
are not in it (docs/CLUSTER.md, "Capacity").
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field

from testbed.config.capacity import MACHINE_IDLE_MEAN_MIN, REFERENCE, Capacity
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import tcp_payload_fraction
from testbed.experiments.jobs.spec import JOB_DSCPS, placements
from testbed.experiments.parallel.model import job_config, kind_flows, network, prediction
from testbed.experiments.parallel.spec import job_hosts
from testbed.experiments.training.model import (
    CPU_WAIT_SHARE_LIMIT,
    LINK_BUSY_BOTTLENECK,
    host_link,
    place_on,
    predict,
    ring_link_load,
    spread,
)
from testbed.experiments.training.spec import job_hosts_needed, training_topologies
from testbed.workloads.model.parallel.cost import KINDS, Network, sent_bytes
from topologies import patterns
from topologies.builders import nonblocking
from topologies.graph import shortest_paths
from topologies.model import Topology, at_rate

Flow = tuple[str, str]


@dataclass(frozen=True)
class Load:
    """What one phase of an experiment asks of the machine at its busiest. A phase with
    `comm_s` iterates: its flows run `comm_s` of each iteration, beside `step_s` of real
    compute per trainer and `idle_s` of neither (emulated compute); without, they run
    throughout."""
    label: str
    topo: Topology
    mtu: int
    flows: list[Flow] = field(default_factory=list)  # TCP flows at once
    trainers: int = 0                                  # training processes, all at once
    step_s: float = 0.0                                # a trainer's real compute, one core
    comm_s: float | None = None
    idle_s: float = 0.0
    sent_mb: float = 0.0                               # a trainer sends per iteration
    steps: int = 0                                     # steps of its collectives
    parallel: bool = False                             # ranks of the parallel worker
    links_judged: bool = False  # the runner forgives waits behind busy links (training rings)


@dataclass(frozen=True)
class Demand:
    label: str
    flows: int
    goodput_mbps: float       # what the flows carry together (fluid max-min)
    packets_per_s: float      # entering switches while they run, ACKs included (estimate)
    ovs: str                  # OVS's thread: fits | marginal | CPU-bound | - (iterations)
    comm_share: float         # of an iteration the flows run (1: throughout)
    trainers: int
    wait_share: float         # of an iteration a trainer waits for a core
    cores: float              # the machine's busy cores, mean
    servers: int              # servers (of the capacity's cores) it needs
    verdict: str              # fits | marginal | CPU-bound, on one server


def fluid_rates(topo: Topology, flows: list[Flow]) -> list[tuple[float, float]]:
    """Each flow's max-min fair rate (Mb/s) when it is split evenly over its shortest paths,
    and the switches it crosses (mean over those paths)."""
    shares: list[dict[tuple[str, str], float]] = []
    hops: list[float] = []
    for src, dst in flows:
        paths = shortest_paths(topo, src, dst)
        share: dict[tuple[str, str], float] = {}
        for path in paths:
            for u, v in zip(path, path[1:]):
                share[(u, v)] = share.get((u, v), 0.0) + 1 / len(paths)
        shares.append(share)
        hops.append(sum(sum(1 for n in p[1:-1] if not topo.is_host(n)) for p in paths)
                    / len(paths))
    left = {}
    for link in topo.links:
        left[(link.a, link.b)] = left[(link.b, link.a)] = link.rate_mbps
    rates = [0.0] * len(flows)
    active = {i for i, s in enumerate(shares) if s}
    while active:
        weight: dict[tuple[str, str], float] = {}
        for i in active:
            for arc, s in shares[i].items():
                weight[arc] = weight.get(arc, 0.0) + s
        step = min(left[arc] / w for arc, w in weight.items())
        for i in active:
            rates[i] += step
        for arc, w in weight.items():
            left[arc] -= step * w
        full = {arc for arc in weight if left[arc] <= 1e-9 * (1 + step)}
        active = {i for i in active if not full.intersection(shares[i])}
    return list(zip(rates, hops))


def demand(load: Load, cap: Capacity = REFERENCE) -> Demand:
    rated = fluid_rates(load.topo, load.flows)
    pps = sum(rate * 1e6 / 8 / load.mtu * hops for rate, hops in rated) \
        * cap.packets_per_segment
    first = _verdict(load, pps, cap, 1)
    servers = next((n for n in range(1, 4097)
                    if _verdict(load, pps, cap, n)[0] == "fits"), 4096)
    return Demand(load.label, len(load.flows), round(sum(r for r, _ in rated), 1), round(pps),
                  first[1], round(first[2], 3), load.trainers, round(first[3], 3),
                  round(first[4], 2), servers, first[0])


def trainer_cpu_s(load: Load, cap: Capacity) -> float:
    """A trainer's CPU per iteration: its compute, the worker's own work, the bytes it
    sends and its collectives' steps (fitted on the reference machine)."""
    per_mb = cap.rank_per_mb_s if load.parallel else cap.trainer_per_mb_s
    return (load.step_s * cap.step_overhead + cap.trainer_base_s + per_mb * load.sent_mb
            + cap.trainer_per_step_s * load.steps)


def _verdict(load: Load, pps: float, cap: Capacity, servers: int
             ) -> tuple[str, str, float, float, float]:
    """(verdict, OVS's, communication share, wait share, busy cores) on each of `servers`
    servers sharing the load evenly."""
    usable = cap.cores * (1 - MACHINE_IDLE_MEAN_MIN)
    if load.comm_s is None:  # flows throughout: OVS's queueing decides
        fits, bound = cap.ovs_pps(load.mtu)
        per_server = pps / servers
        ovs = "CPU-bound" if per_server >= bound else "marginal" if per_server > fits \
            else "fits"
        cores = cap.network_cores if load.flows else 0.0
        verdict = "CPU-bound" if ovs == "CPU-bound" or cores > usable else ovs
        return verdict, ovs, 1.0, 0.0, cores
    # Iterations: the runner's phase also holds the workers' start, so OVS's median queue
    # stays short, and ring jobs whose estimated packet rate was 2-9x what a permutation
    # passes took 0.98-2.33x their model's communication (docs/BENCHMARKS.md, "Capacity"):
    # OVS is no limit the plan applies to them.
    # Were all trainers to want their CPU at once (a collective's step, a compute phase),
    # beyond the cores they get each would wait for the others'; they wait a measured share
    # of that.
    comm = load.comm_s
    trainers = load.trainers / servers
    cpu = trainer_cpu_s(load, cap)
    wait = cap.wait_factor * max(0.0, trainers / cap.compute_cores - 1) * cpu
    iteration = comm + load.idle_s + load.step_s * cap.step_overhead + wait
    comm_share = comm / iteration if iteration > 0 else 0.0
    wait_share = wait / iteration if iteration > 0 else 0.0
    link_busy = comm / (comm + wait) if comm + wait > 0 else 1.0
    cores = (cap.network_cores * comm_share if load.flows else 0.0) \
        + (trainers * cpu / iteration if iteration > 0 else 0.0)
    network_bound = load.links_judged and link_busy >= LINK_BUSY_BOTTLENECK
    if cores > usable or (wait_share > CPU_WAIT_SHARE_LIMIT and not network_bound):
        verdict = "CPU-bound"
    elif wait_share > CPU_WAIT_SHARE_LIMIT / 2 and not network_bound:
        verdict = "marginal"
    else:
        verdict = "fits"
    return verdict, "-", comm_share, wait_share, cores


# ---- each experiment's load -------------------------------------------------------------

def _rated(spec: Spec, topo: Topology) -> Topology:
    return at_rate(topo, spec.links.rate_mbps) if spec.links.rate_mbps else topo


def _ring(hosts: list[str]) -> list[Flow]:
    return [(a, b) for a, b in zip(hosts, hosts[1:] + hosts[:1]) if a != b] \
        if len(hosts) > 1 else []


def _training_flows(job, hosts: list[str]) -> list[Flow]:
    pl = place_on(job, hosts)
    if job.sync == "ps":  # the pushes, every worker to every shard at once
        return [(w, s) for w in pl.workers for s in pl.servers if w != s]
    return _ring(pl.workers)


def _parallel_flows(layout, hosts: list[str]) -> list[Flow]:
    """The collective type whose flows carry the most at once (the types take turns)."""
    best: list[Flow] = []
    for kind in KINDS:
        flows = list(dict.fromkeys((a, b) for a, b, _ in kind_flows(layout, hosts, kind)
                                   if a != b))
        if len(flows) > len(best):
            best = flows
    return best


def loads(spec: Spec, topo: Topology, exp: ExperimentSpec, cap: Capacity = REFERENCE
          ) -> Iterator[Load]:
    """The phases of one experiment, at their busiest (the experiment types' traffic)."""
    mtu = spec.links.mtu_bytes
    kind = exp.type
    if kind == "reachability":  # pings: a packet per pair now and then
        yield Load("reachability", _rated(spec, topo), mtu)
    elif kind == "permutation":
        fabric = _rated(spec, topo)
        hosts = [h.name for h in fabric.hosts]
        for routing in exp.routings:  # type: ignore[attr-defined]
            where = fabric
            if routing == "nonblocking":
                rate = min(fabric.link_at(h, 0).rate_mbps for h in hosts)
                where = nonblocking(len(hosts), rate)
            for pattern in exp.patterns:  # type: ignore[attr-defined]
                flows = [(a, b) for a, b in patterns.generate(pattern, where, exp.seed)]  # type: ignore[attr-defined]
                yield Load(f"{routing} {pattern}", where, mtu, flows)
    elif kind == "circuits":  # a rack pair's hosts, one flow each, over the packet fabric
        fabric = _rated(spec, topo)
        for a, b in exp.pairs:  # type: ignore[attr-defined]
            src = [h.name for h in fabric.hosts if h.label("rack") == a]
            dst = [h.name for h in fabric.hosts if h.label("rack") == b]
            yield Load(f"racks {a}->{b}", fabric, mtu, list(zip(src, dst)))
    elif kind == "link_calibration":
        fabric = _rated(spec, topo)
        a, b = (h.name for h in fabric.hosts[:2])
        for rate in exp.rates_mbps:  # type: ignore[attr-defined]
            yield Load(f"{rate:g} Mb/s", at_rate(fabric, rate), mtu, [(a, b)])
    elif kind in ("queue_calibration", "ecn_queue", "incast", "priority", "pfc_victim"):
        yield from _dumbbell_loads(spec, topo, exp)
    elif kind == "training":
        yield from _training_loads(spec, topo, exp, cap)
    elif kind == "parallel":
        yield from _parallel_loads(spec, topo, exp, cap)
    elif kind == "jobs":
        yield from _jobs_loads(spec, topo, exp, cap)
    else:  # a type this planner does not know: say so rather than guess
        raise ValueError(f"no load model for experiment type {kind!r}")


def _dumbbell_loads(spec: Spec, topo: Topology, exp) -> Iterator[Load]:
    mtu = getattr(exp, "mtu_bytes", None) or spec.links.mtu_bytes
    fabric = exp.fabric() if hasattr(exp, "fabric") else _rated(spec, topo)
    hosts = [h.name for h in fabric.hosts]
    if exp.type == "pfc_victim":  # the incast senders on leaf 2 to leaf 1, and the victim
        n = exp.incast_senders + 1
        leaf1, leaf2, leaf3 = hosts[:n], hosts[n:2 * n], hosts[2 * n:]
        flows = [(s, leaf1[0]) for s in leaf2[:exp.incast_senders]] + [(leaf2[-1], leaf3[0])]
        yield Load("incast and victim", fabric, mtu, flows)
        return
    if exp.type == "queue_calibration":  # one flow into the bottleneck
        yield Load(f"{exp.rate_mbps:g} Mb/s", fabric, mtu, [(hosts[0], hosts[-1])])
        return
    senders = getattr(exp, "senders", 2)  # priority: a high and a low class sender
    senders = max(senders) if isinstance(senders, list) else senders
    receiver = hosts[-1]
    yield Load(f"{senders} senders", fabric, mtu, [(h, receiver) for h in hosts[:senders]])


_STEPS: dict[tuple, tuple[float, int]] = {}


def _step(model: str, width: int, depth: int, batch: int, data: str) -> tuple[float, int]:
    """A training step's compute on one core here, and the gradient's bytes (timed once)."""
    key = (model, width, depth, batch, data)
    if key not in _STEPS:
        from testbed.workloads.models import step_seconds
        _STEPS[key] = step_seconds(model, width, depth, batch, data)
    return _STEPS[key]


def _payload(job, grad: int) -> int:
    """The bytes a worker's gradient takes on the wire, compressed as the job says (torch is
    loaded already: the step was timed)."""
    if job.compression == "none":
        return grad
    from testbed.workloads.compression import make
    return make(job.compression, ratio=job.topk_ratio,
                levels=job.qsgd_levels).expected_nbytes(grad // 4)


def _training_comm(job, n: int, grad: int, where: Topology, hosts: list[str], mtu: int,
                   cap: Capacity) -> tuple[float, float, int]:
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


def _processes(job) -> int:
    """A training job's processes: its workers and its parameter servers."""
    return job.workers + (job.ps_shards if job.sync == "ps" else 0)


def _training_loads(spec: Spec, topo: Topology, exp, cap: Capacity) -> Iterator[Load]:
    mtu = spec.links.mtu_bytes
    step, grad = _step(exp.model, exp.width, exp.depth, exp.batch, exp.data)
    for fabric in training_topologies(exp, _rated(spec, topo)):
        for rate in exp.rates_mbps or [None]:
            where = at_rate(fabric, rate) if rate else fabric
            names = [h.name for h in where.hosts]
            for job in exp.jobs:
                for n in exp.workers or [job.workers]:
                    job_n = dataclasses.replace(job, workers=n)
                    hosts = spread(names, job_hosts_needed(job_n, n))
                    comm, sent, steps = _training_comm(job_n, n, grad, where, hosts, mtu, cap)
                    yield Load(f"{where.kind} {job_n.label()}"
                               f"{f' at {rate:g} Mb/s' if rate else ''}", where, mtu,
                               _training_flows(job_n, hosts), trainers=_processes(job_n),
                               step_s=step, comm_s=comm, sent_mb=sent, steps=steps,
                               links_judged=job.sync != "ps")


def _parallel_timing(exp, job, where: Topology, hosts: list[str], mtu: int,
                     cap: Capacity) -> tuple[float, float, float, int]:
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
    return max(0.0, pred["iteration_s"] - pred["compute_s"]), compute, sent / 1e6, steps


def _parallel_loads(spec: Spec, topo: Topology, exp, cap: Capacity) -> Iterator[Load]:
    mtu = spec.links.mtu_bytes
    for fabric in training_topologies(exp, _rated(spec, topo)):
        for rate in exp.rates_mbps or [None]:
            where = at_rate(fabric, rate) if rate else fabric
            for job in exp.jobs:
                hosts = job_hosts(job, where)
                comm, idle, sent, steps = _parallel_timing(exp, job, where, hosts, mtu, cap)
                real = exp.compute == "real"
                step = _step("mlp", exp.real.width, exp.real.depth, exp.real.batch,
                             exp.real.data)[0] / max(1, job.layout.tp * job.layout.pp) \
                    if real else 0.0
                yield Load(f"{where.kind} {_layout(job.layout)}"
                           f"{f' at {rate:g} Mb/s' if rate else ''}", where, mtu,
                           _parallel_flows(job.layout, hosts), trainers=len(hosts),
                           step_s=step, comm_s=comm, idle_s=idle, sent_mb=sent,
                           steps=steps, parallel=True)


def _layout(layout) -> str:
    return " ".join(f"{k}={getattr(layout, k)}" for k in ("dp", "tp", "pp", "ep")
                    if getattr(layout, k) > 1) or "one rank"


def _jobs_loads(spec: Spec, topo: Topology, exp, cap: Capacity) -> Iterator[Load]:
    """All jobs at once: their flows together, the longest communication and compute."""
    mtu = spec.links.mtu_bytes
    fabric = exp.fabric_topology(topo)
    fabric = at_rate(fabric, spec.links.rate_mbps) if spec.links.rate_mbps else fabric
    for placement in exp.placements:
        flows: list[Flow] = []
        trainers = steps = 0
        step = comm = idle = sent = 0.0
        for j, (job, hosts) in enumerate(zip(exp.jobs, placements(exp, fabric, placement))):
            t = job.training
            if t is not None:
                n = job.worker_count
                job_step, grad = _step(t.model, t.width, t.depth, t.batch, t.data)
                job_comm, job_sent, job_steps = _training_comm(t, n, grad, fabric, hosts, mtu,
                                                               cap)
                flows += _training_flows(t, hosts)
                trainers += _processes(dataclasses.replace(t, workers=n))
                step = max(step, job_step)
                comm, sent = max(comm, job_comm), max(sent, job_sent)
                steps = max(steps, job_steps)
                idle = max(idle, t.compute_ms / 1000)
            else:
                pexp, pjob = job.as_parallel(exp, JOB_DSCPS[j])
                job_comm, job_idle, job_sent, job_steps = _parallel_timing(
                    pexp, pjob, fabric, hosts, mtu, cap)
                sent, steps = max(sent, job_sent), max(steps, job_steps)
                flows += _parallel_flows(job.layout, hosts)
                trainers += len(hosts)
                comm, idle = max(comm, job_comm), max(idle, job_idle)
        yield Load(f"{placement}, all jobs", fabric, mtu, flows, trainers=trainers,
                   step_s=step, comm_s=comm, idle_s=idle, sent_mb=sent, steps=steps,
                   parallel=any(job.training is None for job in exp.jobs))


# ---- the plan ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    spec: str
    capacity: Capacity
    experiments: list[tuple[str, list[Demand]]]
    cluster_servers: int | None = None  # the spec's `cluster`, if it has one

    @property
    def demands(self) -> list[Demand]:
        return [d for _, ds in self.experiments for d in ds]

    @property
    def verdict(self) -> str:
        """The spec's on one server: its worst phase's."""
        return max((d.verdict for d in self.demands), key=VERDICTS.index, default="fits")

    @property
    def servers(self) -> int:
        return max((d.servers for d in self.demands), default=1)


VERDICTS = ("fits", "marginal", "CPU-bound")


def plan(spec: Spec, topo: Topology, cap: Capacity = REFERENCE) -> Plan:
    return Plan(spec.name, cap, [(f"{i}:{exp.type}", [demand(load, cap) for load in
                                                     loads(spec, topo, exp, cap)])
                                 for i, exp in enumerate(spec.experiments)],
                len(spec.cluster.servers) if spec.cluster is not None else None)


def render(p: Plan) -> str:
    cap = p.capacity
    lines = [f"{p.spec}, on servers like the reference machine with {cap.cores} cores",
             "",
             f"{'experiment / phase':<42} {'flows':>5} {'Mb/s':>7} {'pkt/s':>7} "
             f"{'OVS':>9} {'comm':>5} {'trainers':>8} {'wait':>5} {'cores':>5} "
             f"{'servers':>7}  verdict"]
    for name, demands in p.experiments:
        for d in demands:
            lines.append(f"{(name + ' ' + d.label)[:42]:<42} {d.flows:>5} "
                         f"{d.goodput_mbps:>7.1f} {d.packets_per_s:>7.0f} {d.ovs:>9} "
                         f"{d.comm_share:>5.0%} {d.trainers:>8} {d.wait_share:>5.0%} "
                         f"{d.cores:>5.2f} {d.servers:>7}  {d.verdict}")
    lines += ["", {"fits": "one machine is enough",
                   "marginal": "one machine is at its limit: some phases may be flagged "
                               f"CPU-bound; {p.servers} servers leave headroom",
                   "CPU-bound": f"one machine is not enough: {p.servers} servers"}[p.verdict]]
    if p.cluster_servers is not None:
        lines.append(f"the spec's cluster has {p.cluster_servers} servers: "
                     + ("enough" if p.cluster_servers >= p.servers else
                        f"{p.servers - p.cluster_servers} short (if they are like the "
                        "reference machine)"))
    return "\n".join(lines)
