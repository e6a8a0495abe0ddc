"""`testbed plan SPEC`: the CPU a spec's experiments need at their link rates and MTU, from
the costs measured on the reference machine (testbed/config/capacity.py), before anything
is built. Offline like `testbed validate` (no root, no fabric); a spec
with real-compute trainers has their step timed here, on one core of this machine.

Each experiment offers the fabric a load at its busiest: the TCP flows it runs at once (a
permutation's pairs, a training job's ring or pushes, an incast's senders) and the trainers
that compute at once: its type's load model says which (each type carries its own on its
`Experiment` record, testbed/experiments/load.py; this module knows no type by name). Every
flow gets its max-min fair share of the links on its shortest paths, split evenly over
equal-cost paths (ECMP's fluid view: the most the fabric carries), which makes data
segments per second through each switch on the path and, with the ACKs, the packets
entering switches per second. The runner's CPU verdict is then predicted:

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

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from testbed.config.capacity import MACHINE_IDLE_MEAN_MIN, OVS_DELAY_LIMIT_MS, REFERENCE, Capacity
from testbed.config.forwarding import host_switches, switch_port_count
from testbed.config.spec import ExperimentSpec, Spec
from testbed.experiments import EXPERIMENTS
from testbed.experiments.load import Expectation, Flow, Load
from testbed.experiments.reachability import farthest_pair
from testbed.experiments.trainers.model import CPU_WAIT_SHARE_LIMIT, LINK_BUSY_BOTTLENECK
from testbed.workloads.model.rdma import ROCE_OVERHEAD
from topologies.graph import shortest_paths
from topologies.model import Topology

# the RoCE engine acknowledges every data packet (its ack_every is 1): two packets enter
# the switches for each one of data, where TCP's measured share is packets_per_segment
ROCE_PACKETS_PER_DATA = 2.0


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


def fluid_rates(topo: Topology, flows: list[Flow], demands: list[float] | None = None
                ) -> list[tuple[float, float]]:
    """Each flow's max-min fair rate (Mb/s) when it is split evenly over its shortest paths,
    and the switches it crosses (mean over those paths); with `demands`, no flow above its
    own (Mb/s)."""
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
    cap = demands or [math.inf] * len(flows)
    active = {i for i, s in enumerate(shares) if s and cap[i] > 0}
    while active:
        weight: dict[tuple[str, str], float] = {}
        for i in active:
            for arc, s in shares[i].items():
                weight[arc] = weight.get(arc, 0.0) + s
        step = min(min(left[arc] / w for arc, w in weight.items()),
                   min(cap[i] - rates[i] for i in active))
        for i in active:
            rates[i] += step
        for arc, w in weight.items():
            left[arc] -= step * w
        full = {arc for arc in weight if left[arc] <= 1e-9 * (1 + step)}
        active = {i for i in active if not full.intersection(shares[i])
                  and rates[i] < cap[i] * (1 - 1e-9)}
    return list(zip(rates, hops))


def demand(load: Load, cap: Capacity = REFERENCE) -> Demand:
    rated = fluid_rates(load.topo, load.flows, load.demands_mbps)
    per_data = ROCE_PACKETS_PER_DATA if load.roce else cap.packets_per_segment
    pps = sum(rate * 1e6 / 8 / load.mtu * hops for rate, hops in rated) * per_data
    # the RoCE engines send and receive each data packet themselves (no TCP segmentation)
    engine_cores = sum(rate * 1e6 / 8 / load.mtu for rate, _ in rated) * cap.roce_pkt_s \
        if load.roce else 0.0
    first = _verdict(load, pps, cap, 1, engine_cores)
    servers = next((n for n in range(1, 4097)
                    if _verdict(load, pps, cap, n, engine_cores)[0] == "fits"), 4096)
    return Demand(load.label, len(load.flows), round(sum(r for r, _ in rated), 1), round(pps),
                  first[1], round(first[2], 3), load.trainers, round(first[3], 3),
                  round(first[4], 2), servers, first[0])


def trainer_cpu_s(load: Load, cap: Capacity) -> float:
    """A trainer's CPU per iteration: its compute, the worker's own work, the bytes it
    sends and its collectives' steps (fitted on the reference machine)."""
    per_mb = cap.rank_per_mb_s if load.parallel else cap.trainer_per_mb_s
    # ranks whose collectives the RoCE engine carries: its CPU for each packet they send
    # (both ends), in their host, beside them
    engine = (load.sent_mb * 1e6 / (load.mtu - ROCE_OVERHEAD) * cap.roce_pkt_s
              if load.roce and load.comm_s is not None else 0.0)
    return (load.step_s * cap.step_overhead + cap.trainer_base_s + per_mb * load.sent_mb
            + cap.trainer_per_step_s * load.steps + engine)


