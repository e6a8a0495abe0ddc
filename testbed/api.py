"""The testbed as a library for experiment scripts, the way Mininet's users write theirs:
build the fabric of a spec, run commands and long-lived processes in its hosts, read the
switches' queues while traffic runs, and leave a results directory in the format of
`testbed run`. Run under sudo; everything is torn down when the `with` block ends, by an
exception or Ctrl-C as well.

    from testbed.api import Testbed

    spec = {"name": "my-script", "links": {"rate_mbps": 10},
            "topology": {"kind": "leafspine",
                         "params": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}}}
    with Testbed(spec, out="results/my-script") as tb:
        fab = tb.fabric()                       # the spec's routing, classes and plugins
        h1, h4 = fab.host("h1"), fab.host("h4")
        print(h1.run(["ping", "-c", "3", h4.ip], check=True).stdout)
        server = h4.start(["iperf3", "-s", "-1"])
        fab.wait_listening([("h4", 5201)])      # the server listens before the client starts
        client = h1.run(["iperf3", "-c", h4.ip, "-t", "3", "--json"], check=True)
        fab.stop([server])
        (flow,) = fab.flows([("h1", "h4")], duration_s=3)   # the same, as metrics/script_flows.csv

Without a `with` block: `tb = Testbed(spec).start()`, ..., `tb.stop()` (a notebook's cells).
Mininet's own vocabulary (`Mininet`, `net.get`, `h.cmd`, `pingAll`, `iperf`) is testbed.mn.

A spec given as a file, plain data or a `Spec` needs no `experiments` here; `Testbed.fabric`
may also take another topology, routing or classes than the spec's (one fabric at a time),
as the plain data a spec takes.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.errors import TestbedError
from testbed.workloads.model.flows import FlowResult, assign_ports, carried_nothing
from topologies.model import Topology, ifname

from .config.capture import CaptureSpec
from .config.loader import SpecError, from_data, registered
from .config.network import TopologySpec
from .config.qos import QosConfig
from .config.replies import reply_data
from .config.spec import ExperimentSpec, Spec, check, load, loads, with_topology
from .experiments import reachability
from .measure.capture import Capture
from .net.fabric import Fabric
from .runner import RunContext, session


class Host:
    """One emulated host of a running fabric."""

    def __init__(self, live: LiveFabric, name: str):
        self.live, self.name = live, name
        self.ip = live.fabric.topo.host(name).ip

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.ip})"

    def run(self, argv: list[str] | str, timeout: float = 60.0,
            check: bool = False) -> subprocess.CompletedProcess:
        """`argv` in the host's network namespace, to completion: its exit status and its
        output (text). A string is split as a shell would split it (`shlex`), but no shell
        runs it: no pipes, globs or variables. `check`: a non-zero exit raises
        TestbedError with its stderr."""
        self.live.pid(self.name)  # a known host
        argv = command_argv(argv)
        try:
            done = subprocess.run(self.live.fabric.host_argv(self.name, argv),
                                  capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"{self.name}: {' '.join(argv)} still running after "
                               f"{timeout:g} s") from None
        if check and done.returncode != 0:
            raise TestbedError(f"{self.name}: {' '.join(argv)} exited {done.returncode}: "
                               f"{done.stderr.strip()[-300:]}")
        return done

    def start(self, argv: list[str] | str, log: str | Path | None = None) -> subprocess.Popen:
        """A long-lived process in the host, its output to `log` (default: the results
        directory's scripts/<host>-<n>.log); its PID is recorded so that the fabric's
        teardown and `testbed clean` stop it. Stop it earlier with `LiveFabric.stop`. A
        string is split as in `run`."""
        self.live.pid(self.name)  # refuses a torn-down fabric
        argv = command_argv(argv)
        self.live.started += 1
        path = Path(log) if log else (self.live.out_dir / "scripts" /
                                      f"{self.name}-{self.live.started}.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = self.live.fabric.start_process(self.name, argv, f"{argv[0]} in {self.name}", path)
        self.live.procs.append(proc)
        return proc


def command_argv(command: list[str] | str) -> list[str]:
    """A command as argv: a list as it is, a string split by shell rules (`shlex`); an
    empty or unsplittable command is a TestbedError naming it."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise TestbedError(f"command {command!r}: {exc}") from None
    else:
        argv = list(command)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TestbedError(f"command {command!r}: expected a string or a list of strings")
    return argv


SCRIPT_FLOW_HEADER = ["call", "src", "dst", "duration_s", "goodput_mbps", "sent_mbps",
                      "retransmits_pkts", "sender_cc", "fct_s", "error"]


@dataclasses.dataclass(frozen=True)
class PortClass:
    """One switch egress port's traffic class now: the queue and its counters so far."""
    port: str
    cls: int
    queue_bytes: int
    queue_pkts: int
    enq_pkts: int
    drops: int
    marks: int
    paused: bool


class LiveFabric:
    """A running fabric: its hosts, its switches' queues, its ports."""

    def __init__(self, fabric: Fabric, ctx: RunContext, stack: contextlib.ExitStack):
        self.fabric, self.ctx, self._stack = fabric, ctx, stack
        self.out_dir = ctx.out_dir
        self.procs: list[subprocess.Popen] = []
        self.captures: list[Capture] = []
        self.started = 0
        self.live = True
        self._dp: Any = None

    @property
    def topo(self) -> Topology:
        return self.fabric.topo

    @property
    def hosts(self) -> list[str]:
        return [h.name for h in self.topo.hosts]

    def _alive(self, what: str) -> None:
        if not self.live:
            raise TestbedError(f"the fabric is torn down: {what} no longer exists")

    def pid(self, host: str) -> int:
        self._alive(host)
        if host not in self.hosts:
            raise TestbedError(f"no host {host!r} in this {self.topo.kind} (hosts "
                               f"{self.hosts[0]}..{self.hosts[-1]})")
        return self.fabric.host_pid(host)

    def host(self, name: str) -> Host:
        self.pid(name)
        return Host(self, name)

    @property
    def rest_url(self) -> str:
        """Where Ryu's REST server listens, for plugins that use one (`ryu.app.ofctl_rest`):
        on 127.0.0.1 only."""
        self._alive("its controller")
        return f"http://127.0.0.1:{self.fabric.controller.launch.rest_port}"

    def controller_state(self) -> dict:
        """The controller's state: connected switches, packet counters, reroutes, and what
        the plugin guard changed of each plugin's messages (`plugin_guard`), as the
        controller wrote it after this call (it writes every 0.5 s)."""
        self._alive("its controller")
        state = self.fabric.controller_state(since=time.time())
        return reply_data(state) if state is not None else {}

    def ping_all(self, count: int = 1, interval_s: float = 0.2) -> dict:
        """Every host pings every other (Mininet's pingAll): pairs, pings sent and received,
        loss %, pairs with loss, round-trip times (`reachability`'s headline)."""
        return reachability.analyse(self.ping_rows(count, interval_s)).headline

    def ping_rows(self, count: int = 1, interval_s: float = 0.2,
                  among: list[str] | None = None) -> list[list]:
        """Every host (or every one of `among`) pings every other: a row per pair, as
        reachability.csv has them (src, dst, sent, received, loss %, RTT avg / max / min
        in ms). A loss the fabric cannot explain marks the run degraded."""
        for host in among or []:
            self.pid(host)
        self._alive("its network")
        rows = reachability.ping_all(self.fabric, count, interval_s, among)
        if not self.fabric.ports_down:  # no cable pulled to explain a loss
            self.ctx.degraded += reachability.analyse(rows).degraded
        return rows

    def flows(self, pairs: list[tuple[str, str]], duration_s: float = 10.0,
              omit_s: float = 1.0, nbytes: int | None = None,
              tag: str = "script") -> list[FlowResult]:
        """iperf3 TCP flows between (src, dst) pairs, all at once (finite transfers of
        `nbytes` with their completion times, when given): each flow's goodput, sent rate,
        retransmits and congestion control as the receiver measured them. Each call is
        numbered in the session: its raw iperf3 JSON goes to flows/<tag>-<call>-*, its rows
        to metrics/script_flows.csv."""
        for src, dst in pairs:
            self.pid(src), self.pid(dst)  # unknown hosts and a torn-down fabric refused
        self.ctx.script_flow_calls += 1
        call = self.ctx.script_flow_calls
        res = self.fabric.run_flows(assign_ports(pairs, duration_s, omit_s, nbytes),
                                    f"{tag}-{call}")
        why = carried_nothing(res)
        if why and not self.fabric.ports_down:  # no cable pulled to explain it
            self.ctx.degraded.append(f"flows() call {call}: {why}")
        self.ctx.write_csv("script_flows.csv", SCRIPT_FLOW_HEADER, [
            [call, r.src, r.dst, duration_s, round(r.goodput_mbps, 3), round(r.sent_mbps, 3),
             r.retransmits, r.sender_cc, round(r.seconds, 4) if nbytes else None, r.error]
            for r in res])
        return res

    def wait_listening(self, endpoints: list[tuple[str, int]]) -> None:
        """Until each (host, TCP port) has a listener (a server started with `start`)."""
        self._alive("its network")
        self.fabric.wait_listening(endpoints)

    def port(self, host: str) -> str:
        """The switch egress port toward a host (its edge switch's downlink)."""
        self.pid(host)
        _, switch, port = self.topo.ports_of(host)[0]
        return ifname(switch, port)

    def stop(self, procs: list[subprocess.Popen]) -> None:
        """Stop processes started with `Host.start` (SIGTERM, then SIGKILL)."""
        self.fabric.stop_processes(procs)

    def set_ports(self, ports: list[tuple[str, int]], up: bool,
                  wait_s: float = 5.0) -> list[dict]:
        """Switch ports down or up, as cables pulled or put back; the controller reroutes.
        Returns once it has replanned for every port that changed (its reroutes, as plain
        data); after `wait_s` without all of them, TestbedError says which it has not."""
        self._alive("its network")
        t0 = time.time()
        changing = {ifname(node, port) for node, port in ports
                    if ((node, port) in self.fabric.ports_down) == up}
        self.fabric.set_ports(ports, up)
        seen: list = []
        while changing:
            state = self.fabric.controller_state(since=time.time(), timeout=0.5)
            if state is None or self.fabric.controller_report() is not None:
                break  # no controller to wait for: the run says why it ended
            seen = [r for r in state.reroutes
                    if r.time >= t0 and r.port in changing and r.down == (not up)]
            missing = changing - {r.port for r in seen}
            if not missing:
                break
            if time.time() > t0 + wait_s:
                raise TestbedError(f"set_ports: the controller did not reroute for "
                                   f"{', '.join(sorted(missing))} within {wait_s:g} s")
        return reply_data(seen)

    def set_routing(self, mode: str) -> dict:
        """Route the fabric by `mode` ("ecmp" or "single") from now on, while traffic runs:
        the controller replans and sends only the difference, in an order that never loops
        a packet. Returns its answer: changes, switches, how long it took to decide."""
        self._alive("its controller")
        return reply_data(self.fabric.set_routing(mode))

    def dataplane(self):
        """The traffic-class dataplane (a spec or fabric with `qos`): queues, marks, drops
        and pauses per port and class, ECN and PFC settings (testbed/dataplane/dpapi.py)."""
        self._alive("its network")
        if self.fabric.qos is None:
            raise TestbedError("this fabric has no traffic classes (give the spec or "
                               "Testbed.fabric a `qos`)")
        if self._dp is None:
            self._dp = self.fabric.dataplane()
        return self._dp

    def queues(self, ports: list[str] | None = None) -> list[PortClass]:
        """Every switch egress port's classes now (or these ports')."""
        dp = self.dataplane()
        n = len(self.fabric.qos.classes)
        out = []
        for p in dp.ports:
            if p["is_host"] or (ports is not None and p["ifname"] not in ports):
                continue
            for cls in range(n):
                q = dp.queue(p["id"], cls)
                out.append(PortClass(p["ifname"], cls, q.bytes, q.pkts, q.enq_pkts, q.drops,
                                     q.marks, dp.held(p["id"], cls)))
        return out

    def capture(self, ports: list[str] | None = None, hosts: list[str] | None = None,
                filter: str = "", snaplen: int = 128, max_mb: float = 100.0) -> Capture:
        """tcpdump on switch ports (`l1-eth3`) and hosts' NICs (`h1`: each of its ports),
        as a spec's `capture:` takes them, until `stop()` on what this returns or the
        fabric's end: pcap files in the results (capture/call-<n>/ for the session's n-th
        call), listening when this returns. `stop()` returns each file's packets and the
        kernel's drops for it."""
        self._alive("its network")
        if self.ctx.spec.cluster is not None:
            raise TestbedError("capture(): on one machine only so far (each server's ports "
                               "would need their own tcpdump)")
        spec = CaptureSpec(ports=list(ports or []), hosts=list(hosts or []), filter=filter,
                           snaplen=snaplen, max_mb=max_mb)
        try:
            spec.check("capture()")
            spec.check_on(self.topo, "capture()")
        except SpecError as exc:
            raise TestbedError(str(exc)) from None
        self.ctx.script_captures += 1  # numbered in the session, as flows() calls are
        self.captures.append(Capture(self.fabric, spec, self.out_dir / "capture" /
                                     f"call-{self.ctx.script_captures}").start())
        return self.captures[-1]

    def close(self) -> None:
        """Tear the fabric down now (the `with` block's end does it otherwise)."""
        if self.live:
            for cap in self.captures:
                self.ctx.stop_capture(cap, "script")
            self.live = False
            if self._dp is not None:
                self._dp.close()
            self._stack.close()


def script_spec(spec: str | Path | dict | Spec) -> tuple[Spec, Topology, str]:
    """A script's spec (a file, its plain data or a Spec; no experiments needed), checked:
    the Spec, its topology, and the text the results keep of it."""
    if isinstance(spec, (str, Path)):
        loaded, topo = load(spec, experiments_required=False)
        return loaded, topo, Path(spec).read_text()
    if isinstance(spec, dict):
        loaded, topo = loads(spec, experiments_required=False)
        return loaded, topo, json.dumps(spec, indent=1)
    return (spec, check(spec, experiments_required=False),
            json.dumps(dataclasses.asdict(spec), indent=1, default=str))


class Testbed:
    """A session: one results directory, the run's lock and record, and the fabrics built
    in it (one at a time)."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, spec: str | Path | dict | Spec, *, topo: Topology | None = None,
                 out: str | Path | None = None, log: Callable[[str], None] = print,
                 what: str = "a testbed script", live_port: int | None = None):
        self.spec, self.topo, self.text = script_spec(spec)
        self.topo = topo or self.topo
        self.out = Path(out) if out else None
        self.log, self.what, self.live_port = log, what, live_port
        self._stack: contextlib.ExitStack | None = None
        self._fabric: LiveFabric | None = None
        self._excepthook: Any = None  # the one `start` replaced
        self.ctx: RunContext | None = None

    def __enter__(self) -> Testbed:
        if self._stack is not None:
            raise TestbedError("this Testbed is started already")
        stack = contextlib.ExitStack()
        self.ctx = stack.enter_context(session(self.spec, self.topo, self.text, self.out,
                                               self.log, self.what, self.live_port))
        self._stack = stack
        return self

    def __exit__(self, *exc) -> bool | None:
        assert self._stack is not None  # the fabric's teardown first, then the session's
        stack, self._stack, self._fabric = self._stack, None, None
        atexit.unregister(self.stop)
        if self._excepthook is not None:
            sys.excepthook, self._excepthook = self._excepthook, None
        return stack.__exit__(*exc)

    def start(self) -> Testbed:
        """The session without a `with` block, as Mininet's `net.start()`: for a notebook
        whose cells use one fabric, or a script that ends with `stop`. A session still
        open when Python exits is stopped then, as failed if an exception ended the
        script."""
        self.__enter__()
        atexit.register(self.stop)
        self._excepthook = sys.excepthook

        def failed(kind, exc, trace) -> None:
            hook = self._excepthook or sys.__excepthook__
            try:
                self.stop(exc)
            except TestbedError as said:
                print(f"testbed: {said}", file=sys.stderr)
            hook(kind, exc, trace)

        sys.excepthook = failed
        return self

    def stop(self, error: BaseException | None = None) -> None:
        """End a session opened with `start`: the fabric torn down, the results written;
        with `error`, the session failed of it (and raises TestbedError saying so, as a
        `with` block would). Stopping a stopped session does nothing."""
        if self._stack is not None:
            if error is None:
                self.__exit__(None, None, None)
            else:
                self.__exit__(type(error), error, error.__traceback__)

    def _checked(self, topo: Topology | str | dict | None, routing: str | None,
                 qos: QosConfig | dict | None) -> tuple[Topology, QosConfig | None]:
        """`fabric`'s arguments through the spec's loader and checks: the topology and
        classes to build, or SpecError with the bad field's path. A built Topology is taken
        as it is, its routing checked against it."""
        if isinstance(qos, dict):
            qos = from_data(QosConfig, qos, "qos")
        if not isinstance(qos, QosConfig | None):
            raise SpecError(f"qos: expected a mapping or a QosConfig, got {type(qos).__name__}")
        if isinstance(topo, str):
            if not topo.split():
                raise SpecError("topo: empty (give 'KIND [PARAM=VALUE ...]', e.g. 'fattree k=4')")
            try:
                topo = with_topology({}, topo)["topology"]
            except SpecError as exc:
                raise SpecError(str(exc).replace("--topology: ", "topo: ", 1)) from None
        spec = self.spec
        if isinstance(topo, dict):
            spec = dataclasses.replace(spec, topology=from_data(TopologySpec, topo, "topology"))
        elif not isinstance(topo, Topology | None):
            raise SpecError(f"topo: expected a mapping, 'KIND [PARAM=VALUE ...]' or a "
                            f"Topology, got {type(topo).__name__}")
        if routing is not None:
            spec = dataclasses.replace(spec, controller=dataclasses.replace(
                spec.controller, routing=routing))
        spec = dataclasses.replace(spec, experiments=[], qos=qos or spec.qos)
        built = check(spec, experiments_required=False)
        if isinstance(topo, Topology):
            spec.controller.check(topo)  # the routing, on the fabric that will be built
            return topo, qos
        return (built if topo is not None else self.topo), qos

    @property
    def out_dir(self) -> Path:
        """The session's results directory (during the session and after it)."""
        if self.ctx is None:
            raise TestbedError("use the Testbed in a `with` block, or `start` it first")
        return self.ctx.out_dir

    def _context(self) -> RunContext:
        if self.ctx is None or self._stack is None:
            raise TestbedError("use the Testbed in a `with` block, or `start` it first")
        return self.ctx

    def experiment(self, exp: dict | ExperimentSpec) -> dict:
        """One experiment of the kinds a spec lists (`incast`, `training`, `jobs`,
        `parallel`, `permutation`, `pfc_victim`...), given as its spec's plain data or
        type, run in this session on a fabric of its own, as `testbed run` runs it: its
        tables in metrics/, its plots, and its headline and warnings in summary.json, which
        it also returns. A fabric built with `fabric()` is torn down first."""
        ctx = self._context()
        spec = registered(ExperimentSpec, exp, "experiment") if isinstance(exp, dict) else exp
        spec.check_common("experiment")
        spec.check("experiment", self.spec, self.topo)
        if self._fabric is not None:
            self._fabric.close()
            self._fabric = None
        # the session's spec lists it, as a spec file would: the manifest says what ran, and
        # an experiment numbers its rows by its place among the spec's experiments
        ctx.spec = dataclasses.replace(ctx.spec, experiments=[*ctx.spec.experiments, spec])
        return ctx.run_experiment(spec, len(ctx.spec.experiments) - 1)

    def fabric(self, label: str = "script", *,
               topo: Topology | str | dict | None = None, routing: str | None = None,
               qos: QosConfig | dict | None = None) -> LiveFabric:
        """Build and start a fabric: the spec's topology, routing, classes and plugins
        unless given here. `topo` as a spec's `topology` (a mapping, or "KIND
        [PARAM=VALUE ...]" as `--topology` takes it) or a built Topology, `qos` as a spec's
        `qos` mapping or a QosConfig: checked as a spec is (SpecError naming the field)
        before anything changes. The previous fabric is torn down first."""
        ctx = self._context()
        topo, qos = self._checked(topo, routing, qos)
        if self._fabric is not None:
            self._fabric.close()
        stack = contextlib.ExitStack()
        fab = stack.enter_context(ctx.fabric(topo, routing or self.spec.controller.routing,
                                             label, qos=qos))
        self._fabric = LiveFabric(fab, ctx, stack)
        assert self._stack is not None
        self._stack.callback(self._fabric.close)
        return self._fabric
