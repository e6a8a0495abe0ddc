"""The training experiment's spec: the model, the jobs (how their workers synchronise),
background traffic, stragglers and faults; checked before anything starts."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from testbed.config.controller import check_routing
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.network import TopologySpec, build_fabrics, one_of, positive
from testbed.config.spec import ExperimentSpec, Spec
from testbed.workloads.commsched import CREDIT_PARAMS, PARTITION_PARAMS, PRIORITIES
from testbed.workloads.fusion import MODES as FUSION_MODES
from testbed.workloads.fusion import PROFILE_ITERS, PROFILED
from testbed.workloads.largebatch import OPTIMIZERS, iterations
from testbed.workloads.staleness import LR_STALENESS
from topologies import TopologyError
from topologies.model import Topology

SYNCS = ("ring", "ps", "local")
COMPRESSIONS = ("none", "fp16", "topk", "qsgd", "sign", "terngrad", "sbc")
FUSIONS = ("ddp",) + FUSION_MODES
MODELS = ("mlp", "cnn", "vgg", "transformer")
DATASETS = ("digits", "synthetic")


@dataclass(frozen=True, kw_only=True)
class TrainingJob:
    """One training job: how `workers` processes synchronise (see testbed/workloads/train.py)."""
    name: str = ""
    sync: str = "ring"                 # ring | ps | local
    workers: int = 4
    ps_shards: int = 1
    ps_placement: str = "dedicated"    # dedicated (own hosts) | colocated (on worker hosts)
    consistency: str = "bsp"           # bsp | ssp | asp (parameter server)
    staleness: int = 2                 # SSP bound, in iterations
    # ssp / asp: a push's weight cut by its staleness, DynSGD's rule (workloads/staleness.py);
    # with ssp, the survey's DynSSP
    lr_staleness: str = "none"         # none | dynsgd
    local_steps: int = 4               # local SGD: average every H steps
    compression: str = "none"          # none | fp16 | topk | qsgd | sign | terngrad | sbc
    topk_ratio: float = 0.01           # topk's and sbc's share of the entries sent
    qsgd_levels: int = 16
    terngrad_clip: float = 2.5         # TernGrad's clipping, in standard deviations
    priority: str = "none"             # none (DDP buckets) | fifo | p3 | tictac | bytescheduler
    # ByteScheduler's piece and credit (workloads/commsched.py), in parameters at its paper's
    # 100 Gb/s as BYTESCHEDULER_PARTITION / _CREDIT are: scaled with the job's link rate
    partition_params: float = PARTITION_PARAMS
    credit_params: float = CREDIT_PARAMS
    forward_ms: float = 0.0            # layer-wise: emulated forward per iteration (backward 2x)
    bucket_mb: float = 25.0
    # when the gradients go (workloads/fusion.py): DDP's buckets, or one message, each
    # tensor alone (WFBP), MG-WFBP's merge, the model's optimum, Horovod's fusion cycle
    fusion: str = "ddp"                # ddp | one | wfbp | mgwfbp | optimal | horovod
    fusion_threshold_mb: float = 128.0  # horovod: the fusion buffer (HOROVOD_FUSION_THRESHOLD)
    cycle_ms: float = 1.0              # horovod: the cycle time (HOROVOD_CYCLE_TIME); tictac,
    #                                    bytescheduler: the shortest time between two rounds
    # large batches (workloads/largebatch.py): the optimizer, the job's own batch per
    # worker and budget in epochs, its learning rate (tuned at the experiment's batch) and
    # the linear scaling rule with gradual warm-up
    optimizer: str = "sgd"             # sgd | lars | lamb
    batch: int = 0                     # per worker; 0: the experiment's
    epochs: float = 0.0                # passes over the training split; 0: the experiment's iters
    lr: float = 0.0                    # 0: the experiment's
    lr_scaling: str = "none"           # none | linear | sqrt (of the job's batch / the experiment's)
    warmup_epochs: float = 0.0         # gradual warm-up to the scaled rate
    weight_decay: float | None = None  # None: the optimizer's paper's (SGD: none)

    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.sync]
        if self.sync == "ps":
            parts.append(f"{self.ps_shards}x{self.ps_placement[:3]}-{self.consistency}")
            if self.consistency == "ssp":
                parts[-1] += str(self.staleness)
            if self.lr_staleness != "none":
                parts[-1] += "-dyn"
        if self.sync == "local":
            parts.append(f"h{self.local_steps}")
        if self.compression != "none":
            parts.append(self.compression)
        if self.priority != "none":
            parts.append(self.priority)
        if self.fusion != "ddp":
            parts.append(self.fusion)
        if self.optimizer != "sgd":
            parts.append(self.optimizer)
        if self.batch:
            parts.append(f"b{self.batch}")
        return "-".join(parts) + f"-{self.workers}w"


@dataclass(frozen=True, kw_only=True)
class BackgroundTraffic:
    """Traffic beside training, for as long as each job runs. `hosts`: iperf [src, dst];
    all_to_all [h, ...] (a flow between every ordered pair); incast [reader, server, ...]."""
    kind: str = "iperf"                # iperf | all_to_all | incast
    hosts: list[str] = field(default_factory=list)
    dscp: int = 0
    udp_mbps: float | None = None      # iperf / all_to_all: UDP at this rate instead of TCP
    block_bytes: int = 1_000_000       # incast: bytes per round, split over the servers


@dataclass(frozen=True, kw_only=True)
class Straggler:
    """One worker made slow: its host's link at `rate_mbps`, and/or extra compute time."""
    worker: int = 0                    # index among the job's workers
    rate_mbps: float | None = None
    compute_delay_ms: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Fault:
    """Fault injection: a worker raises at the start of an iteration (the run must fail fast
    with its error and stop the others)."""
    worker: int = 0
    at_iter: int = 0


