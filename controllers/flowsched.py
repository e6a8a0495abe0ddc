"""Flow scheduling decisions, pure (no Ryu, no switch): Hedera's elephant detection, its
max-min natural-demand estimation, Global First Fit and Simulated Annealing placement
(Al-Fares et al., "Hedera: Dynamic Flow Scheduling for Data Center Networks", NSDI 2010,
sections 4.1-4.4).

Demands are fractions of a host's NIC rate (1.0 = the whole link), as in the paper. The
flow control core (controllers/flowctl.py, run by controllers/apps/flow_app.py) measures
flows, calls these functions each scheduling period and turns what they return into flow
entries; a user's own scheduler can reuse them the same way.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from testbed.config.controller import ELEPHANT_FRACTION, SA_ITERATIONS

from .routing import FlowKey

CONVERGENCE = 1e-9


def is_elephant(rate_bps: float, nic_bps: float, fraction: float = ELEPHANT_FRACTION) -> bool:
    """A flow whose measured rate exceeds `fraction` of its source host's NIC rate."""
    return rate_bps > fraction * nic_bps


def estimate_demands(flows: Sequence[tuple[Hashable, Hashable]],
                     max_rounds: int = 1000) -> list[float]:
    """Natural demand of each flow (src, dst) as a fraction of a NIC, by the paper's
    iteration (its Figure 5): senders share their NIC equally among their not yet converged
    flows; a receiver whose incoming demand exceeds its NIC gives receiver-limited flows an
    equal share of what the sender-limited ones leave, and marks them converged. Repeated
    until no demand changes: the max-min fair rates a non-blocking fabric would give to TCP
    flows limited only by the hosts' NICs. Flows may repeat a (src, dst) pair."""
    n = len(flows)
    demand = [0.0] * n
    converged = [False] * n
    by_src: dict[Hashable, list[int]] = {}
    by_dst: dict[Hashable, list[int]] = {}
    for i, (s, d) in enumerate(flows):
        by_src.setdefault(s, []).append(i)
        by_dst.setdefault(d, []).append(i)
    for _ in range(max_rounds):
        before = demand[:]
        for idx in by_src.values():
            _est_src(idx, demand, converged)
        for idx in by_dst.values():
            _est_dst(idx, demand, converged)
        if all(abs(a - b) <= CONVERGENCE for a, b in zip(before, demand)):
            break
    return demand


def _est_src(idx: list[int], demand: list[float], converged: list[bool]) -> None:
    done = sum(demand[i] for i in idx if converged[i])
    open_ = [i for i in idx if not converged[i]]
    if open_:
        share = (1.0 - done) / len(open_)
        for i in open_:
            demand[i] = share


def _est_dst(idx: list[int], demand: list[float], converged: list[bool]) -> None:
    total = sum(demand[i] for i in idx)
    if total <= 1.0 + CONVERGENCE:
        return
    limited = set(idx)  # receiver-limited until shown sender-limited
    sender_limited = 0.0
    share = 1.0 / len(limited)
    while True:
        below = {i for i in limited if demand[i] < share - CONVERGENCE}
        if not below:
            break
        limited -= below
        sender_limited += sum(demand[i] for i in below)
        share = (1.0 - sender_limited) / len(limited)
    for i in limited:
        demand[i] = share
        converged[i] = True


Link = tuple[str, str]  # a direction of a link: (from node, to node)


def links_of(path: Sequence[str]) -> list[Link]:
    return list(zip(path, path[1:]))


@dataclass
class Reservations:
    """Capacity reserved on each directed link, in NIC fractions (1.0 = a full link; links
    faster than the hosts' NICs have a capacity above 1)."""
    capacity: dict[Link, float] = field(default_factory=dict)
    default_capacity: float = 1.0
    used: dict[Link, float] = field(default_factory=dict)

    def fits(self, path: Sequence[str], demand: float) -> bool:
        return all(self.used.get(l, 0.0) + demand
                   <= self.capacity.get(l, self.default_capacity) + CONVERGENCE
                   for l in links_of(path))

    def reserve(self, path: Sequence[str], demand: float) -> None:
        for l in links_of(path):
            self.used[l] = self.used.get(l, 0.0) + demand

    def release(self, path: Sequence[str], demand: float) -> None:
        for l in links_of(path):
            self.used[l] = max(0.0, self.used.get(l, 0.0) - demand)


