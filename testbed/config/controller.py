"""What the controller does: routing, Hedera's scheduler, flow priorities, plugins; and the
per-phase configuration file through which the runner hands all of it to the Ryu apps
(`ControllerConfig`, loaded by the apps with the same strict loader as the spec)."""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from topologies.kinds import own_routing, routings
from topologies.model import Topology

from .loader import SpecError, load_json

# Hedera: a flow above 10% of its host's NIC rate is an elephant
ELEPHANT_FRACTION = 0.1
# Simulated annealing's steps per period. The paper ran 1000 over its smaller state (a core
# per destination host); moving one flow at a time, it took 20000 here to reach a placement
# exceeding nothing (one exists: a k=4 Fat-Tree is rearrangeably non-blocking) for the
# random bijections randbij@0-2, started from Global First Fit's placement, in 30 of 30
# seeded runs (5000: 27, 1000: 20), about 0.1 s of one core per period for 16 elephants.
SA_ITERATIONS = 20000
CONFIG_ENV = "TESTBED_CONTROLLER_CONFIG"  # the one variable: the path of the phase's file


def check_routing(mode: str, topo: Topology, path: str,
                  extra: tuple[str, ...] = ()) -> None:
    """`mode` is a routing `topo`'s kind has, "own" (its own), or one of `extra` (an
    experiment's references, e.g. a permutation's nonblocking)."""
    known = routings(topo.kind)
    if mode not in known and mode != "own" and mode not in extra:
        raise SpecError(f"{path}: {mode!r} is not a routing of a {topo.kind} fabric; choose "
                        f"one of {', '.join(known + ('own',) + extra)}")


@dataclass(frozen=True, kw_only=True)
class HederaSpec:
    """Hedera's scheduler (routing: hedera): its period, the elephant threshold as a fraction
    of the host NIC, the idle timeout of per-flow entries, the routing new flows start on
    (ecmp as in the paper; single makes every collision certain, for tests), and the
    placement: Global First Fit (gff) or Simulated Annealing (annealing, with its number of
    iterations per period and its seed)."""
    period_s: float = 5.0
    elephant_fraction: float = ELEPHANT_FRACTION
    idle_timeout_s: int = 10
    base: Literal["ecmp", "single"] = "ecmp"
    placement: Literal["gff", "annealing"] = "gff"
    annealing_iterations: int = SA_ITERATIONS
    annealing_seed: int = 0

    def check(self) -> None:
        path = "controller.hedera"
        if not self.period_s > 0:
            raise SpecError(f"{path}.period_s: must be > 0 (got {self.period_s:g})")
        if not 0 < self.elephant_fraction <= 1:
            raise SpecError(f"{path}.elephant_fraction: must be in (0, 1] "
                            f"(got {self.elephant_fraction:g})")
        if self.idle_timeout_s < 1:
            raise SpecError(f"{path}.idle_timeout_s: must be >= 1 (got {self.idle_timeout_s})")
        if self.annealing_iterations < 1:
            raise SpecError(f"{path}.annealing_iterations: must be >= 1 "
                            f"(got {self.annealing_iterations})")


@dataclass(frozen=True, kw_only=True)
class CircuitSpec:
    """c-Through's circuit scheduler (routing cthrough, a hybrid fabric;
    controllers/circuits.py): every `period_s` the optical circuits go to the rack pairs
    that sent each other the most since the last period; a change leaves the circuits that
    change dark for `dark_ms` (the optical switch reconfiguring) before the new ones carry
    anything; `hold` >= 1 keeps the circuits unless the new choice carries more than `hold`
    times their traffic (1: always the best)."""
    period_s: float = 1.0
    dark_ms: float = 10.0
    hold: float = 1.0

    def check(self) -> None:
        path = "controller.circuits"
        if not self.period_s > 0:
            raise SpecError(f"{path}.period_s: must be > 0 (got {self.period_s:g})")
        if not 0 <= self.dark_ms <= 10_000:
            raise SpecError(f"{path}.dark_ms: must be in 0..10000 (got {self.dark_ms:g})")
        if self.dark_ms / 1000 >= self.period_s:
            raise SpecError(f"{path}.dark_ms: {self.dark_ms:g} ms is not shorter than the "
                            f"period ({self.period_s:g} s)")
        if not self.hold >= 1:
            raise SpecError(f"{path}.hold: must be >= 1 (got {self.hold:g})")


