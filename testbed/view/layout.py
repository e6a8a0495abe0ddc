"""Where each node of a fabric is drawn: tiers from its role (hosts at the bottom; edge or
leaf above them; aggregation; core or spine on top; a BCube's switches by level), and within a
tier an order that keeps neighbours together (each tier by the mean position of the tier
below it), so that a Fat-Tree's pods, a Leaf-Spine's leaves and a BCube's cells read as
such. Pure: a topology in, coordinates in [0, 1] out."""
from __future__ import annotations

import re
from statistics import mean

from topologies.model import Topology, ifname

TIER = {"edge": 1, "leaf": 1, "agg": 2, "core": 3, "spine": 3, "big": 1}


def natural(name: str) -> tuple:
    """h2 before h10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def tier_of(topo: Topology, name: str) -> int:
    if topo.is_host(name):
        return 0
    sw = topo.switch(name)
    if sw.role == "bcube":
        return 1 + (sw.label("level") or 0)
    return TIER.get(sw.role, 1)


def layout(topo: Topology) -> dict:
    """Nodes with x, y in [0, 1] (y = 1 at the bottom) and links with both ends' interface
    names (a switch port's name is what the live view's counters are keyed by)."""
    tiers: dict[int, list[str]] = {}
    for node in [h.name for h in topo.hosts] + [s.name for s in topo.switches]:
        tiers.setdefault(tier_of(topo, node), []).append(node)
    x: dict[str, float] = {}
    for t in sorted(tiers):
        names = tiers[t]
        if t == 0:
            names.sort(key=natural)
        else:
            def below(n: str, t: int = t) -> float:
                xs = [x[p] for _, p, _ in topo.ports_of(n) if p in x and tier_of(topo, p) < t]
                return mean(xs) if xs else 0.5
            names.sort(key=lambda n: (below(n), natural(n)))
        for i, n in enumerate(names):
            x[n] = (i + 0.5) / len(names)
    top = max(tiers)
    nodes = [{"name": n, "host": topo.is_host(n),
              "role": "host" if topo.is_host(n) else topo.switch(n).role,
              "x": round(x[n], 4), "y": round(1 - t / top if top else 0.5, 4)}
             for t in sorted(tiers) for n in tiers[t]]
    links = [{"a": link.a, "b": link.b, "a_if": ifname(link.a, link.a_port),
              "b_if": ifname(link.b, link.b_port), "rate_mbps": link.rate_mbps}
             for link in topo.links]
    return {"kind": topo.kind, "nodes": nodes, "links": links}
