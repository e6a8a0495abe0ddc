"""Max-min fair rates of flows on fixed paths (progressive filling): every flow's rate
grows at the same pace until a link it crosses is full; the flows on a full link stop
there, the others go on. What long TCP flows converge to, to a first approximation, when
each keeps one path (Bertsekas and Gallager, Data Networks, 6.5.2).

A path is a node sequence (host, switch, ..., host); each of its directed links, host
links included, has the topology's rate in each direction.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from .model import Topology

Path = Sequence[str]


def maxmin(topo: Topology, paths: Sequence[Path], rate_of: Callable[[float], float] = float
           ) -> list[float]:
    """Each flow's max-min fair rate in Mb/s, flows in the order of `paths`. `rate_of`
    maps a link's configured rate to what flows may use of it (e.g. its TCP payload)."""
    capacity: dict[tuple[str, str], float] = {}
    users: dict[tuple[str, str], list[int]] = {}
    for i, path in enumerate(paths):
        for u, v in zip(path, path[1:]):
            link = topo.link_between(u, v)
            if link is None:
                raise ValueError(f"{u} and {v} are not linked (path {list(path)})")
            capacity[(u, v)] = rate_of(link.rate_mbps)
            users.setdefault((u, v), []).append(i)
    rates = [0.0] * len(paths)
    active = {i for i, path in enumerate(paths) if len(path) > 1}
    while active:
        # the link that fills first when every active flow grows by the same amount
        step = min((capacity[e] - sum(rates[i] for i in users[e])) /
                   sum(1 for i in users[e] if i in active)
                   for e in users if any(i in active for i in users[e]))
        for i in active:
            rates[i] += step
        done = {i for e, flows in users.items()
                if capacity[e] - sum(rates[j] for j in flows) <= 1e-9 * capacity[e]
                for i in flows}
        active -= done
    return rates


def sampled_maxmin(topo: Topology, choices: list[dict[tuple[str, ...], float]],
                   samples: int, seed: int = 0, rate_of: Callable[[float], float] = float
                   ) -> list[float]:
    """The flows' summed max-min rate, once per sample, each flow on a path drawn from its
    `choices` (path -> share of flows a hash puts there): a hashed routing's outcome over
    many 5-tuples. One sample is enough when every flow has one path."""
    rng = random.Random(seed)
    if all(len(c) == 1 for c in choices):
        samples = 1
    out: list[float] = []
    for _ in range(samples):
        drawn = [rng.choices(list(c), weights=list(c.values()))[0] for c in choices]
        out.append(sum(maxmin(topo, drawn, rate_of)))
    return out