@dataclass(frozen=True, kw_only=True)
class FlowPriority:
    """Priority flow scheduling: the controller gives each TCP flow a DSCP at its ingress
    edge (which the switches' traffic classes act on), from a policy: by_port (`ports`:
    {tcp port: dscp}, `default`), by_hosts (flows among `hosts` get `dscp`, the rest
    `default`), small_first (a flow is `high` until it has sent `threshold_bytes`, then
    `low`), or plugin (`plugin`: "file.py:Class" or "module:Class", built with `args`, whose
    dscp(flow) decides). `default` None leaves what the host marked.
    controllers/priority.py has the policies."""
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

    def check(self, topo: Topology, relay: bool) -> None:
        path = "controller.flow_priority"
        if self.policy == "none":
            return
        if relay:
            raise SpecError(f"{path}.policy: flow priorities need a switched fabric; BCube's "
                            "servers route for themselves")
        dscps = {"dscp": self.dscp, "high": self.high, "low": self.low,
                 **({"default": self.default} if self.default is not None else {}),
                 **{f"ports[{p}]": d for p, d in self.ports.items()}}
        for name, d in dscps.items():
            if not isinstance(d, int) or not 0 <= d <= 63:
                raise SpecError(f"{path}.{name}: a DSCP must be an integer in 0-63 (got {d!r})")
        for p in self.ports:
            if not isinstance(p, int) or not 0 < p < 65536:
                raise SpecError(f"{path}.ports: {p!r} is not a TCP port")
        if self.policy == "by_port" and not self.ports:
            raise SpecError(f"{path}.ports: by_port needs at least one port")
        if self.policy == "by_hosts":
            names = {h.name for h in topo.hosts}
            unknown = [h for h in self.hosts if h not in names]
            if not self.hosts or unknown:
                raise SpecError(f"{path}.hosts: by_hosts needs hosts of the topology "
                                f"(unknown: {unknown})")
        if self.policy == "small_first" and self.threshold_bytes < 1:
            raise SpecError(f"{path}.threshold_bytes: must be >= 1 (got {self.threshold_bytes})")
        if self.policy == "plugin":
            where, _, cls = self.plugin.rpartition(":")
            if not where or not cls:
                raise SpecError(f"{path}.plugin: expected 'file.py:Class' or 'module:Class' "
                                f"(got {self.plugin!r})")
            if where.endswith(".py") and not Path(where).exists():
                raise SpecError(f"{path}.plugin: file {where} does not exist")
        if not self.period_s > 0:
            raise SpecError(f"{path}.period_s: must be > 0 (got {self.period_s:g})")


@dataclass(frozen=True, kw_only=True)
class ControllerSpec:
    """`fast_failover`: every single next hop between switches goes through an OpenFlow
    fast-failover group with a precomputed detour, which the switch takes by itself when
    the port goes down (controllers/failover.py); off, only ECMP's select groups fail over
    locally and the rest waits for the controller's replan. `on_death`: what the runner
    does when the controller dies without a fault killing it: `warn` (the phase's results
    say so), `fail` (the run fails), `restart` (it is started again and resynchronises
    with the switches' tables, and the phase says so)."""
    routing: str = "ecmp"  # topologies.kinds.routings(kind), or "own": the fabric's own
    plugins: list[str] = field(default_factory=list)
    hedera: HederaSpec = field(default_factory=HederaSpec)
    flow_priority: FlowPriority = field(default_factory=FlowPriority)
    circuits: CircuitSpec = field(default_factory=CircuitSpec)
    fast_failover: bool = False
    on_death: Literal["warn", "fail", "restart"] = "warn"

    def check(self, topo: Topology) -> None:
        relay = topo.relays
        self.flow_priority.check(topo, relay)
        if relay and self.routing == "hedera":
            raise SpecError("controller.routing: hedera needs a switched fabric; BCube's "
                            "servers route for themselves")
        if relay and self.fast_failover:
            raise SpecError("controller.fast_failover: needs a switched fabric; BCube's "
                            "servers route for themselves")
        check_routing(self.routing, topo, "controller.routing")
        mode = own_routing(topo.kind, self.routing)
        if mode not in ("ecmp", "single", "hedera"):
            if self.flow_priority.policy != "none":
                raise SpecError(f"controller.flow_priority.policy: needs routing ecmp, single "
                                f"or hedera (flows get their own entries); {mode} routes by "
                                "destination only")
            if self.fast_failover:
                raise SpecError(f"controller.fast_failover: needs routing ecmp, single or "
                                f"hedera (got {mode})")
        self.hedera.check()
        self.circuits.check()
        for i, plugin in enumerate(self.plugins):
            if problem := plugin_problem(plugin):
                raise SpecError(f"controller.plugins[{i}]: {problem}")


# the controller process imports from the project's root (its working directory) first
PROJECT_ROOT = Path(__file__).resolve().parents[2]
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


# names a plugin may have imported that now live elsewhere: the controller's Ryu names and
# OpenFlow builders moved into its apps' folder, the dataplane's live API into its own
# package; old name -> new name (a module, or a module's attribute)
MOVED = {"controllers.compat": "controllers.apps.compat",
         "controllers.ofmsgs": "controllers.apps.ofmsgs",
         "controllers.launch": "controllers.apps.launch",
         "testbed.net.dpapi": "testbed.dataplane.dpapi",
         "testbed.net.qos_render": "testbed.dataplane.qos_render",
         "controllers.plans.Plan": "controllers.plans.RoutePlan",
         "controllers.routing.Plan": "controllers.plans.RoutePlan",
         "controllers.flowsched.Placement": "controllers.flowsched.FlowPlacement"}