@dataclass(frozen=True)
class FlowPlacement:
    flow: Hashable
    path: tuple[str, ...] | None  # None: no path had room; the flow stays where it is
    demand: float


def global_first_fit(elephants: Iterable[tuple[Hashable, float, Sequence[Sequence[str]]]],
                     reservations: Reservations) -> list[FlowPlacement]:
    """Global First Fit (section 4.3): each elephant in turn, given its estimated demand and
    its equal-cost paths in a fixed order, goes on the first path whose every link still
    has room for the demand, and that capacity is reserved. A flow no path can hold keeps
    its current (hash) path. `reservations` is updated, so that it carries over to the next
    scheduling period for the flows already placed."""
    out = []
    for flow, demand, paths in elephants:
        chosen = None
        for path in paths:
            if reservations.fits(path, demand):
                chosen = tuple(path)
                reservations.reserve(chosen, demand)
                break
        out.append(FlowPlacement(flow, chosen, demand))
    return out


def _exceeded(link: Link, used: float, capacity: dict[Link, float],
              default_capacity: float) -> float:
    return max(0.0, used - capacity.get(link, default_capacity))


def overload(used: dict[Link, float], capacity: dict[Link, float],
             default_capacity: float = 1.0) -> float:
    """Simulated annealing's energy: the capacity exceeded, summed over every link."""
    return sum(_exceeded(l, u, capacity, default_capacity) for l, u in used.items())


def simulated_annealing(flows: Sequence[tuple[float, Sequence[Sequence[str]], int]],
                        capacity: dict[Link, float] | None = None,
                        default_capacity: float = 1.0, iterations: int = SA_ITERATIONS,
                        seed: int = 0, t0: float = 0.5) -> tuple[list[int], float]:
    """Simulated Annealing placement (section 4.4): `flows` are (demand, equal-cost paths,
    index of the path it starts on). The state is a path per flow; the energy is the link
    capacity the demands exceed, summed over all links (`overload`); a neighbour moves one
    random flow to another of its paths; a worse state is accepted with probability
    exp(-increase / T), T falling linearly from `t0` (NIC fractions) to 0 over `iterations`.
    Returns the best state seen and its energy; between equally good states the one moving
    fewest flows from where they started wins, so that flows are not moved for nothing.

    The paper's state is a core switch per destination host (Fat-Tree specific, which also
    makes the down paths into a pod disjoint); a path per flow is the same search on any
    fabric with equal-cost paths (Leaf-Spine too), over a larger space."""
    capacity = capacity or {}
    rng = random.Random(seed)
    state = [start for _, _, start in flows]
    links = [[links_of(p) for p in paths] for _, paths, _ in flows]
    used: dict[Link, float] = {}
    for i, (demand, _, _) in enumerate(flows):
        for l in links[i][state[i]]:
            used[l] = used.get(l, 0.0) + demand

    energy = overload(used, capacity, default_capacity)
    moved = 0
    best, best_key = state[:], (energy, moved)
    movable = [i for i, (_, paths, _) in enumerate(flows) if len(paths) > 1]
    if not movable:
        return best, energy
    for step in range(iterations):
        temp = t0 * (1 - step / iterations)
        i = rng.choice(movable)
        demand, paths, start = flows[i]
        new = rng.randrange(len(paths) - 1)
        new += new >= state[i]  # any path but the current one
        delta: dict[Link, float] = {}
        for l in links[i][state[i]]:
            delta[l] = delta.get(l, 0.0) - demand
        for l in links[i][new]:
            delta[l] = delta.get(l, 0.0) + demand
        change = sum(_exceeded(l, used.get(l, 0.0) + d, capacity, default_capacity)
                     - _exceeded(l, used.get(l, 0.0), capacity, default_capacity)
                     for l, d in delta.items())
        if change > 0 and (temp <= 0 or rng.random() >= math.exp(-change / temp)):
            continue
        for l, d in delta.items():
            used[l] = used.get(l, 0.0) + d
        moved += (new != start) - (state[i] != start)
        state[i] = new
        energy += change
        if (round(energy, 9), moved) < (round(best_key[0], 9), best_key[1]):
            best, best_key = state[:], (energy, moved)
    return best, max(0.0, best_key[0])


