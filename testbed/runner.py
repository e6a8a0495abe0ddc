"""`testbed run SPEC`: one results directory per run, written so that an interrupted run is
never mistaken for a finished one (summary.json says "incomplete" until the very end)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.cluster.servers import release_servers
from testbed.config.controller import CircuitSpec, HederaSpec
from testbed.config.faults import FabricFault
from testbed.config.forwarding import partition
from testbed.config.network import HostConfig, LinkConfig
from testbed.config.qos import QosConfig
from testbed.config.replies import reply_data
from testbed.config.units import frame_bytes
from testbed.core import provenance
from testbed.core.resources import IN_PROGRESS, RunLock, RunRecord, release_record
from testbed.core.system import TestbedError, hold_wakeup_latency, is_root, port_free
from testbed.dataplane import ovs
from testbed.dataplane.dpapi import Dataplane
from testbed.dataplane.hostcc import HostCongestion
from testbed.workloads.model.flows import carried_nothing
from topologies.graph import distances_to
from topologies.kinds import own_routing
from topologies.model import Topology, at_rate

from .config.spec import ExperimentSpec, Spec, SweepPoint
from .experiments import EXPERIMENTS
from .experiments.base import Outcome, slug
from .measure import checks
from .measure.capture import Capture
from .measure.capture import warnings as capture_warnings
from .measure.cpu import CpuMonitor
from .measure.queues import ClassQueueSampler, QueueSampler
from .net.controller import plugin_warnings
from .net.executor import LocalExecutor
from .net.fabric import Fabric
from .net.faults import FaultInjector
from .net.partitioned import PartitionedExecutor
from .net.traffic import REPO_ROOT
from .outputs import write_outputs
from .results import sweep
from .results.files import append_csv

QOS_MECHANISMS = {
    "queue": "per-class tail-drop buffers enforced by tc-BPF (testbed/dataplane/bpf/tbqos.bpf.c)",
    "classes": "HTB classes per port (strict priority or weighted round robin), DSCP -> class",
    "ecn_marking": "tc-BPF, per packet on the class's instantaneous queue (step K or RED-like)",
    "pfc": "tc-BPF per-ingress XOFF/XON detection; controller pauses the upstream class "
           "(tbf gate); emulated, no 802.1Qbb frames",
}


class Interrupted(Exception):
    pass


@dataclass
class RunContext:
    spec: Spec
    topo: Topology
    out_dir: Path
    record: RunRecord
    log: Callable[[str], None]
    cpu: CpuMonitor
    events: list[dict] = field(default_factory=list)
    startups: list[list] = field(default_factory=list)
    datapath: str = ""
    host_cc: dict[str, str] = field(default_factory=dict)
    send_buffer_bytes: int | None = None
    mechanisms: dict = field(default_factory=dict)  # what the phases used, for the manifest
    phases: dict = field(default_factory=dict)  # label -> host settings and classes it ran with
    slugs: dict[str, int] = field(default_factory=dict)  # phase file names used so far
    results: dict[str, dict] = field(default_factory=dict)  # per experiment: headline, warnings
    warnings: list[str] = field(default_factory=list)  # the session's own, beside experiments'
    samplers: int = 0  # class samplers made so far (their timeline files are numbered)
    live: bool = False  # a live view follows the run (live.json says which fabric is up)
    # the spec index of the experiment running now (None: a script's own fabric); every
    # table row and raw file name carries it, so that two equal experiments never collide
    experiment: int | None = None
    # a sweep's point running now (None: no sweep) and its swept fields' values
    point: int | None = None
    point_values: dict[str, Any] = field(default_factory=dict)
    sweep: list[dict[str, Any]] = field(default_factory=list)  # every point's values
    # (experiment, point, start, end) on the CPU monitor's clock: cpu.csv's rows say which
    experiment_spans: list[tuple[int, int | None, float, float]] = field(default_factory=list)
    script_flow_calls: int = 0  # a script's LiveFabric.flows calls (numbered in the session)
    script_captures: int = 0  # a script's LiveFabric.capture calls (capture/call-<n>)
    degraded: list[str] = field(default_factory=list)  # the session's own, beside experiments'
    code: dict = field(default_factory=dict)  # the code that ran (provenance.code_state)
    wakeup_held: bool = False  # the CPUs were asked to wake at once (hold_wakeup_latency)
    # one moment on both clocks, so that the timeline puts monotonic times on the Unix clock
    clock: dict[str, float] = field(default_factory=lambda: {"unix_s": time.time(),
                                                            "monotonic_s": time.monotonic()})
    # the BPF congestion controls the run registered (built and registered on first use)
    cc: HostCongestion | None = None

    def resolve_cc(self, spec: Spec) -> Spec:
        """`spec` with its hosts' congestion control as the name hosts select: a BPF
        program (the testbed's own or the user's) is built and registered now, so that a
        compile error or a verifier's refusal comes before any fabric."""
        cc = self.host_congestion().resolve(spec.hosts.congestion_control)
        return replace(spec, hosts=replace(spec.hosts, congestion_control=cc))

    def host_congestion(self) -> HostCongestion:
        if self.cc is None:
            self.cc = HostCongestion(self.record, self.log,
                                     cluster=self.spec.cluster is not None)
        return self.cc

    def run_experiment(self, exp: ExperimentSpec, index: int) -> dict:
        """The experiment at `index` in the session's spec: its headline, warnings and
        degraded reasons, kept for summary.json under "<index>:<type>" ("p<point>-<index>:
        <type>" in a sweep)."""
        self.experiment = index
        t0 = time.time() - self.cpu.t0
        try:
            outcome: Outcome = EXPERIMENTS[exp.type].run(self, exp)
        finally:
            self.experiment_spans.append((index, self.point, t0, time.time() - self.cpu.t0))
            self.experiment = None
        key = f"{index}:{exp.type}" if self.point is None else f"p{self.point}-{index}:{exp.type}"
        self.results[key] = {"headline": outcome.headline, "warnings": outcome.warnings,
                             "degraded": outcome.degraded}
        return self.results[key]

    def phase_slug(self, label: str) -> str:
        """The phase's name in file names, unique in the run: a second phase with the same
        label (two training experiments on one fabric) gets "-2", so that its topology,
        controller configuration and QoS logs never overwrite the first's."""
        base = slug(label)
        self.slugs[base] = self.slugs.get(base, 0) + 1
        return base if self.slugs[base] == 1 else f"{base}-{self.slugs[base]}"

    def raw_name(self, name: str) -> str:
        """A raw file's name in the run's directory, prefixed with the running experiment's
        index ("3-perm-ecmp-stride8-0"), so that two experiments never write the same file."""
        if self.experiment is not None:
            name = f"{self.experiment}-{name}"
        return name if self.point is None else f"p{self.point}-{name}"

    def row_keys(self) -> tuple[list[str], list]:
        """The columns every table row starts with, and their values now: the experiment,
        and in a sweep the point and its swept fields' values."""
        if self.point is None:
            return ["experiment"], [self.experiment]
        return (["experiment", "point", *self.point_values],
                [self.experiment, self.point, *self.point_values.values()])

    def write_csv(self, name: str, header: list[str], rows: list[list]) -> Path:
        """metrics/<name>: rows under a header with units, appended to what another
        experiment of the run wrote there (results/files.py). The first column is
        `experiment`, the spec index of the experiment that wrote the row (added here
        unless the rows carry their own)."""
        keys, values = self.row_keys()
        if "experiment" in header:  # the rows carry their own: the point's columns after it
            at = header.index("experiment") + 1
            header = [*header[:at], *keys[1:], *header[at:]]
            rows = [[*r[:at], *values[1:], *r[at:]] for r in rows]
        else:
            header, rows = [*keys, *header], [[*values, *r] for r in rows]
        return append_csv(self.out_dir / "metrics" / name, header, rows)

    @contextlib.contextmanager
    def traffic_phase(self, fab: Fabric, outcome: Outcome, label: str) -> Iterator[dict]:
        """Packet conservation and CPU checks around one traffic phase (measure/checks.py);
        yields the dict that holds "conservation" and "cpu" once the block has ended."""
        first = len(fab.flow_results)
        with checks.traffic_phase(self.cpu, self.events, fab, outcome.warnings,
                                  label) as result:
            yield result
        # flows that carried nothing, with no fault in this phase to explain them
        why = carried_nothing(fab.flow_results[first:])
        if why and not result.get("faults") and not fab.ports_down:
            outcome.degraded.append(f"{label}: {why}")

    @contextlib.contextmanager
    def faults(self, fab: Fabric, faults: list[FabricFault], label: str,
               progress: Callable[[], int] | None = None) -> Iterator[list[dict]]:
        """Injects `faults` while the block runs (net/faults.py; `progress`: the iterations
        a training job has finished, for faults `at_iter`); yields the list of executed
        steps (fault, down/up, when), which also go to events.jsonl. A step that could not be
        executed fails the run: the phase would not be what the spec says."""
        if not faults:
            yield []
            return
        injector = FaultInjector(fab, faults, label, self.log, progress)
        injector.start()
        try:
            yield injector.done
        finally:
            injector.stop()
            time.sleep(0.5)  # the controller hears of the last port change and writes it
            self.events.extend({"fault_step": step} for step in injector.done)
            state = fab.controller_state()
            self.events.extend({"phase": label, "reroute": reply_data(r)}
                               for r in (state.reroutes if state else [])
                               if r.time >= injector.t0)  # this phase's, not earlier
            self.events.extend({"phase": label, "relay_reroute": r} for r in fab.relay_reroutes
                               if r["time"] >= injector.t0)
        if injector.errors:
            raise TestbedError(f"{label}: fault not injected: {injector.errors[0]}")
        struck = {s["index"] for s in injector.done if s["action"] == "down"}
        missed = [f for i, f in enumerate(faults) if i not in struck]
        if missed:  # the phase ended first: it was not the phase the spec describes
            f = missed[0]
            when = f"at {f.at_s:g} s" if f.at_s is not None else f"at iteration {f.at_iter}"
            raise TestbedError(f"{label}: the fault {f.target()} {when} never happened: the "
                               f"phase's traffic ended after {time.time() - injector.t0:.1f} s")

    def congestion_controls(self) -> list[str]:
        """The congestion controls hosts may select: this kernel's and the testbed's own
        BPF algorithms (registered when a phase selects one)."""
        return self.host_congestion().available()

    def cc_trace(self, t0: float, t1: float) -> list[list]:
        """What the BPF congestion controls traced between two Unix times (rows of
        hostcc.TRACE_FIELDS)."""
        return self.cc.rows(t0, t1) if self.cc is not None else []

    def qdisc_sampler(self, ifnames: list[str], rate_hz: float) -> QueueSampler:
        """Samples the root qdisc of switch ports over netlink (fabrics without `qos`)."""
        return QueueSampler(ifnames, rate_hz=rate_hz)

    def _live_state(self, label: str, phase: str, fab: Fabric, up: bool) -> None:
        """live.json: the fabric the live view should draw now (written whole, then moved)."""
        if not self.live:
            return
        state = {"up": up, "label": label, "slug": phase, "t0_unix_s": self.clock["unix_s"],
                 "topology": str(self.out_dir / "topologies" / f"{phase}.json"),
                 "dataplane": str(fab.qos_plane.description) if fab.qos_plane else None,
                 "hedera": str(fab.hedera_dir)}
        tmp = self.out_dir / "live.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(self.out_dir / "live.json")

    def class_sampler(self, dp: Dataplane, slots: list[tuple[int, int]],
                      rate_hz: float = 1000.0,
                      paired: tuple[int, int] | None = None) -> ClassQueueSampler:
        """Samples (port, class) queues from the BPF counters in shared memory; what it saw
        goes to timeline/ when it stops, for the run's timeline.json."""
        self.samplers += 1
        return ClassQueueSampler(dp, slots, rate_hz=rate_hz, paired=paired,
                                 record=self.out_dir / "timeline" / f"sampled-{self.samplers}")

    @contextlib.contextmanager
    def fabric(self, topo: Topology, routing: str, label: str, *,
               qos: QosConfig | None = None, hosts: HostConfig | None = None,
               hedera: dict[str, Any] | None = None, jobs: bool = False,
               circuits: dict[str, Any] | None = None, udp_hash: bool = False,
               **link_overrides: Any) -> Iterator[Fabric]:
        """A fabric for one phase; `qos` and `hosts` replace the spec's for this phase,
        `hedera` and `circuits` change some of Hedera's or c-Through's settings, `jobs`
        loads the cross-job policies' app (it needs `qos`), `udp_hash` has every ECMP
        choice hash UDP's ports too (RoCE's per-QP ports)."""
        routing = own_routing(topo.kind, routing)
        if hosts is not None:  # a phase's own hosts may select one of the testbed's BPF
            hosts = replace(hosts, congestion_control=self.host_congestion().resolve(
                hosts.congestion_control))
        links = replace(self.spec.links, **link_overrides) if link_overrides else self.spec.links
        if links.rate_mbps:  # one rate for every link: the controller and the
            topo = at_rate(topo, links.rate_mbps)  # experiment see the rates the fabric has
        if self.cc is not None and self.cc.configurable():  # a delay-based program's units
            self.cc.configure(min(link.rate_mbps for link in topo.links),
                              frame_bytes(links.mtu_bytes), path_switches(topo))
        qos = qos if qos is not None else self.spec.qos
        if qos is not None:
            self.mechanisms.update(QOS_MECHANISMS)
        phase = self.phase_slug(label)
        key = label if phase == slug(label) else f"{label} ({phase})"
        self.phases[key] = {"hosts": dataclasses.asdict(hosts or self.spec.hosts),
                            "qos": dataclasses.asdict(qos) if qos else None,
                            "links": dataclasses.asdict(links)}
        fab = build_fabric(self.spec, topo, routing, links=links,
                           hosts=hosts or self.spec.hosts, qos=qos,
                           hedera=replace(self.spec.controller.hedera, **(hedera or {})),
                           circuits=replace(self.spec.controller.circuits, **(circuits or {})),
                           jobs=jobs, udp_hash=udp_hash, out_dir=self.out_dir,
                           record=self.record,
                           topology_json=self.out_dir / "topologies" / f"{phase}.json",
                           log=self.log, flow_tag_prefix=self.raw_name(""))
        self.log(f"[{label}] starting {topo.kind} ({len(topo.hosts)} hosts, "
                 f"{len(topo.switches)} switches), routing {routing}")
        t_start = time.time() - self.cpu.t0
        t_up: float | None = None
        capture: Capture | None = None
        try:
            fab.start()
            t_up = time.time() - self.cpu.t0
            if self.spec.cluster is not None:
                self.phases[key]["cluster"] = fab.manifest()
                self.warnings.extend(w for w in fab.warnings if w not in self.warnings)
            self.cpu.watch(set(fab.switch_ifaces()), fab.forwarder_pids())
            self.datapath = fab.datapath
            self.host_cc.update(fab.host_cc)
            self.send_buffer_bytes = fab.send_buffer_bytes
            self.log(f"[{label}] up in {fab.times.total_s:.1f} s (paths installed at "
                     f"{fab.times.paths_installed_s:.1f} s)")
            self.events.append({"phase_up": label, "slug": phase, "time": time.time()})
            self._live_state(label, phase, fab, up=True)
            capture = self._capture(fab, phase)
            yield fab
        finally:
            if t_up is not None:
                self.events.append({"phase_down": label, "slug": phase, "time": time.time()})
                self._live_state(label, phase, fab, up=False)
            if capture is not None:
                self.phases[key]["capture"] = self.stop_capture(capture, label)
            self.cpu.watch(set())
            state = fab.controller_state(since=time.time())
            guard = state.plugin_guard.plugins if state else {}
            if guard:  # what the plugins did, and what the guard changed of it
                self.phases[key]["plugins"] = guard
                self.warnings.extend(plugin_warnings(label, guard))
            fab.stop()
            t = fab.times
            # evaluated now, when the samples covering the startup have been taken
            cpu = self.cpu.window(t_start, t_up if t_up is not None else time.time() - self.cpu.t0)
            self.startups.append([self.experiment, *([self.point] if self.sweep else []),
                                  label, topo.kind, len(topo.hosts), len(topo.switches),
                                  round(t.net_up_s, 3), round(t.controller_connected_s, 3),
                                  round(t.paths_installed_s, 3), round(t.total_s, 3),
                                  round(t.teardown_s, 3), cpu["machine_idle_min"],
                                  cpu["machine_idle_mean"], cpu["ovs_thread_p90"]])
            self.log(f"[{label}] torn down in {t.teardown_s:.1f} s")


    def _capture(self, fab: Fabric, phase: str) -> Capture | None:
        """The spec's capture on a phase's fabric, listening before its traffic starts;
        None when the spec has none, or this fabric has none of its interfaces."""
        spec = self.spec.capture
        if spec is None:
            return None
        ports, hosts = spec.interfaces(fab.topo)
        if not ports and not hosts:
            self.warnings.append(f"capture: phase {phase} has none of the ports and hosts "
                                 "named; nothing captured there")
            return None
        return Capture(fab, spec, self.out_dir / "capture" / phase).start()

    def stop_capture(self, capture: Capture, label: str) -> list[dict]:
        """Stop a capture; what its files hold, its warnings in the run's. A capture that
        cannot be stopped or read is a warning: the fabric's teardown goes on."""
        try:
            report = capture.stop()
        except (OSError, TestbedError) as exc:
            self.warnings.append(f"capture {label}: not stopped cleanly ({exc}); its files "
                                 f"may be incomplete")
            return []
        self.warnings.extend(capture_warnings(label, report))
        return report


