"""Parallel layout: which ranks form which groups, and which host each rank runs on.

Ranks are numbered with tensor parallelism fastest, then pipeline, then data parallelism:
rank = tp + TP * (pp + PP * dp). Expert parallelism is carved out of data parallelism as
Megatron-LM does: the EP group of a rank is the EP consecutive data-parallel replicas that
share its (tp, pp) position and hold different experts; the experts' gradients are averaged
over the DP / EP replicas that hold the same experts.

Placement maps ranks to hosts. `packed` puts consecutive ranks on hosts that share an edge
switch, then a pod: TP groups inside one edge switch, pipeline stages next to each other,
data-parallel replicas across pods (the usual practice). `spread` does the opposite: it
deals hosts round-robin over the edge switches of every pod, so consecutive ranks land as
far apart as the fabric allows. `random` shuffles the hosts with a seed. An explicit list
gives rank i's host.
"""
from __future__ import annotations

import random as _random
from dataclasses import dataclass

from topologies.model import Topology

GROUP_KINDS = ("tp", "pp", "dp", "ep", "edp")
POLICIES = ("packed", "spread", "random")


@dataclass(frozen=True)
class Layout:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1          # expert parallel degree (divides dp)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def check(self) -> None:
        for name in ("dp", "tp", "pp", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1 (got {getattr(self, name)})")
        if self.dp % self.ep:
            raise ValueError(f"ep: expert parallelism is carved out of data parallelism, so it "
                             f"must divide dp={self.dp} (got {self.ep})")

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp, pp, tp) index of a rank."""
        return rank // (self.tp * self.pp), (rank // self.tp) % self.pp, rank % self.tp

    def rank(self, dp: int, pp: int, tp: int) -> int:
        return tp + self.tp * (pp + self.pp * dp)

    def groups(self, kind: str) -> list[list[int]]:
        """Every group of one kind, each a sorted rank list (groups of one rank included)."""
        out: list[list[int]] = []
        if kind == "tp":
            out = [[self.rank(d, p, t) for t in range(self.tp)]
                   for d in range(self.dp) for p in range(self.pp)]
        elif kind == "pp":
            out = [[self.rank(d, p, t) for p in range(self.pp)]
                   for d in range(self.dp) for t in range(self.tp)]
        elif kind == "dp":
            out = [[self.rank(d, p, t) for d in range(self.dp)]
                   for p in range(self.pp) for t in range(self.tp)]
        elif kind == "ep":
            out = [[self.rank(b * self.ep + e, p, t) for e in range(self.ep)]
                   for b in range(self.dp // self.ep) for p in range(self.pp)
                   for t in range(self.tp)]
        elif kind == "edp":
            out = [[self.rank(b * self.ep + e, p, t) for b in range(self.dp // self.ep)]
                   for e in range(self.ep) for p in range(self.pp) for t in range(self.tp)]
        else:
            raise ValueError(f"unknown group kind {kind!r} (one of {', '.join(GROUP_KINDS)})")
        return out

    def group_of(self, kind: str, rank: int) -> list[int]:
        return next(g for g in self.groups(kind) if rank in g)

    def label(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        return "-".join(parts)


def locality_order(topo: Topology) -> list[list[str]]:
    """The fabric's hosts grouped by their first switch (edge, leaf, or a BCube server's
    level-0 switch), groups in pod order then switch order, hosts in name order."""
    groups: dict[str, list[str]] = {}
    for h in topo.hosts:
        _, sw, _ = topo.ports_of(h.name)[0]
        groups.setdefault(sw, []).append(h.name)
    def key(sw: str) -> tuple:
        s = topo.switch(sw)
        return (s.label("pod") or 0, s.label("leaf") or 0, s.label("index") or 0, s.dpid)
    return [groups[sw] for sw in sorted(groups, key=key)]


def place(topo: Topology, world: int, policy: str | list[str], seed: int = 0) -> list[str]:
    """Host of each rank (rank i on the i-th host of the list)."""
    names = [h.name for h in topo.hosts]
    if isinstance(policy, list):
        unknown = [h for h in policy if h not in names]
        if unknown:
            raise ValueError(f"no host {unknown[0]!r} in the fabric")
        if len(set(policy)) != len(policy):
            raise ValueError("a host appears twice")
        if len(policy) != world:
            raise ValueError(f"{len(policy)} hosts for {world} ranks")
        return list(policy)
    if world > len(names):
        raise ValueError(f"{world} ranks need {world} hosts; the fabric has {len(names)}")
    groups = locality_order(topo)
    if policy == "packed":
        order = [h for g in groups for h in g]
    elif policy == "spread":
        order = spread_order(topo, groups)
    elif policy == "random":
        order = [h for g in groups for h in g]
        _random.Random(seed).shuffle(order)
    else:
        raise ValueError(f"unknown placement {policy!r} (one of {', '.join(POLICIES)})")
    return order[:world]


def spread_order(topo: Topology, groups: list[list[str]]) -> list[str]:
    """Hosts dealt round-robin: the first host of a switch in every pod, then of the next
    switch in every pod, ...; then the second hosts, and so on."""
    pods: dict[int, list[list[str]]] = {}
    for g in groups:
        _, sw, _ = topo.ports_of(g[0])[0]
        pods.setdefault(topo.switch(sw).label("pod") or 0, []).append(g)
    switches: list[list[str]] = []
    for j in range(max(len(v) for v in pods.values())):
        switches += [pods[p][j] for p in sorted(pods) if j < len(pods[p])]
    return [s[i] for i in range(max(len(s) for s in switches)) for s in switches if i < len(s)]
