"""Training jobs sharing one bottleneck, as a fluid model: what each job's
iteration should take when its communication phases meet other jobs' on the link, and the
start offsets that keep them apart (CASSINI's idea, NSDI'24).

Each job repeats compute (`compute_s`, the link idle for it) then communication: `comm_s`
seconds of the bottleneck's full rate, which is what it takes alone. Jobs communicating at
the same time share the link in proportion to their `weight` (1 each: TCP's fair share;
other weights: a weighted round robin, or priorities as very unequal weights). `simulate`
steps through every change of who is communicating and returns each iteration's start,
communication start and end; everything else (iteration times, overlap, the best offsets)
is computed from that. For two identical jobs the known closed forms fall out: fully
overlapped, each communication takes 2M (iteration C + 2M); interleaved, M (iteration
C + M) when C >= M (`tests/unit/test_interference.py`).

Pure: no clock, no I/O; the runner compares it with what the jobs measured.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

EPS = 1e-12


@dataclass(frozen=True)
class Job:
    name: str
    compute_s: float         # C: per iteration, the link idle for this job
    comm_s: float            # M: its communication alone at the bottleneck's full rate
    offset_s: float = 0.0    # when its first iteration starts
    weight: float = 1.0      # its share of the link while others communicate too


@dataclass(frozen=True)
class Iteration:
    start: float
    comm_start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def simulate(jobs: list[Job], iterations: int) -> list[list[Iteration]]:
    """Every job's first `iterations` iterations under weighted fair sharing of the link."""
    n = len(jobs)
    done: list[list[Iteration]] = [[] for _ in jobs]
    # per job: phase ("wait" before its offset, "compute", "comm"), when the phase ends
    # (compute) or the work left (comm), and the current iteration's start / comm start
    phase = ["wait"] * n
    left = [job.offset_s for job in jobs]  # seconds of waiting, computing, or link work
    started = [job.offset_s for job in jobs]
    comm_started = [0.0] * n
    t = 0.0
    while any(len(d) < iterations for d in done):
        active = [i for i in range(n) if len(done[i]) < iterations]
        comm = [i for i in active if phase[i] == "comm"]
        total_w = sum(jobs[i].weight for i in comm)
        rate = {i: jobs[i].weight / total_w for i in comm}
        # the next change: a wait or compute phase ending, or a communication finishing
        step = min(left[i] / rate[i] if phase[i] == "comm" else left[i] for i in active)
        step = max(step, 0.0)
        t += step
        for i in active:
            left[i] -= step * rate[i] if phase[i] == "comm" else step
        for i in active:
            if left[i] > EPS:
                continue
            if phase[i] == "wait":
                phase[i], left[i], started[i] = "compute", jobs[i].compute_s, t
            elif phase[i] == "compute":
                phase[i], left[i], comm_started[i] = "comm", jobs[i].comm_s, t
            else:
                done[i].append(Iteration(started[i], comm_started[i], t))
                phase[i], left[i], started[i] = "compute", jobs[i].compute_s, t
            if phase[i] == "compute" and left[i] <= EPS:  # no compute: straight to the link
                phase[i], left[i], comm_started[i] = "comm", jobs[i].comm_s, t
    return done


def steady_iteration_s(runs: list[list[Iteration]], warmup: int = 2) -> list[float]:
    """Each job's median iteration time after `warmup` iterations."""
    return [statistics.median(it.duration for it in run[warmup:] or run) for run in runs]


def overlap_fraction(runs: list[list[Iteration]], job: int, k: int) -> float:
    """Of job `job`'s k-th communication phase, the fraction during which another job was
    communicating too (0: interleaved; 1: always shared)."""
    mine = runs[job][k]
    a, b = mine.comm_start, mine.end
    if b <= a:
        return 0.0
    spans = sorted((max(a, it.comm_start), min(b, it.end)) for j, run in enumerate(runs)
                   if j != job for it in run if it.end > a and it.comm_start < b)
    covered, reach = 0.0, a
    for lo, hi in spans:  # the union of the others' phases within mine
        lo = max(lo, reach)
        if hi > lo:
            covered += hi - lo
            reach = hi
    return covered / (b - a)


