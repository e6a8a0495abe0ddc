"""Experiment specs: YAML loaded strictly into frozen dataclasses.

An unknown key or a wrong type is an error naming the field's path (`links.buffer_pkts`);
semantic checks follow; the result is frozen. `testbed validate SPEC` runs exactly this,
offline.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from controllers.flowsched import SA_ITERATIONS
from topologies import TopologyError, build, patterns
from topologies.model import Topology

from .fabric import HostConfig, LinkConfig
from .qos import EcnProfile, PfcConfig, QosConfig, QosError, TrafficClass
from .qos import validate as validate_qos


class SpecError(ValueError):
    """A spec is invalid; the message starts with the path of the bad field."""


@dataclass(frozen=True, kw_only=True)
class TopologySpec:
    kind: str = "fattree"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HederaSpec:
    """Hedera's scheduler (routing: hedera): its period, the elephant threshold as a fraction
    of the host NIC, the idle timeout of per-flow entries, the routing new flows start on
    (ecmp as in the paper; single makes every collision certain, for tests), and the
    placement: Global First Fit (gff) or Simulated Annealing (annealing, with its number of
    iterations per period and its seed)."""
    period_s: float = 5.0
    elephant_fraction: float = 0.1
    idle_timeout_s: int = 10
    base: Literal["ecmp", "single"] = "ecmp"
    placement: Literal["gff", "annealing"] = "gff"
    annealing_iterations: int = SA_ITERATIONS
    annealing_seed: int = 0


@dataclass(frozen=True, kw_only=True)
class FlowPriority:
    """Priority flow scheduling: the controller gives each TCP flow a DSCP at its ingress
    edge (which the switches' traffic classes act on), from a policy: by_port (`ports`:
    {tcp port: dscp}, `default`), by_hosts (flows among `hosts` get `dscp`, the rest
    `default`), small_first (a flow is `high` until it has sent `threshold_bytes`, then
    `low`), or plugin (`plugin`: "file.py:Class" or "module:Class", built with `args`, whose
    dscp(flow) decides). controllers/flowsched.py has the policies."""
    policy: Literal["none", "by_port", "by_hosts", "small_first", "plugin"] = "none"
    ports: dict[int, int] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    dscp: int = 46
    default: int | None = None
    threshold_bytes: int = 100_000
    high: int = 46
    low: int = 0
    plugin: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    period_s: float = 1.0  # how often flows' bytes are read for the policy (without hedera)


@dataclass(frozen=True, kw_only=True)
class ControllerSpec:
    routing: Literal["ecmp", "single", "hedera"] = "ecmp"
    plugins: list[str] = field(default_factory=list)
    hedera: HederaSpec = field(default_factory=HederaSpec)
    flow_priority: FlowPriority = field(default_factory=FlowPriority)


@dataclass(frozen=True, kw_only=True)
class Reachability:
    type: Literal["reachability"] = "reachability"
    count: int = 3
    interval_s: float = 0.2


@dataclass(frozen=True, kw_only=True)
class LinkCalibration:
    type: Literal["link_calibration"] = "link_calibration"
    rates_mbps: list[float] = field(default_factory=lambda: [10.0, 50.0, 100.0])
    duration_s: float = 10.0
    omit_s: float = 2.0


@dataclass(frozen=True, kw_only=True)
class QueueCalibration:
    type: Literal["queue_calibration"] = "queue_calibration"
    rate_mbps: float = 20.0
    access_rate_mbps: float = 100.0
    buffer_pkts: int = 100
    duration_s: float = 15.0
    sample_hz: float = 200.0


@dataclass(frozen=True, kw_only=True)
class Permutation:
    type: Literal["permutation"] = "permutation"
    patterns: list[str] = field(default_factory=lambda: ["stride:8", "randbij"])
    seed: int = 1  # repeat r of a seeded pattern uses seed + r
    # finite flows of this many bytes instead of long ones: their completion times are
    # measured, against one flow of the same size alone on the idle fabric (slowdown);
    # duration_s is then the budget they must finish within
    flow_bytes: int | None = None
    # nonblocking: the same hosts and flows on one non-blocking switch (the ideal reference);
    # hedera places elephants as controller.hedera.placement says, hedera_sa with Simulated
    # Annealing whatever it says (to compare both in one run)
    routings: list[Literal["nonblocking", "ecmp", "single", "hedera", "hedera_sa"]] = field(
        default_factory=lambda: ["single", "ecmp"])
    duration_s: float = 20.0
    omit_s: float = 3.0
    repeats: int = 1


@dataclass(frozen=True, kw_only=True)
class EcnQueue:
    """DCTCP's queue-occupancy experiment (Alizadeh et al. 2010, as reproduced on
    Mininet-HiFi): `senders` long flows into one receiver through a `rate_mbps` bottleneck
    with `buffer_pkts`, once with drop-tail TCP and once with marking at `k_pkts`."""
    type: Literal["ecn_queue"] = "ecn_queue"
    senders: int = 2
    rate_mbps: float = 100.0
    access_rate_mbps: float = 1000.0
    buffer_pkts: int = 425
    k_pkts: float = 20.0
    duration_s: float = 20.0
    omit_s: float = 3.0
    sample_hz: float = 1000.0


@dataclass(frozen=True, kw_only=True)
class PriorityQueues:
    """Two classes share one bottleneck port, saturated with UDP: strict priority (the high
    class keeps its offered load) and weighted round robin (shares follow the weights)."""
    type: Literal["priority"] = "priority"
    rate_mbps: float = 20.0
    high_load: float = 0.6  # offered load of the high class, fraction of the bottleneck
    low_load: float = 1.0
    weights: list[int] = field(default_factory=lambda: [3, 1])
    duration_s: float = 10.0
    omit_s: float = 2.0


INCAST_VARIANTS = ("lossy", "ecn", "pfc", "rto")


@dataclass(frozen=True, kw_only=True)
class Incast:
    """TCP incast (Phanishayee 2008, Vasudevan 2009): N synchronized senders return a fixed
    block split N ways to one reader through a shallow buffer; goodput and TCP timeouts vs N,
    for a lossy fabric, ECN marking, PFC on a lossless class, and a lower RTO minimum."""
    type: Literal["incast"] = "incast"
    senders: list[int] = field(default_factory=lambda: [1, 2, 4, 6, 8, 10, 12, 15])
    variants: list[str] = field(default_factory=lambda: list(INCAST_VARIANTS))
    rate_mbps: float = 100.0
    buffer_pkts: int = 32
    block_bytes: int = 1_000_000
    rounds: int = 20
    burst_us: int = 1000  # HTB catch-up allowance on switch ports, see docs/FIDELITY.md
    k_pkts: float = 8.0
    rto_min_us: int = 5000
    xoff_bytes: int = 12000
    xon_bytes: int = 6000
    headroom_bytes: int = 64000  # in flight while the pause takes effect (ms here, FIDELITY.md)
    dscp: int = 26


VICTIM_PHASES = ("no-incast", "lossy", "pfc", "pfc+ecn")


@dataclass(frozen=True, kw_only=True)
class PfcVictim:
    """PFC congestion spreading (Guo et al. 2016; DCQCN, Zhu et al. 2015) on a leaf-spine with
    one spine: `incast_senders` on leaf 2 send to one receiver on leaf 1; a victim flow from
    leaf 2 to an idle receiver on leaf 3 shares only leaf 2's uplink with them. Victim
    goodput and pauses per link for each phase."""
    type: Literal["pfc_victim"] = "pfc_victim"
    phases: list[str] = field(default_factory=lambda: list(VICTIM_PHASES))
    host_rate_mbps: float = 100.0
    uplink_rate_mbps: float = 300.0
    incast_senders: int = 3
    duration_s: float = 15.0
    omit_s: float = 3.0
    mtu_bytes: int = 9000  # 4 switch hops at 200 Mb/s: jumbo frames keep OVS below CPU limit
    buffer_pkts: int = 32  # the lossy phase's buffer per port
    xoff_bytes: int = 36000
    xon_bytes: int = 18000
    headroom_bytes: int = 160000
    k_bytes: int = 20000
    burst_us: int = 1000
    dscp: int = 26


SYNCS = ("ring", "ps", "local")
COMPRESSIONS = ("none", "fp16", "topk", "qsgd", "sign")
MODELS = ("mlp", "cnn", "transformer")
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
    local_steps: int = 4               # local SGD: average every H steps
    compression: str = "none"          # none | fp16 | topk | qsgd | sign
    topk_ratio: float = 0.01
    qsgd_levels: int = 16
    priority: str = "none"             # none (DDP buckets) | fifo | p3 (layer-wise, ring)
    bucket_mb: float = 25.0

    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.sync]
        if self.sync == "ps":
            parts.append(f"{self.ps_shards}x{self.ps_placement[:3]}-{self.consistency}")
            if self.consistency == "ssp":
                parts[-1] += str(self.staleness)
        if self.sync == "local":
            parts.append(f"h{self.local_steps}")
        if self.compression != "none":
            parts.append(self.compression)
        if self.priority != "none":
            parts.append(self.priority)
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
class Training:
    """Training jobs of real Gloo workers in the emulated hosts, one fabric per
    (topology, link rate); every job's iteration and communication times next to the
    analytical model's."""
    type: Literal["training"] = "training"
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
    fault: Fault | None = None
    p3_dscp: list[int] = field(default_factory=lambda: [46, 34, 26])  # highest level first
    sample_hz: float = 200.0           # every switch queue (BPF counters, shared memory)


