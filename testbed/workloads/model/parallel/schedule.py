"""Pipeline schedules (pure): the order in which one stage runs the forward (F) and backward
(B) passes of the micro-batches of an iteration.

- GPipe (Huang et al. 2019): every forward, then every backward (in reverse order).
- 1F1B (PipeDream-Flush, Narayanan et al. 2021; DAPPLE): stage s runs p-s-1 warm-up
  forwards, then alternates one forward and one backward, then drains the backwards. The
  same bubble as GPipe, (p-1)/(m+p-1) of the iteration, with at most p micro-batches'
  activations alive instead of m.

`simulate` replays a schedule with fixed per-micro-batch times and transfer delays: the
iteration time and bubble the model predicts, used by the analytical model and the tests.
"""
from __future__ import annotations

SCHEDULES = ("gpipe", "1f1b")

Action = tuple[str, int]  # ("F" | "B", micro-batch)


def actions(schedule: str, stage: int, stages: int, micro: int) -> list[Action]:
    if schedule == "gpipe":
        return [("F", i) for i in range(micro)] + [("B", i) for i in reversed(range(micro))]
    if schedule == "1f1b":
        warm = min(stages - stage - 1, micro)
        out: list[Action] = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while f < micro:
            out.append(("F", f))
            f += 1
            out.append(("B", b))
            b += 1
        out += [("B", i) for i in range(b, micro)]
        return out
    raise ValueError(f"unknown schedule {schedule!r} (one of {', '.join(SCHEDULES)})")


def bubble_fraction(stages: int, micro: int) -> float:
    """(p-1)/(m+p-1): the share of an iteration a stage idles (GPipe and 1F1B alike)."""
    return (stages - 1) / (micro + stages - 1)


def simulate(schedule: str, stages: int, micro: int, fwd_s: float | list[float],
             bwd_s: float | list[float], transfer_s: float = 0.0) -> dict:
    """Event-driven replay: each stage runs its actions in order, a forward waits for the
    previous stage's forward of that micro-batch to arrive, a backward for the next stage's
    backward. Transfers overlap compute (asynchronous sends into receives posted ahead) but
    leave one at a time on the sending stage's link (forward activations and backward
    gradients of a middle stage share it). Returns the iteration
    time, each stage's busy time and the bubble (1 - busy / iteration, averaged). Times may
    differ per stage (a list)."""
    fwd = fwd_s if isinstance(fwd_s, list) else [fwd_s] * stages
    bwd = bwd_s if isinstance(bwd_s, list) else [bwd_s] * stages
    plans = [actions(schedule, s, stages, micro) for s in range(stages)]
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
            pos[s] += 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocks")  # cannot happen for the two above
    total = max(clock)
    busy = [micro * (f + b) for f, b in zip(fwd, bwd)]
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
