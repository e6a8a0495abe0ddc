"""The emulated fabric of one phase: a Mininet network of Open vSwitch switches built from
a `Topology`, its queues, its hosts' TCP settings, and the Ryu controller that routes it;
and what an experiment does with it (flows, processes in hosts, the dataplane, samplers).

The network itself is built here; testbed/mntopo.py builds the same one for plain `mn`
from the same translation (topologies/mnplan.py). `Fabric` is the façade over its parts:
where a command on a node runs (net/executor.py here; testbed/cluster/fabric.py across
servers), the controller's supervisor (net/supervisor.py), the hosts' and queues' setup
(net/hostsetup.py) and what experiments use (net/services.py).
"""
from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from testbed.config.controller import CircuitSpec, ControllerConfig, FlowPriority, HederaSpec
from testbed.config.datapath import TRAITS, Traits
from testbed.config.network import HostConfig, LinkConfig
from testbed.config.qos import QosConfig
from testbed.config.replies import CommandReply, ControllerState
from testbed.core.resources import RunRecord, netns_of
from testbed.core.system import TestbedError, congestion_controls, is_root, qdisc_supported
from testbed.dataplane import ovs, queues
from testbed.dataplane.dpapi import Dataplane
from testbed.dataplane.qosplane import QOS_APPS, QosPlane, build_object
from testbed.measure.conservation import SwitchCounters
from testbed.workloads.launch import free_port
from testbed.workloads.model.flows import Flow, FlowResult
from topologies.mnplan import IP_BASE, populate
from topologies.model import Topology

