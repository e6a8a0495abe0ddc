"""A parallel job's collectives over the RoCE engine (`transport: roce`), the part both
ends agree on (pure): which queue pairs a rank holds, and their numbers.

Every rank holds, for each of its groups (tensor, pipeline, data, expert, and expert-data
when the model has experts) and each other member, `channels` queue pairs of its own; a
message to that member is split evenly over them (NCCL's channels). Rank r's queue pair to
peer p of group kind k, channel c, has the number `qpn(k, p, c)` at r and `qpn(k, r, c)`
at p: each end derives the other's from the same function.
"""
from __future__ import annotations

from collections.abc import Iterator

from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.rdma import split_bytes

__all__ = ["GROUP_KINDS", "connections", "qpn", "queue_pairs", "split_bytes"]

GROUP_KINDS = ("tp", "pp", "dp", "ep", "edp")


def qpn(kind: str, peer: int, channel: int, world: int, channels: int) -> int:
    """The queue pair, at the rank that holds it, to `peer` of group `kind`, `channel`."""
    return 1 + (GROUP_KINDS.index(kind) * world + peer) * channels + channel


def connections(layout: Layout, rank: int, experts: bool = True
                ) -> Iterator[tuple[str, int]]:
    """(group kind, peer) of every connection the rank holds: each other member of each
    of its groups of two or more (the expert-data group only for a model with experts)."""
    for kind in GROUP_KINDS:
        if kind == "edp" and not experts:
            continue
        for ranks in layout.groups(kind):
            if rank in ranks and len(ranks) > 1:
                yield from ((kind, p) for p in ranks if p != rank)


def queue_pairs(layout: Layout, channels: int, experts: bool = True) -> int:
    """The most queue pairs any rank's engine holds."""
    return max(len(list(connections(layout, r, experts))) for r in range(layout.world)) \
        * channels
