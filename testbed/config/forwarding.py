"""`forwarding:` in a spec: how many Open vSwitch processes forward one machine's fabric, and
which switches each one owns.

Why more than one (docs/FIDELITY.md, "Latency that grows with the fabric"): the userspace
datapath's one thread reads every switch port of its fabric on each wake-up, so a packet
waits about one pass over all ports at every switch it crosses, and that pass grows with the
fabric (0.28 ms a crossing at a Fat-Tree k=4's 80 ports, 1.9 ms at k=8's 640). Each extra
ovs-vswitchd reads only its own switches' ports. Every link is a veth pair whichever
processes its two switches live in, so a packet's path through the kernel is the same
whether its next switch is in the same process or another: what the split must balance is
the ports each process reads, not which switches sit together.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from topologies.model import Topology

from .loader import SpecError

# The ports one process reads when `processes: auto` splits a fabric: at most this many
# (measured per crossing: 0.21-0.35 ms with 80 ports in one process, 0.24 ms with a k=8's
# 640 split 16 ways; docs/BENCHMARKS.md, "Latency and the forwarding process").
AUTO_PORTS_PER_PROCESS = 80
MAX_PROCESSES = 32


@dataclass(frozen=True, kw_only=True)
class ForwardingSpec:
    """`processes`: the ovs-vswitchd processes that forward the fabric (1: the machine's
    own, as Open vSwitch runs; N: it and N-1 more, each owning a share of the switches;
    `auto`, the default: enough that none reads more than AUTO_PORTS_PER_PROCESS switch
    ports, which leaves a Fat-Tree k=4 (80) in one and splits a k=8 (640) in eight)."""
    processes: int | Literal["auto"] = "auto"

    def check(self, path: str = "forwarding") -> None:
        if self.processes != "auto" and not 1 <= self.processes <= MAX_PROCESSES:
            raise SpecError(f"{path}.processes: 1..{MAX_PROCESSES} or auto "
                            f"(got {self.processes})")

    def count(self, topo: Topology) -> int:
        """The processes a fabric of `topo` gets: the spec's, at most one per switch that
        has a host (each process needs one, to make its send socket at the first packet:
        net/partitioned.py), and `auto`'s from the ports."""
        most = max(1, len(host_switches(topo)))
        if self.processes == "auto":
            return min(most, MAX_PROCESSES,
                       max(1, math.ceil(switch_port_count(topo) / AUTO_PORTS_PER_PROCESS)))
        return min(most, self.processes)


def switch_port_count(topo: Topology) -> int:
    return sum(1 for link in topo.links for node in (link.a, link.b) if not topo.is_host(node))


def host_switches(topo: Topology) -> list[str]:
    """The switches a host is linked to, in the topology's order."""
    attached = {node for link in topo.links for node, other in ((link.a, link.b),
                                                                (link.b, link.a))
                if not topo.is_host(node) and topo.is_host(other)}
    return [s.name for s in topo.switches if s.name in attached]


def partition(topo: Topology, n: int) -> list[list[str]]:
    """`topo`'s switches in `n` groups (n at most the switches that have hosts), each with
    one of those, of nearly equal switch ports, neighbours kept together where the balance
    allows: each group starts from a switch with hosts, spread evenly over the topology's
    order, and the group with the fewest ports takes in turn the unplaced switch with the
    most links into it (the first in the topology's order among ties; any unplaced switch
    when none is linked to it). A Fat-Tree k=8 in 8 gives each group a pod and two cores."""
    seeds = host_switches(topo)
    n = max(1, min(n, len(seeds)))
    order = {s.name: i for i, s in enumerate(topo.switches)}
    ports = {s.name: 0 for s in topo.switches}
    links: dict[str, dict[str, int]] = {s.name: {} for s in topo.switches}
    for link in topo.links:
        for a, b in ((link.a, link.b), (link.b, link.a)):
            if a in ports:
                ports[a] += 1
                if b in ports:
                    links[a][b] = links[a].get(b, 0) + 1
    groups = [[seeds[i * len(seeds) // n]] for i in range(n)]
    where = {group[0]: g for g, group in enumerate(groups)}
    load = [ports[group[0]] for group in groups]
    unplaced = sorted((s for s in ports if s not in where), key=order.__getitem__)
    while unplaced:
        g = min(range(n), key=lambda i: (load[i], i))
        best = max(unplaced, key=lambda s: (sum(c for peer, c in links[s].items()
                                                if where.get(peer) == g), -order[s]))
        groups[g].append(best)
        where[best] = g
        load[g] += ports[best]
        unplaced.remove(best)
    return [sorted(group, key=order.__getitem__) for group in groups]
