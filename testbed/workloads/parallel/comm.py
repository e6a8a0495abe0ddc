"""The rank's communication: one Gloo process group per parallel group it belongs to
(tensor, pipeline, data, expert), whose TCP connections carry the DSCP of its collective
type and whose bytes are counted from the rank's own sockets (TCP_INFO); every collective
and pipeline transfer timed as a span of the rank's trace (`TID`: the trace's rows).

Gloo's reduce_scatter is an allreduce followed by a slice (measured: a rank sends 2(n-1)/n
of the tensor, not (n-1)/n), so the reduce-scatter here is a ring over send/recv.
"""
from __future__ import annotations

import time
from datetime import timedelta

from testbed.config.units import ETHERNET_HEADER_BYTES, IP_TCP_HEADER_BYTES
from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.job import JobConfig

from ..rank import Timeline
from ..sockets import mark_sockets, socket_fds, tcp_sent, tcp_written

TID = {"compute": 0, "tp": 1, "pp": 2, "dp": 3, "ep": 4, "fsdp": 5, "wait": 6}


class Comm:
    """The rank's process groups, each collective timed (a trace span) and its sockets'
    bytes counted per collective type (`mark`: their sockets in the type's DSCP)."""
    header_bytes = ETHERNET_HEADER_BYTES + IP_TCP_HEADER_BYTES   # per segment sent
    transport = "gloo"

    def __init__(self, cfg: JobConfig, rank: int, timeline: Timeline, mark: bool = True):
        import torch.distributed as dist
        self.dist, self.rank, self.timeline = dist, rank, timeline
        self.layout = cfg.layout
        self.groups: dict[str, tuple[object, list[int]]] = {}
        self.fds: dict[str, set[int]] = {k: set() for k in KINDS}
        self.spans: list[tuple[float, float, str]] = []
        self.marked: dict[str, int] = {}
        self.in_flight = ""  # the blocking operation under way, named in a timeout's error
        plan = {"tp": "tp", "pp": "pp", "dp": "dp", "ep": "ep", "edp": "dp"}
        if cfg.zero:
            plan.update(dp="fsdp", edp="fsdp")
        for kind, account in plan.items():
            for ranks in cfg.layout.groups(kind):
                if len(ranks) < 2:
                    continue
                before = socket_fds()
                pg = dist.new_group(ranks, backend="gloo",
                                    timeout=timedelta(seconds=cfg.timeout_s))
                if rank in ranks:
                    dist.barrier(group=pg)  # its connections are up
                    fds = socket_fds() - before
                    self.fds[account] |= fds
                    self.groups[kind] = (pg, ranks)
                    dscp = cfg.dscp.get(account, 0) if mark else 0
                    self.marked[account] = self.marked.get(account, 0) + (
                        mark_sockets(fds, dscp) if dscp else 0)

    def close(self):
        """Ends what carries the collectives; what it counted (Gloo: nothing)."""
        return None

    def has(self, kind: str) -> bool:
        return kind in self.groups

    def sent(self) -> dict[str, tuple[int, int]]:
        """Per collective kind: (payload acknowledged, segments sent)."""
        return {k: tcp_sent(self.fds[k]) for k in KINDS}

    def written(self) -> dict[str, tuple[int, int]]:
        """Per collective kind: (payload handed to TCP, acknowledged or queued; segments)."""
        return {k: tcp_written(self.fds[k]) for k in KINDS}

    def _span(self, account: str, name: str, start: float, nbytes: int) -> None:
        self.in_flight = ""
        end = time.perf_counter()
        self.spans.append((start, end, account))
        self.timeline.span(name, account, start, end, tid=TID[account], bytes=nbytes)

    def _enter(self, what: str, kind: str) -> None:
        self.in_flight = f"{what} with ranks {self.groups[kind][1]}"

    def allreduce(self, kind: str, t, account: str | None = None) -> None:
        pg, _ = self.groups[kind]
        self._enter(f"{kind} allreduce", kind)
        start = time.perf_counter()
        self.dist.all_reduce(t, group=pg)
        self._span(account or kind, f"{kind} allreduce", start, t.numel() * t.element_size())

    def all_gather(self, kind: str, out, shard) -> None:
        """Ring all-gather of every rank's `shard` into `out` (rank order): n-1 steps, each
        passing on the shard received in the step before, every receive posted first (see
        `reduce_scatter`; Gloo's own all-gather took 233 ms where this ring takes the
        model's 180-190 at 10 Mb/s, the same bytes)."""
        pg, ranks = self.groups[kind]
        self._enter(f"{kind} all-gather", kind)
        start = time.perf_counter()
        n, i = len(ranks), ranks.index(self.rank)
        parts = out.view(n, -1)
        parts[i].copy_(shard)
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        recvs = [self.dist.irecv(parts[(i - k - 1) % n], prv, group=pg, tag=k)
                 for k in range(n - 1)]
        sends = []
        for k in range(n - 1):
            sends.append(self.dist.isend(parts[(i - k) % n], nxt, group=pg, tag=k))
            recvs[k].wait()
        for send in sends:
            send.wait()
        self._span("fsdp", f"{kind} all-gather", start, out.numel() * out.element_size())

    def all_to_all(self, t, out) -> None:
        """Slice j of `t` to member j, slice j of `out` from member j: every receive posted,
        then every send, all pairs at once (as NCCL runs it). Gloo's `all_to_all_single`
        sends the same bytes but took 1.4x this model's time on 8 ranks across a Fat-Tree."""
        pg, ranks = self.groups["ep"]
        self._enter("ep all-to-all", "ep")
        start = time.perf_counter()
        n, i = len(ranks), ranks.index(self.rank)
        src, dst = t.view(n, -1), out.view(n, -1)
        dst[i].copy_(src[i])
        recvs = [self.dist.irecv(dst[j], ranks[j], group=pg) for j in range(n) if j != i]
        sends = [self.dist.isend(src[j], ranks[j], group=pg) for j in range(n) if j != i]
        for work in recvs + sends:
            work.wait()
        self._span("ep", "ep all-to-all", start, t.numel() * t.element_size())

    def reduce_scatter(self, kind: str, flat):
        """Ring reduce-scatter of `flat` (its length a multiple of the group size): returns
        this rank's chunk, summed over the group. n-1 steps, each sending one chunk to the
        next rank while receiving one from the previous. Every step's receive is posted
        first: a Gloo send starts only once its receive is posted, and with one receive
        posted per step the ranks' steps lagged each other and every step took two chunk
        times (measured: 115 ms instead of 60 at 10 Mb/s)."""
        pg, ranks = self.groups[kind]
        self._enter(f"{kind} reduce-scatter", kind)
        n, i = len(ranks), ranks.index(self.rank)
        chunks = flat.view(n, -1).clone()
        start = time.perf_counter()
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        bufs = [chunks[0].clone() for _ in range(n - 1)]
        recvs = [self.dist.irecv(bufs[k], prv, group=pg, tag=k) for k in range(n - 1)]
        sends = []
        for k in range(n - 1):
            sends.append(self.dist.isend(chunks[(i - k - 1) % n].contiguous(), nxt, group=pg,
                                         tag=k))
            recvs[k].wait()
            chunks[(i - k - 2) % n] += bufs[k]
        for send in sends:
            send.wait()
        self._span("fsdp", f"{kind} reduce-scatter", start, flat.numel() * flat.element_size())
        return chunks[i]

    def send(self, t, stage: int, tag: int):
        pg, ranks = self.groups["pp"]
        start = time.perf_counter()
        work = self.dist.isend(t, ranks[stage], group=pg, tag=tag)
        self.timeline.span("pp send", "pp", start, time.perf_counter(), tid=TID["pp"],
                           bytes=t.numel() * t.element_size())
        return work

    def irecv(self, t, stage: int, tag: int):
        """Posts a receive from a neighbour stage (posted early, as Megatron-LM does, so that
        the transfer overlaps this stage's compute: Gloo sends only once the receive is
        posted)."""
        pg, ranks = self.groups["pp"]
        return self.dist.irecv(t, ranks[stage], group=pg, tag=tag), t, ranks[stage]

    def wait(self, posted) -> float:
        """Blocks until a posted receive has its tensor; returns the seconds waited."""
        work, t, src = posted
        self.in_flight = f"pp recv with ranks [{src}]"
        start = time.perf_counter()
        work.wait()
        self.in_flight = ""
        end = time.perf_counter()
        self.spans.append((start, end, "pp"))
        self.timeline.span("pp recv (wait)", "wait", start, end, tid=TID["wait"],
                           bytes=t.numel() * t.element_size())
        return end - start
