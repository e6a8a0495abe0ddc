"""What every experiment type shares: its registration, its outcome, and small pure checks.

An experiment type is one module of this package (a package for a large one) holding its
spec type (a subclass of `ExperimentSpec`), its runner `run(ctx, exp)`, its load model for
`testbed plan` (testbed/experiments/load.py), its pure result analysis and its plots, and
one `Experiment` record listed in `testbed/experiments/__init__.py`, which registers it.
A runner reaches the emulated network only through the run context it is given
(`ctx.fabric(...)`, `ctx.traffic_phase(...)`, `ctx.write_csv(...)`) and the phase handle
that `ctx.fabric` yields (flows, processes in hosts, the dataplane), so that importing an
experiment module -- what `testbed validate` and `testbed plan` do -- loads no runtime
module. docs/ARCHITECTURE.md.
"""
from __future__ import annotations

import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed.config.faults import FabricFault
from testbed.config.network import HostConfig, LinkConfig
from testbed.config.qos import QosConfig
from testbed.config.spec import ExperimentSpec, Spec, type_name
from testbed.core.errors import TestbedError
from testbed.results.plots import CsvPlot, DirPlot
from testbed.workloads.model.flows import Flow, FlowResult
from topologies.model import Topology

from .load import ExpectModel, LoadModel


class Phase(Protocol):
    """A running phase's fabric, as an experiment uses it (testbed/net/fabric.py)."""
    topo: Topology
    links: LinkConfig
    routing: str  # the mode its controller routes it by ("own" resolved)

    @property
    def qos_status_dir(self) -> Path: ...

    @property
    def circuits_log(self) -> Path: ...

    @property
    def jobs_dir(self) -> Path: ...

    def run_flows(self, flows: list[Flow], tag: str) -> list[FlowResult]: ...

    def start_process(self, host: str, argv: list[str], what: str,
                      log: Path) -> subprocess.Popen: ...

    def run_process(self, host: str, argv: list[str], timeout: float) -> str: ...

    def wait_listening(self, endpoints: list[tuple[str, int]]) -> None: ...

    def stop_processes(self, procs: list[subprocess.Popen]) -> None: ...

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen: ...

    def ping_rtt_s(self, src: str, dst: str) -> float | None: ...

    def set_initial_window(self, segments: int) -> None: ...

    def writing_in(self, path: Path, hosts: list[str]) -> AbstractContextManager[None]: ...

    def netstat(self, host: str, key: str) -> int: ...

    def dataplane(self) -> Any: ...

    def set_ports(self, ports: list[tuple[str, int]] | tuple[tuple[str, int], ...],
                  up: bool) -> None: ...

    def kill_controller(self) -> None: ...

    def controller_report(self) -> str | None: ...


class Context(Protocol):
    """The run, as an experiment uses it (testbed/runner.py's RunContext)."""
    spec: Spec
    topo: Topology
    out_dir: Path
    log: Callable[[str], None]
    experiment: int | None  # the spec index of the running experiment

    def raw_name(self, name: str) -> str: ...

    def fabric(self, topo: Topology, routing: str, label: str, *,
               qos: QosConfig | None = None, hosts: HostConfig | None = None,
               hedera: dict[str, Any] | None = None, jobs: bool = False,
               circuits: dict[str, Any] | None = None, udp_hash: bool = False,
               **link_overrides: Any) -> AbstractContextManager[Phase]: ...

    def traffic_phase(self, fab: Phase, outcome: Outcome,
                      label: str) -> AbstractContextManager[dict]: ...

    def write_csv(self, name: str, header: list[str], rows: list[list]) -> Path: ...

    def faults(self, fab: Phase, faults: list[FabricFault], label: str,
               progress: Callable[[], int] | None = None
               ) -> AbstractContextManager[list[dict]]: ...

    def congestion_controls(self) -> list[str]: ...

    def cc_trace(self, t0: float, t1: float) -> list[list]: ...

    def qdisc_sampler(self, ifnames: list[str], rate_hz: float) -> Any: ...

    def class_sampler(self, dp: Any, slots: list[tuple[int, int]], rate_hz: float = 1000.0,
                      paired: tuple[int, int] | None = None) -> Any: ...


@dataclass
class Outcome:
    """What an experiment returns: headline metrics and fidelity warnings."""
    headline: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # what broke without a fault of the spec to explain it (pings lost, flows that carried
    # nothing): the run ends "degraded" instead of "ok"
    degraded: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Experiment:
    """One registered experiment type: its spec type, its runner, its load model (what
    `testbed plan` prices: testbed/experiments/load.py) and its plots."""
    spec: type
    run: Callable[[Context, Any], Outcome]
    load: LoadModel
    plots: dict[str, CsvPlot] = field(default_factory=dict)  # metrics CSV -> its plot
    dir_plots: tuple[DirPlot, ...] = ()
    expect: ExpectModel | None = None  # what its models expect, shown by `testbed plan`

    @property
    def name(self) -> str:
        return type_name(self.spec)


def register(*experiments: Experiment) -> dict[str, Experiment]:
    """Make each experiment's spec type loadable (the spec's `experiments[i].type`) and
    return them by name."""
    for e in experiments:
        ExperimentSpec.register(e.spec)
    return {e.name: e for e in experiments}


def check_cc(results: list[Any], expected: str, outcome: Outcome, label: str) -> list[str]:
    """The congestion controls the senders used (iperf3 reports each connection's); a
    warning when it is not the one configured."""
    used = sorted({r.sender_cc for r in results})
    if used != [expected]:
        outcome.warnings.append(f"{label}: senders used {used}, not {expected}")
    return used


def require_congestion_controls(ctx: Context, ccs: list[str], who: str) -> None:
    """TestbedError naming the first of `ccs` the hosts cannot select here."""
    available = ctx.congestion_controls()
    if missing := [cc for cc in ccs if cc not in available]:
        raise TestbedError(f"{who}: congestion control {missing[0]} is not available "
                           f"({' '.join(available)})")


def ecn_congestion_control(available: list[str]) -> str:
    """What ECN phases run: DCTCP (the kernel's, or the testbed's BPF program where the
    kernel has none), else ECN-enabled cubic."""
    return "dctcp" if "dctcp" in available else "cubic"


def slug(label: str) -> str:
    """A label as a file name: letters and digits, the rest as dashes."""
    return "".join(c if c.isalnum() else "-" for c in label).strip("-")

