"""Communication scheduling of a data-parallel worker's layer-wise gradients, pure: the
pieces they go in, which go next, and the model of an iteration under each schedule.

Layers are in forward order 0..L-1 (0 the input side); backward makes their gradients
from L-1 down to 0, and the next forward pass needs them from 0 up. A message of M bytes
takes a + b M seconds (fusion.CommModel), one after the other in the order they start:
the allreduces of one Gloo group share its connections step by step, so a second one in
flight does not hide its start-up behind the first (measured under a background flow: two
6.4 KB pieces started together took 240 ms each and ended together, where one alone takes
about a, 90-165 ms).

- `fifo`: each layer's gradient whole, handed to the communication library as soon as
  backward has made it: sent in the order backward makes them, last layer first.
- `tictac`: each gradient whole, one at a time; when the channel is free, the ready one
  that the next forward pass needs first goes (TicTac's order, Hashemi et al., "TicTac:
  Accelerating Distributed Deep Learning with Communication Scheduling", MLSys 2019; on a
  chain of layers its order is the input side first).
- `bytescheduler`: gradients cut into pieces of at most `partition` bytes; ready pieces go
  input side first while the bytes in flight stay within `credit`, so that a piece made
  ready later passes every piece not yet started (Peng et al., "A Generic Communication
  Scheduler for Distributed DNN Training Acceleration", SOSP 2019). TicTac is the case of
  no partition and no credit: one whole gradient in flight.

The schedulers decide on what every worker has ready (the workers must start the same
allreduces in the same order), which they agree on in a negotiation round like Horovod's;
`negotiation_s`, a round's time, delays every decision in the model.
"""
from __future__ import annotations

from dataclasses import dataclass

from .fusion import CommModel

SCHEDULES = ("fifo", "tictac", "bytescheduler")
# a ring job's --priority: none (DDP's buckets), or layer-wise: FIFO, P3's levels, a schedule
PRIORITIES = ("none", "fifo", "p3") + SCHEDULES[1:]
# ByteScheduler's defaults for allreduce (BYTESCHEDULER_PARTITION and _CREDIT, in
# parameters of 4 bytes), at the 100 Gb/s of its paper's testbed: scaled with the link rate
# so that a piece takes the same time on the wire
PARTITION_PARAMS = 8_000_000
CREDIT_PARAMS = 16_000_000
REFERENCE_MBPS = 100_000.0


def scaled_bytes(params: float, rate_mbps: float) -> int:
    """`params` 4-byte parameters at REFERENCE_MBPS, as bytes taking as long at `rate_mbps`."""
    return max(4, round(params * 4 * rate_mbps / REFERENCE_MBPS / 4) * 4)


@dataclass(frozen=True)
class Piece:
    """Part of a layer's gradient: `offset` and `nbytes` into it."""
    layer: int
    offset: int
    nbytes: int


def pieces(sizes: list[int], partition: int | None) -> list[Piece]:
    """Every layer's gradient in pieces of at most `partition` bytes (None: whole), in
    priority order: input side first, then by offset. Sizes are multiples of 4."""
    out = []
    for layer, size in enumerate(sizes):
        step = size if not partition else max(4, partition // 4 * 4)
        for offset in range(0, size, step or 1):
            out.append(Piece(layer, offset, min(step, size - offset)))
    return out


def pick(ready: list[int], in_flight: int, credit: int, sizes: list[int]) -> list[int]:
    """Which `ready` pieces (indices in priority order, none started) start now, with
    `in_flight` bytes out: highest priority first while the bytes out stay within
    `credit`; one always starts when none is out (a piece larger than the credit), and
    none passes a higher one that does not fit."""
    out: list[int] = []
    for i in sorted(ready):
        if (in_flight or out) and in_flight + sizes[i] > credit:
            break
        out.append(i)
        in_flight += sizes[i]
    return out


@dataclass(frozen=True)
class Schedule:
    """A schedule and its parameters in bytes (partition None: whole gradients)."""
    name: str
    partition: int | None = None
    credit: int = 0

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.name!r} (one of {', '.join(SCHEDULES)})")


def iteration(schedule: Schedule, sizes: list[int], fwd: list[float], bwd: list[float],
              comm: CommModel, negotiation_s: float = 0.0, iterations: int = 8) -> float:
    """The model's steady iteration time (s): `iterations` back to back, the last one's
    length. Forward of layer l starts when layer l-1's forward is done and layer l's update
    of the iteration before is back; backward runs L-1..0 after the last forward layer;
    messages go one after the other (a + b M each) in the order the schedule starts them.
    A scheduler decides `negotiation_s` after a piece is ready, and its credit comes back
    `negotiation_s` after a piece ends (the rounds that tell every worker)."""
    n = len(sizes)
    plan = pieces(sizes, schedule.partition if schedule.name == "bytescheduler" else None)
    psize = [p.nbytes for p in plan]
    credit = schedule.credit if schedule.name == "bytescheduler" else 0
    back = [0.0] * n  # when each layer's update of the iteration before is back
    t_free = 0.0       # when the channel is free
    length = 0.0
    for _ in range(iterations):
        t = 0.0  # this iteration's first forward layer may start (its update is back)
        for layer in range(n):
            t = max(t, back[layer]) + fwd[layer]
        ready = [0.0] * n
        for layer in reversed(range(n)):
            t += bwd[layer]
            ready[layer] = t
        end = _messages(schedule.name, plan, psize, ready, credit, comm, negotiation_s, t_free)
        back = [max(end[i] for i, p in enumerate(plan) if p.layer == layer)
                for layer in range(n)]
        # the next iteration starts when its first layer's update is back (the last
        # gradient backward makes, so never before backward's end)
        length = back[0] if n else 0.0
        back = [b - length for b in back]
        t_free = max(end) - length
    return length


def _end(comm: CommModel, start: float, t_free: float, nbytes: int) -> float:
    """When a message of `nbytes` started at `start` ends, the one before it ending at
    `t_free`."""
    return max(start, t_free) + comm.time(nbytes)


def _messages(name: str, plan: list[Piece], psize: list[int], ready: list[float],
              credit: int, comm: CommModel, negotiation_s: float, t_free: float
              ) -> list[float]:
    """When each piece is back (its message ends), the wire free from `t_free`."""
    end = [0.0] * len(plan)
    if name == "fifo":  # in the order backward makes them, as soon as each is ready
        for i in sorted(range(len(plan)), key=lambda i: (ready[plan[i].layer], i)):
            t_free = end[i] = _end(comm, ready[plan[i].layer], t_free, psize[i])
        return end
    known = [ready[p.layer] + negotiation_s for p in plan]  # agreed ready
    started: set[int] = set()
    out: list[tuple[float, int]] = []  # (credit back at, piece)
    now = min(known)
    while len(started) < len(plan):
        out = [(at, i) for at, i in out if at > now]
        waiting = [i for i in range(len(plan)) if i not in started and known[i] <= now]
        go = pick(waiting, sum(psize[i] for _, i in out), credit, psize)
        for i in go:
            started.add(i)
            t_free = end[i] = _end(comm, now, t_free, psize[i])
            out.append((t_free + negotiation_s, i))
        later = [known[i] for i in range(len(plan)) if i not in started and known[i] > now]
        later += [at for at, _ in out]
        if not later:
            break
        now = min(later)
    return end