def path_switches(topo: Topology) -> dict[tuple[str, str], int]:
    """(source address, destination address) -> the nodes a packet crosses between two
    hosts on a shortest path (switches, and relaying servers where a fabric has them)."""
    ips = {h.name: h.ip for h in topo.hosts}
    out = {}
    for dst in topo.hosts:
        dist = distances_to(topo, dst.name)
        for src in topo.hosts:
            if src.name != dst.name and src.name in dist:
                out[(ips[src.name], dst.ip)] = dist[src.name] - 1
    return out


def build_fabric(spec: Spec, topo: Topology, routing: str, *, links: LinkConfig,
                 hosts: HostConfig, qos: QosConfig | None, hedera: HederaSpec,
                 circuits: CircuitSpec, jobs: bool, out_dir: Path, record: RunRecord,
                 topology_json: Path, log: Callable[[str], None],
                 flow_tag_prefix: str, udp_hash: bool = False) -> Fabric:
    """A phase's fabric, not started: the phase's topology, routing, links, hosts, classes
    and Hedera and c-Through settings, the spec's other controller settings and datapath;
    its nodes here (its switches forwarded by `forwarding.processes` processes,
    net/partitioned.py), or across the servers of the spec's `cluster` (the cluster's
    executor, testbed/cluster/fabric.py)."""
    executor = LocalExecutor()
    if spec.cluster is not None:
        from testbed.cluster.fabric import ClusterExecutor
        executor = ClusterExecutor(spec.cluster)
    elif (processes := spec.forwarding_processes(topo)) > 1:
        executor = PartitionedExecutor(partition(topo, processes))
    return Fabric(topo=topo, links=links, hosts=hosts, routing=routing, qos=qos,
                  executor=executor, out_dir=out_dir, record=record,
                  plugins=tuple(spec.controller.plugins), hedera=hedera,
                  flow_priority=spec.controller.flow_priority, circuits=circuits,
                  fast_failover=spec.controller.fast_failover, udp_hash=udp_hash,
                  on_death=spec.controller.on_death, datapath_setting=spec.datapath,
                  jobs=jobs, topology_json=topology_json, log=log,
                  flow_tag_prefix=flow_tag_prefix)