EXPERIMENTS = {cls.__dataclass_fields__["type"].default: cls
               for cls in (Reachability, LinkCalibration, QueueCalibration, Permutation,
                           EcnQueue, PriorityQueues, Incast, PfcVictim, Training)}


@dataclass(frozen=True, kw_only=True)
class Spec:
    name: str
    description: str = ""
    topology: TopologySpec = field(default_factory=TopologySpec)
    links: LinkConfig = field(default_factory=LinkConfig)
    hosts: HostConfig = field(default_factory=HostConfig)
    controller: ControllerSpec = field(default_factory=ControllerSpec)
    qos: QosConfig | None = None
    experiments: list[Any] = field(default_factory=list)

    def build_topology(self) -> Topology:
        return build(self.topology.kind, **self.topology.params)


# ---- strict conversion ------------------------------------------------------------------

def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string",
            dict: "a mapping", list: "a list"}.get(tp, str(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path)
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{path}: must be one of {', '.join(map(str, args))} (got {value!r})")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise SpecError(f"{path}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{path}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, path)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp in (bool, str):
        if not isinstance(value, tp):
            raise SpecError(f"{path}: expected {_type_name(tp)}, got {value!r}")
        return value
    raise SpecError(f"{path}: unsupported field type {tp}")


def _dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise SpecError(f"{path or 'spec'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            raise SpecError(f"{path + '.' if path else ''}{key}: unknown key "
                            f"(known: {', '.join(names)})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        fpath = f"{path}.{f.name}" if path else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{fpath}: required")
            continue
        if cls is Spec and f.name == "experiments":
            kwargs[f.name] = [_experiment(v, f"{fpath}[{i}]") for i, v in
                              enumerate(_convert(list[Any], data[f.name], fpath))]
        else:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], fpath)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{path or 'spec'}: {exc}") from None


