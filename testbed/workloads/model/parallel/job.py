"""What every rank of a parallel job is told (pure): one JSON file the runner (or a local
launch) writes and each worker reads with the strict loader."""
from __future__ import annotations

from dataclasses import dataclass, field

from testbed.workloads.model.parallel.cost import JobShape
from testbed.workloads.model.parallel.desc import ModelDesc
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.pipemare import PipeMare

COMPUTE_MODES = ("real", "emulated")


@dataclass(frozen=True, kw_only=True)
class RealModel:
    """Real compute: the training experiment's MLP on real data, its Linear layers paired
    into Megatron MLP blocks (column-parallel, ReLU, row-parallel) for tensor parallelism."""
    width: int = 64
    depth: int = 3
    data: str = "digits"
    batch: int = 32              # samples per data-parallel replica per iteration
    lr: float = 0.05
    momentum: float = 0.9


@dataclass(frozen=True, kw_only=True)
class RoceTransport:
    """The collectives carried by the RoCE engine (`transport: roce`): the engine's binary,
    the folder of each rank's engine config (`rank<R>.conf`, its queue pairs numbered as
    `parallel.roce.qpn`), the queue pairs per connection, the RoCE MTU, and the bytes of
    telemetry room a data packet carries (HPCC)."""
    binary: str
    config_dir: str
    channels: int = 1
    mtu: int = 1024
    telemetry_bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    layout: Layout
    schedule: str = "1f1b"
    micro_batches: int = 1
    zero: int = 0
    iters: int = 10
    seed: int = 0
    compute: str = "emulated"          # real | emulated
    model: ModelDesc | None = None     # emulated: the transformer described
    scale: float = 1.0                 # emulated: tensors (and FLOPs) shrunk by this factor
    s_per_flop: float = 0.0            # emulated: seconds of compute per (scaled) FLOP
    profile: dict[str, float] = field(default_factory=dict)  # emulated: fwd_s/bwd_s per layer
    real: RealModel = field(default_factory=RealModel)
    dscp: dict[str, int] = field(default_factory=dict)        # per collective type
    timeout_s: float = 60.0
    crash_rank: int = -1               # fault injection: this rank raises ...
    crash_iter: int = -1               # ... at the start of this iteration
    hang_rank: int = -1                # ... or stops answering (sleeps) there
    gate_file: str = ""                # jobs sharing a fabric: a policy's gate (jobsync), ...
    report_file: str = ""              # ... where rank 0 reports its progress, ...
    start_file: str = ""               # ... and the runner's start of iteration 0
    roce: RoceTransport | None = None  # emulated: collectives over the RoCE engine
    pipemare: PipeMare = field(default_factory=PipeMare)  # schedule pipemare, real compute

    def plan(self) -> JobShape:
        """The job as the analytical model sees it."""
        if self.compute == "real":
            return JobShape(None, self.layout, self.schedule, self.micro_batches, self.zero,
                        mlp=(self.real.width, self.real.depth,
                             self.real.batch // self.micro_batches))
        if self.model is None:
            raise ValueError("an emulated job needs a model description")
        return JobShape(self.model, self.layout, self.schedule, self.micro_batches, self.zero,
                    self.scale)
