"""c-Through's circuit scheduling (Wang et al., SIGCOMM 2010; Helios decides alike), as
pure decisions: which rack pairs get the optical circuits next, from the demand measured
between racks, and the two steps that carry out a change with the optical switch's dark
time between them.

Every period the controller reads, at each ToR, the bytes its routes sent towards each
other rack (one counter per destination host, whether the route is the packet fabric's or
a circuit's), and gives the circuits to the rack pairs with the most traffic both ways: a
maximum-weight matching, since a rack has one optical port per circuit (with several
ports, one matching per port, a pair getting at most one circuit). c-Through estimated
demand from the hosts' socket buffers instead (what is queued rather than what got
through); measured bytes favour the pairs a circuit already serves, which the paper's
estimate avoids; `hold` below damps the flapping that invites.

A change takes two steps (`transition`): at once, the circuits that change go dark (their
rack pairs' traffic back onto the packet fabric, their cross-connects removed); `dark_s`
later the new ones are lit (cross-connects, then the ToRs steer their pairs' traffic onto
them). Circuits that stay are not touched. The optical switch is an Open vSwitch bridge
whose entries join port to port, so "dark" is exactly the time between the two steps.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from topologies.model import Topology

Circuit = tuple[int, int, int]  # (rack a, rack b, port c), a < b: a's port c to b's port c


@dataclass(frozen=True)
class Step:
    """At `at` (seconds, the caller's clock), the circuits lit are exactly `circuits`;
    `kind`: "dark" (changed circuits removed) or "light" (the new ones lit)."""
    at: float
    kind: str
    circuits: tuple[Circuit, ...]


Counters = dict[tuple[int, str, int], int]  # (ToR dpid, destination IP, priority) -> bytes


def rack_demand(topo: Topology, before: Counters, after: Counters
                ) -> dict[tuple[int, int], int]:
    """Bytes each rack sent to each other rack between two readings of the ToRs' route
    entries' counters, one per entry: the packet fabric's route and, while a circuit
    carries the pair, the circuit's (an entry that went away counts nothing more; one
    whose count went down was replaced, and all of its count is new)."""
    out: dict[tuple[int, int], int] = {}
    for (dpid, ip, priority), count in after.items():
        sw, host = topo.switch_by_dpid(dpid), topo.host_by_ip(ip)
        if sw is None or host is None or sw.role != "tor":
            continue
        a, b = sw.label("rack"), host.label("rack")
        if a is None or b is None or a == b:
            continue
        old = before.get((dpid, ip, priority), 0)
        delta = count - old if count >= old else count
        out[(a, b)] = out.get((a, b), 0) + delta
    return out


def choose(demand: dict[tuple[int, int], int], racks: int, ports: int,
           installed: tuple[Circuit, ...] = (), hold: float = 1.0) -> tuple[Circuit, ...]:
    """The circuits for the next period: per port, a maximum-weight matching of the rack
    pairs by their traffic both ways (pairs already given a circuit left out). `hold` >= 1:
    keep the installed circuits unless the new matching carries more than `hold` times
    their traffic (1: always take the best). Sorted; the installed ones when nothing
    crossed racks."""
    weight: dict[tuple[int, int], int] = {}
    for (a, b), n in demand.items():
        if 0 <= a < racks and 0 <= b < racks and a != b and n > 0:
            key = (min(a, b), max(a, b))
            weight[key] = weight.get(key, 0) + n
    if not weight:  # nothing crossed racks: no reason to move a mirror
        return tuple(sorted(installed))
    out: list[Circuit] = []
    left = dict(weight)
    for port in range(ports):
        g = nx.Graph()
        for (a, b), w in sorted(left.items()):
            g.add_edge(a, b, weight=w)
        matched = nx.max_weight_matching(g) if g.number_of_edges() else set()
        for a, b in sorted((min(e), max(e)) for e in matched):
            out.append((a, b, port))
            left.pop((a, b))
    best = tuple(sorted(out))
    if installed and hold > 1:
        carried = sum(weight.get((a, b), 0) for a, b, _ in installed)
        if sum(weight.get((a, b), 0) for a, b, _ in best) <= hold * carried:
            return tuple(sorted(installed))
    return best


def transition(now: float, installed: tuple[Circuit, ...], wanted: tuple[Circuit, ...],
               dark_s: float) -> list[Step]:
    """The steps from the circuits `installed` to `wanted` (none when they are the same):
    the ones that change go dark now, the new ones are lit `dark_s` later."""
    if set(installed) == set(wanted):
        return []
    kept = tuple(sorted(set(installed) & set(wanted)))
    return [Step(at=now, kind="dark", circuits=kept),
            Step(at=now + dark_s, kind="light", circuits=tuple(sorted(wanted)))]


def check_circuits(topo: Topology, circuits: tuple[Circuit, ...] | list[Circuit]) -> None:
    """ValueError unless every circuit joins two racks of `topo` on a port they have, and
    no port carries two circuits."""
    racks, ports = topo.param("racks"), topo.param("circuits")
    used: set[tuple[int, int]] = set()
    for a, b, c in circuits:
        if not (0 <= a < racks and 0 <= b < racks and a != b and 0 <= c < ports):
            raise ValueError(f"circuit {(a, b, c)}: racks are 0..{racks - 1}, two different "
                             f"ones, on a port 0..{ports - 1}")
        for end in ((a, c), (b, c)):
            if end in used:
                raise ValueError(f"circuit {(a, b, c)}: rack {end[0]}'s port {c} already "
                                 "carries a circuit")
            used.add(end)
