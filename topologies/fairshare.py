"""Max-min fair rates of flows on fixed paths (progressive filling): every flow's rate
grows at the same pace until a link it crosses is full; the flows on a full link stop
there, the others go on. What long TCP flows converge to, to a first approximation, when
each keeps one path (Bertsekas and Gallager, Data Networks, 6.5.2).

A path is a node sequence (host, switch, ..., host); each of its directed links, host
links included, has the topology's rate in each direction.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from .model import Topology

Path = Sequence[str]
K = TypeVar("K")


def _links(topo: Topology, paths: Sequence[Path], rate_of: Callable[[float], float]
           ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], list[int]]]:
    """Every directed link the paths cross: its capacity (`rate_of` its rate) and the
    flows crossing it."""
    capacity: dict[tuple[str, str], float] = {}
    users: dict[tuple[str, str], list[int]] = {}
    for i, path in enumerate(paths):
        for u, v in zip(path, path[1:]):
            link = topo.link_between(u, v)
            if link is None:
                raise ValueError(f"{u} and {v} are not linked (path {list(path)})")
            capacity[(u, v)] = rate_of(link.rate_mbps)
            users.setdefault((u, v), []).append(i)
    return capacity, users


def maxmin(topo: Topology, paths: Sequence[Path], rate_of: Callable[[float], float] = float
           ) -> list[float]:
    """Each flow's max-min fair rate in Mb/s, flows in the order of `paths`. `rate_of`
    maps a link's configured rate to what flows may use of it (e.g. its TCP payload)."""
    capacity, users = _links(topo, paths, rate_of)
    usage: list[dict[tuple[str, str], float]] = [{} for _ in paths]
    for e, flows in users.items():
        for i in flows:
            usage[i][e] = usage[i].get(e, 0.0) + 1.0
    # (a "path" of one node crosses no link and carries nothing)
    return [r if len(p) > 1 else 0.0 for r, p in zip(weighted_maxmin(capacity, usage), paths)]


def weighted_maxmin(capacity: Mapping[K, float], usage: Sequence[Mapping[K, float]]
                    ) -> list[float]:
    """Max-min fair rates by progressive filling, where flow i puts usage[i][e] times its
    rate on link e: 1 for a link its one path crosses, a path's share for a flow sprayed
    over several, or the number of its members crossing e for a group of flows that
    advance together (a ring collective, whose steps wait for its slowest member: each
    member's rate is the group's). A flow that uses no link gets an infinite rate."""
    rates = [0.0] * len(usage)
    users: dict[K, list[int]] = {}
    for i, u in enumerate(usage):
        for e, a in u.items():
            if a > 0:
                users.setdefault(e, []).append(i)
    active = {i for i, u in enumerate(usage) if any(a > 0 for a in u.values())}
    for i in set(range(len(usage))) - active:
        rates[i] = math.inf
    # each link's capacity left, and its active flows (their number, their usage), kept
    # as the flows grow and stop
    left = {e: float(capacity[e]) for e in users}
    weight = {e: sum(usage[i][e] for i in flows) for e, flows in users.items()}
    count = {e: len(flows) for e, flows in users.items()}
    while active:
        # the link that fills first when every active flow grows by the same amount
        busy = [e for e, n in count.items() if n]
        fills = min(busy, key=lambda e: left[e] / weight[e])
        step = max(left[fills] / weight[fills], 0.0)
        for i in active:
            rates[i] += step
        for e in busy:
            left[e] -= step * weight[e]
        # the flows on a full link stop (rounding: at least those of the one that filled)
        full = [e for e in busy if left[e] <= 1e-9 * capacity[e]] or [fills]
        done = {i for e in full for i in users[e]} & active
        for i in done:
            for e, a in usage[i].items():
                if a > 0:
                    count[e] -= 1
                    weight[e] = weight[e] - a if count[e] else 0.0  # (no rounding residue)
        active -= done
    return rates