def idle_gaps_s(runs: list[list[Iteration]]) -> list[float]:
    """The link's idle times between one communication phase's end and the next phase's
    start, over every phase of every job, shortest first (negative: the phases overlap)."""
    phases = sorted((it.comm_start, it.end) for run in runs for it in run)
    return sorted(nxt[0] - prev[1] for prev, nxt in zip(phases, phases[1:]))


def clearance_s(runs: list[list[Iteration]]) -> float:
    """The shortest of `idle_gaps_s` (infinite with fewer than two phases)."""
    return min(idle_gaps_s(runs), default=float("inf"))


def best_offsets(jobs: list[Job], steps: int = 20, iterations: int = 12,
                 warmup: int = 4, fine: int = 10) -> tuple[list[float], float]:
    """Start offsets (the first job at 0) that minimise the jobs' mean steady iteration time,
    searched over `steps` points of a period for each other job in turn (coordinate
    descent, deterministic); with the mean iteration time they give. A time-shift policy
    delays each job's iteration starts by its offset.

    Many offsets often tie (every placement whose phases fit apart on the link); among
    them each job in turn, twice, is moved on a grid `fine` times finer to the one that
    leaves the link the longest idle times between phases (`idle_gaps_s`, compared
    shortest first), so that a phase running a little late does not run into the next: the
    first offset found sits at the edge of the ties, where a few milliseconds of jitter
    make the phases meet. Two jobs get the idle time split evenly; more, close to it."""
    period = max(j.compute_s + j.comm_s for j in jobs)
    offsets = [0.0] * len(jobs)

    def runs(offs: list[float]) -> list[list[Iteration]]:
        return simulate([Job(j.name, j.compute_s, j.comm_s, o, j.weight)
                         for j, o in zip(jobs, offs)], iterations)

    def cost(offs: list[float]) -> float:
        return statistics.mean(steady_iteration_s(runs(offs), warmup))

    best = cost(offsets)
    for _ in range(2):  # two sweeps settle every case tried (tests)
        for i in range(1, len(jobs)):
            for s in range(steps):
                trial = list(offsets)
                trial[i] = period * s / steps
                c = cost(trial)
                if c < best - 1e-9:
                    best, offsets = c, trial
    tied = best * (1 + 1e-6)

    def spread(r: list[list[Iteration]]) -> tuple[float, ...]:  # compared shortest first
        return tuple(round(g, 9) for g in idle_gaps_s(r))
    for _ in range(2):
        for i in range(1, len(jobs)):
            most = spread(runs(offsets))
            for s in range(steps * fine):
                trial = list(offsets)
                trial[i] = period * s / (steps * fine)
                r = runs(trial)
                if statistics.mean(steady_iteration_s(r, warmup)) <= tied and spread(r) > most:
                    offsets, most = trial, spread(r)
    return offsets, cost(offsets)


def replay(phases: list[tuple[float, float, float]]) -> list[float]:
    """Communication phases at the times they were measured to start: each (start, link
    seconds alone, weight); phases under way at once share the link by weight. Returns each
    phase's end. This is the model at the alignment the jobs actually had (fair sharing of
    a neutral equilibrium lets identical jobs drift apart; `simulate` keeps them where they
    started)."""
    order = sorted(range(len(phases)), key=lambda i: phases[i][0])
    ends = [0.0] * len(phases)
    left: dict[int, float] = {}
    t, nxt = 0.0, 0
    while nxt < len(order) or left:
        if not left:
            t = max(t, phases[order[nxt]][0])
        while nxt < len(order) and phases[order[nxt]][0] <= t + EPS:
            left[order[nxt]] = phases[order[nxt]][1]
            nxt += 1
        total_w = sum(phases[i][2] for i in left)
        finish = min(left[i] * total_w / phases[i][2] for i in left)
        arrive = phases[order[nxt]][0] - t if nxt < len(order) else float("inf")
        dt = min(finish, arrive)
        for i in list(left):
            left[i] -= dt * phases[i][2] / total_w
            if left[i] <= EPS:
                ends[i] = t + dt
                del left[i]
        t += dt
    return ends
