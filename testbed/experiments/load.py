"""What `testbed plan` asks of each experiment type: its load model, the phases it runs at
their busiest (the TCP flows at once, the trainers computing at once), which the plan
(testbed/plan.py) prices against the reference machine. Each type's model lives with the
type and rides on its `Experiment` record (`load=`), so that the plan knows no type by name
and a new type brings its own.

A load model is pure and offline like `testbed validate`: it reads the spec and the
topology and builds nothing. Only a trainer with real compute has its step timed (torch,
loaded then and only then: testbed/experiments/trainers/load.py).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from testbed.config.capacity import Capacity
from testbed.config.spec import Spec
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
    roce: bool = False          # the flows are the RoCE engine's: its CPU per packet counts
    demands_mbps: list[float] | None = None  # each flow's most (an offered load); None: greedy


@dataclass(frozen=True)
class Expectation:
    """What a type's models expect of one of its phases before it runs (a parallel job's
    iteration on one fabric, rate, routing and transport), for `testbed plan` to show:
    the analytical model's iteration, and the path-aware model's mean and 10th to 90th
    percentile over its hash draws (None without one)."""
    label: str
    transport: str
    model_s: float
    paths_s: float | None = None
    paths_p10_s: float | None = None
    paths_p90_s: float | None = None


# An experiment type's expectations: `expect(spec, topo, exp, cap)`, like its load model.
ExpectModel = Callable[[Spec, Topology, Any, Capacity], Iterable[Expectation]]

# An experiment type's load model: `loads(spec, topo, exp, cap)`, the phases of one of its
# experiments (`exp`, the spec's entry of that type) on the spec's topology, in the order
# they run; `cap` is the machine priced against (its latency enters the trainers' models).
LoadModel = Callable[[Spec, Topology, Any, Capacity], Iterable[Load]]


def rated(spec: Spec, topo: Topology) -> Topology:
    """The spec's fabric at its `links.rate_mbps`, when it sets one."""
    return at_rate(topo, spec.links.rate_mbps) if spec.links.rate_mbps else topo


def into_one(fabric: Topology, mtu: int, senders: int) -> Load:
    """`senders` flows into the fabric's last host at once (a dumbbell's receiver): the
    queue experiments' busiest phase."""
    hosts = [h.name for h in fabric.hosts]
    receiver = hosts[-1]
    return Load(f"{senders} senders", fabric, mtu, [(h, receiver) for h in hosts[:senders]])