@dataclass(frozen=True, kw_only=True)
class Training(ExperimentSpec):
    """Training jobs of real Gloo workers in the emulated hosts, one fabric per
    (topology, link rate); every job's iteration and communication times next to the
    analytical model's."""
    type: Literal["training"] = "training"
    on_cluster: ClassVar[bool] = True
    model: str = "mlp"
    width: int = 256
    depth: int = 2
    data: str = "digits"
    iters: int = 20
    warmup_iters: int = 2              # left out of the medians
    batch: int = 32
    lr: float = 0.05
    eval_every: int = 0                # 0: once, after the last iteration
    seed: int = 0
    timeout_s: float = 120.0           # a collective that waits longer fails the job
    job_timeout_s: float = 1200.0
    topologies: list[TopologySpec] = field(default_factory=list)  # default: the spec's
    rates_mbps: list[float] = field(default_factory=list)  # every link; default: as built
    workers: list[int] = field(default_factory=list)  # overrides each job's count
    jobs: list[TrainingJob] = field(default_factory=lambda: [TrainingJob()])
    background: list[BackgroundTraffic] = field(default_factory=list)
    straggler: Straggler | None = None
    fault: Fault | None = None          # a worker that crashes
    faults: list[FabricFault] = field(default_factory=list)  # the fabric's: links, switches
    p3_dscp: list[int] = field(default_factory=lambda: [46, 34, 26])  # highest level first
    sample_hz: float = 200.0           # every switch queue (BPF counters, shared memory)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_training(self, path, topo)
        for fabric in training_topologies(self, topo):  # each runs the controller's routing
            check_routing(spec.controller.routing, fabric,
                          f"controller.routing (for {path}.topologies: {fabric.kind})")

    def check_cluster(self, path: str, spec: Spec, topo: Topology) -> None:
        from testbed.config.placement import place

        assert spec.cluster is not None
        if self.faults:  # they read the connections on a port from this machine's sockets
            raise SpecError(f"{path}.faults: fabric faults do not run on a cluster yet; "
                            "leave them out, or cluster")
        for fabric in training_topologies(self, topo):
            try:
                place(fabric, spec.cluster)
            except SpecError as exc:
                raise SpecError(f"{path}.topologies: {fabric.kind}: {exc}") from None


def training_topologies(exp: Training, topo: Topology) -> list[Topology]:
    """The fabrics a training experiment runs on (the spec's when it names none)."""
    return build_fabrics(exp.topologies, topo)