# ---- the scheduler's state between periods (still pure: no Ryu, no clock) ---------------



@dataclass(frozen=True)
class Move:
    """A decision: put `flow` (src host -> dst host) on `path`."""
    flow: FlowKey
    src: str
    dst: str
    demand: float
    rate_bps: float
    path: tuple[str, ...]


@dataclass
class _Tracked:
    src: str
    dst: str
    bytes: int
    seen: float
    rate_bps: float = 0.0
    path: tuple[str, ...] | None = None  # where the scheduler put it (None: hash path)
    demand: float = 0.0


class HederaScheduler:
    """Hedera's control loop without the switch: feed it the byte counters of the flows seen
    at the edge switches each period (`observe`), then `schedule` returns the flows to move.

    Elephants (rate > `fraction` of the source NIC) get a natural demand from
    `estimate_demands` over all current elephants; already placed elephants keep their path
    and their reservation follows their new demand; new elephants are placed by Global First
    Fit over `paths(src, dst)`. A placed flow that is no longer an elephant (it ended, or
    its entries timed out) releases its reservation at once, so that the next flows can have
    its capacity; flows not seen for `expire_s` are forgotten.

    With `placement="annealing"` every elephant, placed or not, is re-placed each period by
    `simulated_annealing`, starting from where the flows are (new ones from Global First
    Fit's choice, as a good first state) and seeded by `seed` and the period's number, so a
    run is repeatable; a placed flow moves only when that lowers the exceeded capacity.
    `last_energy` holds the period's exceeded capacity before and after."""

    def __init__(self, paths: Callable[[str, str], Sequence[Sequence[str]]],
                 nic_bps: dict[str, float], fraction: float = ELEPHANT_FRACTION,
                 capacity: dict[Link, float] | None = None, expire_s: float = 10.0,
                 placement: str = "gff", iterations: int = SA_ITERATIONS,
                 seed: int = 0):
        if placement not in ("gff", "annealing"):
            raise ValueError(f"unknown placement {placement!r} (gff or annealing)")
        self.paths = paths          # (src host, dst host) -> equal-cost paths, in order
        self.nic_bps = nic_bps      # host -> its NIC rate in bit/s
        self.fraction = fraction
        self.expire_s = expire_s
        self.placement = placement
        self.iterations = iterations
        self.seed = seed
        self.period = 0
        self.last_energy: tuple[float, float] | None = None
        self.reservations = Reservations(capacity=dict(capacity or {}))
        self.flows: dict[FlowKey, _Tracked] = {}

    def observe(self, now: float, counters: dict[FlowKey, tuple[str, str, int]]) -> None:
        """Byte counters per flow key at time `now`: key -> (src host, dst host, bytes)."""
        for key, (src, dst, nbytes) in counters.items():
            t = self.flows.get(key)
            if t is None:
                self.flows[key] = _Tracked(src, dst, nbytes, now)
                continue
            if now > t.seen and nbytes >= t.bytes:
                t.rate_bps = (nbytes - t.bytes) * 8 / (now - t.seen)
            t.bytes, t.seen = nbytes, now
        for key, t in self.flows.items():
            if key not in counters:  # its entries timed out: it sends nothing any more
                t.rate_bps = 0.0
        for key in [k for k, t in self.flows.items() if now - t.seen > self.expire_s]:
            t = self.flows.pop(key)
            if t.path is not None:
                self.reservations.release(t.path, t.demand)

    def unplace(self, broken: Callable[[tuple[str, ...]], bool]
                ) -> list[tuple[FlowKey, tuple[str, ...]]]:
        """Every placed flow whose path is `broken` (it crosses a failed link) goes back to
        its hash path and releases its reservation; the next period may place it again on
        what is left. Returns (flow, the path it had)."""
        out = []
        for key, t in self.flows.items():
            if t.path is not None and broken(t.path):
                if t.demand:
                    self.reservations.release(t.path, t.demand)
                out.append((key, t.path))
                t.path, t.demand = None, 0.0
        return out

    def elephants(self) -> list[FlowKey]:
        return [k for k, t in self.flows.items()
                if is_elephant(t.rate_bps, self.nic_bps[t.src], self.fraction)]

    def schedule(self) -> list[Move]:
        big = self.elephants()
        for key in set(self.flows) - set(big):  # ended or slowed down: its reservation goes
            t = self.flows[key]
            if t.path is not None and t.demand:
                self.reservations.release(t.path, t.demand)
                t.demand = 0.0
        demands = estimate_demands([(self.flows[k].src, self.flows[k].dst) for k in big])
        self.period += 1
        if self.placement == "annealing":
            return self._anneal(big, demands)
        todo = []
        for key, demand in zip(big, demands):
            t = self.flows[key]
            if t.path is not None:  # placed earlier: its reservation follows its demand
                self.reservations.release(t.path, t.demand)
                self.reservations.reserve(t.path, demand)
                t.demand = demand
            else:
                todo.append((key, demand))
        moves = []
        placed = global_first_fit(
            ((k, d, self.paths(self.flows[k].src, self.flows[k].dst)) for k, d in todo),
            self.reservations)
        for p in placed:
            if p.path is None:
                continue
            key = cast(FlowKey, p.flow)
            t = self.flows[key]
            t.path, t.demand = p.path, p.demand
            moves.append(Move(key, t.src, t.dst, p.demand, t.rate_bps, p.path))
        return moves

    def _anneal(self, big: list[FlowKey], demands: list[float]) -> list[Move]:
        res = self.reservations
        res.used = {}  # rebuilt below: only elephants hold reservations
        paths = {k: [tuple(p) for p in self.paths(self.flows[k].src, self.flows[k].dst)]
                 for k in big}
        starts: dict[FlowKey, int] = {}
        new = []
        for key, demand in zip(big, demands):
            t = self.flows[key]
            if t.path in paths[key]:
                starts[key] = paths[key].index(t.path)
                res.reserve(t.path, demand)
            else:
                new.append((key, demand, paths[key]))
        for (key, demand, options), p in zip(new, global_first_fit(new, res)):
            if p.path is None:  # no room anywhere: annealing starts it on its first path
                res.reserve(options[0], demand)
            starts[key] = options.index(p.path) if p.path is not None else 0
        items = [(d, paths[k], starts[k]) for k, d in zip(big, demands)]
        before = overload(res.used, res.capacity, res.default_capacity)
        state, energy = simulated_annealing(items, res.capacity, res.default_capacity,
                                            self.iterations, seed=self.seed + self.period)
        self.last_energy = (before, energy)
        res.used = {}
        moves = []
        for key, demand, i in zip(big, demands, state):
            t = self.flows[key]
            path = paths[key][i]
            res.reserve(path, demand)
            if path != t.path:
                moves.append(Move(key, t.src, t.dst, demand, t.rate_bps, path))
            t.path, t.demand = path, demand
        return moves


# Priority policies live in controllers/priority.py; plugins written against this module
# (docs/FLOWSCHED.md's example, before the move) keep working.
from .priority import FlowInfo, PriorityPolicy  # noqa: E402

__all__ = ["FlowInfo", "HederaScheduler", "Move", "FlowPlacement", "PriorityPolicy",
           "Reservations", "estimate_demands", "global_first_fit", "is_elephant", "links_of",
           "overload", "simulated_annealing"]
