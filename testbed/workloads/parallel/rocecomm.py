"""The rank's collectives over the RoCE engine (`transport: roce`, emulated compute only):
every step Gloo would carry (ring allreduce, all-gather, reduce-scatter, all-to-all, the
pipeline's sends) posted as RDMA WRITEs of the same sizes, between the same ranks, in the
same order, on the engine the rank started in its host (`roce.Session`); a step's receive
is the peer's message arriving whole. The Gloo groups stay, for the ranks' barriers and
the layout, and carry nothing else.

The tensors' contents do not travel (emulated compute exchanges sizes, not values); each
collective type's bytes are what the rank posted, and its packets' headers RoCE's.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.job import JobConfig
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.roce import connections, qpn, split_bytes
from testbed.workloads.model.parallel.schedule import actions
from testbed.workloads.model.rdma import WIRE_OVERHEAD

from ..rank import Timeline
from .comm import TID, Comm

if TYPE_CHECKING:
    from testbed.workloads.roce import Engine


def rank_engines(layout: Layout, where: list[tuple[str, int]], templates: list[Engine],
                 channels: int = 1, per_qp_ports: bool = False,
                 experts: bool = True) -> list[Engine]:
    """Each rank's engine: its template's settings (its congestion control scaled to the
    rank's host link, MTU, classes) bound at `where[rank]` (address, UDP port), in control
    mode, with `channels` queue pairs to every member of each of its groups, at the link's
    rate; `per_qp_ports`: each from its own UDP source port, as a NIC derives it from the
    two QP numbers; `experts`: the model has experts (the expert-data group's QPs)."""
    from testbed.workloads import roce
    world, out = layout.world, []
    for r, (ip, port) in enumerate(where):
        template = templates[r]
        eng = dataclasses.replace(template, bind=ip, port=port, control=True,
                                  exit_when_done=False, qps=[], writes=[])
        for kind, p in connections(layout, r, experts):
            for c in range(channels):
                mine, theirs = qpn(kind, p, c, world, channels), qpn(kind, r, c, world, channels)
                eng.qp(mine, peer=where[p][0], peer_port=where[p][1], peer_qpn=theirs,
                       line_mbps=template.link_mbps,
                       sport=roce.qp_source_port(mine, theirs) if per_qp_ports else 0)
        out.append(eng)
    return out


class RoceComm(Comm):
    """Comm's collectives, carried by the engine: per collective type, the payload posted
    and its packets (`sent`, `written`)."""
    transport = "roce"

    def __init__(self, cfg: JobConfig, rank: int, timeline: Timeline, out: Path):
        from testbed.workloads import roce
        super().__init__(cfg, rank, timeline, mark=False)
        r = cfg.roce
        assert r is not None
        self.cfg = cfg
        self.world, self.channels, self.mtu = cfg.layout.world, r.channels, r.mtu
        self.header_bytes = WIRE_OVERHEAD + r.telemetry_bytes
        self.session = roce.Session(Path(r.binary), Path(r.config_dir) / f"rank{rank}.conf",
                                    out / f"rank{rank}.roce.json", timeout_s=cfg.timeout_s)
        # every rank's engine up before any sends: a WRITE to a host without one is lost,
        # and costs a retransmission timeout
        self.dist.barrier()
        self.expected: dict[int, int] = {}     # qpn -> messages from its peer awaited
        self.pp_posted: dict[int, int] = {}    # neighbour stage -> receives posted from it
        self.counts = {k: [0, 0] for k in KINDS}   # payload posted, packets

    def close(self):
        """Ends the engine; its result (counters per queue pair)."""
        return self.session.close()

    def sent(self) -> dict[str, tuple[int, int]]:
        return {k: (b, p) for k, (b, p) in self.counts.items()}

    def written(self) -> dict[str, tuple[int, int]]:
        return self.sent()

    # ---- one message, split over the connection's channels ------------------------------

    def _post(self, kind: str, peer: int, nbytes: int, account: str) -> list[tuple[int, int]]:
        """Posts `nbytes` to `peer`; what to wait for its acknowledgement."""
        done = []
        for c, part in enumerate(split_bytes(nbytes, self.channels)):
            if part:
                q = qpn(kind, peer, c, self.world, self.channels)
                done.append((q, self.session.post(q, part)))
                self.counts[account][0] += part
                self.counts[account][1] += -(-part // self.mtu)
        return done

    def _expect(self, kind: str, peer: int, nbytes: int) -> list[tuple[int, int]]:
        """The next message of `nbytes` from `peer`: what to wait for its arrival."""
        due = []
        for c, part in enumerate(split_bytes(nbytes, self.channels)):
            if part:
                q = qpn(kind, peer, c, self.world, self.channels)
                self.expected[q] = n = self.expected.get(q, 0) + 1
                due.append((q, n))
        return due

    def _arrived(self, due: list[tuple[int, int]]) -> None:
        for q, n in due:
            self.session.wait_recv(q, n)

    def _acked(self, done: list[tuple[int, int]]) -> None:
        for q, n in done:
            self.session.wait_sent(q, n)

    def _ring(self, kind: str, sizes: list[int], first: int, steps: int,
              account: str) -> None:
        """`steps` ring steps: in step k this rank sends chunk (i - k - first) to the next
        member and receives chunk (i - k - first - 1) from the previous one, the next step's
        send waiting for this step's receive (what it forwards)."""
        ranks = self.groups[kind][1]
        n, i = len(ranks), ranks.index(self.rank)
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        posted = []
        for k in range(steps):
            posted += self._post(kind, nxt, sizes[(i - k - first) % n], account)
            self._arrived(self._expect(kind, prv, sizes[(i - k - first - 1) % n]))
        self._acked(posted)

    # ---- the collectives ------------------------------------------------------------------

    def allreduce(self, kind: str, t, account: str | None = None) -> None:
        """Ring allreduce: a reduce-scatter, then an all-gather (2(n-1) steps of 1/n)."""
        account = account or kind
        self._enter(f"{kind} allreduce", kind)
        start = time.perf_counter()
        nbytes = t.numel() * t.element_size()
        sizes = split_bytes(nbytes, len(self.groups[kind][1]))
        n = len(sizes)
        self._ring(kind, sizes, 0, n - 1, account)
        self._ring(kind, sizes, n - 1, n - 1, account)
        self._span(account, f"{kind} allreduce", start, nbytes)

    def all_gather(self, kind: str, out, shard) -> None:
        self._enter(f"{kind} all-gather", kind)
        start = time.perf_counter()
        n, i = len(self.groups[kind][1]), self.groups[kind][1].index(self.rank)
        out.view(n, -1)[i].copy_(shard)
        self._ring(kind, [shard.numel() * shard.element_size()] * n, 0, n - 1, "fsdp")
        self._span("fsdp", f"{kind} all-gather", start, out.numel() * out.element_size())

    def reduce_scatter(self, kind: str, flat):
        """The ring's steps; returns this rank's chunk (its values not summed: emulated
        compute keeps sizes, not values)."""
        self._enter(f"{kind} reduce-scatter", kind)
        start = time.perf_counter()
        n, i = len(self.groups[kind][1]), self.groups[kind][1].index(self.rank)
        chunks = flat.view(n, -1)
        self._ring(kind, [chunks[0].numel() * flat.element_size()] * n, 1, n - 1, "fsdp")
        self._span("fsdp", f"{kind} reduce-scatter", start, flat.numel() * flat.element_size())
        return chunks[i].clone()

    def all_to_all(self, t, out) -> None:
        """Slice j to member j, all pairs at once."""
        ranks = self.groups["ep"][1]
        self._enter("ep all-to-all", "ep")
        start = time.perf_counter()
        n, i = len(ranks), ranks.index(self.rank)
        part = t.numel() * t.element_size() // n
        out.view(n, -1)[i].copy_(t.view(n, -1)[i])
        posted = [d for j in range(n) if j != i
                  for d in self._post("ep", ranks[j], part, "ep")]
        for j in range(n):
            if j != i:
                self._arrived(self._expect("ep", ranks[j], part))
        self._acked(posted)
        self._span("ep", "ep all-to-all", start, t.numel() * t.element_size())

    def send(self, t, stage: int, tag: int):
        ranks = self.groups["pp"][1]
        start = time.perf_counter()
        done = self._post("pp", ranks[stage], t.numel() * t.element_size(), "pp")
        self.timeline.span("pp send", "pp", start, time.perf_counter(), tid=TID["pp"],
                           bytes=t.numel() * t.element_size())
        return Pending(lambda: self._acked(done))

    def pp_tags(self, stage: int) -> list[int]:
        """The tags a neighbour stage sends this rank, in the order it sends them (its
        schedule's: activations in its forwards' order, gradients in its backwards', which
        GPipe runs last micro-batch first)."""
        mine = self.layout.coords(self.rank)[1]
        kind, offset = ("F", 0) if stage == mine - 1 else ("B", 1)
        return [2 * mb + offset for k, mb in actions(
            self.cfg.schedule, stage, self.layout.pp, self.cfg.micro_batches) if k == kind]

    def irecv(self, t, stage: int, tag: int):
        """The message with `tag` from a neighbour stage: a queue pair delivers in the order
        sent, so its number is its place in that stage's sending order (an iteration's
        receives from one stage are all posted before the next iteration's)."""
        src = self.groups["pp"][1][stage]
        order = self.pp_tags(stage)
        k = self.pp_posted.get(stage, 0)
        self.pp_posted[stage] = k + 1
        index = k // len(order) * len(order) + order.index(tag) + 1
        due = [(qpn("pp", src, c, self.world, self.channels), index)
               for c, part in enumerate(split_bytes(t.numel() * t.element_size(),
                                                    self.channels)) if part]
        return Pending(lambda: self._arrived(due)), t, src


class Pending:
    """A posted send or receive, as Gloo's work object: `wait()` returns once it is done
    (acknowledged, or arrived whole)."""

    def __init__(self, wait: Callable[[], None]):
        self.wait = wait