def moved_imports(source: str) -> list[str]:
    """What a plugin's source imports by a name that moved (`MOVED`), each with its new
    name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found += [f"{n} (now {MOVED[n]})" for n in names if n in MOVED]
    return found


def plugin_problem(plugin: str) -> str | None:
    """Why ryu-manager could not load `plugin` (None: it can): a file must be an existing
    .py file, anything else a module found on the controller's import path. Found without
    importing it or its packages, so that `testbed validate` stays offline and loads no
    Ryu."""
    if "/" in plugin or plugin.endswith(".py"):
        path = Path(plugin)
        if path.suffix != ".py":
            return f"{plugin}: a file plugin is a Python file (.py); a module is named with dots"
        if not path.is_file():
            return f"file {plugin} does not exist"
        return _stale(plugin, path)
    if not MODULE_RE.fullmatch(plugin):
        return f"{plugin!r} is neither a module name (ryu.app.simple_switch_13) nor a .py file"
    # the controller's path: the project's root (its working directory), then the
    # installed packages; not this process's working directory
    here = {"", os.getcwd()}
    search: list[str] | None = [str(PROJECT_ROOT), *(p for p in sys.path if p not in here)]
    for i, part in enumerate(plugin.split(".")):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None and i == 0:  # an editable install's finder; imports nothing
            found = importlib.util.find_spec(part)
        if found is None:
            where = ".".join(plugin.split(".")[:i + 1])
            return (f"no module {where!r} (for {plugin}); name a module the controller can "
                    "import, or a .py file")
        search = list(found.submodule_search_locations or []) or None
        if search is None and i < len(plugin.split(".")) - 1:
            return f"{'.'.join(plugin.split('.')[:i + 1])} is a module, not a package"
    origin = found.origin if found is not None else None
    return _stale(plugin, Path(origin)) if origin and origin.endswith(".py") else None


def _stale(plugin: str, path: Path) -> str | None:
    try:
        moved = moved_imports(path.read_text())
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return f"{plugin}: cannot read {path}: {exc}"
    return (f"{plugin} imports {', '.join(moved)}; import the new name" if moved else None)



@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Everything the controller's apps need for one phase, written by the runner beside
    the phase's topology (controller/<phase>.json) and read by every app, built-in or
    plugin, with `phase_config()`.

    `routing` is the phase's (a permutation phase may differ from the spec's); `hedera` and
    `flow_priority` are the spec's settings with the phase's changes; `dataplane_json` and
    `status_dir` are set when the phase has a QoS dataplane; `hedera_dir` is where the flow
    app logs its periods and decisions; `results_dir` is the run's results directory.
    `resync`: the controller is a restart, and its switches kept their tables: it reads
    them and sends only the difference from its plan, instead of clearing them.
    `fast_failover` is the spec's (`ControllerSpec`). `jobs_dir`: the phase runs training
    jobs side by side under a cross-job policy (the jobs app; controllers/jobpolicy.py).
    `commands_jsonl`: a file the runner appends commands to while the phase runs, one JSON
    object a line (`{"id": 1, "op": "routing", "mode": "single"}`: route the fabric another
    way now); the routing app carries each out and answers in its state file (`commands`)."""
    topology_json: str
    state_json: str
    routing: str  # a mode of topologies.kinds.routings(kind)
    results_dir: str
    hedera: HederaSpec = field(default_factory=HederaSpec)
    flow_priority: FlowPriority = field(default_factory=FlowPriority)
    circuits: CircuitSpec = field(default_factory=CircuitSpec)
    circuits_log: str | None = None  # routing cthrough: the scheduler's decisions and steps
    hedera_dir: str = ""
    dataplane_json: str | None = None
    status_dir: str | None = None
    resync: bool = False
    fast_failover: bool = False
    jobs_dir: str | None = None
    commands_jsonl: str | None = None  # what the runner asks while the phase runs (below)
    udp_hash: bool = False  # UDP's ports hashed at every ECMP choice (RoCE's per-QP ports)

    @property
    def per_flow(self) -> bool:
        """Hedera or a priority policy: flows get their own entries (the flow app)."""
        return self.routing == "hedera" or self.flow_priority.policy != "none"

    @property
    def plan_args(self) -> dict[str, Any]:
        """What `controllers.routing.plan` is given besides the topology and the mode."""
        args: dict[str, Any] = {"fast_failover": self.fast_failover,
                                "udp_hash": self.udp_hash}
        if self.per_flow:
            args.update(base=self.hedera.base, track=True)
        return args

    @property
    def period_s(self) -> float:
        """How often the flow app reads flow counters: Hedera's period, or the priority
        policy's without Hedera."""
        return self.hedera.period_s if self.routing == "hedera" else self.flow_priority.period_s

    def topology(self) -> Topology:
        return Topology.from_json(Path(self.topology_json).read_text())


def phase_config(path: str | Path | None = None) -> ControllerConfig:
    """The phase's controller configuration: from `path`, or from the file named by
    $TESTBED_CONTROLLER_CONFIG (what the runner sets for the controller process)."""
    return load_json(ControllerConfig, path or os.environ[CONFIG_ENV])