def _experiment(data: Any, path: str) -> Any:
    if not isinstance(data, dict) or "type" not in data:
        raise SpecError(f"{path}.type: required (one of {', '.join(EXPERIMENTS)})")
    cls = EXPERIMENTS.get(data["type"])
    if cls is None:
        raise SpecError(f"{path}.type: unknown experiment {data['type']!r} "
                        f"(one of {', '.join(EXPERIMENTS)})")
    return _dataclass(cls, data, path)


# ---- semantic checks --------------------------------------------------------------------

def _positive(value: float | None, path: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value is None or value <= 0:
        raise SpecError(f"{path}: must be > 0 (got {value})")


def check(spec: Spec) -> Topology:
    """Semantic checks; returns the topology the spec describes."""
    try:
        topo = spec.build_topology()
    except TopologyError as exc:
        raise SpecError(f"topology.params: {exc}") from None
    links = spec.links
    if (links.buffer_pkts is None) == (links.buffer_bytes is None):
        raise SpecError("links: set exactly one of buffer_pkts and buffer_bytes "
                        "(buffer_pkts: null to use buffer_bytes)")
    _positive(links.buffer_pkts, "links.buffer_pkts", allow_none=True)
    _positive(links.buffer_bytes, "links.buffer_bytes", allow_none=True)
    if links.buffer_bytes is not None and links.buffer_bytes < links.mtu_bytes + 14:
        raise SpecError(f"links.buffer_bytes: must hold one full-size frame "
                        f"(>= {links.mtu_bytes + 14}), got {links.buffer_bytes}")
    _positive(links.rate_mbps, "links.rate_mbps", allow_none=True)
    if not 0 <= links.burst_us <= 1_000_000:
        raise SpecError(f"links.burst_us: must be in 0..1000000 (got {links.burst_us})")
    if not 576 <= links.mtu_bytes <= 9000:
        raise SpecError(f"links.mtu_bytes: must be in 576..9000 (got {links.mtu_bytes})")
    if links.drop not in ("head", "tail"):
        raise SpecError(f"links.drop: must be head or tail (got {links.drop!r})")
    _positive(links.host_queue_pkts, "links.host_queue_pkts")
    if links.delay_us < 0:
        raise SpecError(f"links.delay_us: must be >= 0 (got {links.delay_us})")
    if not 0 <= links.loss_pct <= 100:
        raise SpecError(f"links.loss_pct: must be in [0, 100] (got {links.loss_pct})")
    if not spec.hosts.congestion_control.isidentifier():
        raise SpecError(f"hosts.congestion_control: not an algorithm name "
                        f"({spec.hosts.congestion_control!r})")
    if spec.qos is not None:
        try:
            validate_qos(spec.qos, "qos", links.mtu_bytes, links.buffer_pkts, links.buffer_bytes)
        except QosError as exc:
            raise SpecError(str(exc)) from None
    relay = any(host.relay for host in topo.hosts)
    _check_flow_priority(spec.controller.flow_priority, topo, relay)
    if relay and spec.controller.routing == "hedera":
        raise SpecError("controller.routing: hedera needs a switched fabric; BCube's servers "
                        "route for themselves")
    h = spec.controller.hedera
    if not h.period_s > 0:
        raise SpecError(f"controller.hedera.period_s: must be > 0 (got {h.period_s:g})")
    if not 0 < h.elephant_fraction <= 1:
        raise SpecError(f"controller.hedera.elephant_fraction: must be in (0, 1] "
                        f"(got {h.elephant_fraction:g})")
    if h.idle_timeout_s < 1:
        raise SpecError(f"controller.hedera.idle_timeout_s: must be >= 1 "
                        f"(got {h.idle_timeout_s})")
    if h.annealing_iterations < 1:
        raise SpecError(f"controller.hedera.annealing_iterations: must be >= 1 "
                        f"(got {h.annealing_iterations})")
    for i, plugin in enumerate(spec.controller.plugins):
        if plugin.endswith(".py") and not Path(plugin).exists():
            raise SpecError(f"controller.plugins[{i}]: file {plugin} does not exist")
    if not spec.experiments:
        raise SpecError("experiments: at least one experiment is required")
    for i, exp in enumerate(spec.experiments):
        _check_experiment(exp, f"experiments[{i}]", topo)
    return topo


def _check_experiment(exp: Any, path: str, topo: Topology) -> None:
    for name in ("duration_s", "interval_s", "rate_mbps", "access_rate_mbps", "sample_hz"):
        if hasattr(exp, name):
            _positive(getattr(exp, name), f"{path}.{name}")
    if isinstance(exp, Reachability) and exp.count < 1:
        raise SpecError(f"{path}.count: must be >= 1 (got {exp.count})")
    if isinstance(exp, LinkCalibration):
        if not exp.rates_mbps:
            raise SpecError(f"{path}.rates_mbps: at least one rate")
        for j, r in enumerate(exp.rates_mbps):
            _positive(r, f"{path}.rates_mbps[{j}]")
    if isinstance(exp, QueueCalibration):
        _positive(exp.buffer_pkts, f"{path}.buffer_pkts")
        if exp.access_rate_mbps <= exp.rate_mbps:
            raise SpecError(f"{path}.access_rate_mbps: must exceed rate_mbps so that the "
                            "queue builds at the switch, not in the sender")
        if exp.sample_hz > 2000:
            raise SpecError(f"{path}.sample_hz: at most 2000 (got {exp.sample_hz})")
    if isinstance(exp, EcnQueue):
        if not 1 <= exp.senders <= 64:
            raise SpecError(f"{path}.senders: must be in 1..64 (got {exp.senders})")
        _positive(exp.buffer_pkts, f"{path}.buffer_pkts")
        _positive(exp.k_pkts, f"{path}.k_pkts")
        if exp.k_pkts >= exp.buffer_pkts:
            raise SpecError(f"{path}.k_pkts: must be below buffer_pkts ({exp.k_pkts:g} >= "
                            f"{exp.buffer_pkts}); nothing would ever be marked")
        if exp.access_rate_mbps <= exp.rate_mbps:
            raise SpecError(f"{path}.access_rate_mbps: must exceed rate_mbps")
        if exp.omit_s >= exp.duration_s:
            raise SpecError(f"{path}.omit_s: must be shorter than duration_s")
        if exp.sample_hz > 5000:
            raise SpecError(f"{path}.sample_hz: at most 5000 (got {exp.sample_hz})")
    if isinstance(exp, PriorityQueues):
        for name in ("high_load", "low_load"):
            if not 0 < getattr(exp, name) <= 2:
                raise SpecError(f"{path}.{name}: a fraction of the bottleneck in (0, 2]")
        if len(exp.weights) != 2 or min(exp.weights) < 1:
            raise SpecError(f"{path}.weights: two integers >= 1 (got {exp.weights})")
        if exp.omit_s >= exp.duration_s:
            raise SpecError(f"{path}.omit_s: must be shorter than duration_s")
    if isinstance(exp, Incast):
        if not exp.senders or min(exp.senders) < 1 or max(exp.senders) > 63:
            raise SpecError(f"{path}.senders: sender counts in 1..63 (got {exp.senders})")
        for j, v in enumerate(exp.variants):
            if v not in INCAST_VARIANTS:
                raise SpecError(f"{path}.variants[{j}]: one of {', '.join(INCAST_VARIANTS)} "
                                f"(got {v!r})")
        for name in ("buffer_pkts", "block_bytes", "rounds", "k_pkts", "rto_min_us"):
            _positive(getattr(exp, name), f"{path}.{name}")
        if exp.k_pkts >= exp.buffer_pkts:
            raise SpecError(f"{path}.k_pkts: must be below buffer_pkts")
        if not 0 <= exp.dscp <= 63:
            raise SpecError(f"{path}.dscp: DSCP must be in 0..63 (got {exp.dscp})")
        _check_pfc_fields(exp, path, 1500)
        try:
            validate_qos(_incast_qos(exp, "pfc"), path, 1500, exp.buffer_pkts, None)
        except QosError as exc:
            raise SpecError(str(exc)) from None
    if isinstance(exp, PfcVictim):
        for j, ph in enumerate(exp.phases):
            if ph not in VICTIM_PHASES:
                raise SpecError(f"{path}.phases[{j}]: one of {', '.join(VICTIM_PHASES)} "
                                f"(got {ph!r})")
        if not 1 <= exp.incast_senders <= 16:
            raise SpecError(f"{path}.incast_senders: must be in 1..16")
        if exp.omit_s >= exp.duration_s:
            raise SpecError(f"{path}.omit_s: must be shorter than duration_s")
        if not 576 <= exp.mtu_bytes <= 9000:
            raise SpecError(f"{path}.mtu_bytes: must be in 576..9000")
        _check_pfc_fields(exp, path, exp.mtu_bytes)
        try:
            validate_qos(_victim_qos(exp, "pfc+ecn"), path, exp.mtu_bytes, exp.buffer_pkts, None)
        except QosError as exc:
            raise SpecError(str(exc)) from None
    if isinstance(exp, Training):
        _check_training(exp, path, topo)
    if isinstance(exp, Permutation):
        if exp.omit_s >= exp.duration_s:
            raise SpecError(f"{path}.omit_s: must be shorter than duration_s")
        if exp.repeats < 1:
            raise SpecError(f"{path}.repeats: must be >= 1")
        if not exp.routings:
            raise SpecError(f"{path}.routings: at least one routing mode")
        if exp.flow_bytes is not None and exp.flow_bytes < 1:
            raise SpecError(f"{path}.flow_bytes: must be >= 1 (got {exp.flow_bytes})")
        if {"hedera", "hedera_sa"} & set(exp.routings) and any(h.relay for h in topo.hosts):
            raise SpecError(f"{path}.routings: hedera needs a switched fabric; BCube's servers "
                            "route for themselves")
        for j, pattern in enumerate(exp.patterns):
            parse_pattern(pattern, len(topo.hosts), f"{path}.patterns[{j}]")


def _one_of(value: str, choices: tuple, path: str) -> None:
    if value not in choices:
        raise SpecError(f"{path}: unknown {value!r} (one of {', '.join(choices)})")


def training_topologies(exp: "Training", topo: Topology) -> list[Topology]:
    """The fabrics a training experiment runs on (the spec's when it names none)."""
    if not exp.topologies:
        return [topo]
    return [build(t.kind, **t.params) for t in exp.topologies]


def job_hosts_needed(job: TrainingJob, workers: int) -> int:
    return workers + (job.ps_shards if job.sync == "ps" and job.ps_placement == "dedicated"
                      else 0)


def _check_training(exp: "Training", path: str, topo: Topology) -> None:
    _one_of(exp.model, MODELS, f"{path}.model")
    _one_of(exp.data, DATASETS, f"{path}.data")
    for name in ("width", "depth", "iters", "batch", "lr", "timeout_s", "job_timeout_s"):
        _positive(getattr(exp, name), f"{path}.{name}")
    if not 0 <= exp.warmup_iters < exp.iters:
        raise SpecError(f"{path}.warmup_iters: must be in 0..iters-1 (got {exp.warmup_iters})")
    if exp.eval_every < 0:
        raise SpecError(f"{path}.eval_every: must be >= 0 (got {exp.eval_every})")
    for j, rate in enumerate(exp.rates_mbps):
        _positive(rate, f"{path}.rates_mbps[{j}]")
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
        jp = f"{path}.jobs[{j}]"
        _one_of(job.sync, SYNCS, f"{jp}.sync")
        _one_of(job.consistency, ("bsp", "ssp", "asp"), f"{jp}.consistency")
        _one_of(job.ps_placement, ("dedicated", "colocated"), f"{jp}.ps_placement")
        _one_of(job.priority, ("none", "fifo", "p3"), f"{jp}.priority")
        _one_of(job.compression, COMPRESSIONS, f"{jp}.compression")
        if not 0 < job.topk_ratio <= 1:
            raise SpecError(f"{jp}.topk_ratio: must be in (0, 1] (got {job.topk_ratio})")
        if not 1 <= job.qsgd_levels <= 127:
            raise SpecError(f"{jp}.qsgd_levels: must be in 1..127 (got {job.qsgd_levels})")
        if job.staleness < 0:
            raise SpecError(f"{jp}.staleness: must be >= 0 (got {job.staleness})")
        _positive(job.local_steps, f"{jp}.local_steps")
        _positive(job.bucket_mb, f"{jp}.bucket_mb")
        if job.priority != "none" and job.sync != "ring":
            raise SpecError(f"{jp}.priority: layer-wise priority scheduling is for sync: ring")
        if job.priority != "none" and job.compression != "none":
            raise SpecError(f"{jp}.priority: not combined with compression")
        if job.sync == "local" and job.compression != "none":
            raise SpecError(f"{jp}.compression: local SGD averages parameters uncompressed")
        for n in (exp.workers or [job.workers]):
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
    names = {h.name for t in fabrics for h in t.hosts}
    for j, bg in enumerate(exp.background):
        bp = f"{path}.background[{j}]"
        _one_of(bg.kind, ("iperf", "all_to_all", "incast"), f"{bp}.kind")
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
        _positive(bg.udp_mbps, f"{bp}.udp_mbps", allow_none=True)
        _positive(bg.block_bytes, f"{bp}.block_bytes")
    if exp.fault is not None:
        most = min(exp.workers or [job.workers for job in exp.jobs])
        if not 0 <= exp.fault.worker < most:
            raise SpecError(f"{path}.fault.worker: an index below {most} (got {exp.fault.worker})")
        if not 0 <= exp.fault.at_iter < exp.iters:
            raise SpecError(f"{path}.fault.at_iter: must be in 0..iters-1")
    if exp.straggler is not None:
        st = exp.straggler
        most = min(exp.workers or [job.workers for job in exp.jobs])
        if not 0 <= st.worker < most:
            raise SpecError(f"{path}.straggler.worker: an index below {most} (got {st.worker})")
        _positive(st.rate_mbps, f"{path}.straggler.rate_mbps", allow_none=True)
        if st.compute_delay_ms < 0:
            raise SpecError(f"{path}.straggler.compute_delay_ms: must be >= 0")


def _check_pfc_fields(exp: Any, path: str, mtu_bytes: int) -> None:
    """PFC thresholds given as experiment fields, checked under their own names."""
    frame = mtu_bytes + 14
    for name in ("xoff_bytes", "xon_bytes", "headroom_bytes"):
        _positive(getattr(exp, name), f"{path}.{name}")
    if exp.xon_bytes >= exp.xoff_bytes:
        raise SpecError(f"{path}.xon_bytes: must be below xoff_bytes "
                        f"({exp.xon_bytes} >= {exp.xoff_bytes})")
    if exp.xoff_bytes < frame:
        raise SpecError(f"{path}.xoff_bytes: must hold one full-size frame (>= {frame})")
    if exp.headroom_bytes < 2 * frame:
        raise SpecError(f"{path}.headroom_bytes: at least two full-size frames ({2 * frame})")


def _incast_qos(exp: "Incast", variant: str) -> QosConfig:
    """The classes an incast variant runs with (also used by the experiment)."""
    ecn = EcnProfile(k=exp.k_pkts) if variant == "ecn" else None
    classes = [TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts, ecn=ecn)]
    pfc = None
    if variant == "pfc":
        classes.append(TrafficClass(name="lossless", dscp=[exp.dscp], priority=3,
                                    lossless=True))
        pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                        headroom_bytes=exp.headroom_bytes)
    else:
        classes[0] = dataclasses.replace(classes[0], dscp=sorted({0, exp.dscp}))
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def _victim_qos(exp: "PfcVictim", phase: str) -> QosConfig:
    lossless = phase.startswith("pfc")
    ecn = EcnProfile(k=exp.k_bytes, unit="bytes") if phase == "pfc+ecn" else None
    data = TrafficClass(name="data", dscp=[0] if lossless else sorted({0, exp.dscp}),
                        buffer_pkts=exp.buffer_pkts)
    classes = [data]
    pfc = None
    if lossless:
        classes.append(TrafficClass(name="lossless", dscp=[exp.dscp], priority=3,
                                    lossless=True, ecn=ecn))
        pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                        headroom_bytes=exp.headroom_bytes)
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def _check_flow_priority(fp: FlowPriority, topo: Topology, relay: bool) -> None:
    path = "controller.flow_priority"
    if fp.policy == "none":
        return
    if relay:
        raise SpecError(f"{path}.policy: flow priorities need a switched fabric; BCube's "
                        "servers route for themselves")
    dscps = {"dscp": fp.dscp, "high": fp.high, "low": fp.low,
             **({"default": fp.default} if fp.default is not None else {}),
             **{f"ports[{p}]": d for p, d in fp.ports.items()}}
    for name, d in dscps.items():
        if not isinstance(d, int) or not 0 <= d <= 63:
            raise SpecError(f"{path}.{name}: a DSCP must be an integer in 0-63 (got {d!r})")
    for p in fp.ports:
        if not isinstance(p, int) or not 0 < p < 65536:
            raise SpecError(f"{path}.ports: {p!r} is not a TCP port")
    if fp.policy == "by_port" and not fp.ports:
        raise SpecError(f"{path}.ports: by_port needs at least one port")
    if fp.policy == "by_hosts":
        names = {h.name for h in topo.hosts}
        unknown = [h for h in fp.hosts if h not in names]
        if not fp.hosts or unknown:
            raise SpecError(f"{path}.hosts: by_hosts needs hosts of the topology "
                            f"(unknown: {unknown})")
    if fp.policy == "small_first" and fp.threshold_bytes < 1:
        raise SpecError(f"{path}.threshold_bytes: must be >= 1 (got {fp.threshold_bytes})")
    if fp.policy == "plugin":
        where, _, cls = fp.plugin.rpartition(":")
        if not where or not cls:
            raise SpecError(f"{path}.plugin: expected 'file.py:Class' or 'module:Class' "
                            f"(got {fp.plugin!r})")
        if where.endswith(".py") and not Path(where).exists():
            raise SpecError(f"{path}.plugin: file {where} does not exist")
    if not fp.period_s > 0:
        raise SpecError(f"{path}.period_s: must be > 0 (got {fp.period_s:g})")


def parse_pattern(text: str, n_hosts: int, path: str = "pattern"):
    """A traffic pattern name (topologies/patterns.py), checked against the fabric."""
    if n_hosts < 2:
        raise SpecError(f"{path}: a traffic pattern needs at least 2 hosts")
    try:
        return patterns.parse(text, n_hosts, path)
    except patterns.PatternError as exc:
        raise SpecError(str(exc)) from None


def load(path: str | Path) -> tuple[Spec, Topology]:
    """Load, convert, check. Raises SpecError with the path of the first bad field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML ({exc})") from None
    return loads(data)


def loads(data: Any) -> tuple[Spec, Topology]:
    spec = _dataclass(Spec, data, "")
    return spec, check(spec)
