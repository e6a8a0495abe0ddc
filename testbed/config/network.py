"""The fabric a spec asks for: its topology, its links' queues and impairments, and the
hosts' TCP settings."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies import build
from topologies.model import Topology

from .loader import SpecError
from .units import frame_bytes


@dataclass(frozen=True, kw_only=True)
class TopologySpec:
    kind: str = "fattree"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class LinkConfig:
    """Queues and link impairments. Rates come from the topology unless `rate_mbps` is set."""
    rate_mbps: float | None = None
    buffer_pkts: int | None = 100
    buffer_bytes: int | None = None
    host_queue_pkts: int = 1000
    # a host NIC's queue: one FIFO (fifo), or a FIFO of host_queue_pkts per flow bucket
    # served round robin, a bucket per flow (fair: as fq_codel on real servers; dataplane/queues.py)
    host_queue: str = "fifo"
    delay_us: int = 0
    loss_pct: float = 0.0
    drop: str = "head"  # head: exact accounting on this datapath; tail: see docs/FIDELITY.md
    mtu_bytes: int = 1500  # every interface; jumbo frames cut the per-packet CPU cost
    burst_us: int = 10000  # HTB catch-up allowance for the emulator's jitter (units.py)

    def check(self) -> None:
        if (self.buffer_pkts is None) == (self.buffer_bytes is None):
            raise SpecError("links: set exactly one of buffer_pkts and buffer_bytes "
                            "(buffer_pkts: null to use buffer_bytes)")
        positive(self.buffer_pkts, "links.buffer_pkts", allow_none=True)
        positive(self.buffer_bytes, "links.buffer_bytes", allow_none=True)
        frame = frame_bytes(self.mtu_bytes)
        if self.buffer_bytes is not None and self.buffer_bytes < frame:
            raise SpecError(f"links.buffer_bytes: must hold one full-size frame "
                            f"(>= {frame}), got {self.buffer_bytes}")
        positive(self.rate_mbps, "links.rate_mbps", allow_none=True)
        if not 0 <= self.burst_us <= 1_000_000:
            raise SpecError(f"links.burst_us: must be in 0..1000000 (got {self.burst_us})")
        if not 576 <= self.mtu_bytes <= 9000:
            raise SpecError(f"links.mtu_bytes: must be in 576..9000 (got {self.mtu_bytes})")
        if self.drop not in ("head", "tail"):
            raise SpecError(f"links.drop: must be head or tail (got {self.drop!r})")
        positive(self.host_queue_pkts, "links.host_queue_pkts")
        if self.host_queue not in ("fifo", "fair"):
            raise SpecError(f"links.host_queue: must be fifo or fair (got {self.host_queue!r})")
        if self.delay_us < 0:
            raise SpecError(f"links.delay_us: must be >= 0 (got {self.delay_us})")
        if not 0 <= self.loss_pct <= 100:
            raise SpecError(f"links.loss_pct: must be in [0, 100] (got {self.loss_pct})")


# The testbed's own congestion controls, BPF programs (testbed/dataplane/bpf/cc/<name>.bpf.c)
# registered under these names when the kernel has no algorithm of that name.
BPF_CONGESTION_CONTROLS = ("dctcp", "swift", "mltcp")


@dataclass(frozen=True, kw_only=True)
class BpfProgram:
    """A user's own congestion control: a C file holding a BPF `tcp_congestion_ops`
    (`SEC(".struct_ops")`), compiled and registered by the testbed for the run. The path is
    relative to the working directory."""
    bpf: str

    def check(self, path: str) -> None:
        if not self.bpf.endswith(".c"):
            raise SpecError(f"{path}.bpf: a C source file (.c) is expected, got {self.bpf!r}")
        if not Path(self.bpf).is_file():
            raise SpecError(f"{path}.bpf: no such file: {self.bpf} (paths are relative to "
                            f"the working directory, {Path.cwd()})")


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    # a kernel algorithm's name, one of BPF_CONGESTION_CONTROLS, or {bpf: path/to/cc.bpf.c};
    # a run resolves a program to the name it registers (testbed/dataplane/hostcc.py)
    congestion_control: str | BpfProgram = "cubic"
    ecn: bool = False
    rto_min_us: int | None = None  # TCP's minimum retransmission timeout (kernel: 200000)
    # False: an idle connection keeps its window (the kernel halves it for each
    # retransmission timeout it was idle, down to the initial window:
    # tcp_slow_start_after_idle)
    slow_start_after_idle: bool = True
    # TCP's initial window, also the window an idle connection restarts from (the hosts'
    # routes' initcwnd); None: the kernel's 10 segments
    initial_window_pkts: int | None = None

    def cc_label(self) -> str:
        """The congestion control as result tables name it: the algorithm, or a user's
        program's file name without `.bpf.c` or `.c`."""
        cc = self.congestion_control
        return cc if isinstance(cc, str) else \
            Path(cc.bpf).name.removesuffix(".c").removesuffix(".bpf")

    def check(self) -> None:
        if self.initial_window_pkts is not None and self.initial_window_pkts < 1:
            raise SpecError(f"hosts.initial_window_pkts: at least 1 segment "
                            f"(got {self.initial_window_pkts})")
        cc = self.congestion_control
        if isinstance(cc, BpfProgram):
            cc.check("hosts.congestion_control")
        elif not cc.isidentifier():
            raise SpecError(f"hosts.congestion_control: not an algorithm name ({cc!r})")


def check_cc_names(ccs: list[str], path: str) -> None:
    """SpecError unless `ccs` are distinct algorithm names (whether the hosts' kernel has
    each is known only on the machine that runs the spec)."""
    if len(set(ccs)) != len(ccs):
        raise SpecError(f"{path}: distinct names (got {ccs})")
    for cc in ccs:
        if not cc.isidentifier():
            raise SpecError(f"{path}: not an algorithm name ({cc!r})")


def positive(value: float | None, path: str, allow_none: bool = False) -> None:
    """SpecError unless `value` > 0 (or None, when allowed)."""
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise SpecError(f"{path}: must be > 0 (got {value})")


def one_of(value: str, choices: tuple[str, ...], path: str) -> None:
    """SpecError unless `value` is one of `choices`."""
    if value not in choices:
        raise SpecError(f"{path}: unknown {value!r} (one of {', '.join(choices)})")


def build_fabrics(specs: list[TopologySpec], default: Topology) -> list[Topology]:
    """The topologies an experiment's `topologies` list names, or the spec's own when it
    names none (TopologyError on bad parameters)."""
    if not specs:
        return [default]
    return [build(t.kind, **t.params) for t in specs]