def job_batch(exp: Training, job: TrainingJob) -> int:
    """A job's batch per worker."""
    return job.batch or exp.batch


def job_iters(exp: Training, job: TrainingJob, n: int) -> int:
    """A job's iterations with `n` workers: its epochs at its global batch, or the
    experiment's iters."""
    if not job.epochs:
        return exp.iters
    return iterations(job.epochs, exp.data, job_batch(exp, job) * n)


def job_schedule(exp: Training, job: TrainingJob, n: int) -> tuple[float, float, int]:
    """(lr, scale, warmup iterations) of a job with `n` workers (largebatch.learning_rate):
    the rate it was tuned at (the experiment's batch per worker, the job's own `workers`),
    times `scale`: k, its global batch over that one, under Goyal et al.'s linear scaling
    rule, or sqrt(k) as LAMB's paper scales; reached over its warm-up epochs."""
    lr = job.lr or exp.lr
    k = job_batch(exp, job) * n / (exp.batch * job.workers)
    scale = {"none": 1.0, "linear": k, "sqrt": math.sqrt(k)}[job.lr_scaling]
    warmup = (iterations(job.warmup_epochs, exp.data, job_batch(exp, job) * n)
              if job.warmup_epochs else 0)
    return lr, scale, warmup


def fewest_iters(exp: Training) -> int:
    """The fewest iterations any job of the experiment runs (with any of its worker counts)."""
    return min(job_iters(exp, job, n) for job in exp.jobs for n in exp.workers or [job.workers])


def job_hosts_needed(job: TrainingJob, workers: int) -> int:
    return workers + (job.ps_shards if job.sync == "ps" and job.ps_placement == "dedicated"
                      else 0)


