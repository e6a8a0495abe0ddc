"""The spec: a YAML file loaded strictly into frozen dataclasses, then checked.

An unknown key or a wrong type is an error naming the field's path (`links.buffer_pkts`);
semantic checks follow; the result is frozen. Experiment types register their spec class
with `ExperimentSpec.register` (testbed/experiments/); the loader picks the class by the
entry's `type`. `testbed validate SPEC` runs exactly this, offline.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from topologies import TopologyError, build, parse_params
from topologies.model import Topology

from .capture import CaptureSpec
from .cluster import ClusterSpec
from .controller import ControllerSpec
from .forwarding import ForwardingSpec
from .limits import check_tree
from .loader import SpecError, from_data, read_yaml
from .network import HostConfig, LinkConfig, TopologySpec, positive
from .qos import QosConfig, QosError
from .qos import validate as validate_qos
from .sweep import SweepSpec, with_sets, with_value

E = TypeVar("E", bound=type)

# fields that, wherever an experiment has them, must be > 0
POSITIVE_FIELDS = ("duration_s", "interval_s", "rate_mbps", "access_rate_mbps", "sample_hz")


# a spec's name becomes a directory (results/<name>-<stamp>) and a file name (the run's
# record): nothing that could leave those folders or need quoting
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(name: str) -> None:
    """SpecError unless `name` is safe as one path component (says which characters are
    not)."""
    if NAME_RE.fullmatch(name):
        return
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
    why = (f"characters {' '.join(repr(c) for c in bad)} not allowed" if bad
           else "empty" if not name else "more than 64 characters" if len(name) > 64
           else "must start with a letter or digit")
    raise SpecError(f"name: {why} (got {name!r}); use letters, digits, '.', '_' and '-': "
                    "it names the results directory and the run's record")


def type_name(spec_type: type) -> str:
    """The `type` an experiment's spec class is named by in a spec (its field's default)."""
    field_ = next(f for f in dataclasses.fields(spec_type) if f.name == "type")
    return str(field_.default)


class ExperimentSpec:
    """Base of every experiment's spec type (a frozen, kw_only dataclass with a `type`
    Literal field): `check` raises SpecError naming the field."""
    registry: ClassVar[dict[str, type]] = {}
    on_cluster: ClassVar[bool] = False  # runs on a fabric split across servers (`cluster`)
    type: str

    @classmethod
    def register(cls, spec_type: E) -> E:
        """Class decorator: make `spec_type` loadable under its `type` name."""
        name = type_name(spec_type)
        if name in cls.registry and cls.registry[name] is not spec_type:
            raise ValueError(f"experiment type {name!r} registered twice")
        cls.registry[name] = spec_type
        return spec_type

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        """Semantic checks of this experiment (the common ones have run)."""

    def check_cluster(self, path: str, spec: Spec, topo: Topology) -> None:
        """What of this experiment a fabric split across servers cannot run (called for an
        `on_cluster` experiment of a spec with a `cluster`)."""

    def check_common(self, path: str) -> None:
        for name in POSITIVE_FIELDS:
            if hasattr(self, name):
                positive(getattr(self, name), f"{path}.{name}")
        if hasattr(self, "omit_s") and self.omit_s >= self.duration_s:  # type: ignore[attr-defined]
            raise SpecError(f"{path}.omit_s: must be shorter than duration_s")


@dataclass(frozen=True, kw_only=True)
class Spec:
    name: str
    description: str = ""
    topology: TopologySpec = field(default_factory=TopologySpec)
    links: LinkConfig = field(default_factory=LinkConfig)
    hosts: HostConfig = field(default_factory=HostConfig)
    controller: ControllerSpec = field(default_factory=ControllerSpec)
    qos: QosConfig | None = None
    # which Open vSwitch datapath forwards: user (measured), kernel or auto (config/datapath.py)
    datapath: Literal["user", "kernel", "auto"] = "user"
    # how many ovs-vswitchd processes forward the fabric (config/forwarding.py)
    forwarding: ForwardingSpec = field(default_factory=ForwardingSpec)
    experiments: list[ExperimentSpec] = field(default_factory=list)
    # the fabric split across servers (config/cluster.py); None: this machine alone
    cluster: ClusterSpec | None = None
    # run the spec once per point of a parameter's values or a grid (config/sweep.py)
    sweep: SweepSpec | None = None
    # packets into pcap files in the results (config/capture.py)
    capture: CaptureSpec | None = None

    def build_topology(self) -> Topology:
        return build(self.topology.kind, **self.topology.params)

    def forwarding_processes(self, topo: Topology) -> int:
        """The ovs-vswitchd processes that forward a fabric of `topo` on this machine
        (config/forwarding.py): one on a cluster's servers (each its own) and on the
        kernel datapath (or one that may be it), where no thread reads the ports."""
        if self.cluster is not None or self.datapath != "user":
            return 1
        return self.forwarding.count(topo)


def check(spec: Spec, experiments_required: bool = True) -> Topology:
    """Semantic checks; returns the topology the spec describes. A script's fabric needs no
    experiment (`experiments_required` False); `testbed run` does."""
    check_name(spec.name)
    try:
        topo = spec.build_topology()
    except TopologyError as exc:
        raise SpecError(f"topology.params: {exc}") from None
    spec.links.check()
    spec.hosts.check()
    if spec.qos is not None:
        links = spec.links
        if links.host_queue == "fair":
            raise SpecError("links.host_queue: fair and a qos section both shape the host "
                            "NICs (the class dataplane owns them); leave out one")
        try:
            validate_qos(spec.qos, "qos", links.mtu_bytes, links.buffer_pkts, links.buffer_bytes)
        except QosError as exc:
            raise SpecError(str(exc)) from None
    spec.controller.check(topo)
    spec.forwarding.check()
    if spec.forwarding.processes not in (1, "auto") and spec.datapath != "user":
        raise SpecError(f"forwarding.processes: the userspace datapath only (one thread per "
                        f"process reads its ports; datapath is {spec.datapath})")
    if spec.capture is not None:
        spec.capture.check()
        spec.capture.check_on(topo)
    if experiments_required and not spec.experiments:
        raise SpecError("experiments: at least one experiment is required")
    for i, exp in enumerate(spec.experiments):
        path = f"experiments[{i}]"
        exp.check_common(path)
        try:
            exp.check(path, spec, topo)
        except QosError as exc:
            raise SpecError(str(exc)) from None
        except TopologyError as exc:  # the fabric an experiment builds from its own fields
            raise SpecError(f"{path}: {exc}") from None
    if spec.cluster is not None:
        check_cluster(spec, topo)
    if spec.sweep is not None:
        spec.sweep.check()
    check_tree(spec)
    return topo


def check_cluster(spec: Spec, topo: Topology) -> None:
    """What a fabric split across servers can run so far (docs/CLUSTER.md, "What works").
    Each server has its own class dataplane (BPF maps in its kernel, reached through its
    agent); PFC's pause executor reads every server's maps at each packet event, which it
    cannot do over ssh, so lossless classes stay on one machine."""
    from testbed.config.placement import place

    assert spec.cluster is not None
    spec.cluster.check()
    place(topo, spec.cluster)
    if spec.qos is not None and (spec.qos.pfc is not None
                                 or any(c.lossless for c in spec.qos.classes)):
        raise SpecError("qos.pfc: PFC and lossless classes run on one machine only so far "
                        "(the pause executor reads every server's BPF maps at each event); "
                        "leave out pfc and lossless, or cluster")
    if spec.links.host_queue == "fair":
        raise SpecError("links.host_queue: fair runs on one machine only so far (its "
                        "classifier is built and loaded on this machine); use fifo, or "
                        "leave out cluster")
    if spec.capture is not None:
        raise SpecError("capture: runs on one machine only so far (each server's ports "
                        "would need their own tcpdump); leave out capture, or cluster")
    if spec.forwarding.processes not in (1, "auto"):
        raise SpecError("forwarding.processes: one per server on a cluster so far (each "
                        "server's own Open vSwitch); leave it out, or cluster")
    if spec.datapath != "user":
        raise SpecError(f"datapath: {spec.datapath}: a cluster runs the userspace datapath "
                        "(the one measured; every server's OVS is started by the testbed)")
    for i, exp in enumerate(spec.experiments):
        if not exp.on_cluster:
            can = sorted(n for n, t in ExperimentSpec.registry.items()
                         if getattr(t, "on_cluster", False))
            raise SpecError(f"experiments[{i}].type: {exp.type} does not run on a cluster yet "
                            f"(it does: {', '.join(can)})")
        exp.check_cluster(f"experiments[{i}]", spec, topo)


def loads(data: Any, experiments_required: bool = True) -> tuple[Spec, Topology]:
    """Convert and check plain data (every point of its sweep too). Raises SpecError with
    the path of the first bad field."""
    spec = from_data(Spec, data, "")
    topo = check(spec, experiments_required)
    if spec.sweep is not None:
        sweep_points(data, experiments_required)
    return spec, topo


def load(path: str | Path, experiments_required: bool = True,
         topology: str | None = None, sets: list[str] | tuple[str, ...] = ()
         ) -> tuple[Spec, Topology]:
    """Load, convert, check a YAML spec file; `topology` ("KIND [PARAM=VALUE ...]")
    replaces its topology (the same experiments on another fabric), `sets` change fields
    (`--set PATH=VALUE`, config/sweep.py)."""
    return loads(spec_data(path, topology, sets), experiments_required)


def spec_data(path: str | Path, topology: str | None = None,
              sets: list[str] | tuple[str, ...] = ()) -> Any:
    """A spec file's data as a run uses it: its topology replaced, its `--set`s applied."""
    return with_sets(with_topology(read_yaml(path), topology), sets)


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: the swept fields' values, and the spec they make."""
    index: int
    values: dict[str, Any]
    spec: Spec
    topo: Topology


