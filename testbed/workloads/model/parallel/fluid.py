"""The path-aware iteration model (pure): a flow-level replay of a parallel job's
iterations on the links its connections actually cross.

The analytical model (`cost.predict`) prices each collective type alone, on a fluid fabric
that spreads every flow evenly over its shortest paths. Here every rank runs the program
the emulated worker runs (its pipeline schedule; each layer's compute halves, tensor-
parallel allreduces and expert all-to-alls; the pipeline sends; the data-parallel
synchronisation, layer by layer), and every transfer is a flow on the links of its
connection's path. The flows active at a moment share the links max-min fairly (or, where
the switches serve traffic classes round-robin, fairly between the classes first), so the
collectives of different stages and groups slow one another where, and while, their paths
meet. A ring collective's flows advance together (each step waits for the slowest member);
an all-to-all's and the pipeline's flows each on its own; pipeline sends on one connection
leave one after another. A transfer ends its steps' one-way latency after its last byte.

Which links a connection uses is `usage`: its share of the flow's rate on each directed
link. A hashed routing puts a connection on one path (draw several to see the spread one
run may land in); per-packet spraying splits it over all paths by their shares; several
queue pairs, each hashed, split it evenly over theirs.
"""
from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from topologies.fairshare import class_maxmin

from .cost import JobShape
from .desc import LayerWork
from .schedule import actions

Link = tuple[str, str]
Usage = Mapping[Link, float]
# (src rank, dst rank, process group: tp, pp, dp, ep, edp) -> the connection's share of a
# flow's rate on each link
UsageOf = Callable[[int, int, str], Usage]

RING_ALLREDUCE, RING_GATHER, ALL_TO_ALL = "allreduce", "gather", "all_to_all"
PEAK = 20.0   # a banked link's rate, in its rate: the emulator forwards a burst far faster


@dataclass(frozen=True)
class Collective:
    kind: str                 # collective type (tp, dp, ep, fsdp): its class and latency
    via: str                  # the process group whose connections carry it (tp, dp, edp...)
    group: tuple[int, ...]    # the ranks, in ring order
    pattern: str              # RING_ALLREDUCE | RING_GATHER | ALL_TO_ALL
    nbytes: float             # the full tensor (S)

    def flows(self) -> list[tuple[int, int, float]]:
        """(src, dst, bytes) of every flow, each member's share of S as cost.py counts it."""
        g, n = self.group, len(self.group)
        if self.pattern == ALL_TO_ALL:
            return [(a, b, self.nbytes / n) for a in g for b in g if a != b]
        per = (2 if self.pattern == RING_ALLREDUCE else 1) * (n - 1) / n * self.nbytes
        return [(g[i], g[(i + 1) % n], per) for i in range(n)]

    @property
    def steps(self) -> int:
        n = len(self.group)
        return {RING_ALLREDUCE: 2 * (n - 1), RING_GATHER: n - 1, ALL_TO_ALL: 1}[self.pattern]


# a rank's program: ("mark", name) | ("compute", s) | ("coll", Collective)
# | ("send", peer, bytes, tag, iteration) | ("recv", tag)
# | ("sends",): wait for every send to end
Op = tuple


def _coll(plan: JobShape, rank: int, kind: str, via: str, pattern: str,
          nbytes: float) -> list[Op]:
    group = tuple(plan.layout.group_of(via, rank))
    if len(group) < 2 or nbytes <= 0:
        return []
    return [("coll", Collective(kind, via, group, pattern, nbytes))]


Compute = Callable[[LayerWork, bool], float]   # a layer's time, forward or backward


def flops_time(s_per_flop: float) -> Compute:
    """A layer's compute from its FLOPs (emulated compute without a profile)."""
    return lambda w, backward: (w.bwd_flops if backward else w.fwd_flops) * s_per_flop


def profile_time(fwd_s: float, bwd_s: float, tp: int) -> Compute:
    """Every layer the profiled time, split over the TP group (emulated.py)."""
    return lambda w, backward: (bwd_s if backward else fwd_s) / tp