def check_training_job(job: TrainingJob, jp: str, workers: list[int], fewest: int,
                       model: str) -> None:
    """One job's fields, with each of its worker counts on a fabric of `fewest` hosts and
    the experiment's `model`."""
    one_of(job.sync, SYNCS, f"{jp}.sync")
    one_of(job.consistency, ("bsp", "ssp", "asp"), f"{jp}.consistency")
    one_of(job.ps_placement, ("dedicated", "colocated"), f"{jp}.ps_placement")
    one_of(job.lr_staleness, LR_STALENESS, f"{jp}.lr_staleness")
    if job.lr_staleness != "none" and (job.sync != "ps" or job.consistency == "bsp"):
        raise SpecError(f"{jp}.lr_staleness: weights pushes by their staleness at a "
                        "parameter server under ssp or asp (BSP's pushes are never stale)")
    one_of(job.priority, PRIORITIES, f"{jp}.priority")
    positive(job.partition_params, f"{jp}.partition_params")
    if job.credit_params < 0:
        raise SpecError(f"{jp}.credit_params: must be >= 0 (got {job.credit_params})")
    for name, default in (("partition_params", PARTITION_PARAMS),
                          ("credit_params", CREDIT_PARAMS)):
        if job.priority != "bytescheduler" and getattr(job, name) != default:
            raise SpecError(f"{jp}.{name}: for priority: bytescheduler")
    if job.forward_ms < 0:
        raise SpecError(f"{jp}.forward_ms: must be >= 0 (got {job.forward_ms})")
    if job.forward_ms and job.priority == "none":
        raise SpecError(f"{jp}.forward_ms: emulated compute is for layer-wise jobs "
                        "(priority: fifo, p3, tictac or bytescheduler)")
    one_of(job.compression, COMPRESSIONS, f"{jp}.compression")
    if not 0 < job.topk_ratio <= 1:
        raise SpecError(f"{jp}.topk_ratio: must be in (0, 1] (got {job.topk_ratio})")
    if job.terngrad_clip <= 0:
        raise SpecError(f"{jp}.terngrad_clip: must be > 0 (got {job.terngrad_clip})")
    if not 1 <= job.qsgd_levels <= 127:
        raise SpecError(f"{jp}.qsgd_levels: must be in 1..127 (got {job.qsgd_levels})")
    if job.staleness < 0:
        raise SpecError(f"{jp}.staleness: must be >= 0 (got {job.staleness})")
    positive(job.local_steps, f"{jp}.local_steps")
    positive(job.bucket_mb, f"{jp}.bucket_mb")
    one_of(job.fusion, FUSIONS, f"{jp}.fusion")
    positive(job.fusion_threshold_mb, f"{jp}.fusion_threshold_mb")
    positive(job.cycle_ms, f"{jp}.cycle_ms")
    if job.fusion != "ddp" and (job.sync != "ring" or job.priority != "none"
                                or job.compression != "none"):
        raise SpecError(f"{jp}.fusion: {job.fusion} sends a ring job's uncompressed "
                        "gradients (sync: ring, no priority, no compression)")
    one_of(job.optimizer, OPTIMIZERS, f"{jp}.optimizer")
    one_of(job.lr_scaling, ("none", "linear", "sqrt"), f"{jp}.lr_scaling")
    for name in ("batch", "epochs", "lr", "warmup_epochs"):
        if getattr(job, name) < 0:
            raise SpecError(f"{jp}.{name}: must be >= 0 (got {getattr(job, name)})")
    if job.weight_decay is not None and job.weight_decay < 0:
        raise SpecError(f"{jp}.weight_decay: must be >= 0 (got {job.weight_decay})")
    if job.sync == "ps" or job.priority != "none":
        for name, plain in (("optimizer", "sgd"), ("lr_scaling", "none"),
                            ("warmup_epochs", 0.0), ("weight_decay", None)):
            if getattr(job, name) != plain:
                raise SpecError(f"{jp}.{name}: for the workers of sync: ring (without "
                                "priority) or local; a parameter server and layer-wise "
                                "priority apply plain SGD at a fixed rate")
    if job.epochs and job.warmup_epochs >= job.epochs:
        raise SpecError(f"{jp}.warmup_epochs: must be below epochs ({job.epochs:g}), or the "
                        "scaled rate is never reached")
    if job.priority != "none" and job.sync != "ring":
        raise SpecError(f"{jp}.priority: layer-wise priority scheduling is for sync: ring")
    if job.priority != "none" and model == "transformer":
        raise SpecError(f"{jp}.priority: layer-wise synchronisation applies each layer's "
                        "update before its forward runs, and the transformer's attention "
                        "output projection has none of its own (model: mlp, cnn or vgg)")
    if job.priority != "none" and job.compression != "none":
        raise SpecError(f"{jp}.priority: not combined with compression")
    if job.sync == "local" and job.compression != "none":
        raise SpecError(f"{jp}.compression: local SGD averages parameters uncompressed")
    for n in workers:
        if n < 1:
            raise SpecError(f"{jp}.workers: must be >= 1 (got {n})")
        if job.sync == "ps":
            if job.ps_shards < 1:
                raise SpecError(f"{jp}.ps_shards: must be >= 1 (got {job.ps_shards})")
            if job.ps_placement == "dedicated" and job.ps_shards >= fewest:
                raise SpecError(f"{jp}.ps_shards: {job.ps_shards} dedicated servers leave "
                                f"no host for workers ({fewest} hosts)")
            if job.ps_placement == "colocated" and job.ps_shards > n:
                raise SpecError(f"{jp}.ps_shards: {job.ps_shards} colocated servers need "
                                f"as many workers (got {n})")
        need = job_hosts_needed(job, n)
        if need > fewest:
            raise SpecError(f"{jp}.workers: {n} workers"
                            + (f" and {job.ps_shards} servers" if need > n else "")
                            + f" need {need} hosts; the smallest fabric has {fewest}")


