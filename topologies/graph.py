"""Graph questions about a topology: hop distances, equal-cost paths, bisection bandwidth.

A host forwards packets for others only when it is a relay (BCube servers); paths never
pass through any other host.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

import networkx as nx

from .builders import oversubscription
from .model import Topology, TopologyError


def neighbours(topo: Topology, node: str) -> list[tuple[int, str, int]]:
    return topo.ports_of(node)


def distances_to(topo: Topology, dst: str) -> dict[str, int]:
    """Hop count from every node to `dst` along paths that transit only switches and relays."""
    cache = topo._idx().setdefault("dist", {})  # per-topology memo; topologies are frozen
    if dst not in cache:
        cache[dst] = _distances(topo, dst)
    return cache[dst]


def _distances(topo: Topology, dst: str) -> dict[str, int]:
    dist = {dst: 0}
    queue = deque([dst])
    while queue:
        node = queue.popleft()
        if node != dst and not _can_transit(topo, node):
            continue  # an end host: reachable, but nothing is reached through it
        for _, peer, _ in topo.ports_of(node):
            if peer not in dist:
                dist[peer] = dist[node] + 1
                queue.append(peer)
    return dist


def _can_transit(topo: Topology, node: str) -> bool:
    if topo.is_host(node):
        return topo.host(node).relay
    return True


def next_hops(topo: Topology, node: str, dst: str) -> list[int]:
    """Ports of `node` that lie on a shortest path to `dst` (sorted)."""
    dist = distances_to(topo, dst)
    here = dist.get(node)
    if here is None or here == 0:
        return []
    out = []
    for port, peer, _ in topo.ports_of(node):
        if dist.get(peer) == here - 1 and (peer == dst or _can_transit(topo, peer)):
            out.append(port)
    return out


def count_shortest_paths(topo: Topology, src: str, dst: str) -> int:
    """Number of distinct shortest paths from `src` to `dst`."""
    dist = distances_to(topo, dst)
    if src not in dist:
        return 0
    memo: dict[str, int] = {dst: 1}

    def paths(node: str) -> int:
        if node not in memo:
            memo[node] = sum(paths(topo.neighbour(node, port))
                             for port in next_hops(topo, node, dst))
        return memo[node]

    return paths(src)


def shortest_paths(topo: Topology, src: str, dst: str) -> list[tuple[str, ...]]:
    """Every shortest path from `src` to `dst` as a node sequence, in port order (the order
    a first-fit scheduler tries them in)."""
    if src == dst:
        return [(src,)]
    out: list[tuple[str, ...]] = []
    for port in next_hops(topo, src, dst):
        peer = topo.neighbour(src, port)
        out.extend((src, *rest) for rest in shortest_paths(topo, peer, dst))
    return out


def link_shares(topo: Topology, flows: list[tuple[str, str, float]],
                paths_of: Callable[[str, str], dict[tuple[str, ...], float]] | None = None
                ) -> dict[tuple[str, str], float]:
    """Each directed link's load per Mb/s of its rate when every (src, dst, weight) flow
    sends `weight` units, split over its paths: evenly over its shortest paths (a fluid
    view of ECMP), or as `paths_of(src, dst)` says ({path: share}, a routing's own, e.g.
    controllers/trace.py's). Multiplied by a host's link rate: how many times that host's
    rate the link is asked to carry (above 1: the flows sharing it slow down)."""
    load: dict[tuple[str, str], float] = {}
    for src, dst, weight in flows:
        if src == dst or weight <= 0:
            continue
        if paths_of is None:
            shortest = shortest_paths(topo, src, dst)
            shares = {path: 1 / len(shortest) for path in shortest}
        else:
            shares = paths_of(src, dst)
        for path, share in shares.items():
            for u, v in zip(path, path[1:]):
                link = topo.link_between(u, v)
                assert link is not None  # consecutive nodes of a path
                load[(u, v)] = load.get((u, v), 0.0) + weight * share / link.rate_mbps
    return load


def to_networkx(topo: Topology) -> nx.DiGraph:
    """Directed graph with one arc per link direction, capacity = link rate in Mb/s."""
    g = nx.DiGraph()
    for link in topo.links:
        g.add_edge(link.a, link.b, capacity=link.rate_mbps)
        g.add_edge(link.b, link.a, capacity=link.rate_mbps)
    return g


def bisection_mbps(topo: Topology) -> float:
    """Maximum one-way throughput from the first half of the hosts (by number) to the second
    half, through switches and relays only: the bisection bandwidth across the topology's
    natural halving (first half of the pods, leaves or servers)."""
    hosts = [h.name for h in topo.hosts]
    if len(hosts) < 2:
        return 0.0
    half = len(hosts) // 2
    g = to_networkx(topo)
    for h in topo.hosts:
        if not h.relay:  # an end host may send and receive but not carry others' traffic
            for _, peer, _ in topo.ports_of(h.name):
                if h.name in hosts[half:]:
                    g.remove_edge(h.name, peer)
                else:
                    g.remove_edge(peer, h.name)
    for name in hosts[:half]:
        g.add_edge("_src", name, capacity=float("inf"))
    for name in hosts[half:2 * half]:
        g.add_edge(name, "_dst", capacity=float("inf"))
    return float(nx.maximum_flow_value(g, "_src", "_dst"))


def host_rate_sum(topo: Topology, hosts: list[str] | None = None) -> float:
    """Sum of the host link rates: the non-blocking aggregate for a permutation."""
    names = hosts or [h.name for h in topo.hosts]
    total = 0.0
    for name in names:
        total += topo.link_at(name, 0).rate_mbps
    return total


def diameter_hops(topo: Topology) -> int:
    return max(max(d for n, d in distances_to(topo, h.name).items() if topo.is_host(n))
               for h in topo.hosts)


def describe(topo: Topology, src: str | None = None, dst: str | None = None) -> dict:
    """A summary a person can read: counts, links, bisection and equal-cost paths."""
    src = src or topo.hosts[0].name
    dst = dst or topo.hosts[-1].name
    hosts = {h.name for h in topo.hosts}
    for name in (src, dst):
        if name not in hosts:
            raise TopologyError(f"{topo.kind}: no host {name!r} (hosts are "
                                f"{topo.hosts[0].name}..{topo.hosts[-1].name})")
    roles: dict[str, int] = {}
    for s in topo.switches:
        roles[s.role] = roles.get(s.role, 0) + 1
    rates = sorted({link.rate_mbps for link in topo.links})
    out = {
        "kind": topo.kind,
        "params": dict(topo.params),
        "hosts": len(topo.hosts),
        "switches": len(topo.switches),
        "switches_by_role": roles,
        "links": len(topo.links),
        "switch_ports": sum(1 for n, _, _ in topo.interfaces() if not topo.is_host(n)),
        "link_rates_mbps": rates,
        "bisection_mbps": bisection_mbps(topo),
        "diameter_hops": diameter_hops(topo),
        "example_pair": [src, dst],
        "equal_cost_paths": count_shortest_paths(topo, src, dst),
        "path_hops": distances_to(topo, dst).get(src),
    }
    if topo.kind == "leafspine":
        out["oversubscription"] = oversubscription(topo)
    return out
