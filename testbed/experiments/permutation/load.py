"""The permutation experiment's load model for `testbed plan`
(testbed/experiments/load.py): each pattern's flows at once, under each routing (the
non-blocking reference on its own switch of the hosts' rate)."""
from __future__ import annotations

from collections.abc import Iterator

from testbed.config.capacity import Capacity
from testbed.config.spec import Spec
from topologies import nonblocking, patterns
from topologies.model import Topology

from ..load import Load, rated
from .spec import Permutation


def loads(spec: Spec, topo: Topology, exp: Permutation, cap: Capacity) -> Iterator[Load]:
    """Every routing's phases, a pattern each, in the order the runner runs them (each
    pattern's flows as its first repeat draws them, from `seed`)."""
    mtu = spec.links.mtu_bytes
    fabric = rated(spec, topo)
    hosts = [h.name for h in fabric.hosts]
    for routing in exp.routings:
        where = fabric
        if routing == "nonblocking":
            rate = min(fabric.link_at(h, 0).rate_mbps for h in hosts)
            where = nonblocking(len(hosts), rate)
        for pattern in exp.patterns:
            flows = [(a, b) for a, b in patterns.generate(pattern, where, exp.seed)]
            yield Load(f"{routing} {pattern}", where, mtu, flows)
