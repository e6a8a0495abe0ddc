"""Mininet's network made in batches on one machine: the same nodes, links and interface
objects as Mininet's own classes, but the veth pairs and the hosts' addresses made by a few
`ip -batch` processes instead of a command per interface through each node's shell.

Mininet makes each link with its own `ip link add`, then sets each end's MAC and brings it
up with `ifconfig` through the node's shell, and gives each host its address the same way:
about 11 ms a link, 4.2 s of a Fat-Tree k=8's 16 s build here. Here a link only records its
pair while Mininet builds the network (`BatchLink`, `BatchIntf`, `BatchHost`), and every
node's shell starts at once (`DeferredShell`); `create` waits for the shells, then makes
every pair in one `ip -batch` of the root namespace (each end straight into its
node's namespace, with its MAC), brings the root namespace's ends up there, and runs one
`ip -batch` per host (several hosts at a time) for its addresses and its ends.

Only what the topology translation (topologies/mnplan.py) gives is supported: a MAC per
end, an address per host. Anything else raises rather than being silently dropped.
"""
from __future__ import annotations

import os
import pty
import select
import termios
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from typing import Any

from mininet.link import Intf, Link
from mininet.node import Host, OVSSwitch
from mininet.util import errRun

from testbed.core.system import IP_BATCH, batch_input, ip_batch


class BatchIntf(Intf):
    """An interface whose MAC and state the batch sets (`create`)."""

    def config(self, mac: str | None = None, ip: str | None = None,
               ifconfig: str | None = None, up: bool = True, **params: Any) -> dict:
        if ip is not None or ifconfig is not None or not up or params:
            raise NotImplementedError(f"{self.name}: only a MAC is set in a batch")
        return {}


class BatchLink(Link):
    """A veth pair recorded for the batch (`create`), not made yet."""

    def __init__(self, node1: Any, node2: Any, **params: Any) -> None:
        params["intf"] = BatchIntf  # over Mininet's default (Mininet.addLink sets it)
        super().__init__(node1, node2, **params)

    def makeIntfPair(self, intfname1: str, intfname2: str,  # noqa: N802 (Mininet's name)
                     addr1: str | None = None, addr2: str | None = None,
                     node1: Any = None, node2: Any = None, deleteIntfs: bool = True) -> None:
        self.pair = (intfname1, addr1, node1), (intfname2, addr2, node2)


PROMPT = chr(127)  # Mininet's shells' prompt


