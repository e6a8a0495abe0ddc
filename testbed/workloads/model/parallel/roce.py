"""A parallel job's collectives over the RoCE engine (`transport: roce`), the part both
ends agree on (pure): which queue pairs a rank holds, and their numbers.

Every rank holds, for each of its groups (tensor, pipeline, data, expert, expert-data) and
each other member, `channels` queue pairs of its own; a message to that member is split
evenly over them (NCCL's channels). Rank r's queue pair to peer p of group kind k, channel
c, has the number `qpn(k, p, c)` at r and `qpn(k, r, c)` at p: each end derives the
other's from the same function.
"""
from __future__ import annotations

from collections.abc import Iterator

from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.rdma import split_bytes

__all__ = ["GROUP_KINDS", "MAX_CHANNELS", "connections", "qpn", "split_bytes"]

GROUP_KINDS = ("tp", "pp", "dp", "ep", "edp")
MAX_CHANNELS = 16


def qpn(kind: str, peer: int, channel: int, world: int, channels: int) -> int:
    """The queue pair, at the rank that holds it, to `peer` of group `kind`, `channel`."""
    return 1 + (GROUP_KINDS.index(kind) * world + peer) * channels + channel


def connections(layout: Layout, rank: int) -> Iterator[tuple[str, int]]:
    """(group kind, peer) of every connection the rank holds: each other member of each
    of its groups of two or more."""
    for kind in GROUP_KINDS:
        for ranks in layout.groups(kind):
            if rank in ranks and len(ranks) > 1:
                yield from ((kind, p) for p in ranks if p != rank)


def split(nbytes: int, parts: int) -> list[int]:
    """`nbytes` in `parts` as even as whole bytes go (the first ones a byte more)."""
    return [nbytes // parts + (k < nbytes % parts) for k in range(parts)]