def _layer(plan: JobShape, rank: int, w: LayerWork, backward: bool,
           compute: Compute) -> list[Op]:
    """One layer, forward or backward (emulated.py): half the compute, the TP allreduce,
    the dispatch all-to-all, the other half, the combine all-to-all, the TP allreduce;
    under ZeRO-3 the layer's parameters gathered first."""
    nb = plan.dtype_bytes
    c = compute(w, backward)
    tp = _coll(plan, rank, "tp", "tp", RING_ALLREDUCE, w.tp_elems * nb) if w.tp_allreduces \
        else []
    a2a = _coll(plan, rank, "ep", "ep", ALL_TO_ALL, w.a2a_elems * nb) if w.a2a_elems else []
    gather: list[Op] = []
    if plan.zero == 3:
        gather = (_coll(plan, rank, "fsdp", "dp", RING_GATHER, w.params * nb)
                  + _coll(plan, rank, "fsdp", "edp", RING_GATHER, w.expert_params * nb))
    mid = tp if w.tp_allreduces >= 2 else []   # (the MLP of real compute: one, at the end)
    return gather + [("compute", c / 2)] + mid + a2a + [("compute", c / 2)] + a2a + tp


def _sync(plan: JobShape, rank: int, work: list[LayerWork]) -> list[Op]:
    """The data-parallel synchronisation (shards.py): the dense layers' gradients, then the
    experts', each layer's allreduced (or reduce-scattered, and under ZeRO-1/2 the updated
    shards all-gathered after)."""
    nb, ops = plan.dtype_bytes, []
    kind = "dp" if plan.zero == 0 else "fsdp"
    pattern = RING_ALLREDUCE if plan.zero == 0 else RING_GATHER
    for params, via in (([w.params for w in work], "dp"),
                        ([w.expert_params for w in work if w.expert_params], "edp")):
        for p in params:
            ops += _coll(plan, rank, kind, via, pattern, p * nb)
        if plan.zero in (1, 2):
            for p in params:
                ops += _coll(plan, rank, kind, via, RING_GATHER, p * nb)
    return ops


def program(plan: JobShape, rank: int, compute: Compute, iters: int) -> list[Op]:
    """The rank's program over `iters` iterations, as the emulated worker runs it
    (parallel/runner.py): the schedule's forwards and backwards, each waiting for its
    input from the neighbour stage and sending its output on; every send ended; the
    synchronisation."""
    lay = plan.layout
    d, s, t = lay.coords(rank)
    work = plan.stage_work(s)
    act = work[-1].act_elems * plan.dtype_bytes
    nxt, prev = lay.rank(d, min(s + 1, lay.pp - 1), t), lay.rank(d, max(s - 1, 0), t)
    ops: list[Op] = []
    for it in range(iters):
        ops.append(("mark", "start"))
        for kind, mb in actions(plan.schedule, s, lay.pp, plan.micro_batches):
            fwd = kind == "F"
            if s != (0 if fwd else lay.pp - 1):
                ops.append(("recv", (kind, it, mb, rank)))
            for j in (range(len(work)) if fwd else reversed(range(len(work)))):
                ops += _layer(plan, rank, work[j], not fwd, compute)
            if s != (lay.pp - 1 if fwd else 0):
                peer = nxt if fwd else prev
                ops.append(("send", peer, act, (kind, it, mb, peer), it))
        ops += [("sends",), ("mark", "pipeline")] + _sync(plan, rank, work) + [("mark", "end")]
    return ops


def programs(plan: JobShape, compute: Compute, iters: int) -> list[list[Op]]:
    return [program(plan, r, compute, iters) for r in range(plan.layout.world)]


@dataclass
class _Transfer:
    """Flows that advance together at one rate each: a ring collective's members, or one
    flow. `left`: bytes each still has to send."""
    usage: dict[Link, float]
    klass: str
    left: float
    done: tuple                       # what its end means: ("coll", key) | ("send", conn)
    sig: int = 0
    rate: float = 0.0


@dataclass
class _State:
    t: float = 0.0
    transfers: list[_Transfer] = field(default_factory=list)
    timers: list[tuple[float, int, tuple]] = field(default_factory=list)
    seq: int = 0