def _verdict(load: Load, pps: float, cap: Capacity, servers: int, engine_cores: float = 0.0
             ) -> tuple[str, str, float, float, float]:
    """(verdict, OVS's, communication share, wait share, busy cores) on each of `servers`
    servers sharing the load evenly; `engine_cores`: the RoCE engines' CPU, all servers'."""
    usable = cap.cores * (1 - MACHINE_IDLE_MEAN_MIN)
    if load.comm_s is None:  # flows throughout: OVS's queueing decides
        fits, bound = cap.ovs_pps(load.mtu)
        per_server = pps / servers
        ovs = "CPU-bound" if per_server >= bound else "marginal" if per_server > fits \
            else "fits"
        cores = (cap.network_cores if load.flows else 0.0) + engine_cores / servers
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


# ---- each experiment's load: its type's model ------------------------------------------

def loads(spec: Spec, topo: Topology, exp: ExperimentSpec, cap: Capacity = REFERENCE
          ) -> Iterator[Load]:
    """The phases of one experiment, at their busiest: what its type's load model says
    (its `Experiment` record's `load`, testbed/experiments/load.py)."""
    record = EXPERIMENTS.get(exp.type)
    if record is None:  # a type this planner does not know: say so rather than guess
        raise ValueError(f"no load model for experiment type {exp.type!r}")
    yield from record.load(spec, topo, exp, cap)


# ---- the plan ---------------------------------------------------------------------------

def expectations(spec: Spec, topo: Topology, exp: ExperimentSpec, cap: Capacity = REFERENCE
                 ) -> list[Expectation]:
    """What the experiment's models expect of its phases, when its type has models that
    can say it before a run (its `Experiment` record's `expect`)."""
    record = EXPERIMENTS.get(exp.type)
    if record is None or record.expect is None:
        return []
    return list(record.expect(spec, topo, exp, cap))


@dataclass(frozen=True)
class CapacityPlan:
    spec: str
    capacity: Capacity
    experiments: list[tuple[str, list[Demand]]]
    cluster_servers: int | None = None  # the spec's `cluster`, if it has one
    # per experiment, what its models expect (parallel jobs' iterations)
    expected: list[tuple[str, list[Expectation]]] = field(default_factory=list)
    switch_ports: int = 0      # the fabric's switch ports
    longest_switches: int = 0  # switches its farthest pair's path crosses one way
    processes: int = 1         # the ovs-vswitchd processes that forward it (`forwarding`)
    most_processes: int = 1    # as many as it can have (config/forwarding.py)

    @property
    def ports_per_process(self) -> int:
        """The switch ports one ovs-vswitchd reads: all of them, or a cluster server's
        share, or one forwarding process's (an even share)."""
        return self.ports_with(self.cluster_servers or self.processes)

    def ports_with(self, processes: int) -> int:
        return math.ceil(self.switch_ports / processes)

    @property
    def idle_added_rtt_s(self) -> float:
        """What forwarding adds to the farthest pair's idle round trip."""
        return 2 * self.longest_switches * self.capacity.crossing_s(self.ports_per_process)

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