def check_training(exp: Training, path: str, topo: Topology) -> None:
    one_of(exp.model, MODELS, f"{path}.model")
    one_of(exp.data, DATASETS, f"{path}.data")
    for name in ("width", "depth", "iters", "batch", "lr", "timeout_s", "job_timeout_s"):
        positive(getattr(exp, name), f"{path}.{name}")
    if not 0 <= exp.warmup_iters < exp.iters:
        raise SpecError(f"{path}.warmup_iters: must be in 0..iters-1 (got {exp.warmup_iters})")
    if exp.eval_every < 0:
        raise SpecError(f"{path}.eval_every: must be >= 0 (got {exp.eval_every})")
    for j, rate in enumerate(exp.rates_mbps):
        positive(rate, f"{path}.rates_mbps[{j}]")
    for j, n in enumerate(exp.workers):
        if n < 1:
            raise SpecError(f"{path}.workers[{j}]: must be >= 1 (got {n})")
    if len(exp.p3_dscp) < 1 or not all(0 <= d <= 63 for d in exp.p3_dscp) or \
            len(set(exp.p3_dscp)) != len(exp.p3_dscp):
        raise SpecError(f"{path}.p3_dscp: distinct DSCP values in 0..63 (got {exp.p3_dscp})")
    if not exp.jobs:
        raise SpecError(f"{path}.jobs: at least one job")
    try:
        fabrics = training_topologies(exp, topo)
    except TopologyError as exc:
        raise SpecError(f"{path}.topologies: {exc}") from None
    fewest = min(len(t.hosts) for t in fabrics)
    for j, job in enumerate(exp.jobs):
        check_training_job(job, f"{path}.jobs[{j}]", exp.workers or [job.workers], fewest,
                           exp.model)
        for n in exp.workers or [job.workers]:
            if (iters := job_iters(exp, job, n)) <= exp.warmup_iters:
                raise SpecError(f"{path}.jobs[{j}].epochs: {job.epochs:g} epochs are {iters} "
                                f"iterations with {n} workers, not more than warmup_iters "
                                f"({exp.warmup_iters})")
            if job.fusion in PROFILED and iters <= PROFILE_ITERS + 1:
                raise SpecError(f"{path}.jobs[{j}].fusion: {job.fusion} plans after "
                                f"{PROFILE_ITERS + 1} iterations of profile; the job has "
                                f"{iters}")
    names = {h.name for t in fabrics for h in t.hosts}
    for j, bg in enumerate(exp.background):
        bp = f"{path}.background[{j}]"
        one_of(bg.kind, ("iperf", "all_to_all", "incast"), f"{bp}.kind")
        least = {"iperf": 2, "all_to_all": 2, "incast": 2}[bg.kind]
        if len(bg.hosts) < least or (bg.kind == "iperf" and len(bg.hosts) != 2):
            raise SpecError(f"{bp}.hosts: {bg.kind} needs "
                            + ("[src, dst]" if bg.kind == "iperf" else f">= {least} hosts"))
        for h in bg.hosts:
            if h not in names:
                raise SpecError(f"{bp}.hosts: no host {h!r} in the fabric")
        if len(set(bg.hosts)) != len(bg.hosts):
            raise SpecError(f"{bp}.hosts: a host appears twice")
        if not 0 <= bg.dscp <= 63:
            raise SpecError(f"{bp}.dscp: DSCP must be in 0..63 (got {bg.dscp})")
        positive(bg.udp_mbps, f"{bp}.udp_mbps", allow_none=True)
        positive(bg.block_bytes, f"{bp}.block_bytes")
    if exp.fault is not None:
        most = min(exp.workers or [job.workers for job in exp.jobs])
        if not 0 <= exp.fault.worker < most:
            raise SpecError(f"{path}.fault.worker: an index below {most} (got {exp.fault.worker})")
        if not 0 <= exp.fault.at_iter < fewest_iters(exp):
            raise SpecError(f"{path}.fault.at_iter: must be in 0..{fewest_iters(exp) - 1} "
                            "(the fewest iterations of a job)")
    for fabric in fabrics:
        check_faults(exp.faults, path, fabric, None, fewest_iters(exp))
    if exp.straggler is not None:
        st = exp.straggler
        most = min(exp.workers or [job.workers for job in exp.jobs])
        if not 0 <= st.worker < most:
            raise SpecError(f"{path}.straggler.worker: an index below {most} (got {st.worker})")
        positive(st.rate_mbps, f"{path}.straggler.rate_mbps", allow_none=True)
        if st.compute_delay_ms < 0:
            raise SpecError(f"{path}.straggler.compute_delay_ms: must be >= 0")