class Replay:
    """One replay of `progs` on the fabric: `capacity` (payload bytes/s per directed
    link), `usage_of` (a connection's links), `latency_s` (one-way, per collective type)
    and `class_of` (the switch class a type's traffic is served in, round-robin between
    classes; None: every flow on its own).

    `burst`: each link's token bucket, in bytes, as the emulator's HTB shapes a port (a
    link left idle banks up to that much and then lets it through at once, `peak` times
    its rate, before falling back to its rate); None: links never exceed their rate (as
    for senders that pace themselves at their line rate, like the RoCE engine, which
    never draw on a bucket's credit)."""

    def __init__(self, progs: list[list[Op]], capacity: Mapping[Link, float],
                 usage_of: UsageOf, latency_s: Mapping[str, float],
                 class_of: Callable[[str], str] | None = None,
                 burst: Mapping[Link, float] | None = None, peak: float = PEAK,
                 posted_recv: bool = False):
        self.progs, self.capacity, self.usage_of = progs, capacity, usage_of
        self.latency_s, self.class_of = latency_s, class_of
        self.burst, self.peak = burst or {}, peak
        self.bucket = dict(self.burst)          # an idle fabric: every bucket full
        self.low: set[Link] = set()             # the buckets not full
        self.posted_recv = posted_recv
        self.begun: set[tuple[int, int]] = set()          # (rank, iteration) started
        self.deferred: dict[tuple[int, int], list[tuple[int, int]]] = {}
        n = len(progs)
        self.pc = [0] * n
        self.blocked: list[tuple | None] = [None] * n
        self.marks: list[list[tuple[str, float]]] = [[] for _ in range(n)]
        self.rendezvous: dict[tuple, set[int]] = {}
        self.count: list[dict[tuple, int]] = [{} for _ in range(n)]
        self.parts: dict[tuple, int] = {}       # an all-to-all's flows still running
        self.arrived: set[tuple] = set()
        self.waiting: dict[tuple, int] = {}     # tag -> the rank waiting for it
        self.sends_out = [0] * n
        self.fifo: dict[tuple, deque] = {}      # connection -> sends queued on it
        self.sigs: dict[tuple, int] = {}
        self.cache: dict[tuple, dict[int, float]] = {}
        self.st = _State()
        self.dirty = True

    # ---- transfers ---------------------------------------------------------------------------
    def _usage(self, flows: list[tuple[int, int]], via: str) -> dict[Link, float]:
        out: dict[Link, float] = {}
        for a, b in flows:
            for e, share in self.usage_of(a, b, via).items():
                out[e] = out.get(e, 0.0) + share
        return out

    def _start(self, usage: dict[Link, float], kind: str, nbytes: float, done: tuple) -> None:
        klass = self.class_of(kind) if self.class_of else ""
        key = (klass, tuple(sorted(usage.items())))
        sig = self.sigs.setdefault(key, len(self.sigs))
        self.st.transfers.append(_Transfer(usage, klass, nbytes, done, sig))
        self.dirty = True

    def _timer(self, at: float, what: tuple) -> None:
        self.st.seq += 1
        heapq.heappush(self.st.timers, (at, self.st.seq, what))

    def _rates(self) -> None:
        live = self.st.transfers
        used = {e for x in live for e in x.usage}
        banked = frozenset(e for e in used if self.bucket.get(e, 0.0) > 0)
        key = (tuple(sorted(x.sig for x in live)), banked)
        got = self.cache.get(key)
        if got is None:
            firsts: dict[int, _Transfer] = {}
            for x in live:
                firsts.setdefault(x.sig, x)
            order = list(firsts.values())
            # identical transfers share a link as many flows: weight each signature by its
            # count
            counts: dict[int, int] = {}
            for x in live:
                counts[x.sig] = counts.get(x.sig, 0) + 1
            capacity: dict = {e: self.capacity[e] * (self.peak if e in banked else 1.0)
                              for e in used}
            usage = [{e: a * counts[x.sig] for e, a in x.usage.items()} for x in order]
            rates = class_maxmin(capacity, usage, [x.klass for x in order])
            got = {x.sig: r for x, r in zip(order, rates)}
            self.cache[key] = got
        for x in live:
            x.rate = got[x.sig]
        self.dirty = False

    def _loads(self) -> dict[Link, float]:
        out: dict[Link, float] = {}
        for x in self.st.transfers:
            if x.rate < math.inf:
                for e, a in x.usage.items():
                    out[e] = out.get(e, 0.0) + a * x.rate
        return out

    def _drained_at(self, loads: Mapping[Link, float]) -> float:
        """When the first banked link sending above its rate runs out of credit."""
        at = math.inf
        for e, load in loads.items():
            over = load - self.capacity[e]
            if over > 1e-9 * self.capacity[e] and self.bucket.get(e, 0.0) > 0:
                at = min(at, self.st.t + self.bucket[e] / over)
        return at

    def _bank(self, loads: Mapping[Link, float], dt: float) -> None:
        """Each bucket over `dt`: credit at the link's rate less what it sent, within
        0 and its size; a bucket that runs out changes the links' capacities."""
        # (a full bucket on an idle link stays full: only the others change)
        for e in [e for e in loads if e in self.burst] + [e for e in self.low if e not in loads]:
            size, before = self.burst[e], self.bucket[e]
            after = min(size, max(0.0, before + (self.capacity[e] - loads.get(e, 0.0)) * dt))
            if after <= 1e-6 * size:
                after = 0.0
            if (before > 0) != (after > 0) and e in loads:
                self.dirty = True
            self.bucket[e] = after
            if after < size:
                self.low.add(e)
            else:
                self.low.discard(e)

    # ---- ranks -------------------------------------------------------------------------------
    def _advance(self, r: int) -> None:
        prog = self.progs[r]
        while self.blocked[r] is None and self.pc[r] < len(prog):
            op = prog[self.pc[r]]
            what = op[0]
            if what == "mark":
                self.marks[r].append((op[1], self.st.t))
                if op[1] == "start":             # its receives for the iteration posted
                    it = sum(1 for name, _ in self.marks[r] if name == "start") - 1
                    self.begun.add((r, it))
                    for conn in self.deferred.pop((r, it), []):
                        self._send_head(conn)
            elif what == "compute":
                if op[1] > 0:
                    self.blocked[r] = ("compute",)
                    self._timer(self.st.t + op[1], ("wake", r))
                    return
            elif what == "coll":
                c: Collective = op[1]
                n = self.count[r].get((c.via, c.group), 0)
                self.count[r][(c.via, c.group)] = n + 1
                key = (c.via, c.group, n)        # the group's n-th collective
                members = self.rendezvous.setdefault(key, set())
                members.add(r)
                self.blocked[r] = ("coll", key)
                if len(members) == len(c.group):
                    self._collective(c, key)
                return
            elif what == "send":
                _, peer, nbytes, tag, it = op
                conn = (r, peer)
                q = self.fifo.setdefault(conn, deque())
                q.append((nbytes, tag, it))
                self.sends_out[r] += 1
                if len(q) == 1:
                    self._send_head(conn)
            elif what == "recv":
                if op[1] not in self.arrived:
                    self.blocked[r] = ("recv", op[1])
                    self.waiting[op[1]] = r
                    return
            elif what == "sends":
                if self.sends_out[r]:
                    self.blocked[r] = ("sends",)
                    return
            self.pc[r] += 1

    def _send_head(self, conn: tuple[int, int]) -> None:
        """The first send queued on a connection starts, once the receiver has posted its
        receive (with `posted_recv`: a Gloo receiver posts an iteration's as it starts it,
        and Gloo sends only into a posted receive)."""
        nbytes, _, it = self.fifo[conn][0]
        if self.posted_recv and (conn[1], it) not in self.begun:
            self.deferred.setdefault((conn[1], it), []).append(conn)
            return
        self._start(self._usage([conn], "pp"), "pp", nbytes, ("send", conn))

    def _collective(self, c: Collective, key: tuple) -> None:
        flows = c.flows()
        if c.pattern == ALL_TO_ALL:
            self.parts[key] = len(flows)
            for a, b, nbytes in flows:
                self._start(self._usage([(a, b)], c.via), c.kind, nbytes, ("part", key, c))
        else:
            self._start(self._usage([(a, b) for a, b, _ in flows], c.via), c.kind,
                        flows[0][2], ("coll", key, c))

    def _release(self, ranks: list[int]) -> None:
        for r in ranks:
            self.blocked[r] = None
            self.pc[r] += 1
            self._advance(r)

    def _finished(self, x: _Transfer) -> None:
        t = self.st.t
        if x.done[0] in ("part", "coll"):
            _, key, c = x.done
            if x.done[0] == "part":          # one flow of an all-to-all: the last ends it
                self.parts[key] -= 1
                if self.parts[key]:
                    return
            self._timer(t + c.steps * self.latency_s.get(c.kind, 0.0), ("release", key))
            return
        conn = x.done[1]
        q = self.fifo[conn]
        _, tag, _ = q.popleft()
        self._timer(t + self.latency_s.get("pp", 0.0), ("arrive", tag))
        if q:   # the next on the connection (before the sender runs on and queues more)
            self._send_head(conn)
        self.sends_out[conn[0]] -= 1
        if self.sends_out[conn[0]] == 0 and self.blocked[conn[0]] == ("sends",):
            self._release([conn[0]])

    def _fire(self, what: tuple) -> None:
        if what[0] == "wake":
            self._release([what[1]])
        elif what[0] == "release":
            self._release(sorted(self.rendezvous.pop(what[1])))
        else:
            tag = what[1]
            self.arrived.add(tag)
            r = self.waiting.pop(tag, None)
            if r is not None:
                self._release([r])

    def run(self) -> list[list[tuple[str, float]]]:
        """Every rank's marks (name, time) once all programs have ended."""
        st = self.st
        for r in range(len(self.progs)):
            self._advance(r)
        while True:
            if self.dirty:
                self._rates()
            loads = self._loads() if self.burst else {}
            nxt = min(st.timers[0][0] if st.timers else math.inf, self._drained_at(loads))
            for x in st.transfers:
                nxt = min(nxt, st.t + (x.left / x.rate if x.rate > 0 else math.inf))
            if nxt == math.inf:
                if all(self.pc[r] >= len(p) for r, p in enumerate(self.progs)):
                    return self.marks
                raise RuntimeError("the replay deadlocks")  # a program bug
            dt = nxt - st.t
            st.t = nxt
            if self.burst:
                self._bank(loads, dt)
            ended: list[_Transfer] = []
            going: list[_Transfer] = []
            for x in st.transfers:
                x.left = x.left - x.rate * dt if x.rate < math.inf else 0.0
                # (what ends now, within rounding: a millionth of a byte or a picosecond)
                (ended if x.left <= 1e-6 or x.left <= x.rate * 1e-12 else going).append(x)
            if ended:
                st.transfers = going
                self.dirty = True
                for x in ended:
                    self._finished(x)
            while st.timers and st.timers[0][0] <= st.t + 1e-12:
                self._fire(heapq.heappop(st.timers)[2])