_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _install_signal_handlers() -> dict:
    """SIGTERM and SIGHUP end a run like Ctrl-C does (teardown, then 'incomplete')."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    old = {sig: signal.getsignal(sig) for sig in _HANDLED_SIGNALS}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    return old


@contextlib.contextmanager
def session(spec: Spec, topo: Topology, spec_text: str, out_dir: Path | None,
            log: Callable[[str], None] = print, what: str = "run",
            live_port: int | None = None) -> Iterator[RunContext]:
    """One results directory and everything a run holds while it lasts (the run lock, the
    record `testbed clean` reads, the CPU monitor, Ctrl-C and SIGTERM handled): the body
    builds fabrics and runs traffic through the context; whatever happens, what it created
    is released and the directory's summary.json says how it ended. An exception in the
    body fails it (TestbedError, naming the results directory). `what`: the command that
    needs root (`testbed run`, `testbed up`, a script)."""
    if not is_root():
        raise TestbedError(f"{what} needs root: run it with sudo")
    if not ovs.running():
        raise TestbedError("Open vSwitch is not running; run scripts/bootstrap.sh")
    if live_port is not None and (why := port_free(live_port)):
        raise TestbedError(f"--live: {why}")
    ovs.datapath_for(spec.datapath)  # refused before anything is created (each fabric
    # chooses again when it starts)
    # the code as the run starts (not as it ends: a checkout may change meanwhile), before
    # the results directory exists (it may sit in the checkout)
    code = {**provenance.code_state(), "command": provenance.command_line(),
            "cwd": os.getcwd()}
    lock = RunLock(what)
    lock.acquire()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out_dir or Path("results") / f"{spec.name}-{stamp}").resolve()
    if out_dir.exists() and any(out_dir.iterdir()):
        lock.release()
        raise TestbedError(f"--out {out_dir} exists and is not empty; choose another directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps({"status": "incomplete",
                                                      "reason": IN_PROGRESS}))
    (out_dir / "spec.yaml").write_text(spec_text)
    (out_dir / "topology.json").write_text(topo.to_json())  # the spec's fabric; each phase's
    # own (what its controller read) goes to topologies/<phase>.json
    record = RunRecord(run_id=f"{spec.name}-{stamp}", out_dir=str(out_dir))
    record.save()
    cpu = CpuMonitor()
    wakeup = hold_wakeup_latency()   # for the run's length: timers fire on time
    ctx = RunContext(spec=spec, topo=topo, out_dir=out_dir, record=record, log=log, cpu=cpu,
                     live=live_port is not None, code=code, wakeup_held=wakeup is not None)
    old_handlers = _install_signal_handlers()
    status, error = "ok", ""
    t0 = time.time()
    cpu.start()
    try:
        ctx.spec = ctx.resolve_cc(spec)
        if live_port is not None:
            start_view(out_dir, live_port, record, log)
        yield ctx
    except (KeyboardInterrupt, Interrupted) as exc:
        status, error = "incomplete", f"interrupted ({str(exc) or 'SIGINT'})"
    except TestbedError as exc:
        status, error = "failed", str(exc)
    except Exception as exc:  # a bug (or a script's error): keep the traceback
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        (out_dir / "traceback.txt").write_text(traceback.format_exc())
    finally:
        # Nothing may interrupt the release of what the run created: a second Ctrl-C or
        # SIGTERM now would leave bridges and processes behind.
        for sig in _HANDLED_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        cpu.stop()
        if ctx.cc is not None:
            try:
                ctx.cc.release()
            except Exception as exc:  # the record's release below unregisters them too
                log(f"warning: releasing the BPF congestion controls: {exc}")
        release_record(record, release_servers)  # what an interrupted teardown left
        if wakeup is not None:
            os.close(wakeup)
        lock.release()
    try:
        write_outputs(ctx, status, error, ctx.results, time.time() - t0)
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    if status != "ok":
        raise TestbedError(f"run {status}: {error} (results in {out_dir})")


def start_view(out_dir: Path, port: int, record: RunRecord,
               log: Callable[[str], None]) -> subprocess.Popen:
    """The live view's server (testbed/view/server.py) in a process of its own, listening on
    127.0.0.1:`port`; its PID goes into the run's record, so the run's end and `testbed
    clean` stop it."""
    with open(out_dir / "view.log", "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "testbed.view.server", "--live",
                                 str(out_dir), "--port", str(port)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True, cwd=REPO_ROOT)
    record.add_pid(proc.pid, "live view")
    deadline = time.time() + 15
    while port_free(port) is None and time.time() < deadline:
        if proc.poll() is not None:
            raise TestbedError(f"the live view did not start; see {out_dir / 'view.log'}")
        time.sleep(0.1)
    if port_free(port) is None:
        proc.kill()
        raise TestbedError(f"the live view did not listen on 127.0.0.1:{port} within 15 s")
    log(f"live view: http://127.0.0.1:{port}/")
    return proc


def run_spec(spec: Spec, topo: Topology, spec_text: str, out_dir: Path | None,
             log: Callable[[str], None] = print, live_port: int | None = None,
             points: Sequence[SweepPoint] = ()) -> Path:
    """`testbed run`: every experiment of the spec, one after another, in one session; with
    `points` (a sweep, config/spec.py sweep_points), every experiment of every point."""
    with session(spec, topo, spec_text, out_dir, log, "`testbed run`", live_port) as ctx:
        ctx.sweep = [p.values for p in points]
        ran = []  # (point, values, type, index, headline): the sweep's table
        # every point's congestion control built and registered before any fabric
        points = [replace(p, spec=ctx.resolve_cc(p.spec)) for p in points]
        resolved = ctx.spec
        try:
            for p in points or [None]:
                if p is not None:
                    what = ", ".join(f"{k}={v}" for k, v in p.values.items())
                    log(f"sweep point {p.index + 1}/{len(points)}: {what}")
                    ctx.spec, ctx.topo = p.spec, p.topo
                    ctx.point, ctx.point_values = p.index, p.values
                for i, exp in enumerate(ctx.spec.experiments):
                    log(f"experiment {i + 1}/{len(ctx.spec.experiments)}: {exp.type}")
                    result = ctx.run_experiment(exp, i)
                    for w in result["warnings"]:
                        log(f"  warning: {w}")
                    if p is not None:
                        ran.append((p.index, p.values, exp.type, i, result["headline"]))
        finally:  # an interrupted sweep keeps the points it finished
            ctx.spec, ctx.topo, ctx.point = resolved, topo, None
            if ran:
                ctx.write_csv("sweep.csv", *sweep.table(list(points[0].values), ran))
    return ctx.out_dir