def plan(spec: Spec, topo: Topology, cap: Capacity = REFERENCE, models: bool = False
         ) -> CapacityPlan:
    """The spec's CPU plan; with `models`, what its experiments' models expect too (a
    parallel job's path-aware model replays its iterations over its hash draws: seconds
    of CPU per job)."""
    def priced(load: Load) -> Demand:  # at the capacity of its fabric's forwarding
        return demand(load, cap.forwarded_by(spec.forwarding_processes(load.topo)))

    return CapacityPlan(spec.name, cap, [(f"{i}:{exp.type}", [priced(load) for load in
                                                              loads(spec, topo, exp, cap)])
                                         for i, exp in enumerate(spec.experiments)],
                        len(spec.cluster.servers) if spec.cluster is not None else None,
                        [(f"{i}:{exp.type}", e) for i, exp in enumerate(spec.experiments)
                         if models and (e := expectations(spec, topo, exp, cap))],
                        switch_port_count(topo), longest_switches(topo),
                        spec.forwarding_processes(topo), len(host_switches(topo)))


def longest_switches(topo: Topology) -> int:
    """The switches on the path of the pair the reachability experiment probes idle (the
    first host and the one farthest from it)."""
    if len(topo.hosts) < 2:
        return 0
    src, dst = farthest_pair(topo)
    return sum(1 for node in shortest_paths(topo, src, dst)[0] if not topo.is_host(node))


def render(p: CapacityPlan) -> str:
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
    if p.switch_ports:
        ports = p.ports_per_process
        lines += ["", f"idle latency: a switch crossing adds about "
                      f"{cap.crossing_s(ports) * 1e3:.2f} ms (one forwarding process reads "
                      f"{ports} switch ports); the farthest pair's round trip",
                  f"  ({p.longest_switches} switches each way) about "
                  f"{p.idle_added_rtt_s * 1e3:.1f} ms above its floor"]
        if p.idle_added_rtt_s * 1e3 > OVS_DELAY_LIMIT_MS:
            lines.append(f"  more than {OVS_DELAY_LIMIT_MS:g} ms, where the reachability "
                         "experiment warns: delays are the emulator's, not the links' "
                         "(docs/FIDELITY.md)")
        if p.cluster_servers is None and p.most_processes > 1:
            choices = sorted({n for n in (1, 2, 4, 8, 16, p.processes)
                              if n <= p.most_processes})
            lines.append("  forwarding.processes: " + ", ".join(
                f"{n}: {cap.crossing_s(p.ports_with(n)) * 1e3:.2f} ms"
                + (" (this run)" if n == p.processes else "") for n in choices)
                + " a crossing")
        if p.processes > 1:
            lines.append(f"  {p.processes} processes: each one's thread busy with its share "
                         "under load, the machine's packet capacity is priced as measured "
                         "with two (docs/BENCHMARKS.md, \"Capacity of one machine\")"
                         + ("; more may carry less" if p.processes > 2 else ""))
    lines += ["", {"fits": "one machine is enough",
                   "marginal": "one machine is at its limit: some phases may be flagged "
                               f"CPU-bound; {p.servers} servers leave headroom",
                   "CPU-bound": f"one machine is not enough: {p.servers} servers"}[p.verdict]]
    if p.cluster_servers is not None:
        lines.append(f"the spec's cluster has {p.cluster_servers} servers: "
                     + ("enough" if p.cluster_servers >= p.servers else
                        f"{p.servers - p.cluster_servers} short (if they are like the "
                        "reference machine)"))
    if p.expected:
        lines += ["", f"what the models expect of an iteration (each step's latency "
                      f"{cap.latency_s * 1e3:g} ms; on its paths: the path-aware model's "
                      "mean over its hash draws, 10th-90th percentile)", "",
                  f"{'experiment / job':<52} {'transport':<16} {'model':>8}  on its paths"]
        for name, rows in p.expected:
            for e in rows:
                paths = "-" if e.paths_s is None else (
                    f"{e.paths_s:.2f} s ({e.paths_p10_s:.2f}-{e.paths_p90_s:.2f}), "
                    f"x{e.paths_s / e.model_s:.2f}")
                lines.append(f"{(name + ' ' + e.label)[:52]:<52} {e.transport[:16]:<16} "
                             f"{e.model_s:>6.2f} s  {paths}")
    return "\n".join(lines)
