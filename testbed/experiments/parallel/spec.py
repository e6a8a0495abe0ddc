"""The parallel-training experiment's spec: a model (a real MLP, or a described transformer
with emulated compute), jobs with their parallel layout and placement, the fabrics and link
rates; every field checked before anything starts."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from testbed.config.controller import check_routing
from testbed.config.loader import SpecError
from testbed.config.network import TopologySpec, build_fabrics, one_of, positive
from testbed.config.spec import ExperimentSpec, Spec
from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.desc import ModelDesc, load_models
from testbed.workloads.model.parallel.job import COMPUTE_MODES, RealModel
from testbed.workloads.model.parallel.layout import POLICIES, Layout, place
from testbed.workloads.model.parallel.pipemare import BACKWARD_WEIGHTS, PipeMare
from testbed.workloads.model.parallel.roce import queue_pairs
from testbed.workloads.model.parallel.schedule import ASYNC, SCHEDULES
from topologies import TopologyError
from topologies.kinds import own_routing
from topologies.model import Topology

from ..rdma import MAX_QPS, Rdma, parse_scheme
from ..training.spec import DATASETS

TRANSPORTS = ("gloo", "roce")


@dataclass(frozen=True, kw_only=True)
class ParallelRoce(Rdma):
    """The RoCE transport's settings for collectives, as the rdma experiment takes them
    (no flows: the jobs make the traffic); one scheme, DCQCN, unless told."""
    schemes: list[str] = field(default_factory=lambda: ["dcqcn"])

# one DSCP (and, unless the spec has its own qos, one switch class) per collective type,
# so that switch counters tell the types apart: AF11, AF12, AF21, AF31, AF41
DEFAULT_DSCP = {"tp": 10, "pp": 12, "dp": 18, "ep": 26, "fsdp": 34}


@dataclass(frozen=True, kw_only=True)
class ParallelJob:
    """One job: its layout (dp x tp x pp ranks, ep carved out of dp), pipeline schedule
    (with `schedule: pipemare`, PipeMare's corrections in `pipemare`), ZeRO stage and
    placement (`packed`, `spread`, `random` with `seed`, or `hosts`)."""
    name: str = ""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    schedule: str = "1f1b"
    micro_batches: int = 1
    zero: int = 0                      # 0: DP allreduce; 1, 2: ZeRO-1/2; 3: ZeRO-3 / FSDP
    placement: str = "packed"          # packed | spread | random
    hosts: list[str] = field(default_factory=list)  # explicit: rank i on hosts[i]
    seed: int = 0
    pipemare: PipeMare | None = None   # schedule pipemare: its corrections (default: both)

    @property
    def layout(self) -> Layout:
        return Layout(dp=self.dp, tp=self.tp, pp=self.pp, ep=self.ep)

    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.layout.label()]
        if self.pp > 1:
            parts.append(f"{self.schedule}-m{self.micro_batches}")
            if self.pipemare is not None and self.pipemare.label():
                parts.append(self.pipemare.label())
        elif self.micro_batches > 1:
            parts.append(f"m{self.micro_batches}")
        if self.zero:
            parts.append(f"zero{self.zero}")
        parts.append("explicit" if self.hosts else self.placement)
        return "-".join(parts)


@dataclass(frozen=True, kw_only=True)
class ParallelFault:
    """Fault injection: a rank raises (`crash`) or stops answering (`hang`) at the start of
    an iteration; the job must fail within its timeout, naming the rank, and stop the
    others."""
    rank: int = 0
    at_iter: int = 0
    kind: str = "crash"                # crash | hang


@dataclass(frozen=True, kw_only=True)
class Parallel(ExperimentSpec):
    """Large-model parallel training jobs (TP, PP, ZeRO/FSDP, EP, combined) of real Gloo
    workers on the fabric, each collective type's bytes and time beside the analytical
    model; docs/PARALLEL.md."""
    type: Literal["parallel"] = "parallel"
    compute: str = "emulated"          # real (the MLP on digits) | emulated
    model: str = "gpt-tiny"            # emulated: a description in models.yaml ...
    model_desc: ModelDesc | None = None  # ... or one written here
    scale: float = 1e-3                # emulated: tensors and FLOPs times this
    device_tflops: float | None = 100.0  # emulated: the accelerator's sustained speed
    reference_link_gbps: float | None = None  # keep the comm/compute ratio of this link
    layer_fwd_s: float | None = None   # emulated: a measured per-layer time instead of FLOPs
    layer_bwd_s: float | None = None
    real: RealModel = field(default_factory=RealModel)
    iters: int = 6
    warmup_iters: int = 1
    seed: int = 0
    topologies: list[TopologySpec] = field(default_factory=list)  # default: the spec's
    rates_mbps: list[float] = field(default_factory=list)  # every link; default: as built
    routings: list[str] = field(default_factory=list)  # own: each fabric's own routing
    jobs: list[ParallelJob] = field(default_factory=lambda: [ParallelJob()])
    dscp: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_DSCP))
    fault: ParallelFault | None = None
    timeout_s: float = 120.0           # a collective that waits longer fails the job
    job_timeout_s: float = 1200.0
    sample_hz: float = 200.0
    # what carries the collectives of emulated compute: gloo (TCP), or roce, the RoCE
    # engine in every host, once per scheme of `roce.schemes`, with `roce`'s settings as the
    # rdma experiment takes them (qps_per_flow: queue pairs per connection); real compute
    # keeps Gloo
    transport: str = "gloo"
    roce: ParallelRoce = field(default_factory=ParallelRoce)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_parallel(self, path, spec, topo)

    def describe_model(self) -> ModelDesc:
        """The described transformer (emulated compute)."""
        if self.model_desc is not None:
            return self.model_desc
        return load_models()[self.model]


def parallel_topologies(exp: Parallel, topo: Topology) -> list[Topology]:
    """The fabrics a parallel experiment runs on (the spec's when it names none)."""
    return build_fabrics(exp.topologies, topo)


def job_hosts(job: ParallelJob, topo: Topology) -> list[str]:
    """The host of each rank."""
    return place(topo, job.layout.world, job.hosts or job.placement, job.seed)


def check_transport(exp: Parallel, path: str, spec: Spec, topo: Topology) -> None:
    one_of(exp.transport, TRANSPORTS, f"{path}.transport")
    if exp.transport != "roce":
        return
    if exp.compute != "emulated":
        raise SpecError(f"{path}.transport: roce carries emulated compute's collectives "
                        f"(real compute exchanges tensors' values: it keeps gloo)")
    r = exp.roce
    if r.flows or r.workload is not None or r.fan_in is not None:
        raise SpecError(f"{path}.roce: the transport's settings only (the jobs make the "
                        f"traffic): no flows, workload or fan_in")
    r.check_transport(f"{path}.roce", replace(spec, controller=replace(
        spec.controller, routing=(exp.routings or [spec.controller.routing])[0])), topo)
    for j, s in enumerate(r.schemes):
        if parse_scheme(s).tcp:
            raise SpecError(f"{path}.roce.schemes[{j}]: {s!r} is TCP: run it with "
                            f"transport gloo")
    if r.source_port == "per_qp":
        for j, routing in enumerate(exp.routings):
            mode = own_routing(topo.kind, routing)
            if mode not in ("ecmp", "single", "hedera"):
                raise SpecError(f"{path}.routings[{j}]: per_qp source ports need routing "
                                f"ecmp, single or hedera (got {mode})")
    experts = exp.describe_model().experts > 0
    for job in exp.jobs:
        held = queue_pairs(job.layout, r.qps_per_flow, experts)
        if held > MAX_QPS:
            raise SpecError(f"{path}.roce.qps_per_flow: a rank of {job.label()} would hold "
                            f"{held} queue pairs; an engine holds {MAX_QPS}")


def check_parallel(exp: Parallel, path: str, spec: Spec, topo: Topology) -> None:
    for name in ("iters", "timeout_s", "job_timeout_s", "sample_hz"):
        positive(getattr(exp, name), f"{path}.{name}")
    if not 0 <= exp.warmup_iters < exp.iters:
        raise SpecError(f"{path}.warmup_iters: must be in 0..iters-1 (got {exp.warmup_iters})")
    for j, rate in enumerate(exp.rates_mbps):
        positive(rate, f"{path}.rates_mbps[{j}]")
    for kind, d in exp.dscp.items():
        one_of(kind, KINDS, f"{path}.dscp")
        if not 0 <= d <= 63:
            raise SpecError(f"{path}.dscp.{kind}: DSCP must be in 0..63 (got {d})")
    model = check_model(exp, path)
    check_transport(exp, path, spec, topo)
    if not exp.jobs:
        raise SpecError(f"{path}.jobs: at least one job")
    try:
        fabrics = parallel_topologies(exp, topo)
    except TopologyError as exc:
        raise SpecError(f"{path}.topologies: {exc}") from None
    if exp.fault is not None:
        one_of(exp.fault.kind, ("crash", "hang"), f"{path}.fault.kind")
        if not 0 <= exp.fault.at_iter < exp.iters:
            raise SpecError(f"{path}.fault.at_iter: must be in 0..iters-1")
        smallest = min(job.layout.world for job in exp.jobs) if exp.jobs else 0
        if not 0 <= exp.fault.rank < smallest:
            raise SpecError(f"{path}.fault.rank: a rank below {smallest} (got {exp.fault.rank})")
    if "hedera" in exp.routings and any(t.relays for t in fabrics):
        raise SpecError(f"{path}.routings: hedera needs a switched fabric (not BCube)")
    for j, routing in enumerate(exp.routings):
        for t in fabrics:
            check_routing(routing, t, f"{path}.routings[{j}]")
    for j, job in enumerate(exp.jobs):
        check_job(exp, job, f"{path}.jobs[{j}]", path, model)
        for t in fabrics:
            try:
                job_hosts(job, t)
            except ValueError as exc:
                field_name = "hosts" if job.hosts else "dp"
                raise SpecError(f"{path}.jobs[{j}].{field_name}: {exc} ({t.kind})") from None


def check_model(exp: Parallel, path: str) -> ModelDesc | None:
    """The compute settings (`path` names the fields): the described model with emulated
    compute (None with real compute)."""
    one_of(exp.compute, COMPUTE_MODES, f"{path}.compute")
    positive(exp.scale, f"{path}.scale")
    if exp.compute != "emulated":
        for name in ("width", "depth", "batch", "lr"):
            positive(getattr(exp.real, name), f"{path}.real.{name}")
        one_of(exp.real.data, DATASETS, f"{path}.real.data")
        return None
    if exp.model_desc is None and exp.model not in load_models():
        raise SpecError(f"{path}.model: unknown {exp.model!r} (one of "
                        f"{', '.join(load_models())}, or write model_desc)")
    if (exp.layer_fwd_s is None) != (exp.layer_bwd_s is None):
        raise SpecError(f"{path}.layer_fwd_s: give both layer_fwd_s and layer_bwd_s")
    if exp.layer_fwd_s is None:
        if exp.device_tflops is None:
            raise SpecError(f"{path}.device_tflops: emulated compute needs a device "
                            "speed (or a profile: layer_fwd_s and layer_bwd_s)")
        positive(exp.device_tflops, f"{path}.device_tflops")
    else:
        positive(exp.layer_fwd_s, f"{path}.layer_fwd_s")
        positive(exp.layer_bwd_s, f"{path}.layer_bwd_s")
    positive(exp.reference_link_gbps, f"{path}.reference_link_gbps", allow_none=True)
    return exp.describe_model()


def check_job(exp: Parallel, job: ParallelJob, jp: str, model_path: str,
              model: ModelDesc | None) -> None:
    """One job's layout, schedule and placement against its model (`jp` names the job's
    fields, `model_path` the model's)."""
    one_of(job.schedule, SCHEDULES + ASYNC, f"{jp}.schedule")
    check_async(exp, job, jp)
    one_of(job.placement, POLICIES, f"{jp}.placement")
    if not 0 <= job.zero <= 3:
        raise SpecError(f"{jp}.zero: 0 (plain data parallel), 1, 2 or 3 (got {job.zero})")
    if job.micro_batches < 1:
        raise SpecError(f"{jp}.micro_batches: must be >= 1 (got {job.micro_batches})")
    try:
        job.layout.check()
    except ValueError as exc:
        raise SpecError(f"{jp}.{exc}") from None
    if model is not None:
        try:
            model.check(job.layout, f"{model_path}.model")
        except ValueError as exc:
            where = str(exc) if str(exc).startswith(f"{model_path}.") else f"{jp}.{exc}"
            raise SpecError(where) from None
    else:
        check_real(exp.real, job, jp)


def check_async(exp: Parallel, job: ParallelJob, jp: str) -> None:
    """PipeMare's pipeline: two stages or more, plain data parallelism, over Gloo; its
    corrections only with it."""
    if job.schedule not in ASYNC:
        if job.pipemare is not None:
            raise SpecError(f"{jp}.pipemare: only with schedule: pipemare")
        return
    if job.pp < 2:
        raise SpecError(f"{jp}.schedule: pipemare pipelines stages (pp >= 2, got {job.pp})")
    if job.zero:
        raise SpecError(f"{jp}.zero: pipemare updates each stage on its own; plain data "
                        "parallelism only (zero: 0)")
    if exp.transport != "gloo":
        raise SpecError(f"{jp}.schedule: pipemare runs over gloo (transport: gloo)")
    if job.pipemare is not None and exp.compute != "real":
        raise SpecError(f"{jp}.pipemare: its corrections act on real compute's weights "
                        "(compute: real)")
    pm = job.pipemare or PipeMare()
    if pm.lr_steps < 0:
        raise SpecError(f"{jp}.pipemare.lr_steps: must be >= 0 (got {pm.lr_steps})")
    one_of(pm.backward, BACKWARD_WEIGHTS, f"{jp}.pipemare.backward")
    if not 0 < pm.decay < 1:
        raise SpecError(f"{jp}.pipemare.decay: between 0 and 1 (got {pm.decay})")


def check_real(real: RealModel, job: ParallelJob, jp: str) -> None:
    """Real compute: the MLP's Linear layers paired into TP units, split into stages."""
    units = (real.depth + 2) // 2  # depth + 1 Linear layers, in pairs
    if job.ep > 1:
        raise SpecError(f"{jp}.ep: real compute has no experts (use compute: emulated)")
    if real.width % job.tp:
        raise SpecError(f"{jp}.tp: {job.tp} must divide real.width={real.width}")
    if job.pp > units:
        raise SpecError(f"{jp}.pp: {job.pp} stages for {units} layer pairs of the MLP")
    if real.batch % job.micro_batches:
        raise SpecError(f"{jp}.micro_batches: {job.micro_batches} must divide "
                        f"real.batch={real.batch}")