def class_maxmin(capacity: Mapping[K, float], usage: Sequence[Mapping[K, float]],
                 klass: Sequence[str], rounds: int = 50) -> list[float]:
    """Max-min fair rates (as `weighted_maxmin`) where each link serves the classes of the
    flows crossing it round-robin with equal weights, as a switch port's deficit round
    robin does: a class gets an equal share of a link, what a class leaves unused (its
    flows limited elsewhere) goes to the others, and inside a class the flows share
    max-min. Found by solving on per-(link, class) shares and re-dividing each link among
    the classes that filled theirs until the shares settle."""
    if len(set(klass)) <= 1:
        return weighted_maxmin(capacity, usage)
    on: dict[K, set[str]] = {}
    for u, k in zip(usage, klass):
        for e, a in u.items():
            if a > 0:
                on.setdefault(e, set()).add(k)
    share = {(e, k): capacity[e] / len(ks) for e, ks in on.items() for k in ks}
    sub = [{(e, k): a for e, a in u.items() if a > 0} for u, k in zip(usage, klass)]
    rates = weighted_maxmin(share, sub)
    for _ in range(rounds):
        used = dict.fromkeys(share, 0.0)
        for flow, r in zip(sub, rates):
            for ek, a in flow.items():
                used[ek] += a * r
        new: dict[tuple[K, str], float] = {}
        for e, ks in on.items():
            full = [k for k in ks if used[(e, k)] >= share[(e, k)] * (1 - 1e-9)]
            level = capacity[e] / len(ks)
            if full:
                level = (capacity[e] - sum(used[(e, k)] for k in ks if k not in full)) / len(full)
            for k in ks:   # the classes limited elsewhere are not limited here
                new[(e, k)] = max(level, used[(e, k)])
        if all(abs(new[x] - share[x]) <= 1e-9 * share[x] for x in share):
            break
        share = new
        rates = weighted_maxmin(share, sub)
    load: dict[K, float] = {}
    for u, r in zip(usage, rates):
        for e, a in u.items():
            load[e] = load.get(e, 0.0) + a * r
    if any(load[e] > capacity[e] * (1 + 1e-6) for e in load):
        return weighted_maxmin(capacity, usage)   # not settled: per flow, always feasible
    return rates


def proportional(topo: Topology, paths: Sequence[Path],
                 rate_of: Callable[[float], float] = float) -> list[float]:
    """Each flow's proportionally fair rate in Mb/s (Kelly, Maulloo and Tan 1998): the
    rates that maximise the sum of their logarithms within every link's capacity. Where
    TCP's additive increase and multiplicative decrease settle, to a first approximation,
    rather than at max-min: a flow that crosses several busy links gets less than its
    max-min share and the flows it makes room for more, so the total is at least
    max-min's. Solved as the convex program it is (scipy's SLSQP, from the max-min rates,
    which are feasible)."""
    import numpy as np  # here: `mn --custom` loads this package without them
    from scipy.optimize import Bounds, LinearConstraint, minimize

    capacity, users = _links(topo, paths, rate_of)
    start = maxmin(topo, paths, rate_of)
    flows = [i for i, path in enumerate(paths) if len(path) > 1]
    if not flows:
        return start
    col = {i: k for k, i in enumerate(flows)}
    crossing = np.zeros((len(users), len(flows)))  # link x flow: 1 where the flow crosses it
    for j, e in enumerate(users):
        crossing[j, [col[i] for i in users[e]]] = 1.0
    scale = max(capacity.values())  # rates in units of the fastest link: well conditioned
    cap = np.array([capacity[e] for e in users]) / scale
    def utility(x: np.ndarray) -> float:
        return float(-np.sum(np.log(x)))

    def gradient(x: np.ndarray) -> np.ndarray:
        return -1.0 / x

    bounds = [(1e-9, None)] * len(flows)
    res = minimize(utility, np.array([start[i] for i in flows]) / scale, jac=gradient,
                   method="SLSQP", bounds=bounds,
                   constraints=[{"type": "ineq", "fun": lambda x: cap - crossing @ x,
                                 "jac": lambda x: -crossing}],
                   options={"ftol": 1e-10, "maxiter": 500})
    if not res.success:  # SLSQP's line search can stall next to the optimum: an interior
        # point method from where it stopped (slower, and steady there)
        res = minimize(utility, np.clip(res.x, 1e-6, None), jac=gradient,
                       method="trust-constr", bounds=Bounds(1e-9, np.inf),
                       constraints=[LinearConstraint(crossing, -np.inf, cap)],
                       options={"gtol": 1e-9, "xtol": 1e-12, "maxiter": 5000})
    if not res.success or np.max(crossing @ res.x - cap) > 1e-6:
        raise ValueError(f"proportional fairness did not converge: {res.message}")
    rates = [0.0] * len(paths)
    for i in flows:
        rates[i] = float(res.x[col[i]]) * scale
    return rates


def sampled_totals(topo: Topology, choices: list[dict[tuple[str, ...], float]],
                   samples: int, seed: int = 0, rate_of: Callable[[float], float] = float,
                   share: Callable[..., list[float]] = maxmin) -> list[float]:
    """The flows' summed rate under `share` (maxmin, proportional), once per sample, each
    flow on a path drawn from its `choices` (path -> share of flows a hash puts there): a
    hashed routing's outcome over many 5-tuples. One sample is enough when every flow has
    one path. The same seed draws the same paths whatever `share`."""
    rng = random.Random(seed)
    if all(len(c) == 1 for c in choices):
        samples = 1
    out: list[float] = []
    for _ in range(samples):
        drawn = [rng.choices(list(c), weights=list(c.values()))[0] for c in choices]
        out.append(sum(share(topo, drawn, rate_of)))
    return out
