"""Where a fabric's commands run: in a host's network namespace, or beside its switches in
the root namespace; here, on this machine. A cluster's executor
(testbed/cluster/fabric.py's `ClusterExecutor`) runs each on the server that holds the
node, and also places the nodes, checks the servers first and brings their outputs back.

The fabric (net/fabric.py) and its parts reach a node only through its executor, so that
the same code builds and drives a fabric on one machine or across servers.
"""
from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.system import delete_bridges, delete_links, expedited_rcu, in_netns, run
from testbed.dataplane import ovs, queues
from testbed.dataplane.qosplane import QosPlane
from testbed.measure.conservation import SwitchCounters, switch_counters

if TYPE_CHECKING:
    from .fabric import Fabric

HOSTS_AT_ONCE = 8  # hosts_run's processes at a time


class LocalExecutor:
    """Every node of the fabric here: hosts in namespaces of this machine's kernel,
    switches in its Open vSwitch."""
    here = "this machine"  # the server the runner is on
    controller_host = "127.0.0.1"  # where the switches reach the controller
    fab: Fabric  # the fabric it runs the commands of (attach)

    def __init__(self) -> None:
        self.warnings: list[str] = []  # fidelity warnings for the summary (a cluster's)

    def attach(self, fab: Fabric) -> None:
        """Serve `fab` (its topology, record and network), once it is made."""
        self.fab = fab

    # ---- where commands run: here, on this machine; a cluster's executor runs them on the
    # server that holds the node (testbed/cluster/fabric.py overrides these four) ----------
    def host_argv(self, host: str, argv: list[str], hangup: bool = False) -> list[str]:
        """argv that runs `argv` in host `host`'s network namespace. `hangup`: a long-lived
        process, which must end when the process running argv here is stopped (on another
        server: it runs on a terminal that hangs up when its ssh ends)."""
        return in_netns(self.fab.host_pid(host), argv)

    def host_run(self, host: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return run(self.host_argv(host, argv), input=input, check=check)

    def hosts_run(self, argvs: dict[str, list[str]], inputs: dict[str, str] | None = None
                  ) -> dict[str, subprocess.CompletedProcess]:
        """Each host's argv (host name -> argv, with `inputs[host]` on its standard input),
        checked as `host_run` checks it, several at a time: the hosts' setup spawns a few
        processes per host, and one at a time a Fat-Tree k=8's 128 hosts took seconds (a
        cluster's executor runs them in turn)."""
        inputs = inputs or {}
        with ThreadPoolExecutor(max_workers=HOSTS_AT_ONCE) as pool:
            done = {host: pool.submit(self.host_run, host, argv, inputs.get(host))
                    for host, argv in argvs.items()}
        return {host: future.result() for host, future in done.items()}

    def switch_groups(self) -> list[list[str]]:
        """The switches by the machine they run on (one group here)."""
        return [[s.name for s in self.fab.topo.switches]]

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        """`argv` in the root namespace of the machine that runs `switch`."""
        return run(argv, input=input, check=check)

    def offloads_off(self, switch: str, ifnames: list[str]) -> None:
        """queues.offload_command's effect on these interfaces of the root namespace of the
        machine that runs `switch` (here: by ioctl, queues.offloads_off)."""
        queues.offloads_off(ifnames)

    def raised_buffers(self) -> contextlib.AbstractContextManager:
        """The socket buffer defaults raised while OVS makes its sockets (ovs.py says why)."""
        return ovs.raised_socket_defaults(self.fab.needed_buffer_bytes,
                                          self.fab.record.remember_sysctl)

    def forwarding_groups(self) -> list[list[str]]:
        """The switches by the ovs-vswitchd that forwards them: one per machine here (a
        split fabric's: one per process, net/partitioned.py)."""
        return self.switch_groups()

    def quicken_reconnect(self, target: str) -> None:
        """ovs.quicken_reconnect in every forwarding process, side by side."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda group: ovs.quicken_reconnect(
                target, runner=partial(self.root_run, group[0])), self.forwarding_groups()))

    def switch_counters(self) -> dict[str, SwitchCounters]:
        """Every switch's packet counters now (measure/conservation.py)."""
        return switch_counters({s.name: self.fab.switch_ifaces([s.name])
                                for s in self.fab.topo.switches},
                               self.fab.traits.socket_drops, run_at=self.root_run,
                               groups=self.forwarding_groups())

    def send_buffers(self) -> dict[str, int | None]:
        """OVS's send socket buffer where switches run, by server ('': this machine)."""
        return {"": ovs.send_socket_buffer()}

    # ---- before anything is built, and building -------------------------------------------
    def preflight(self, here: Callable[[], None]) -> None:
        """Everything that can fail before anything is created: `here`, this machine's
        checks (a cluster's executor checks every server around them)."""
        here()

    def net_classes(self) -> tuple[Any, Any, Any]:
        """Mininet's host, switch and link classes for this fabric: here, hosts and links
        made in batches (net/mnbatch.py, `create_links`)."""
        from .mnbatch import BatchHost, BatchLink, BatchSwitch
        return BatchHost, BatchSwitch, BatchLink

    def create_links(self, net: Any) -> None:
        """The links and hosts' addresses that the classes of `net_classes` recorded while
        Mininet built `net` (a cluster's: made already, by Mininet's own classes)."""
        from .mnbatch import create
        create(net, self.hosts_run)

    def node_params(self, name: str) -> dict:
        """Mininet's extra parameters of one node (a cluster's: its server)."""
        return {}

    def link_params(self, index: int) -> dict:
        """Mininet's extra parameters of the topology's link `index`."""
        return {}

    def before_switches(self) -> None:
        """Once the links are made, before the switches start (a split fabric's: its extra
        Open vSwitch processes, net/partitioned.py)."""

    def switch_env(self, switch: str) -> dict[str, str]:
        """The environment that aims Open vSwitch's tools at `switch`'s process (empty:
        the machine's own)."""
        return {}

    def forwarder_pids(self) -> list[int]:
        """The fabric's ovs-vswitchd processes here besides the machine's own."""
        return []

    def first_packet(self) -> None:
        """Make OVS create its send socket now, while the raised buffer default is in force."""
        topo = self.fab.topo
        if len(topo.hosts) >= 2:
            a, b = topo.hosts[0], topo.hosts[1]
            self.host_run(a.name, ["ping", "-c", "1", "-W", "2", b.ip], check=False)

    def install_qos(self, plane: QosPlane) -> None:
        """The class dataplane on every port (a cluster's: on each server)."""
        plane.install(self.fab.record)

    def remove_qos(self, plane: QosPlane) -> None:
        plane.remove()

    def teardown(self, net: Any) -> None:
        """Mininet's `net.stop()`, all at once: its stop deletes every link with its own
        `ip link del` and OVS waits a kernel grace period for each port it removes (2.7 s
        for a Fat-Tree k=4, 21.5 s for k=8 here). Here the bridges go in one ovs-vsctl
        transaction with grace periods expedited, every link in one interface group
        (core/system.py), then the nodes' shells as Mininet ends them. A link with no end in
        the root namespace (none in the shipped topologies) is stopped as Mininet does."""
        if net.terms:  # windows `testbed up`'s CLI opened (xterm)
            net.stopXterms()
        for controller in net.controllers:
            controller.stop()
        root_ends, other = [], []
        for link in net.links:
            ends = [i for i in (link.intf1, link.intf2) if not i.node.inNamespace]
            if ends:
                root_ends.append(ends[0].name)
            else:
                other.append(link)
        with expedited_rcu(self.fab.record.remember_sysctl):
            delete_bridges([switch.name for switch in net.switches])
            delete_links(root_ends)
        for link in other:
            link.stop()
        for node in [*net.switches, *net.hosts]:
            try:
                node.terminate()
            except OSError:  # a shell not yet in its own process group (a build cut short)
                node.shell.kill()

    def started(self) -> None:
        """Once the fabric is up (a cluster's: each other server's CPU monitor)."""

    def stopping(self) -> None:
        """Before the fabric is torn down (a cluster's: those CPU monitors closed)."""

    def close(self) -> None:
        """Once the fabric is torn down, or failed to be (a cluster's: its connections)."""

    # ---- the servers' CPU and files (one, here; a cluster has more) --------------------------
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

    def manifest(self) -> dict:
        """What the manifest records of where the fabric ran (a cluster's placement)."""
        return {}
