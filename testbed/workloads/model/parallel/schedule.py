"""Pipeline schedules (pure): the order in which one stage runs the forward (F) and backward
(B) passes of the micro-batches of an iteration.

- GPipe (Huang et al. 2019): every forward, then every backward (in reverse order).
- 1F1B (PipeDream-Flush, Narayanan et al. 2021; DAPPLE): stage s runs p-s-1 warm-up
  forwards, then alternates one forward and one backward, then drains the backwards. The
  same bubble as GPipe, (p-1)/(m+p-1) of the iteration, with at most p micro-batches'
  activations alive instead of m.
- PipeMare (Yang et al. 2021): asynchronous, no flush. 1F1B runs over every micro-batch of
  the whole run; a stage updates its weights after the last backward of each mini-batch
  and then goes on with the next mini-batch's forwards, some of which it ran before the
  update (`stream`). The bubble is the
  fill and drain of the whole run, not of every iteration; the price is that a forward
  uses weights a few updates older than those its gradient is applied to (`staleness`).

`simulate` replays a schedule with fixed per-micro-batch times and transfer delays: the
iteration time and bubble the model predicts, used by the analytical model and the tests.
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b")  # synchronous: a flush at the end of every iteration
ASYNC = ("pipemare",)         # no flush: iterations overlap

Action = tuple[str, int]  # ("F" | "B", micro-batch)


def actions(schedule: str, stage: int, stages: int, micro: int) -> list[Action]:
    if schedule == "gpipe":
        return [("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]
    if schedule == "1f1b":
        return one_f_one_b(stages - stage - 1, micro)
    raise ValueError(f"unknown schedule {schedule!r} (one of {', '.join(SCHEDULES)})")


def one_f_one_b(warm: int, micro: int) -> list[Action]:
    """`warm` forwards, then one forward and one backward alternately, then the backwards
    left, over micro-batches 0 .. micro-1."""
    warm = min(warm, micro)
    out: list[Action] = [("F", i) for i in range(warm)]
    for f in range(warm, micro):
        out += [("F", f), ("B", f - warm)]
    return out + [("B", i) for i in range(micro - warm, micro)]


def stream(stage: int, stages: int, micro: int, iters: int) -> list[list[Action]]:
    """PipeMare's pipeline: 1F1B over the run's micro-batches, numbered over the whole run
    (micro-batch j of iteration k is k*micro + j), cut after each iteration's last backward,
    where the stage updates its weights: one list per iteration. Every list but the last
    also holds the next iteration's first forwards; the first holds the fill, the last
    the drain."""
    out: list[list[Action]] = [[]]
    for kind, g in one_f_one_b(stages - stage - 1, micro * iters):
        out[-1].append((kind, g))
        if kind == "B" and g % micro == micro - 1 and len(out) < iters:
            out.append([])
    return out


def staleness(stage: int, stages: int, micro: int) -> list[int]:
    """In PipeMare's steady state, how many weight updates of the stage fall between the
    forward of micro-batch j of an iteration and its backward, j = 0 .. micro-1: the updates
    its gradient is late by (0 for the last stage). Their mean is (stages-stage-1)/micro."""
    warm = stages - stage - 1
    return [-((j - warm) // micro) for j in range(micro)]


def bubble_fraction(stages: int, micro: int) -> float:
    """(p-1)/(m+p-1): the share of an iteration a stage idles (GPipe and 1F1B alike)."""
    return (stages - 1) / (micro + stages - 1)


def simulate(schedule: str, stages: int, micro: int, fwd_s: float | list[float],
             bwd_s: float | list[float], transfer_s: float = 0.0,
             sync_s: list[float] | None = None, iters: int = 8) -> dict:
    """Event-driven replay: each stage runs its actions in order, a forward waits for the
    previous stage's forward of that micro-batch to arrive, a backward for the next stage's
    backward. Transfers overlap compute (asynchronous sends into receives posted ahead) but
    leave one at a time on the sending stage's link (forward activations and backward
    gradients of a middle stage share it). Returns the iteration
    time, each stage's busy time and the bubble (1 - busy / iteration, averaged). Times may
    differ per stage (a list).

    An asynchronous schedule is replayed over at least `iters` iterations, each stage
    stopping for its `sync_s` at every weight update; its iteration is the steady period
    between updates
    (its sync included), its bubble the share of that period, less the sync, each stage
    idles. A synchronous schedule's sync comes after the flush: the caller adds it."""
    fwd = fwd_s if isinstance(fwd_s, list) else [fwd_s] * stages
    bwd = bwd_s if isinstance(bwd_s, list) else [bwd_s] * stages
    sync = sync_s or [0.0] * stages
    # without a flush the fill lasts about (p-1)/m iterations: run well past it
    run = max(iters, 4 * -(-(stages - 1) // micro) + 8) if schedule in ASYNC else 1
    plans = [[a for chunk in stream(s, stages, micro, run) for a in chunk]
             if schedule in ASYNC else actions(schedule, s, stages, micro)
             for s in range(stages)]
    updates: list[list[float]] = [[] for _ in range(stages)]
    done: dict[tuple[str, int, int], float] = {}
    arrived: dict[tuple[str, int, int], float] = {}
    nic = [0.0] * stages  # when each stage's link is free to send the next tensor
    clock = [0.0] * stages
    pos = [0] * stages
    while any(pos[s] < len(plans[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if pos[s] >= len(plans[s]):
                continue
            kind, mb = plans[s][pos[s]]
            if kind == "F":
                dep = ("F", s - 1, mb) if s > 0 else None
            else:
                dep = ("B", s + 1, mb) if s < stages - 1 else ("F", s, mb)
            if dep is not None and dep not in done:
                continue
            ready = arrived[dep] if dep and dep[1] != s else (done[dep] if dep else 0.0)
            start = max(clock[s], ready)
            clock[s] = start + (fwd[s] if kind == "F" else bwd[s])
            done[(kind, s, mb)] = clock[s]
            if (kind == "F" and s < stages - 1) or (kind == "B" and s > 0):
                # the output leaves on the stage's link, after what it sent before
                leave = max(clock[s], nic[s])
                nic[s] = leave + transfer_s
                arrived[(kind, s, mb)] = nic[s]
            if kind == "B" and mb % micro == micro - 1 and schedule in ASYNC:
                clock[s] += sync[s]
                updates[s].append(clock[s])
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocks")  # cannot happen for the three above
    busy = [micro * (f + b) for f, b in zip(fwd, bwd)]
    if schedule in ASYNC:
        # over the second half of the updates, before the last: past the fill, before the
        # drain; never shorter than the busiest stage's work
        first = run // 2
        period = max(max((u[-2] - u[first]) / (run - 2 - first) for u in updates),
                     max(b + y for b, y in zip(busy, sync)))
        idle = [max(0.0, 1 - b / (period - y)) if period > y else 0.0
                for b, y in zip(busy, sync)]
        return {"iteration_s": period, "busy_s": busy, "bubble": sum(idle) / stages,
                "peak_in_flight": [peak_in_flight(p) for p in plans]}
    total = max(clock)
    return {"iteration_s": total, "busy_s": busy,
            "bubble": 1 - sum(busy) / stages / total if total > 0 else 0.0,
            "peak_in_flight": [peak_in_flight(p) for p in plans]}


def peak_in_flight(plan: list[Action]) -> int:
    """The most micro-batches whose activations a stage holds at once (forward done,
    backward not yet)."""
    live = peak = 0
    for kind, _ in plan:
        live += 1 if kind == "F" else -1
        peak = max(peak, live)
    return peak