class DeferredShell:
    """A node whose shell is spawned when Mininet makes it, but whose prompt is awaited
    only in `create`: Mininet waits for each shell in turn (12 ms a node, 2.6 s of a
    Fat-Tree k=8's build here); spawned together, they start side by side. The spawn is
    Mininet's own (Node.startShell, mininet 2.3), up to its wait for the prompt."""
    shell_ready = False

    def startShell(self: Any, mnopts: str | None = None) -> None:  # noqa: N802 (Mininet's)
        opts = ("-cd" if mnopts is None else mnopts) + ("n" if self.inNamespace else "")
        cmd = ["mnexec", opts, "bash", "--norc", "--noediting", "-is", "mininet:" + self.name]
        # Mininet's `env PS1=...` and its first command's `stty -echo` without their
        # processes (416 on a Fat-Tree k=8): the variables through Popen, the
        # terminal's echo off before the shell starts
        env = {**os.environ, "PS1": PROMPT,
               **dict(pair.split("=", 1) for pair in self.shell_env())}
        self.master, self.slave = pty.openpty()
        attrs = termios.tcgetattr(self.slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        self.shell = self._popen(cmd, stdin=self.slave, stdout=self.slave,
                                 stderr=self.slave, close_fds=False, env=env)
        self.stdin = os.fdopen(self.master, "r")
        self.stdout = self.stdin
        self.pid = self.shell.pid
        self.pollOut = select.poll()
        self.pollOut.register(self.stdout)
        self.outToNode[self.stdout.fileno()] = self
        self.inToNode[self.stdin.fileno()] = self
        self.execed, self.lastCmd, self.lastPid, self.readbuf = False, None, None, ""

    def shell_env(self) -> list[str]:
        """Variables ("NAME=value") the node's shell has besides Mininet's."""
        return []

    def finish_shell(self: Any) -> None:
        """Mininet's wait for the shell's prompt, and its first command: until then the
        node may not have its namespace yet, and its shell takes no command."""
        if self.shell_ready:
            return
        while not self.read(1024).endswith(PROMPT):
            self.pollOut.poll()
        self.waiting = False
        self.shell_ready = True
        self.cmd("unset HISTFILE; set +m")

    def cmd(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.shell_ready and not self.inNamespace and args == ("ifconfig", "lo", "up"):
            # a switch's control interface (mininet's Switch makes it at once): the root
            # namespace's own loopback, up already; waiting for the shell here would make
            # the switches' shells start one at a time again
            return ""
        return super().cmd(*args, **kwargs)  # type: ignore[misc]

    def sendCmd(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (Mininet's)
        self.finish_shell()  # any other command before `create`: the shell first
        return super().sendCmd(*args, **kwargs)  # type: ignore[misc]


class BatchSwitch(DeferredShell, OVSSwitch):
    """Mininet's OVS switch, its shell awaited in `create`. A switch of a fabric forwarded by
    several processes (net/partitioned.py) has the `ovs_env` of its process, if that is not
    the machine's own: in its shell's environment (Mininet's ovs-vsctl and ovs-ofctl through
    the shell reach that process), in its startup's, and its bridge has the "dummy" datapath
    type (dataplane/forwarders.py says why)."""

    def shell_env(self) -> list[str]:
        return [f"{k}={v}" for k, v in sorted(self.params.get("ovs_env", {}).items())]

    def bridgeOpts(self) -> str:  # noqa: N802 (Mininet's name)
        opts = super().bridgeOpts()
        if self.params.get("ovs_env"):
            if " datapath_type=netdev" not in opts:
                raise NotImplementedError(f"{self.name}: a process of its own takes the "
                                          "userspace datapath only")
            opts = opts.replace(" datapath_type=netdev", " datapath_type=dummy")
        return opts

    @classmethod
    def batchStartup(cls, switches: Any, run: Callable[..., Any] = errRun) -> Any:  # noqa: N802
        """Mininet's, one ovs-vsctl per process (its startup's environment aimed at it), the
        processes side by side."""
        def key(switch: Any) -> list[str]:
            return switch.shell_env()

        def start(env: list[str], group: tuple) -> None:
            prefix = " ".join(["env", *env, ""]) if env else ""

            def aimed(cmds: str, **kwargs: Any) -> Any:
                return run(prefix + cmds, **kwargs)
            OVSSwitch.batchStartup.__func__(cls, group, run=aimed)  # type: ignore[attr-defined]

        groups = [(env, tuple(group)) for env, group in groupby(sorted(switches, key=key), key)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda g: start(*g), groups))
        return switches


class BatchHost(DeferredShell, Host):
    """A host whose loopback, address and ports the batch sets (`create`), its shell
    awaited there. What a script starts with `popen` is recorded by `on_popen` (the run
    record's add_pid: teardown and `testbed clean` stop it)."""
    batch_lines: list[str]
    on_popen: Callable[[int, str], None] | None = None

    def popen(self, *args: Any, **kwargs: Any) -> Any:
        proc = super().popen(*args, **kwargs)
        if self.on_popen is not None:
            self.on_popen(proc.pid, f"popen in {self.name}")
        return proc

    def config(self, mac: str | None = None, ip: str | None = None,
               defaultRoute: str | None = None, lo: str = "up",  # noqa: N803 (Mininet's)
               **params: Any) -> dict:
        if defaultRoute is not None or params:
            raise NotImplementedError(f"{self.name}: only a MAC and an address are set in a "
                                      f"batch, not {sorted([*params, 'defaultRoute'])}")
        intf = self.defaultIntf()
        lines = [f"link set dev lo {lo}"]
        if mac is not None and mac != intf.mac:
            lines.append(f"link set dev {intf.name} address {mac}")
            intf.mac = mac
        if ip is not None:  # "10.0.0.1/8", kept as Mininet's setIP keeps it
            intf.ip, _, intf.prefixLen = ip.partition("/")
            intf.prefixLen = intf.prefixLen or "8"
            lines.append(f"addr add {intf.ip}/{intf.prefixLen} brd + dev {intf.name}")
        lines += [f"link set dev {i.name} up" for i in self.intfList()]
        self.batch_lines = lines
        return {}


def link_add_line(ends: tuple[tuple[str, str | None, Any], ...]) -> str:
    """The `ip -batch` line that makes one recorded pair, each end in its node's namespace
    (an end of a node in the root namespace stays in this one)."""
    words = ["link", "add"]
    for i, (name, mac, node) in enumerate(ends):
        if i:
            words += ["type", "veth", "peer"]
        words += ["name", name]
        if mac is not None:
            words += ["address", mac]
        if node is not None and node.inNamespace:
            words += ["netns", str(node.pid)]
    return " ".join(words)


def create(net: Any, hosts_run: Callable[..., dict]) -> None:
    """Make the links and set the hosts up that `net` recorded (after `net.build()`, before
    `net.start()`: the switches take their ports then). `hosts_run` is the executor's."""
    for node in [*net.hosts, *net.switches]:
        node.finish_shell()
    lines = [link_add_line(link.pair) for link in net.links]
    lines += [f"link set dev {intf.name} up" for link in net.links
              for intf in (link.intf1, link.intf2) if not intf.node.inNamespace]
    ip_batch(lines)
    hosts_run({h.name: IP_BATCH for h in net.hosts},
              inputs={h.name: batch_input(h.batch_lines) for h in net.hosts})