from .controller import ControllerLaunch, ControllerProcess
from .executor import LocalExecutor
from .hostsetup import HostSetup
from .services import Services
from .supervisor import ControllerSupervisor


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
    udp_hash: bool = False  # every ECMP choice hashes UDP's ports too (plans.hash_udp)
    on_death: str = "warn"  # the spec's controller.on_death: warn | fail | restart
    topology_json: Path | None = None  # where this fabric's topology is written for the controller
    log: Callable[[str], None] = print
    # before every flow tag: the experiment's index, so that raw flow files never collide
    flow_tag_prefix: str = ""
    datapath_setting: str = "user"  # the spec's: user | kernel | auto
    datapath: str = "user"  # the one chosen (config/datapath.py)
    times: StartupTimes = field(default_factory=StartupTimes)
    net: Any = None  # the Mininet network while it runs
    ports_down: set = field(default_factory=set)  # (switch, port) a fault has set down
    qos_status: dict = field(default_factory=dict)
    send_buffer_bytes: int | None = None
    needed_buffer_bytes: int = 0
    qos: QosConfig | None = None  # traffic classes, ECN and PFC (the BPF dataplane)
    qos_plane: QosPlane | None = None
    fair_object: Path | None = None  # links.host_queue: fair: the host NICs' classifier
    jobs: bool = False  # training jobs side by side: the jobs app and its directory
    # where its commands run: here (a cluster's: on each node's server, cluster/fabric.py)
    executor: LocalExecutor = field(default_factory=LocalExecutor)
    supervisor: ControllerSupervisor = field(init=False, repr=False)  # its controller
    setup: HostSetup = field(init=False, repr=False)  # its hosts' settings and queues
    services: Services = field(init=False, repr=False)  # what experiments do with it

    def __post_init__(self) -> None:
        self.executor.attach(self)
        self.supervisor = ControllerSupervisor(self)
        self.setup = HostSetup(self)
        self.services = Services(self)

    def switch_ifaces(self, switches: list[str] | None = None) -> list[str]:
        """The switch ports' interfaces (of `switches` only, if given)."""
        return [name for node, _, name in self.topo.interfaces()
                if not self.topo.is_host(node) and (switches is None or node in switches)]

    # ---- life cycle ----------------------------------------------------------------
    def preflight(self) -> None:
        """Everything that can fail before anything is created (a cluster's executor
        checks its servers around this machine's checks)."""
        self.executor.preflight(self._preflight_here)

    def _preflight_here(self) -> None:
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
        switch_q, _ = self.setup.port_queues()
        if any(q.delay_us or q.loss_pct for q in switch_q):
            queues.check_mechanisms(switch_q, netem_available=_netem_available())
        self.datapath = ovs.datapath_for(self.datapath_setting).name
        if self.links.host_queue == "fair":  # the host NICs' classifier, before any fabric
            self.fair_object = build_object(queues.FAIR_SOURCE, queues.fair_defines())
        if self.qos is not None:
            build_object()
            self.qos_plane = self.setup.make_qos_plane()
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
            fast_failover=self.fast_failover, udp_hash=self.udp_hash,
            dataplane_json=str(self.qos_plane.description) if self.qos_plane else None,
            status_dir=str(self.qos_status_dir) if self.qos_plane else None,
            jobs_dir=str(self.jobs_dir) if self.jobs else None,
            commands_jsonl=str(self.commands_jsonl))
        self.supervisor.launch(
            ControllerLaunch(config=config,
                             config_path=self.out_dir / "controller" / f"{self.slug}.json",
                             port=free_port(), rest_port=free_port(), plugins=self.plugins,
                             qos_apps=self.qos_apps, host=self.controller_host),
            self.out_dir / "controller.log")
        self.setup.allow_congestion_control()

        with self.executor.raised_buffers():
            self._build_net()
            self.times.net_up_s = time.time() - t0
            t_queues = time.time()
            self.setup.configure_queues()
            self.times.controller_connected_s = self.supervisor.wait_connected(t0)
            self.executor.quicken_reconnect(
                f"tcp:{self.controller_host}:{self.controller.launch.port}")
            self.controller.wait_ready(len(self.topo.switches))
            if self.qos_plane is not None:
                self.qos_status = self.qos_plane.wait_apps(
                    self.qos_status_dir, since=t_queues, alive=self.controller.alive,
                    apps=self.qos_apps)
            self.times.paths_installed_s = time.time() - t0
            self.executor.first_packet()
        self.times.total_s = time.time() - t0
        self._check_send_buffer()
        self.supervisor.watch()
        self.executor.started()

    def _build_net(self) -> None:
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import RemoteController

        class _StartedController(RemoteController):
            # Our controller is listening by the time the switches start (the fabric waits
            # for it: Supervisor.wait_listening). Mininet's own check pipes telnet's
            # output, which holds the controller's binary OpenFlow hello, through a UTF-8
            # decoder: a hello whose xid is not valid UTF-8 failed the run
            # (UnicodeDecodeError, seen in a test run).
            def checkListening(self):
                pass

        setLogLevel("warning")
        host_cls, switch_cls, link_cls = self.executor.net_classes()
        switch = partial(switch_cls, datapath=self.datapath, protocols="OpenFlow13",
                         failMode="secure", batch=True)
        net = Mininet(host=host_cls, switch=switch, controller=None, link=link_cls, build=False,
                      autoSetMacs=False, autoStaticArp=False, ipBase=IP_BASE,
                      waitConnected=False)
        self.net = net
        c0 = net.addController("c0", controller=_StartedController, ip=self.controller_host,
                               port=self.controller.launch.port)
        self.record.add_pid(c0.pid, "mininet controller node shell")
        populate(net, self.topo, self.executor.node_params, self.executor.link_params)
        for host in net.hosts:  # their shells run from here on
            if getattr(host, "isRemote", False):  # its shell here is the ssh to its server
                self.record.add_pid(host.shell.pid, f"ssh to mininet host {host.name}")
            else:
                self.record.add_pid(host.pid, f"mininet host {host.name}", group=True)
        net.build()
        self.executor.create_links(net)
        namespaces = {}
        for host in net.hosts:  # in their namespaces now: where their groups are found
            if not getattr(host, "isRemote", False) and (ns := netns_of(host.pid)):
                namespaces[host.pid] = ns
                # what a script's popen starts there (mnexec -d: a group of its own)
                host.on_popen = partial(self.record.add_pid, group=True, netns=ns)
        self.record.set_netns(namespaces)
        # The hosts' settings and the switch ports' offloads before the switches take their
        # ports: every change of a port is a link event that wakes every ovs-vswitchd, and
        # each wake-up reads all of that process's ports (docs/FIDELITY.md); made after, they
        # took 1.2 s of a Fat-Tree k=8's start in one process and 9.5 s in 17.
        self.setup.configure_hosts()
        self.supervisor.wait_listening()  # before the switches start: none waits to retry
        self.executor.before_switches()
        net.start()

    def host_pid(self, name: str) -> int:
        return self.net.get(name).pid

    @property
    def traits(self) -> Traits:
        """What the chosen datapath changes (config/datapath.py)."""
        return TRAITS[self.datapath]

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

    def stop(self) -> None:
        try:
            self.executor.stopping()
            self.supervisor.stop_watch()
            t0 = time.time()
            # The controller first: tearing the network down takes every port down, and a
            # controller still running would take that for failures (replans, Hedera's placed
            # flows sent back, in its logs as if they had happened during the phase).
            self.supervisor.stop()
            if self.net is not None:
                controllers = list(self.net.controllers)
                self.executor.teardown(self.net)
                for node in controllers:  # RemoteController.stop() leaves its shell running
                    node.terminate()
                self.net = None
            if self.qos_plane is not None:
                self.executor.remove_qos(self.qos_plane)
            self.times.teardown_s = time.time() - t0
        finally:
            self.executor.close()

    # ---- the phase's files ---------------------------------------------------------------
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

    @property
    def commands_jsonl(self) -> Path:
        """Where the runner asks the controller for changes while the phase runs."""
        return self.out_dir / "controller" / f"{self.slug}-commands.jsonl"

    # ---- where commands run (the executor) ----------------------------------------------
    def host_argv(self, host: str, argv: list[str], hangup: bool = False) -> list[str]:
        """argv that runs `argv` in host `host`'s network namespace (executor.py)."""
        return self.executor.host_argv(host, argv, hangup)

    def host_run(self, host: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return self.executor.host_run(host, argv, input=input, check=check)

    def hosts_run(self, argvs: dict[str, list[str]], inputs: dict[str, str] | None = None
                  ) -> dict[str, subprocess.CompletedProcess]:
        return self.executor.hosts_run(argvs, inputs)

    def switch_groups(self) -> list[list[str]]:
        """The switches by the machine they run on."""
        return self.executor.switch_groups()

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        """`argv` in the root namespace of the machine that runs `switch`."""
        return self.executor.root_run(switch, argv, input=input, check=check)

    @property
    def controller_host(self) -> str:
        """Where the switches reach the controller."""
        return self.executor.controller_host

    @property
    def here(self) -> str:
        """The server the runner is on."""
        return self.executor.here

    @property
    def warnings(self) -> list[str]:
        """Fidelity warnings of where it runs, for the summary (a cluster's)."""
        return self.executor.warnings

    def switch_counters(self) -> dict[str, SwitchCounters]:
        """Every switch's packet counters now (measure/conservation.py)."""
        return self.executor.switch_counters()

    def send_buffers(self) -> dict[str, int | None]:
        """OVS's send socket buffer where switches run, by server ('': this machine)."""
        return self.executor.send_buffers()

    def switch_env(self, switch: str) -> dict[str, str]:
        """The environment that aims Open vSwitch's tools at `switch`'s process."""
        return self.executor.switch_env(switch)

    def forwarder_pids(self) -> list[int]:
        """The ovs-vswitchd processes here that forward it besides the machine's own."""
        return self.executor.forwarder_pids()

    def servers_cpu(self, t_start: float, t_end: float) -> dict[str, dict]:
        """The other servers' CPU over a phase (none on one machine)."""
        return self.executor.servers_cpu(t_start, t_end)

    def packets_by_server(self, per_switch: dict[str, dict]) -> dict[str, int]:
        """The packets each server's switches took in."""
        return self.executor.packets_by_server(per_switch)

    def writing_in(self, path: Path, hosts: list[str]) -> contextlib.AbstractContextManager[None]:
        """A directory that processes in `hosts` write their outputs into (a cluster's
        remote servers get it too, and their files come back at the end)."""
        return self.executor.writing_in(path, hosts)

    def manifest(self) -> dict:
        """What the manifest records of where it ran (a cluster's placement, tunnels, MTU)."""
        return self.executor.manifest()

    # ---- the controller (the supervisor) ---------------------------------------------------
    @property
    def controller(self) -> ControllerProcess | None:
        return self.supervisor.controller

    @property
    def controller_killed(self) -> float | None:
        """When a fault killed the controller (time.time()), until it is restarted."""
        return self.supervisor.controller_killed

    @property
    def controller_deaths(self) -> list[dict]:
        """Deaths nobody asked for, as the watch saw them."""
        return self.supervisor.controller_deaths

    def set_routing(self, mode: str, timeout: float = 10.0) -> CommandReply:
        """Route the fabric by `mode` from now on (supervisor.py)."""
        return self.supervisor.set_routing(mode, timeout)

    def kill_controller(self) -> None:
        """The controller killed outright (a fault)."""
        self.supervisor.kill_controller()

    def restart_controller(self, timeout: float = 60.0) -> dict:
        """A killed controller started again and resynchronised (supervisor.py)."""
        return self.supervisor.restart_controller(timeout)

    def controller_state(self, since: float | None = None,
                         timeout: float = 2.0) -> ControllerState | None:
        """The controller's state file, with the counters of those it replaced."""
        return self.supervisor.controller_state(since, timeout)

    def controller_report(self) -> str | None:
        """Why the controller is not running, if it is not (None while it runs)."""
        return self.supervisor.controller_report()

    def deaths_report(self, t_start: float, t_end: float) -> list[str]:
        """The controller deaths the watch saw between two times."""
        return self.supervisor.deaths_report(t_start, t_end)

    # ---- the hosts (their setup) ----------------------------------------------------------
    @property
    def host_cc(self) -> dict[str, str]:
        """The congestion control each host runs."""
        return self.setup.host_cc

    @property
    def relay_plan(self) -> Any:
        """BCube: the relay routes the servers have now."""
        return self.setup.relay_plan

    @property
    def relay_reroutes(self) -> list[dict]:
        return self.setup.relay_reroutes

    def port_queues(self) -> tuple[list[queues.PortQueue], dict[str, list[queues.PortQueue]]]:
        """Switch egress queues (root namespace) and host NIC queues (per host)."""
        return self.setup.port_queues()

    # ---- what experiments do with a running fabric (the services) ------------------------
    @property
    def flow_results(self) -> list[FlowResult]:
        """Every flow run so far."""
        return self.services.flow_results

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        """A short command in a host (its output piped, as text): pings and the like."""
        return self.services.popen(host, argv)

    def run_flows(self, flows: list[Flow], tag: str) -> list[FlowResult]:
        """iperf3 flows (or finite transfers) at once; their results in order."""
        return self.services.run_flows(flows, tag)

    def start_process(self, host: str, argv: list[str], what: str,
                      log: Path) -> subprocess.Popen:
        """A long-lived process in a host, its PID recorded for teardown and `testbed clean`."""
        return self.services.start_process(host, argv, what, log)

    def run_process(self, host: str, argv: list[str], timeout: float) -> str:
        """A process in a host, to completion; its stdout."""
        return self.services.run_process(host, argv, timeout)

    def wait_listening(self, endpoints: list[tuple[str, int]]) -> None:
        self.services.wait_listening(endpoints)

    def stop_processes(self, procs: list[subprocess.Popen]) -> None:
        self.services.stop_processes(procs)

    def netstat(self, host: str, key: str) -> int:
        """A TcpExt counter of one host's namespace."""
        return self.services.netstat(host, key)

    def set_initial_window(self, segments: int) -> None:
        """Every host's TCP initial window from now on (connections opened later), as
        hosts.initial_window_pkts sets it at the start."""
        for host in self.topo.hosts:
            self.setup.initial_window(host.name, segments)

    def ping_rtt_s(self, src: str, dst: str) -> float | None:
        """Median RTT of a few pings (after the first, which may wait for ARP)."""
        return self.services.ping_rtt_s(src, dst)

    def set_ports(self, ports: list[tuple[str, int]] | tuple[tuple[str, int], ...],
                  up: bool) -> None:
        """Switch ports down or up, as a cable pulled or put back (services.py)."""
        self.services.set_ports(ports, up)

    def flow_tables(self) -> dict[str, list[str]]:
        """Every switch's OpenFlow entries and groups, without counters (`ovs.tables`)."""
        return self.services.flow_tables()

    def dataplane(self) -> Dataplane:
        """The live dataplane API of this fabric's class queues (a `qos` fabric only)."""
        return self.services.dataplane()


def _netem_available() -> bool:
    return qdisc_supported("netem", ("delay", "1ms"))
