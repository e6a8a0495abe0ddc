"""The spec of training jobs sharing one fabric: the jobs (each a parallel job
with its own model, size and hosts or a place in the cross-job placement, or a job of the
training worker: ring, parameter server, local SGD, compression), the placements and
cross-job policies to compare, and every field checked before anything starts."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from controllers.jobpolicy import BUILTIN
from testbed.config.loader import SpecError
from testbed.config.network import (
    TopologySpec,
    build_fabrics,
    check_cc_names,
    one_of,
    positive,
)
from testbed.config.qos import NCLASS, EcnProfile
from testbed.config.spec import ExperimentSpec, Spec
from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.desc import ModelDesc
from testbed.workloads.model.parallel.job import RealModel
from testbed.workloads.model.parallel.layout import POLICIES, Layout, place
from testbed.workloads.model.parallel.schedule import ASYNC
from topologies import TopologyError
from topologies.model import Topology

from ..parallel.spec import (
    TRANSPORTS,
    Parallel,
    ParallelFault,
    ParallelJob,
    ParallelRoce,
    check_job,
    check_model,
    check_transport,
)
from ..training.spec import (
    DATASETS,
    MODELS,
    BackgroundTraffic,
    TrainingJob,
    check_training_job,
    job_hosts_needed,
)

# each job's own code point (AF11 ... AF43, then CS1..CS3): the switches count every DSCP
# per port, and a policy can put each in a class of its own
JOB_DSCPS = (10, 12, 14, 18, 20, 22, 26, 28, 30, 34, 36, 38, 8, 16, 24)
JOB_CLASSES = NCLASS - 1  # class 0 is best effort (background traffic, `none`)
ROCE_JOB_CLASSES = NCLASS - 2  # over RoCE the last class carries its ACKs, NAKs and CNPs


@dataclass(frozen=True, kw_only=True)
class SharedTraining(TrainingJob):
    """A job of the training worker (testbed/workloads/train.py): data-parallel ring,
    parameter server (BSP / SSP / ASP), local SGD, with or without compression, as in the
    training experiment, and the model it trains; `compute_ms` is emulated compute added to
    each iteration's real one (the small models' own compute is a few milliseconds)."""
    model: str = "mlp"
    width: int = 256
    depth: int = 2
    data: str = "digits"
    batch: int = 32
    lr: float = 0.05
    compute_ms: float = 0.0

    def hosts_needed(self) -> int:
        return job_hosts_needed(self, self.workers)


@dataclass(frozen=True, kw_only=True)
class SharedJob:
    """One job: its model and compute (as in the parallel experiment) and its layout, or
    `training`, a job of the training worker instead; its hosts (explicit, else from the
    experiment's placement), when it starts after the first job (`offset_s`) and its weight
    (the priority policy's `weight` order)."""
    name: str = ""
    compute: str = "emulated"          # real (the MLP on digits) | emulated
    model: str = "gpt-tiny"
    model_desc: ModelDesc | None = None
    scale: float = 1e-3
    device_tflops: float | None = 100.0
    layer_fwd_s: float | None = None
    layer_bwd_s: float | None = None
    real: RealModel = field(default_factory=RealModel)
    dp: int = 2
    tp: int = 1
    pp: int = 1
    ep: int = 1
    schedule: str = "1f1b"
    micro_batches: int = 1
    zero: int = 0
    hosts: list[str] = field(default_factory=list)
    offset_s: float = 0.0
    weight: float = 1.0
    fault: ParallelFault | None = None  # in the rounds the jobs share: the run must stop all
    training: SharedTraining | None = None

    @property
    def layout(self) -> Layout:
        return Layout(dp=self.dp, tp=self.tp, pp=self.pp, ep=self.ep)

    @property
    def host_count(self) -> int:
        """Hosts the job takes (a colocated parameter server shares its workers' hosts)."""
        return self.training.hosts_needed() if self.training else self.layout.world

    @property
    def worker_count(self) -> int:
        """Ranks that compute (a parameter server's do not)."""
        return self.training.workers if self.training else self.layout.world

    @property
    def ranks(self) -> int:
        if self.training:
            t = self.training
            return t.workers + (t.ps_shards if t.sync == "ps" else 0)
        return self.layout.world

    def as_parallel(self, exp: Jobs, dscp: int) -> tuple[Parallel, ParallelJob]:
        """The job as the parallel experiment's worker runs it, every collective type
        marked with the job's own DSCP."""
        p = Parallel(compute=self.compute, model=self.model, model_desc=self.model_desc,
                     scale=self.scale, device_tflops=self.device_tflops,
                     layer_fwd_s=self.layer_fwd_s, layer_bwd_s=self.layer_bwd_s,
                     real=self.real, iters=exp.iters, warmup_iters=exp.warmup_iters,
                     seed=exp.seed, timeout_s=exp.timeout_s, fault=self.fault,
                     dscp=dict.fromkeys(KINDS, dscp), transport=exp.transport,
                     roce=replace(exp.roce, dscp=dscp))
        return p, ParallelJob(name=self.name, dp=self.dp, tp=self.tp, pp=self.pp, ep=self.ep,
                              schedule=self.schedule, micro_batches=self.micro_batches,
                              zero=self.zero, hosts=list(self.hosts))


@dataclass(frozen=True, kw_only=True)
class PriorityArgs:
    """Crux-like priorities: jobs ordered by `weight` or `intensity` (compute per byte);
    strict priority, or WRR weights falling with rank."""
    order: Literal["weight", "intensity"] = "weight"
    scheduler: Literal["strict", "wrr"] = "strict"


@dataclass(frozen=True, kw_only=True)
class TimeShiftArgs:
    """CASSINI-like gates: the common period is the slowest alone iteration times
    1 + `slack`, or the jobs' link times times 1 + `margin` if that is longer; gates start
    `lead` iterations after every job has reported."""
    slack: float = 0.03
    lead: int = 2
    margin: float = 0.1


@dataclass(frozen=True, kw_only=True)
class MltcpArgs:
    """MLTCP-like weights: 1 + `gain` x (share of the iteration's bytes sent), in
    `levels` steps."""
    gain: float = 3.0
    levels: int = 4


@dataclass(frozen=True, kw_only=True)
class Jobs(ExperimentSpec):
    """Training jobs side by side on one fabric: each alone, then all together under each
    cross-job policy, per placement; iteration times, slowdown, bytes, marks and drops per
    job and link, and the jobs' communication phases on one time axis, beside the fluid
    model (testbed/workloads/model/interference.py). docs/JOBS.md."""
    type: Literal["jobs"] = "jobs"
    jobs: list[SharedJob] = field(default_factory=list)
    placements: list[str] = field(default_factory=lambda: ["packed"])
    policies: list[str] = field(default_factory=lambda: ["none"])
    priority: PriorityArgs = field(default_factory=PriorityArgs)
    time_shift: TimeShiftArgs = field(default_factory=TimeShiftArgs)
    mltcp: MltcpArgs = field(default_factory=MltcpArgs)
    plugin_args: dict[str, Any] = field(default_factory=dict)  # a user's policy's arguments
    period_ms: float = 20.0            # how often the jobs app steps the policy
    iters: int = 20
    warmup_iters: int = 3
    seed: int = 0                      # random placement
    allow_shared_hosts: bool = False   # jobs may list the same host
    background: list[BackgroundTraffic] = field(default_factory=list)
    ecn: EcnProfile | None = None      # marking on every class (hosts ECN-capable)
    topology: TopologySpec | None = None  # default: the spec's (links.rate_mbps applies)
    timeout_s: float = 120.0
    job_timeout_s: float = 900.0
    sample_hz: float = 200.0
    # what carries the parallel jobs' collectives: gloo (TCP), or roce, the RoCE engine in
    # every host, each job's data in a lossless class with its own DSCP, once per scheme of
    # `roce.schemes` (the parallel experiment's `roce`)
    transport: str = "gloo"
    roce: ParallelRoce = field(default_factory=ParallelRoce)
    # over gloo, once per TCP congestion control of the hosts (default: the spec's
    # hosts.congestion_control); dctcp needs `ecn`, the switches' marking
    congestion_controls: list[str] = field(default_factory=list)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_jobs(self, path, topo, spec)

    def job_classes(self) -> int:
        """How many jobs can have a class of their own."""
        return ROCE_JOB_CLASSES if self.transport == "roce" else JOB_CLASSES

    def fabric_topology(self, topo: Topology) -> Topology:
        return build_fabrics([self.topology] if self.topology else [], topo)[0]

    def names(self) -> list[str]:
        return [j.name or f"job{i}" for i, j in enumerate(self.jobs)]


def per_job_classes(policy: str) -> bool:
    """Whether a policy needs a traffic class per job (every plugin gets them)."""
    return policy in ("priority", "mltcp") or ":" in policy


def check_policy(name: str, path: str) -> None:
    if ":" in name:
        where, _, cls = name.rpartition(":")
        if not where or not cls:
            raise SpecError(f"{path}: expected 'file.py:Class' or 'module:Class' (got {name!r})")
        if where.endswith(".py") and not Path(where).exists():
            raise SpecError(f"{path}: file {where} does not exist")
        return
    one_of(name, BUILTIN, path)


def placements(exp: Jobs, topo: Topology, policy: str) -> list[list[str]]:
    """Each job's hosts (rank i on the i-th): a job's own `hosts`, else the next free hosts
    in the placement's order over the whole fabric (`packed`: edge by edge, so each job
    spans as few edge switches as it can; `spread`: dealt over switches and pods;
    `random`: shuffled with the seed). ValueError naming the field."""
    names = [h.name for h in topo.hosts]
    explicit = [h for job in exp.jobs for h in job.hosts]
    for j, job in enumerate(exp.jobs):
        if not job.hosts:
            continue
        unknown = [h for h in job.hosts if h not in names]
        if unknown:
            raise ValueError(f"jobs[{j}].hosts: no host {unknown[0]!r} in the fabric")
        if len(set(job.hosts)) != len(job.hosts):
            raise ValueError(f"jobs[{j}].hosts: a host appears twice")
        if len(job.hosts) != job.host_count:
            raise ValueError(f"jobs[{j}].hosts: {len(job.hosts)} hosts; the job takes "
                             f"{job.host_count}")
    if not exp.allow_shared_hosts and len(set(explicit)) != len(explicit):
        shared = sorted({h for h in explicit if explicit.count(h) > 1})
        raise ValueError(f"jobs: hosts {shared} are in more than one job (set "
                         "allow_shared_hosts to allow it)")
    need = sum(job.host_count for job in exp.jobs if not job.hosts)
    free = [h for h in place(topo, len(names), policy, exp.seed) if h not in explicit]
    if need > len(free):
        raise ValueError(f"jobs: {need} hosts to fill from {len(free)} free hosts of "
                         f"{len(names)} ({topo.kind})")
    out, k = [], 0
    for job in exp.jobs:
        if job.hosts:
            out.append(list(job.hosts))
        else:
            out.append(free[k:k + job.host_count])
            k += job.host_count
    return out


PARALLEL_FIELDS = ("compute", "model", "model_desc", "scale", "device_tflops", "layer_fwd_s",
                   "layer_bwd_s", "real", "dp", "tp", "pp", "ep", "schedule", "micro_batches",
                   "zero")
DEFAULT_JOB = SharedJob()


def check_shared_training(t: SharedTraining, path: str, hosts: int) -> None:
    check_training_job(t, path, [t.workers], hosts, t.model)
    if t.priority != "none":
        raise SpecError(f"{path}.priority: layer-wise priorities mark traffic with several "
                        "DSCPs; jobs sharing a fabric mark each job with its own")
    one_of(t.model, MODELS, f"{path}.model")
    one_of(t.data, DATASETS, f"{path}.data")
    for name in ("width", "depth", "batch", "lr"):
        positive(getattr(t, name), f"{path}.{name}")
    if t.compute_ms < 0:
        raise SpecError(f"{path}.compute_ms: must be >= 0 (got {t.compute_ms:g})")


def check_jobs(exp: Jobs, path: str, topo: Topology, spec: Spec | None = None) -> None:
    for name in ("iters", "timeout_s", "job_timeout_s", "sample_hz", "period_ms"):
        positive(getattr(exp, name), f"{path}.{name}")
    if not 0 <= exp.warmup_iters < exp.iters:
        raise SpecError(f"{path}.warmup_iters: must be in 0..iters-1 (got {exp.warmup_iters})")
    if not exp.jobs:
        raise SpecError(f"{path}.jobs: at least one job")
    if len(exp.jobs) > len(JOB_DSCPS):
        raise SpecError(f"{path}.jobs: at most {len(JOB_DSCPS)} jobs (one DSCP each)")
    names = exp.names()
    if len(set(names)) != len(names):
        raise SpecError(f"{path}.jobs: job names must differ ({names})")
    if not exp.placements:
        raise SpecError(f"{path}.placements: at least one")
    for i, pl in enumerate(exp.placements):
        one_of(pl, POLICIES, f"{path}.placements[{i}]")
    if not exp.policies:
        raise SpecError(f"{path}.policies: at least one")
    for i, pol in enumerate(exp.policies):
        check_policy(pol, f"{path}.policies[{i}]")
        if per_job_classes(pol) and len(exp.jobs) > exp.job_classes():
            raise SpecError(f"{path}.policies[{i}]: {pol} gives each job a traffic class; "
                            f"the dataplane has {exp.job_classes()} besides best effort"
                            f"{' and RoCE control' if exp.transport == 'roce' else ''} for "
                            f"{len(exp.jobs)} jobs")
    if exp.time_shift.slack < 0 or exp.time_shift.lead < 1 or exp.time_shift.margin < 0:
        raise SpecError(f"{path}.time_shift: slack >= 0, margin >= 0 and lead >= 1")
    if exp.mltcp.gain < 0 or exp.mltcp.levels < 1:
        raise SpecError(f"{path}.mltcp: gain >= 0 and levels >= 1")
    used = {b.dscp for b in exp.background}
    clash = used & set(JOB_DSCPS[:len(exp.jobs)])
    if clash:
        raise SpecError(f"{path}.background: DSCP {sorted(clash)} is a job's own")
    try:
        fabric = exp.fabric_topology(topo)
    except TopologyError as exc:
        raise SpecError(f"{path}.topology: {exc}") from None
    if fabric.relays and any(per_job_classes(p) for p in exp.policies):
        raise SpecError(f"{path}.policies: per-job classes need a switched fabric (BCube's "
                        "servers relay, outside the switches' classes)")
    for j, job in enumerate(exp.jobs):
        jp = f"{path}.jobs[{j}]"
        if job.offset_s < 0:
            raise SpecError(f"{jp}.offset_s: must be >= 0 (got {job.offset_s:g})")
        positive(job.weight, f"{jp}.weight")
        if job.training is not None:
            check_shared_training(job.training, f"{jp}.training", len(fabric.hosts))
            for name in PARALLEL_FIELDS:
                if getattr(job, name) != getattr(DEFAULT_JOB, name):
                    raise SpecError(f"{jp}.{name}: a field of a parallel job; this job is a "
                                    "training job (its `training`)")
        else:
            pexp, pjob = job.as_parallel(exp, JOB_DSCPS[j])
            if pjob.schedule in ASYNC:  # its phases are not the ones the policies gate
                raise SpecError(f"{jp}.schedule: pipemare runs in the parallel experiment "
                                "only")
            check_job(pexp, pjob, jp, jp, check_model(pexp, jp))
        if job.fault is not None:
            one_of(job.fault.kind, ("crash",) if job.training else ("crash", "hang"),
                   f"{jp}.fault.kind")
            if not 0 <= job.fault.at_iter < exp.iters:
                raise SpecError(f"{jp}.fault.at_iter: must be in 0..iters-1")
            if not 0 <= job.fault.rank < job.ranks:
                raise SpecError(f"{jp}.fault.rank: a rank below {job.ranks}")
            if job.training and job.training.sync == "ps" and \
                    job.fault.rank < job.training.ps_shards:
                raise SpecError(f"{jp}.fault.rank: rank {job.fault.rank} is a parameter "
                                "server; a fault strikes a worker")
    one_of(exp.transport, TRANSPORTS, f"{path}.transport")
    check_congestion_controls(exp, path)
    if exp.transport == "roce" and spec is not None:
        check_roce(exp, path, spec, fabric)
    for bi, bg in enumerate(exp.background):
        unknown = [h for h in bg.hosts if h not in {x.name for x in fabric.hosts}]
        if unknown:
            raise SpecError(f"{path}.background[{bi}].hosts: no host {unknown[0]!r}")
    for pl in exp.placements:
        try:
            placements(exp, fabric, pl)
        except ValueError as exc:
            raise SpecError(f"{path}.{exc}") from None


def check_congestion_controls(exp: Jobs, path: str) -> None:
    """TCP's congestion controls, for jobs over Gloo: distinct algorithm names, and ECN
    marking in the switches for dctcp (whether the hosts' kernel has each is checked when
    the experiment starts)."""
    ccs, where = exp.congestion_controls, f"{path}.congestion_controls"
    if not ccs:
        return
    if exp.transport != "gloo":
        raise SpecError(f"{where}: TCP's congestion controls; over {exp.transport} the "
                        f"scheme is {exp.transport}.schemes")
    check_cc_names(ccs, where)
    if "dctcp" in ccs and exp.ecn is None:
        raise SpecError(f"{where}: dctcp reacts to ECN marks; set `ecn` (the switches' "
                        "marking threshold)")


def check_roce(exp: Jobs, path: str, spec: Spec, fabric: Topology) -> None:
    """Over RoCE: parallel jobs of emulated compute only, the RoCE schemes' own marking,
    and each job's queue pairs within an engine's."""
    for j, job in enumerate(exp.jobs):
        if job.training is not None:
            raise SpecError(f"{path}.jobs[{j}]: a training-worker job exchanges its tensors "
                            "over Gloo; transport roce carries parallel jobs (emulated compute)")
    if exp.ecn is not None:
        raise SpecError(f"{path}.ecn: over RoCE the scheme marks the jobs' classes "
                        "(roce.ecn_k_bytes, ...); ecn is TCP's marking")
    if exp.roce.ctrl_dscp in {b.dscp for b in exp.background} | set(JOB_DSCPS):
        raise SpecError(f"{path}.roce.ctrl_dscp: {exp.roce.ctrl_dscp} is a job's or the "
                        "background's DSCP")
    for j, job in enumerate(exp.jobs):
        pexp, pjob = job.as_parallel(exp, JOB_DSCPS[j])
        # the transport's checks as the parallel experiment's, named by this spec's fields
        check_transport(replace(pexp, jobs=[pjob]), path, spec, fabric)