def sweep_points(data: Any, experiments_required: bool = True) -> list[SweepPoint]:
    """Every point of the spec data's `sweep:`, each loaded and checked as a spec of its
    own (without the sweep); SpecError names the point and the field. Empty without a
    sweep."""
    if not isinstance(data, dict) or data.get("sweep") is None:
        return []
    sweep = from_data(SweepSpec, data["sweep"], "sweep")
    sweep.check()
    base = {k: v for k, v in data.items() if k != "sweep"}
    out = []
    for i, values in enumerate(sweep.points()):
        point = base
        what = ", ".join(f"{k}={v!r}" for k, v in values.items())
        for path, value in values.items():
            point = with_value(point, path, value, f"sweep: {path}")
        try:
            spec, topo = loads(point, experiments_required)
        except SpecError as exc:
            raise SpecError(f"sweep point {what}: {exc}") from None
        out.append(SweepPoint(i, values, spec, topo))
    return out


def with_topology(data: Any, topology: str | None) -> Any:
    """Spec data with its topology replaced by `topology` ("KIND [PARAM=VALUE ...]", the
    parameters as `testbed topo describe` takes them); unchanged for None."""
    if topology is None or not isinstance(data, dict):
        return data
    kind, *args = topology.split()
    try:
        params = parse_params(kind, args)
    except TopologyError as exc:
        raise SpecError(f"--topology: {exc}") from None
    return {**data, "topology": {"kind": kind, "params": params}}