def iteration_times(marks: list[list[tuple[str, float]]], warmup: int = 1,
                    tail: int = 1) -> dict[str, float]:
    """The job's times as the experiment reports them (parallel/analysis.py), over the
    iterations after `warmup` and before the last `tail` (which no following iteration's
    traffic met): the iteration, per iteration its slowest rank's (start to end), the
    median over iterations; the pipeline and synchronisation phases, the median over every
    rank's every such iteration."""
    per_rank = []
    for ms in marks:
        starts = [t for n, t in ms if n == "start"]
        pipes = [t for n, t in ms if n == "pipeline"]
        ends = [t for n, t in ms if n == "end"]
        per_rank.append(list(zip(starts, pipes, ends)))
    iters = range(warmup, min(len(x) for x in per_rank) - tail)
    it = [max(x[i][2] - x[i][0] for x in per_rank) for i in iters]
    pipe = [x[i][1] - x[i][0] for x in per_rank for i in iters]
    sync = [x[i][2] - x[i][1] for x in per_rank for i in iters]
    return {"iteration_s": statistics.median(it), "pipeline_s": statistics.median(pipe),
            "sync_s": statistics.median(sync)}


def replay(plan: JobShape, compute: Compute, capacity: Mapping[Link, float],
           usage_of: UsageOf, latency_s: Mapping[str, float],
           class_of: Callable[[str], str] | None = None, iters: int = 4,
           burst: Mapping[Link, float] | None = None,
           posted_recv: bool = False) -> dict[str, float]:
    """The job's iteration, pipeline and synchronisation times on these paths (Replay's
    arguments)."""
    marks = Replay(programs(plan, compute, iters), capacity, usage_of, latency_s,
                   class_of, burst, posted_recv=posted_recv).run()
    return iteration_times(marks)
