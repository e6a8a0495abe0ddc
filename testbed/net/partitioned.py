"""A fabric on this machine whose switches are forwarded by several ovs-vswitchd processes
(`forwarding.processes`; testbed/config/forwarding.py says why and how the switches are
split): the machine's own Open vSwitch keeps the first share, and each other share gets an
extra process of its own (dataplane/forwarders.py) for as long as the fabric is up.

Links, hosts, queues, the class dataplane and the controller are as on one process: every
link is a veth pair either way, the queues and BPF programs are on the veth interfaces,
and each switch connects to the same controller with its own datapath ID. What differs is
which process an Open vSwitch tool must reach for a switch: each switch's Mininet shell has
its process's directory in its environment, and the testbed's own commands for a switch go
through `root_run`, which adds it (`switch_groups` stays one group: the switches by the
machine they run on).
"""
from __future__ import annotations

import hashlib
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from testbed.core.system import TestbedError, run
from testbed.dataplane import ovs
from testbed.dataplane.forwarders import ROOT, Forwarder, start_all, stop_all
from topologies.model import Topology

from .executor import LocalExecutor

if TYPE_CHECKING:
    from .fabric import Fabric


class PartitionedExecutor(LocalExecutor):
    """Every node here, the switches in `groups` (config/forwarding.partition): the first
    in the machine's own ovs-vswitchd, each other in a process of its own."""

    def __init__(self, groups: list[list[str]]) -> None:
        super().__init__()
        self.groups = groups
        self.forwarders: list[Forwarder] = []  # once attached: named after the run
        self.share = {switch: p for p, group in enumerate(groups) for switch in group}

    def attach(self, fab: Fabric) -> None:
        super().attach(fab)
        # the run's own directories (a record's, for `testbed clean`), short enough for the
        # Unix sockets in them (108 bytes)
        tag = hashlib.sha1(fab.record.run_id.encode()).hexdigest()[:10]
        self.forwarders = [Forwarder(ROOT / f"{tag}.{p}") for p in range(1, len(self.groups))]

    def forwarder(self, switch: str) -> Forwarder | None:
        """The extra process that forwards `switch` (None: the machine's own)."""
        p = self.share[switch]
        return self.forwarders[p - 1] if p else None

    def forwarding_groups(self) -> list[list[str]]:
        return [list(group) for group in self.groups]

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        fwd = self.forwarder(switch)
        return run(fwd.argv(argv) if fwd else argv, input=input, check=check)

    def switch_env(self, switch: str) -> dict[str, str]:
        fwd = self.forwarder(switch)
        return fwd.env if fwd else {}

    def node_params(self, name: str) -> dict:
        env = self.switch_env(name) if name in self.share else {}
        return {"ovs_env": env} if env else {}

    def before_switches(self) -> None:
        record = self.fab.record
        record.forwarders += [str(f.directory) for f in self.forwarders]
        record.save()
        start_all(self.forwarders)

    def forwarder_pids(self) -> list[int]:
        return [pid for f in self.forwarders if (pid := f.pid()) is not None]

    def send_buffers(self) -> dict[str, int | None]:
        """The smallest of the processes' send socket buffers (None while one has none)."""
        pids = [ovs.vswitchd_pid(), *(f.pid() for f in self.forwarders)]
        found = ovs.send_socket_buffers(pid for pid in pids if pid is not None)
        sizes = [found[pid] if pid is not None else None for pid in pids]
        return {"": None if None in sizes else min(s for s in sizes if s is not None)}

    def first_packet(self) -> None:
        """A packet out of every process, each making its send socket while the raised
        buffer default is in force (checked: a process that sent none is an error)."""
        self.hosts_run_each([first_ping(self.fab.topo, group) for group in self.groups])
        pids = {str(f.directory): f.pid() for f in self.forwarders}
        found = ovs.send_socket_buffers(pid for pid in pids.values() if pid is not None)
        silent = [where for where, pid in pids.items() if pid is None or found[pid] is None]
        if silent:
            raise TestbedError(f"the forwarding processes of {', '.join(silent)} sent no "
                               "packet at the start, so their send socket would take the "
                               "kernel's default buffer (docs/FIDELITY.md); set "
                               "forwarding.processes lower for this topology")

    def hosts_run_each(self, commands: list[tuple[str, list[str]]]) -> None:
        """Each (host, argv), several at a time, unchecked."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda c: self.host_run(c[0], c[1], check=False), commands))

    def teardown(self, net: Any) -> None:
        """The extra processes stopped first (their switches go with them), then the rest
        as on one process."""
        try:
            self.stop_forwarders()
        finally:
            super().teardown(net)

    def stop_forwarders(self) -> None:
        stopped = {str(f.directory) for f in self.forwarders}
        stop_all([f.directory for f in self.forwarders])
        record = self.fab.record
        if not record.released and any(d in stopped for d in record.forwarders):
            record.forwarders = [d for d in record.forwarders if d not in stopped]
            record.save()

    def close(self) -> None:
        try:
            self.stop_forwarders()  # a build cut short: nothing of them stays
        finally:
            super().close()


def first_ping(topo: Topology, group: list[str]) -> tuple[str, list[str]]:
    """(host, argv) of a ping that one of `group`'s switches forwards to a host: between
    two hosts of one of its switches (one hop apart, also where servers relay: BCube,
    DCell), else to the host of a switch that has one, from another host (the last hop
    of a host with one port is its switch)."""
    hosts = {sw: [h for h in topo.hosts for port, _, _ in topo.ports_of(h.name)
                  if topo.neighbour(h.name, port) == sw] for sw in group}
    pair = next(((hs[0], hs[1]) for hs in hosts.values() if len(hs) >= 2), None)
    if pair is None:
        target = next(hs[0] for hs in hosts.values() if hs)
        pair = (next(h for h in topo.hosts if h.name != target.name), target)
    return pair[0].name, ["ping", "-c", "1", "-W", "2", pair[1].ip]
