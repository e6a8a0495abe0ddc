"""The emulated fabric of one phase: a Mininet network of Open vSwitch switches built from
a `Topology`, its queues, its hosts' TCP settings, and the Ryu controller that routes it;
and what an experiment does with it (flows, processes in hosts, the dataplane, samplers).

The network itself is built here; testbed/mntopo.py builds the same one for plain `mn`
from the same translation (topologies/mnplan.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import shlex
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from controllers.recovery import degraded, host_route_changes, host_route_line
from controllers.routing import plan as routing_plan
from testbed.config.controller import CircuitSpec, ControllerConfig, FlowPriority, HederaSpec
from testbed.config.datapath import TRAITS, Traits
from testbed.config.network import HostConfig, LinkConfig
from testbed.config.qos import QosConfig
from testbed.config.replies import CommandReply, ControllerCommand, ControllerState, command_line
from testbed.measure.conservation import SwitchCounters, switch_counters
from testbed.resources import BPF_PIN_ROOT as RESOURCES_BPF_ROOT
from testbed.resources import RunRecord
from testbed.system import (
    IP_BATCH,
    TestbedError,
    batch_input,
    congestion_controls,
    in_netns,
    is_root,
    qdisc_supported,
    run,
    sysctl_get,
    sysctl_set,
)
from testbed.workloads.flows import Flow, FlowResult
from testbed.workloads.launch import free_port
from topologies.mnplan import IP_BASE, populate
from topologies.model import Topology, ifname

from . import dataplane, ovs, traffic
from .controller import (
    ControllerLaunch,
    ControllerProcess,
    controller_death,
    merged_state,
    resync_summary,
)
from .dpapi import Dataplane
from .qosplane import QOS_APPS, QosPlane, build_object


@dataclass
class StartupTimes:
    net_up_s: float = 0.0
    controller_connected_s: float = 0.0
    paths_installed_s: float = 0.0
    total_s: float = 0.0
    teardown_s: float = 0.0


@dataclass
class Fabric:
    topo: Topology
    links: LinkConfig
    hosts: HostConfig
    routing: str
    out_dir: Path
    record: RunRecord
    plugins: tuple[str, ...] = ()
    hedera: HederaSpec = field(default_factory=HederaSpec)  # for routing hedera
    flow_priority: FlowPriority = field(default_factory=FlowPriority)
    circuits: CircuitSpec = field(default_factory=CircuitSpec)  # for routing cthrough
    fast_failover: bool = False
    on_death: str = "warn"  # the spec's controller.on_death: warn | fail | restart
    topology_json: Path | None = None  # where this fabric's topology is written for the controller
    log: Callable[[str], None] = print
    # before every flow tag: the experiment's index, so that raw flow files never collide
    flow_tag_prefix: str = ""
    flow_results: list[FlowResult] = field(default_factory=list)  # every flow run so far
    datapath_setting: str = "user"  # the spec's: user | kernel | auto
    datapath: str = "user"  # the one chosen (config/datapath.py)
    times: StartupTimes = field(default_factory=StartupTimes)
    net: Any = None  # the Mininet network while it runs
    controller: ControllerProcess | None = None
    controller_killed: float | None = None  # when a fault killed it (time.time())
    past_controllers: list[ControllerState] = field(default_factory=list)  # replaced ones
    controller_deaths: list[dict] = field(default_factory=list)  # unasked, seen by the watch
    ports_down: set = field(default_factory=set)  # (switch, port) a fault has set down
    relay_plan: Any = None  # BCube: the relay routes the servers have now
    relay_reroutes: list[dict] = field(default_factory=list)
    _ctl_lock: Any = field(default_factory=threading.RLock, repr=False)
    _watch_stop: Any = field(default_factory=threading.Event, repr=False)
    host_cc: dict[str, str] = field(default_factory=dict)
    qos_status: dict = field(default_factory=dict)
    send_buffer_bytes: int | None = None
    needed_buffer_bytes: int = 0
    qos: QosConfig | None = None  # traffic classes, ECN and PFC (the BPF dataplane)
    qos_plane: QosPlane | None = None
    fair_object: Path | None = None  # links.host_queue: fair: the host NICs' classifier
    jobs: bool = False  # training jobs side by side: the jobs app and its directory

    # ---- queues ------------------------------------------------------------------
    def port_queues(self) -> tuple[list[dataplane.PortQueue], dict[str, list[dataplane.PortQueue]]]:
        """Switch egress queues (root namespace) and host NIC queues (per host)."""
        switch_q: list[dataplane.PortQueue] = []
        host_q: dict[str, list[dataplane.PortQueue]] = {}
        for link in self.topo.links:
            rate = self.links.rate_mbps or link.rate_mbps
            for node, port in link.ends():
                name = ifname(node, port)
                if self.topo.is_host(node):
                    host_q.setdefault(node, []).append(dataplane.PortQueue(
                        ifname=name, rate_mbps=rate, buffer_pkts=self.links.host_queue_pkts,
                        mtu_bytes=self.links.mtu_bytes,
                        fair=self.links.host_queue == "fair"))
                else:
                    switch_q.append(dataplane.PortQueue(
                        ifname=name, rate_mbps=rate, buffer_pkts=self.links.buffer_pkts,
                        buffer_bytes=self.links.buffer_bytes, delay_us=self.links.delay_us,
                        loss_pct=self.links.loss_pct, drop=self.links.drop,
                        mtu_bytes=self.links.mtu_bytes, burst_us=self.links.burst_us))
        return switch_q, host_q

    def switch_ifaces(self, switches: list[str] | None = None) -> list[str]:
        """The switch ports' interfaces (of `switches` only, if given)."""
        return [name for node, _, name in self.topo.interfaces()
                if not self.topo.is_host(node) and (switches is None or node in switches)]

    # ---- where commands run: here, on this machine; a cluster's fabric runs them on the
    # server that holds the node (testbed/cluster/fabric.py overrides these four) ----------
    def host_argv(self, host: str, argv: list[str], hangup: bool = False) -> list[str]:
        """argv that runs `argv` in host `host`'s network namespace. `hangup`: a long-lived
        process, which must end when the process running argv here is stopped (on another
        server: it runs on a terminal that hangs up when its ssh ends)."""
        return in_netns(self.host_pid(host), argv)

    def host_run(self, host: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return run(self.host_argv(host, argv), input=input, check=check)

    def switch_groups(self) -> list[list[str]]:
        """The switches by the machine they run on (one group here)."""
        return [[s.name for s in self.topo.switches]]

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        """`argv` in the root namespace of the machine that runs `switch`."""
        return run(argv, input=input, check=check)

    controller_host = "127.0.0.1"  # where the switches reach the controller

    def _raised_buffers(self) -> contextlib.AbstractContextManager:
        """The socket buffer defaults raised while OVS makes its sockets (ovs.py says why)."""
        return ovs.raised_socket_defaults(self.needed_buffer_bytes, self.record.remember_sysctl)

    def _quicken_reconnect(self, target: str) -> None:
        for group in self.switch_groups():
            ovs.quicken_reconnect(target, runner=partial(self.root_run, group[0]))

    def switch_counters(self) -> dict[str, SwitchCounters]:
        """Every switch's packet counters now (measure/conservation.py)."""
        return switch_counters({s.name: self.switch_ifaces([s.name]) for s in self.topo.switches},
                               self.traits.socket_drops)

    # ---- life cycle ----------------------------------------------------------------
    def preflight(self) -> None:
        """Everything that can fail before anything is created."""
        if not is_root():
            raise TestbedError("the fabric needs root: run with sudo")
        try:
            import mininet.net  # noqa: F401
        except ImportError:
            raise TestbedError("Mininet is not importable; run scripts/bootstrap.sh") from None
        if not ovs.running():
            raise TestbedError("Open vSwitch is not running; run scripts/bootstrap.sh")
        taken = [b for b in ovs.bridges() if b in {s.name for s in self.topo.switches}]
        taken += [n for n in self.switch_ifaces() + [s.name for s in self.topo.switches]
                  if Path(f"/sys/class/net/{n}").exists()]
        if taken:
            raise TestbedError(f"{taken[0]} already exists and was not created by this run; "
                               "run `testbed clean` or remove it")
        if self.hosts.congestion_control not in congestion_controls():
            raise TestbedError(f"hosts.congestion_control: {self.hosts.congestion_control!r} "
                               f"is not available in this kernel ({' '.join(congestion_controls())})")
        switch_q, _ = self.port_queues()
        if any(q.delay_us or q.loss_pct for q in switch_q):
            dataplane.check_mechanisms(switch_q, netem_available=_netem_available())
        self.datapath = ovs.datapath_for(self.datapath_setting).name
        if self.links.host_queue == "fair":  # the host NICs' classifier, before any fabric
            self.fair_object = build_object(dataplane.FAIR_SOURCE, dataplane.fair_defines())
        if self.qos is not None:
            build_object()
            self.qos_plane = self._make_qos_plane()
            self.needed_buffer_bytes = ovs.needed_buffer_bytes(
                *self.qos_plane.switch_buffer_limits(), self.links.mtu_bytes)
        else:
            self.needed_buffer_bytes = ovs.needed_buffer_bytes(
                [q.buffer_pkts for q in switch_q if q.buffer_pkts],
                [q.buffer_bytes for q in switch_q if q.buffer_bytes], self.links.mtu_bytes)
        if self.traits.send_socket:
            tuned = ovs.malloc_tuned()
            reason = ovs.restart_reason(ovs.send_socket_buffer(), self.needed_buffer_bytes,
                                        tuned, not tuned and bool(ovs.bridges()))
            if reason:
                self.log(f"{reason}; restarting ovs-vswitchd")
                ovs.restart_vswitchd(self.needed_buffer_bytes, self.record.remember_sysctl)
            elif not tuned:  # others' bridges are up: not ours to restart
                self.log("warning: ovs-vswitchd runs without the testbed's malloc "
                         "thresholds; its first busy fabric forwards slowly "
                         "(docs/FIDELITY.md)")

    def start(self) -> None:
        self.preflight()
        t0 = time.time()
        topo_json = self.topology_json or self.out_dir / "topology.json"
        topo_json.parent.mkdir(parents=True, exist_ok=True)
        topo_json.write_text(self.topo.to_json())
        self.record.bridges = [s.name for s in self.topo.switches]
        self.record.root_ifaces = self.switch_ifaces() + [s.name for s in self.topo.switches]
        self.record.save()

        config = ControllerConfig(
            topology_json=str(topo_json), state_json=str(self.out_dir / "controller_state.json"),
            routing=self.routing, results_dir=str(self.out_dir), hedera=self.hedera,
            flow_priority=self.flow_priority, hedera_dir=str(self.hedera_dir),
            circuits=self.circuits, circuits_log=str(self.circuits_log)
            if self.routing == "cthrough" else None,
            fast_failover=self.fast_failover,
            dataplane_json=str(self.qos_plane.description) if self.qos_plane else None,
            status_dir=str(self.qos_status_dir) if self.qos_plane else None,
            jobs_dir=str(self.jobs_dir) if self.jobs else None,
            commands_jsonl=str(self.commands_jsonl))
        self.commands_jsonl.unlink(missing_ok=True)
        self.commands_sent = 0
        self.controller = ControllerProcess(
            ControllerLaunch(config=config,
                             config_path=self.out_dir / "controller" / f"{self.slug}.json",
                             port=free_port(), rest_port=free_port(), plugins=self.plugins,
                             qos_apps=self.qos_apps, host=self.controller_host),
            self.out_dir / "controller.log")
        self.record.add_pid(self.controller.start(), "ryu controller")
        self._allow_congestion_control()

        with self._raised_buffers():
            self._build_net()
            self.times.net_up_s = time.time() - t0
            self._configure_hosts()
            t_queues = time.time()
            self._configure_queues()
            self._wait_connected(t0)
            self._quicken_reconnect(f"tcp:{self.controller_host}:{self.controller.launch.port}")
            self.controller.wait_ready(len(self.topo.switches))
            if self.qos_plane is not None:
                self.qos_status = self.qos_plane.wait_apps(
                    self.qos_status_dir, since=t_queues, alive=self.controller.alive,
                    apps=self.qos_apps)
            self.times.paths_installed_s = time.time() - t0
            self._first_packet()
        self.times.total_s = time.time() - t0
        self._check_send_buffer()
        threading.Thread(target=self._watch_controller, name="controller-watch",
                         daemon=True).start()

    WATCH_S = 0.5  # how often the runner looks whether its controller is alive

    def _watch_controller(self) -> None:
        """Notices a controller that died without a fault killing it: records when, how
        and its last log lines, and with `on_death: restart` starts it again."""
        while not self._watch_stop.wait(self.WATCH_S):
            with self._ctl_lock:
                ctl = self.controller
                if ctl is None or ctl.proc is None or ctl.alive() \
                        or self.controller_killed is not None \
                        or any(d["pid"] == ctl.proc.pid for d in self.controller_deaths):
                    continue
                death = {"time": time.time(), "pid": ctl.proc.pid,
                         "returncode": ctl.returncode(), "log_tail": ctl.log_tail(),
                         "action": self.on_death}
                self.log(f"  the controller died ({controller_death(ctl.returncode(), None, [])})"
                         + ("; restarting it" if self.on_death == "restart" else ""))
                self.controller_deaths.append(death)
                if self.on_death == "restart":
                    try:
                        death["restart"] = self.restart_controller()
                    except TestbedError as exc:
                        death["restart_error"] = str(exc)

    def _net_classes(self) -> tuple[Any, Any, Any]:
        """Mininet's host, switch and link classes for this fabric."""
        from mininet.link import Link
        from mininet.node import Host, OVSSwitch
        return Host, OVSSwitch, Link

    def _node_params(self, name: str) -> dict:
        """Mininet's extra parameters of one node (a cluster's: its server)."""
        return {}

    def _link_params(self, index: int) -> dict:
        """Mininet's extra parameters of the topology's link `index`."""
        return {}

    def _build_net(self) -> None:
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import RemoteController

        class _StartedController(RemoteController):
            # Our controller is listening already (ControllerProcess.start waits for it).
            # Mininet's own check pipes telnet's output, which holds the controller's
            # binary OpenFlow hello, through a UTF-8 decoder: a hello whose xid is not
            # valid UTF-8 failed the run (UnicodeDecodeError, seen in a test run).
            def checkListening(self):
                pass

        setLogLevel("warning")
        host_cls, switch_cls, link_cls = self._net_classes()
        switch = partial(switch_cls, datapath=self.datapath, protocols="OpenFlow13",
                         failMode="secure", batch=True)
        net = Mininet(host=host_cls, switch=switch, controller=None, link=link_cls, build=False,
                      autoSetMacs=False, autoStaticArp=False, ipBase=IP_BASE,
                      waitConnected=False)
        self.net = net
        c0 = net.addController("c0", controller=_StartedController, ip=self.controller_host,
                               port=self.controller.launch.port)
        self.record.add_pid(c0.pid, "mininet controller node shell")
        populate(net, self.topo, self._node_params, self._link_params)
        net.build()
        for host in net.hosts:
            if getattr(host, "isRemote", False):  # its shell here is the ssh to its server
                self.record.add_pid(host.shell.pid, f"ssh to mininet host {host.name}")
            else:
                self.record.add_pid(host.pid, f"mininet host {host.name}")
        net.start()

    def host_pid(self, name: str) -> int:
        return self.net.get(name).pid

    def _allow_congestion_control(self) -> None:
        """A host namespace can only select algorithms in the initial namespace's allowed
        list; otherwise it silently stays on the system default (bbr here)."""
        name = "net.ipv4.tcp_allowed_congestion_control"
        allowed = sysctl_get(name).split()
        if self.hosts.congestion_control not in allowed:
            self.record.remember_sysctl(name, " ".join(allowed))
            sysctl_set(name, " ".join(allowed + [self.hosts.congestion_control]))

    def _configure_hosts(self) -> None:
        relay_plan = routing_plan(self.topo, self.routing) if any(
            h.relay for h in self.topo.hosts) else None
        self.relay_plan = relay_plan
        for host in self.topo.hosts:
            settings = [f"net.ipv4.tcp_congestion_control={self.hosts.congestion_control}",
                        f"net.ipv4.tcp_ecn={1 if self.hosts.ecn else 0}",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"]
            if self.hosts.rto_min_us is not None:
                settings.append(f"net.ipv4.tcp_rto_min_us={self.hosts.rto_min_us}")
            if host.relay:
                settings += ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                             "net.ipv4.conf.default.rp_filter=0",
                             "net.ipv4.fib_multipath_hash_policy=1"]
            self.host_run(host.name, ["sh", "-c", " && ".join(
                [shlex.join(["sysctl", "-q", "-w", *settings])]
                + [shlex.join(dataplane.offload_command(ifname(host.name, port)))
                   for port in range(host.ports)])])
            if host.relay:
                self._relay_routes(host, relay_plan)
            self.host_cc[host.name] = self.host_run(
                host.name, ["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
        wrong = {h: cc for h, cc in self.host_cc.items() if cc != self.hosts.congestion_control}
        if wrong:
            raise TestbedError(f"hosts did not take congestion control "
                               f"{self.hosts.congestion_control}: {wrong}")
        # IPv6 off on switch ports: the root namespace must not send ND/MLD out of them.
        for group in self.switch_groups():
            names = self.switch_ifaces(group)
            self.root_run(group[0], ["sysctl", "-q", "-w", *(
                f"net.ipv6.conf.{name}.disable_ipv6=1" for name in names)], check=False)
            self.root_run(group[0], ["sh", "-c", " && ".join(
                shlex.join(dataplane.offload_command(name)) for name in names)])

    def _relay_routes(self, host, relay_plan) -> None:
        """BCube servers: their address on every port, and a /32 route per destination."""
        lines = [f"addr replace {host.ip}/32 dev {ifname(host.name, p)}"
                 for p in range(1, host.ports)]
        for route in relay_plan.host_routes:
            if route.host != host.name:
                continue
            lines.append(host_route_line(route))
        self.host_run(host.name, IP_BATCH, input=batch_input(lines))

    @property
    def slug(self) -> str:
        """The phase's name in file names (topologies/, controller/, hedera/, qos_apps/)."""
        return self.topology_json.stem if self.topology_json else "fabric"

    @property
    def circuits_log(self) -> Path:
        """Where c-Through's scheduler logs its periods and steps for this fabric."""
        return self.out_dir / "circuits" / f"{self.slug}.jsonl"

    @property
    def hedera_dir(self) -> Path:
        """Where Hedera's scheduler logs its periods and decisions for this fabric."""
        return self.out_dir / "hedera" / self.slug

    @property
    def qos_apps(self) -> tuple[str, ...]:
        """The QoS apps the controller loads (and the fabric waits for)."""
        if self.qos_plane is None:
            return ()
        return QOS_APPS + (("jobs",) if self.jobs else ())

    @property
    def jobs_dir(self) -> Path:
        """Where the jobs app reads rounds and logs its decisions (with `jobs`)."""
        return self.out_dir / "jobs" / self.slug

    @property
    def qos_status_dir(self) -> Path:
        """Where the controller's QoS apps report (status, PFC event log) for this fabric."""
        return self.out_dir / "qos_apps" / self.slug

    def _make_qos_plane(self) -> QosPlane:
        slug = self.slug
        return QosPlane(
            self.topo, self.qos, rate_of=lambda link: self.links.rate_mbps or link.rate_mbps,
            host_pid=self.host_pid, mtu_bytes=self.links.mtu_bytes, burst_us=self.links.burst_us,
            buffer_pkts=self.links.buffer_pkts, buffer_bytes=self.links.buffer_bytes,
            host_queue_pkts=self.links.host_queue_pkts,
            pin_dir=RESOURCES_BPF_ROOT / f"{self.record.run_id}-{slug}",
            out_dir=self.qos_status_dir)

    def _install_qos(self, plane: QosPlane) -> None:
        """The class dataplane on every port (a cluster's: on each server)."""
        plane.install(self.record)

    def _remove_qos(self, plane: QosPlane) -> None:
        plane.remove()

    def _configure_queues(self) -> None:
        switch_q, host_q = self.port_queues()
        mtu = self.links.mtu_bytes
        if mtu != 1500:
            for group in self.switch_groups():
                self.root_run(group[0], IP_BATCH, input=batch_input(
                    dataplane.mtu_commands(self.switch_ifaces(group), mtu)))
            for host, queues in host_q.items():
                self.host_run(host, IP_BATCH, input=batch_input(
                    dataplane.mtu_commands([q.ifname for q in queues], mtu)))
        if self.qos_plane is not None:
            self._install_qos(self.qos_plane)
            return
        for group in self.switch_groups():
            names = set(self.switch_ifaces(group))
            self.root_run(group[0], dataplane.TC_BATCH, input=dataplane.tc_lines(
                [c for q in switch_q if q.ifname in names for c in dataplane.htb_commands(q)]))
        for host, queues in host_q.items():
            self.host_run(host, dataplane.TC_BATCH, input=dataplane.tc_lines(
                [c for q in queues for c in dataplane.htb_commands(q, self.fair_object)]))

    def _wait_connected(self, t0: float, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.controller.state()
            if state is not None and len(state.connected) >= len(self.topo.switches):
                self.times.controller_connected_s = time.time() - t0
                return
            time.sleep(0.05)
        raise TestbedError("not every switch connected to the controller within "
                           f"{timeout:.0f} s; see {self.controller.log_path}")

    def _first_packet(self) -> None:
        """Make OVS create its send socket now, while the raised buffer default is in force."""
        if len(self.topo.hosts) >= 2:
            a, b = self.topo.hosts[0], self.topo.hosts[1]
            self.host_run(a.name, ["ping", "-c", "1", "-W", "2", b.ip], check=False)

    @property
    def traits(self) -> Traits:
        """What the chosen datapath changes (config/datapath.py)."""
        return TRAITS[self.datapath]

    def send_buffers(self) -> dict[str, int | None]:
        """OVS's send socket buffer where switches run, by server ('': this machine)."""
        return {"": ovs.send_socket_buffer()}

    def _check_send_buffer(self) -> None:
        if not self.traits.send_socket:
            return
        sizes = self.send_buffers()
        self.send_buffer_bytes = min((v for v in sizes.values() if v is not None), default=None)
        for where, size in sizes.items():
            if size is None or size < self.needed_buffer_bytes:
                fix = (f"restart OVS on server {where} with a larger net.core.wmem_default"
                       if where else "Run `testbed clean` and retry (OVS is restarted when idle)")
                raise TestbedError(
                    f"OVS's send socket buffer is {size} bytes, below the "
                    f"{self.needed_buffer_bytes} bytes this fabric's queues need; packets "
                    f"would be lost silently. {fix} (docs/FIDELITY.md)")

    # ---- what experiments do with a running fabric ---------------------------------------
    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        """A short command in a host (its output piped, as text): pings and the like."""
        return subprocess.Popen(self.host_argv(host, argv), stdout=subprocess.PIPE, text=True)

    def run_flows(self, flows: list[Flow], tag: str) -> list[FlowResult]:
        """iperf3 flows (or finite transfers) at once; their results in order."""
        res = traffic.FlowRunner(self, self.out_dir / "flows").run(
            flows, self.flow_tag_prefix + tag)
        self.flow_results += res
        return res

    def start_process(self, host: str, argv: list[str], what: str,
                      log: Path) -> subprocess.Popen:
        """A long-lived process in a host, its PID recorded for teardown and `testbed clean`."""
        return traffic.start_in_host(self, host, argv, what, log)

    def run_process(self, host: str, argv: list[str], timeout: float) -> str:
        """A process in a host, to completion; its stdout."""
        return traffic.run_in_host(self, host, argv, timeout)

    def wait_listening(self, endpoints: list[tuple[str, int]]) -> None:
        traffic.wait_listening(self, endpoints)

    def stop_processes(self, procs: list[subprocess.Popen]) -> None:
        traffic.stop_and_reap(procs)

    def netstat(self, host: str, key: str) -> int:
        """A TcpExt counter of one host's namespace (/proc/net/netstat is per namespace)."""
        text = self.host_run(host, ["cat", "/proc/net/netstat"]).stdout
        lines = text.splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            if names.startswith("TcpExt:"):
                return int(dict(zip(names.split()[1:], values.split()[1:])).get(key, 0))
        return 0

    # ---- the servers' CPU (one, here; a cluster's fabric has more) --------------------------
    here = "this machine"  # the server the runner is on

    def servers_cpu(self, t_start: float, t_end: float) -> dict[str, dict]:
        """The other servers' CPU over a phase (Unix times): server -> its CpuMonitor
        window. None on one machine, whose CPU the run's own monitor samples."""
        return {}

    def packets_by_server(self, per_switch: dict[str, dict]) -> dict[str, int]:
        """The packets each server's switches took in (a conservation report's
        per-switch counts)."""
        return {self.here: sum(v["in"] for v in per_switch.values())}

    @contextlib.contextmanager
    def writing_in(self, path: Path, hosts: list[str]) -> Iterator[None]:
        """A directory that processes in `hosts` write their outputs into (a cluster's
        remote servers get it too, and their files come back at the end)."""
        path.mkdir(parents=True, exist_ok=True)
        yield

    def ping_rtt_s(self, src: str, dst: str) -> float | None:
        """Median RTT of a few pings (after the first, which may wait for ARP)."""
        argv = ["ping", "-n", "-c", "6", "-i", "0.05", "-W", "2", self.topo.host(dst).ip]
        out = subprocess.run(self.host_argv(src, argv), capture_output=True,
                             text=True, timeout=30).stdout
        rtts = [float(line.split("time=")[1].split()[0]) for line in out.splitlines()
                if "time=" in line]
        return statistics.median(rtts[1:]) / 1000 if len(rtts) > 1 else None

    @property
    def commands_jsonl(self) -> Path:
        """Where the runner asks the controller for changes while the phase runs."""
        return self.out_dir / "controller" / f"{self.slug}-commands.jsonl"

    def set_routing(self, mode: str, timeout: float = 10.0) -> CommandReply:
        """Route the fabric by `mode` (ecmp or single) from now on: the controller replans
        and sends the difference while traffic runs (controllers/apps/routing_app.py); its
        answer (changes, switches, how long it took to decide), or TestbedError with why it
        would not."""
        self.commands_sent += 1
        cmd_id = self.commands_sent
        with open(self.commands_jsonl, "a") as fh:
            fh.write(command_line(ControllerCommand(id=cmd_id, op="routing", mode=mode,
                                                    time=time.time())))
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.controller_state()
            done = [c for c in (state.commands if state else []) if c.id == cmd_id]
            if done:
                if done[0].error is not None:
                    raise TestbedError(f"routing {mode}: {done[0].error}")
                self.routing = mode
                return done[0]
            if self.controller is not None and not self.controller.alive():
                raise TestbedError("routing: the controller is not running")
            time.sleep(0.05)
        raise TestbedError(f"routing {mode}: the controller did not answer within "
                           f"{timeout:g} s; see {self.out_dir / 'controller.log'}")

    def set_ports(self, ports: list[tuple[str, int]] | tuple[tuple[str, int], ...],
                  up: bool) -> None:
        """Switch ports down or up, as a cable pulled or put back: the interface is set
        down (the host's or switch's end beyond it loses its carrier), so the switch tells
        the controller and its select groups stop using the port."""
        for node, port in ports:
            if self.topo.is_host(node):
                raise TestbedError(f"{node} is a host: a fault sets switch ports down")
            self.root_run(node, ["ip", "link", "set", "dev", ifname(node, port),
                                 "up" if up else "down"])
            (self.ports_down.discard if up else self.ports_down.add)((node, port))
        if self.relay_plan is not None:
            self._reroute_relays()

    def _reroute_relays(self) -> None:
        """BCube's servers route for themselves: their /32 routes are replanned on the
        fabric without the ports that are down and only the changed ones replaced
        (recovery.host_route_changes), at once. An oracle: BCube's own protocol (BSR)
        would find a broken path by probing; here the runner knows when it breaks one."""
        t0 = time.time()
        new = routing_plan(degraded(self.topo, self.ports_down), self.routing)
        changes = host_route_changes(self.relay_plan, new)
        for host, lines in changes.items():
            self.host_run(host, IP_BATCH, input=batch_input(lines))
        self.relay_plan = new
        self.relay_reroutes.append({"time": t0, "ports_down": len(self.ports_down),
                                    "hosts": len(changes),
                                    "routes": sum(len(v) for v in changes.values()),
                                    "took_s": round(time.time() - t0, 4)})

    def kill_controller(self) -> None:
        """The controller killed outright (a fault): the switches keep the flows they have
        (fail-mode secure) and nobody answers them until the phase ends."""
        with self._ctl_lock:
            if self.controller is None or not self.controller.alive():
                raise TestbedError("the controller is not running")
            self.controller_killed = time.time()  # before: the watch must not take it
            self.controller.kill()

    def restart_controller(self, timeout: float = 60.0) -> dict:
        """A controller that was killed, started again on the same port with the same
        configuration, told to resynchronise (`resync`: it reads the tables the switches
        kept and sends only the difference); once every switch has reconnected and
        acknowledged its changes, returns how long that took and what the resync read and
        changed."""
        with self._ctl_lock:
            t0 = time.time()
            old = self.controller
            if old is None or old.alive():
                raise TestbedError("the controller is running; only a dead one is restarted")
            if (past := old.state()) is not None:
                self.past_controllers.append(past)
            launch = dataclasses.replace(old.launch, config=dataclasses.replace(
                old.launch.config, resync=True))
            self.controller = ControllerProcess(launch, old.log_path)
            self.record.add_pid(self.controller.start(), "ryu controller (restarted)")
            self.controller_killed = None
            state = self.controller.wait_ready(len(self.topo.switches), timeout)
            return {"ready_s": round(time.time() - t0, 3),
                    "resync": resync_summary(state.resyncs)}

    def controller_state(self, since: float | None = None,
                         timeout: float = 2.0) -> ControllerState | None:
        """The controller's state file (None: it has written none), its packet counters and
        reroutes added to those of the controllers it replaced (a restart starts them from
        zero). With `since`: as written at or after that time (it writes every 0.5 s and on
        each packet-out), so that what it did before then is in it; a controller that has
        ended is not waited for."""
        state = self._controller_state_since(since, timeout)
        return merged_state(self.past_controllers, state) if state is not None else None

    def _controller_state_since(self, since: float | None,
                                timeout: float) -> ControllerState | None:
        if self.controller is None:
            return None
        deadline = time.time() + timeout
        state = self.controller.state()
        while since is not None and (state.time if state else 0) < since \
                and time.time() < deadline and self.controller.returncode() is None:
            time.sleep(0.05)
            state = self.controller.state()
        return state

    def flow_tables(self) -> dict[str, list[str]]:
        """Every switch's OpenFlow entries and groups, without counters (`ovs.tables`)."""
        return {sw.name: ovs.tables(sw.name) for sw in self.topo.switches}

    def controller_report(self) -> str | None:
        """Why the controller is not running, if it is not (None while it runs)."""
        if self.controller is None:
            return None
        seen = [d["time"] for d in self.controller_deaths
                if self.controller.proc is not None and d["pid"] == self.controller.proc.pid]
        said = controller_death(self.controller.returncode(), self.controller_killed,
                                self.controller.log_tail(), seen[0] if seen else None)
        if said and self.qos is not None and self.qos.pfc is not None:
            said += ("; PFC's pause executor runs in the controller, so the pauses in force "
                     "stayed in force and the lossless classes froze")
        return said

    def dataplane(self) -> Dataplane:
        """The live dataplane API of this fabric's class queues (a `qos` fabric only)."""
        if self.qos_plane is None:
            raise TestbedError("this phase has no traffic-class dataplane (no qos)")
        return Dataplane(self.qos_plane.description)

    def deaths_report(self, t_start: float, t_end: float) -> list[str]:
        """The controller deaths the watch saw between two times, each with what was done
        (restarted and resynchronised, or not)."""
        out = []
        for d in self.controller_deaths:
            if not t_start <= d["time"] <= t_end:
                continue
            text = controller_death(d["returncode"], None, d["log_tail"], d["time"]) or ""
            if "restart" in d:
                r = d["restart"]
                text += (f"; restarted: {r['resync']['switches']} switches resynchronised in "
                         f"{r['ready_s']:.1f} s with {r['resync']['changes']} changes")
            elif "restart_error" in d:
                text += f"; the restart failed: {d['restart_error']}"
            out.append(text)
        return out

    def stop(self) -> None:
        self._watch_stop.set()
        t0 = time.time()
        # The controller first: tearing the network down takes every port down, and a
        # controller still running would take that for failures (replans, Hedera's placed
        # flows sent back, in its logs as if they had happened during the phase).
        if self.controller is not None:
            self.controller.stop()
        if self.net is not None:
            controllers = list(self.net.controllers)
            self.net.stop()
            for node in controllers:  # RemoteController.stop() leaves its shell running
                node.terminate()
            self.net = None
        if self.qos_plane is not None:
            self._remove_qos(self.qos_plane)
        self.times.teardown_s = time.time() - t0


def _netem_available() -> bool:
    return qdisc_supported("netem", ("delay", "1ms"))
