"""Cross-job policies for training jobs sharing a fabric, as pure decisions.

A *round* is one set of jobs running together (`Round`: each job's DSCP and its profile
measured when it ran alone, the traffic classes the fabric has for jobs, the policy and its
arguments). A policy is told the round once (`start(now, round)`) and then, every period,
what each job reports (`step(now, progress)`: its iteration, whether it is computing or
synchronising, the bytes it has sent in this iteration); each call returns a `Decision`:
which class each job's DSCP goes to, the classes' weighted-round-robin weights on the
ports jobs share, and the gates that delay iteration starts (testbed/workloads/model/jobsync.py).
The jobs app (controllers/apps/jobs_app.py) is the shell that applies decisions; a user's
policy is a class with the same two methods, named "file.py:Class" or "module:Class" in
the spec.

Built in:
- `none`: every job in one FIFO class, TCP's fair share.
- `priority` (Crux-like, SIGCOMM'24): a class per job, ordered by a metric: `weight` (the
  spec's) or `intensity` (Crux's GPU intensity: compute seconds x workers per byte sent,
  from the alone profile), highest first; strict priority or WRR weights by rank.
- `time_shift` (CASSINI-like, NSDI'24): once every job has started, gates that release
  each job's iterations on a common period (the slowest job's alone iteration plus
  `slack`, or the jobs' link times plus `margin` if longer) at offsets chosen on the fluid
  model (workloads/model/interference.py) to keep their communication phases apart; a group
  is left ungated, and the note says so, when the model predicts no gain.
- `mltcp` (MLTCP-like, HotNets'24): each job's WRR weight grows with the share of its
  iteration's bytes it has already sent (1 + `gain` x share, in steps of 1/`levels`).
  MLTCP scales the congestion window of each flow inside the sender's TCP; these machines
  cannot change the kernel's congestion control, so the switches' schedulers do it here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from controllers.priority import load_class
from testbed.workloads.model.interference import (
    Job,
    best_offsets,
    overlap_fraction,
    simulate,
    steady_iteration_s,
)
from testbed.workloads.model.jobsync import GateSetting, Progress

BUILTIN = ("none", "priority", "time_shift", "mltcp")
PER_JOB_CLASSES = ("priority", "mltcp")  # built-ins that give each job its own class


@dataclass(frozen=True)
class JobInfo:
    name: str
    dscp: int
    compute_s: float      # alone, per iteration (median)
    comm_s: float         # alone, per iteration (median): its synchronisation phase
    period_s: float       # alone, end to end (median)
    comm_bytes: int       # rank 0's bytes per iteration, alone
    link_s: float = 0.0   # alone: its bytes on its busiest link per iteration / that rate
    workers: int = 1
    weight: float = 1.0   # the spec's, for `priority` by weight

    def fluid(self, offset_s: float = 0.0, weight: float = 1.0,
              period_s: float | None = None) -> Job:
        """The job as the fluid model sees it: `link_s` of link time per iteration (the
        part of its communication that a shared link stretches); the rest of its alone
        iteration (`period_s`, e.g. a gate's) the link is idle for it. Without a measured
        link time, all of its communication counts."""
        link = self.link_s or self.comm_s
        return Job(self.name, max(0.0, (period_s or self.period_s) - link), link, offset_s,
                   weight)


@dataclass(frozen=True)
class Round:
    id: int
    policy: str
    jobs: list[JobInfo]
    job_classes: list[int]            # the class indices the fabric has for jobs
    args: dict[str, Any] = field(default_factory=dict)
    shared_class: int = 0             # best effort: one FIFO with the background traffic
    groups: list[list[str]] = field(default_factory=list)  # jobs whose paths meet (none: all)

    def sharing(self) -> list[list[JobInfo]]:
        """The jobs in groups whose paths meet (every job one group when none are given)."""
        if not self.groups:
            return [list(self.jobs)]
        by = {j.name: j for j in self.jobs}
        return [[by[n] for n in g if n in by] for g in self.groups]


@dataclass(frozen=True)
class Decision:
    classes: dict[str, int] | None = None    # job -> traffic class
    weights: list[int] | None = None         # per class, WRR weights on the shared ports ...
    priorities: list[int] | None = None      # ... or strict priorities (higher first)
    gates: dict[str, GateSetting] | None = None
    note: dict[str, Any] = field(default_factory=dict)  # what the policy predicted or saw


@dataclass(frozen=True)
class RoundFile:
    """What the runner writes (jobs_dir/round.json) when a round starts: the round, where
    each job reports and where its gate is, the switch egress ports (ifnames) that weights
    apply to (those two or more jobs' paths cross), and how often the policy steps."""
    round: Round
    progress: dict[str, str]
    gates: dict[str, str]
    ports: list[str]
    period_s: float = 0.02


class JobPolicy(Protocol):
    def start(self, now: float, rnd: Round) -> Decision: ...

    def step(self, now: float, progress: dict[str, Progress]) -> Decision | None: ...


class FairShare:
    """`none`: every job in the shared class (one FIFO with the background), TCP shares
    it."""

    def start(self, now: float, rnd: Round) -> Decision:
        return Decision(classes={j.name: rnd.shared_class for j in rnd.jobs})

    def step(self, now: float, progress: dict[str, Progress]) -> Decision | None:
        return None


def intensity(job: JobInfo) -> float:
    """Crux's GPU intensity: compute seconds (of all workers) per byte communicated."""
    return job.compute_s * job.workers / max(1, job.comm_bytes)


class Priority:
    """Crux-like: jobs ordered by `order` (weight | intensity), the first in the first job
    class; on the shared ports that class is served first (`strict`, best effort last) or
    gets the largest WRR weight (`wrr`: len(jobs) - rank, best effort 1)."""

    def __init__(self, order: str = "weight", scheduler: str = "strict"):
        if order not in ("weight", "intensity"):
            raise ValueError(f"priority order: weight or intensity (got {order!r})")
        if scheduler not in ("strict", "wrr"):
            raise ValueError(f"priority scheduler: strict or wrr (got {scheduler!r})")
        self.order, self.scheduler = order, scheduler

    def ranking(self, jobs: list[JobInfo]) -> list[JobInfo]:
        key = (lambda j: j.weight) if self.order == "weight" else intensity
        return sorted(jobs, key=lambda j: (-key(j), j.name))

    def start(self, now: float, rnd: Round) -> Decision:
        ranked = self.ranking(rnd.jobs)
        if len(rnd.job_classes) < len(ranked):
            raise ValueError(f"priority needs a class per job ({len(ranked)}); the fabric "
                             f"has {len(rnd.job_classes)}")
        classes = {j.name: rnd.job_classes[r] for r, j in enumerate(ranked)}
        level = [0] * (max(rnd.job_classes) + 1)
        for r, _ in enumerate(ranked):
            level[rnd.job_classes[r]] = len(ranked) - r
        if self.scheduler == "wrr":
            weights, priorities = [max(1, x) for x in level], None
        else:
            weights, priorities = None, level
        return Decision(classes=classes, weights=weights, priorities=priorities,
                        note={"order": self.order, "ranking": [j.name for j in ranked],
                              # weight, or compute seconds per GB sent
                              "metric": {j.name: round(j.weight if self.order == "weight"
                                                       else intensity(j) * 1e9, 6)
                                         for j in ranked}})

    def step(self, now: float, progress: dict[str, Progress]) -> Decision | None:
        return None


@dataclass(frozen=True)
class ShiftPlan:
    period_s: float            # common: the slowest alone iteration plus the slack, or
    #                            the sum of the jobs' link times plus the margin if longer
    offsets: list[float]       # the gates' release offsets
    overlap_unshifted: float   # the model's mean share of a phase beside another's ...
    overlap: float             # ... gated in step, and gated at the offsets
    gated_s: float             # the model's mean iteration gated at the offsets ...
    fair_s: float              # ... and under fair sharing, ungated, released together

    @property
    def gains(self) -> bool:
        """Whether gating is worth it: a job faster than the common period runs at it, so
        jobs of incompatible periods can lose more than interleaving wins."""
        return self.gated_s < 0.99 * self.fair_s


def gated_model(jobs: list[JobInfo], period_s: float, offsets: list[float]) -> list[Job]:
    """The fluid model of jobs whose iterations gates release every `period_s` at
    `offsets`. A released job computes, communicates, then waits for its next release, so
    its link time begins its own alone iteration minus that link time after the release;
    the model pads a job's compute to the period before its link time instead, so each
    job's offset there is its gate's minus its padding (the period minus its alone
    iteration), all moved by one constant to start at zero. What the model does not see:
    a phase stretched by another job's delays the job's later iterations in the model,
    while a gate absorbs up to the job's padding."""
    starts = [o - (period_s - j.period_s) for j, o in zip(jobs, offsets)]
    first = min(starts, default=0.0)
    return [j.fluid(s - first, period_s=period_s) for j, s in zip(jobs, starts)]


def shift_plan(jobs: list[JobInfo], slack: float, margin: float) -> ShiftPlan:
    """The gates for jobs on one period at the offsets the fluid model finds best; with
    what the model predicts of them. The period is the slowest alone iteration plus
    `slack`, and never shorter than the sum of the jobs' link times plus `margin` of it
    (as if they all met on one link, as the model has them): a schedule that leaves the
    link no idle time keeps the phases apart only while nothing jitters, and a job that
    overruns its period once runs late, ungated, from then on."""
    period = max(max(j.period_s for j in jobs) * (1 + slack),
                 sum(j.link_s or j.comm_s for j in jobs) * (1 + margin))
    best, _ = best_offsets([j.fluid(period_s=period) for j in jobs])
    # the model's offsets are where its padded compute starts; a gate releases the job
    # earlier by its padding, which the model does not see
    gates = [o + (period - j.period_s) for j, o in zip(jobs, best)]
    gates = [(g - min(gates)) % period for g in gates]

    def overlap(model: list[Job]) -> float:
        runs = simulate(model, 12)
        return sum(overlap_fraction(runs, i, k) for i in range(len(jobs))
                   for k in range(4, 12)) / (8 * len(jobs))

    def mean_iteration(model: list[Job]) -> float:
        return sum(steady_iteration_s(simulate(model, 12), 4)) / len(model)
    model = gated_model(jobs, period, gates)
    in_step = gated_model(jobs, period, [0.0] * len(jobs))  # gates at one offset
    return ShiftPlan(period, gates, overlap(in_step), overlap(model), mean_iteration(model),
                     mean_iteration([j.fluid() for j in jobs]))


class TimeShift:
    """CASSINI-like: once every job has reported an iteration, the jobs of each group whose
    paths meet are gated on a common period at the model's best offsets, starting `lead`
    iterations later (so that every job reaches its first gated iteration before its
    release); a job that meets no other is left alone."""

    def __init__(self, slack: float = 0.03, lead: int = 2, margin: float = 0.1):
        self.slack, self.lead, self.margin = slack, lead, margin
        self.rnd: Round | None = None
        self.done = False

    def start(self, now: float, rnd: Round) -> Decision:
        self.rnd, self.done = rnd, False
        return FairShare().start(now, rnd)

    def step(self, now: float, progress: dict[str, Progress]) -> Decision | None:
        rnd = self.rnd
        if rnd is None or self.done or any(j.name not in progress for j in rnd.jobs):
            return None
        gates: dict[str, GateSetting] = {}
        note: dict[str, dict[str, float]] = {"period_s": {}, "offset_s": {},
                                             "predicted_overlap_unshifted": {},
                                             "predicted_overlap": {}, "not_gated": {}}
        for group in rnd.sharing():
            if len(group) < 2:
                continue
            plan = shift_plan(group, self.slack, self.margin)
            if not plan.gains:  # the model's mean iterations, gated and not
                note["not_gated"].update({j.name: round(plan.gated_s / plan.fair_s, 3)
                                          for j in group})
                continue
            # the slowest a job can be until then: every job's communication at once
            worst = max(j.period_s for j in group) + sum(j.comm_s for j in group)
            anchor = now + (self.lead + 1) * worst
            for j, off in zip(group, plan.offsets):
                gates[j.name] = GateSetting(anchor, plan.period_s, off,
                                            progress[j.name].iteration + self.lead)
                note["period_s"][j.name] = round(plan.period_s, 4)
                note["offset_s"][j.name] = round(off, 4)
                note["predicted_overlap_unshifted"][j.name] = round(plan.overlap_unshifted, 3)
                note["predicted_overlap"][j.name] = round(plan.overlap, 3)
        self.done = True
        return Decision(gates=gates, note=note)


class MltcpLike:
    """MLTCP-like: a job's WRR weight is 1 + gain x (its bytes sent in this iteration /
    its bytes per iteration), quantised to `levels` steps; weights are scaled to integers
    (`levels` for weight 1). A job that is not synchronising keeps weight 1."""

    def __init__(self, gain: float = 3.0, levels: int = 4):
        if gain < 0 or levels < 1:
            raise ValueError("mltcp: gain >= 0 and levels >= 1")
        self.gain, self.levels = gain, levels
        self.rnd: Round | None = None
        self.classes: dict[str, int] = {}
        self.last: list[int] | None = None

    def start(self, now: float, rnd: Round) -> Decision:
        if len(rnd.job_classes) < len(rnd.jobs):
            raise ValueError(f"mltcp needs a class per job ({len(rnd.jobs)}); the fabric "
                             f"has {len(rnd.job_classes)}")
        self.rnd = rnd
        self.classes = {j.name: rnd.job_classes[i] for i, j in enumerate(rnd.jobs)}
        self.last = self.weights({})
        return Decision(classes=dict(self.classes), weights=self.last)

    def share(self, job: JobInfo, p: Progress | None) -> float:
        if p is None or p.phase != "sync":
            return 0.0
        total = p.last_bytes or job.comm_bytes
        return min(1.0, p.sent_bytes / total) if total > 0 else 0.0

    def weights(self, progress: dict[str, Progress]) -> list[int]:
        assert self.rnd is not None
        out = [self.levels] * (max(self.rnd.job_classes) + 1)
        for j in self.rnd.jobs:
            steps = round(self.share(j, progress.get(j.name)) * self.levels)
            out[self.classes[j.name]] = int(round(self.levels * (1 + self.gain * steps
                                                                 / self.levels)))
        return out

    def step(self, now: float, progress: dict[str, Progress]) -> Decision | None:
        w = self.weights(progress)
        if w == self.last:
            return None
        self.last = w
        return Decision(weights=w)


def policy_for(name: str, args: dict[str, Any]) -> JobPolicy:
    """A built-in policy, or a user's class ("file.py:Class" or "module:Class") built with
    `args`."""
    if ":" in name:
        policy = load_class(name)(**args)
        for method in ("start", "step"):
            if not callable(getattr(policy, method, None)):
                raise TypeError(f"{name} has no {method}() method")
        return policy
    return builtin(name, args)


def meeting_ports(deltas: dict[str, dict[int, int]], min_bytes: int) -> set[str]:
    """The ports on which two or more jobs (their DSCPs) each sent at least `min_bytes`
    since the last look: where a step's weights matter."""
    return {p for p, by in deltas.items() if sum(1 for b in by.values() if b >= min_bytes) >= 2}


def dscp_table(base: list[int], jobs: list[JobInfo], classes: dict[str, int]) -> list[int]:
    """The switches' DSCP -> class table with each job's code point in its class."""
    table = list(base)
    for j in jobs:
        if j.name in classes:
            table[j.dscp] = classes[j.name]
    return table


def builtin(name: str, args: dict[str, Any]) -> JobPolicy:
    if name == "none":
        return FairShare()
    if name == "priority":
        return Priority(**args)
    if name == "time_shift":
        return TimeShift(**args)
    if name == "mltcp":
        return MltcpLike(**args)
    raise ValueError(f"unknown job policy {name!r} (one of {', '.join(BUILTIN)}, or a "
                     "plugin 'file.py:Class')")
