"""What experiments do with a running fabric: flows, processes in its hosts, pings and a
host's TCP counters, switch ports set down or up, the switches' flow tables, and the live
dataplane API of its class queues (the `Phase` of testbed/experiments/base.py, with the
fabric that offers it, net/fabric.py).
"""
from __future__ import annotations

import statistics
import subprocess
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.system import TestbedError
from testbed.dataplane import ovs
from testbed.dataplane.dpapi import Dataplane
from testbed.net import traffic
from testbed.workloads.model.flows import Flow, FlowResult
from topologies.model import ifname

if TYPE_CHECKING:
    from .fabric import Fabric


class Services:
    """A running fabric's services to experiments, and every flow they ran on it."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.flow_results: list[FlowResult] = []  # every flow run so far

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        """A short command in a host (its output piped, as text): pings and the like."""
        return subprocess.Popen(self.fab.host_argv(host, argv), stdout=subprocess.PIPE,
                                text=True)

    def run_flows(self, flows: list[Flow], tag: str) -> list[FlowResult]:
        """iperf3 flows (or finite transfers) at once; their results in order."""
        res = traffic.FlowRunner(self.fab, self.fab.out_dir / "flows").run(
            flows, self.fab.flow_tag_prefix + tag)
        self.flow_results += res
        return res

    def start_process(self, host: str, argv: list[str], what: str,
                      log: Path) -> subprocess.Popen:
        """A long-lived process in a host, its PID recorded for teardown and `testbed clean`."""
        return traffic.start_in_host(self.fab, host, argv, what, log)

    def run_process(self, host: str, argv: list[str], timeout: float) -> str:
        """A process in a host, to completion; its stdout."""
        return traffic.run_in_host(self.fab, host, argv, timeout)

    def wait_listening(self, endpoints: list[tuple[str, int]]) -> None:
        traffic.wait_listening(self.fab, endpoints)

    def stop_processes(self, procs: list[subprocess.Popen]) -> None:
        traffic.stop_and_reap(procs)

    def netstat(self, host: str, key: str) -> int:
        """A TcpExt counter of one host's namespace (/proc/net/netstat is per namespace)."""
        text = self.fab.host_run(host, ["cat", "/proc/net/netstat"]).stdout
        lines = text.splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            if names.startswith("TcpExt:"):
                return int(dict(zip(names.split()[1:], values.split()[1:])).get(key, 0))
        return 0

    def ping_rtt_s(self, src: str, dst: str) -> float | None:
        """Median RTT of a few pings (after the first, which may wait for ARP)."""
        argv = ["ping", "-n", "-c", "6", "-i", "0.05", "-W", "2", self.fab.topo.host(dst).ip]
        out = subprocess.run(self.fab.host_argv(src, argv), capture_output=True,
                             text=True, timeout=30).stdout
        rtts = [float(line.split("time=")[1].split()[0]) for line in out.splitlines()
                if "time=" in line]
        return statistics.median(rtts[1:]) / 1000 if len(rtts) > 1 else None

    def set_ports(self, ports: list[tuple[str, int]] | tuple[tuple[str, int], ...],
                  up: bool) -> None:
        """Switch ports down or up, as a cable pulled or put back: the interface is set
        down (the host's or switch's end beyond it loses its carrier), so the switch tells
        the controller and its select groups stop using the port."""
        fab = self.fab
        for node, port in ports:
            if fab.topo.is_host(node):
                raise TestbedError(f"{node} is a host: a fault sets switch ports down")
            fab.root_run(node, ["ip", "link", "set", "dev", ifname(node, port),
                                "up" if up else "down"])
            (fab.ports_down.discard if up else fab.ports_down.add)((node, port))
        if fab.setup.relay_plan is not None:
            fab.setup.reroute_relays()

    def flow_tables(self) -> dict[str, list[str]]:
        """Every switch's OpenFlow entries and groups, without counters (`ovs.tables`)."""
        return {sw.name: ovs.tables(sw.name, runner=partial(self.fab.root_run, sw.name))
                for sw in self.fab.topo.switches}

    def dataplane(self) -> Dataplane:
        """The live dataplane API of this fabric's class queues (a `qos` fabric only)."""
        if self.fab.qos_plane is None:
            raise TestbedError("this phase has no traffic-class dataplane (no qos)")
        return Dataplane(self.fab.qos_plane.description)
