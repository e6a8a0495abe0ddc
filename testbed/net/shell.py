"""`testbed up`: Mininet's own CLI on a running fabric (`h1 ping h16`, `iperf h1 h2`, `dump`,
`h1 ip addr`, `py net.hosts`, ...), with the testbed's commands beside Mininet's:

    queue PORT [PORT...]   each class's queue, marks, drops and pause (fabrics with classes),
                           or the port's qdisc backlog and drops
    paths SRC DST          the equal-cost paths between two hosts (ECMP puts each flow on one)
    ports                  the switch ports that are down
    link N1 N2 up|down     the cables between two nodes pulled or put back (and rerouted)
    routing [ecmp|single]  the fabric's routing mode, or route it another way from now on

Ctrl-D or `exit` leaves, and the caller tears down what it built."""
from __future__ import annotations

import sys
from typing import Any

from mininet.cli import CLI
from mininet.log import output

from testbed.core.errors import TestbedError
from testbed.core.system import run
from topologies.graph import shortest_paths
from topologies.model import ifname


class TestbedCLI(CLI):
    prompt = "testbed> "

    def __init__(self, live: Any, script: str | None = None, stdin: Any = sys.stdin):
        self.live = live
        CLI.__init__(self, live.fabric.net, stdin=stdin, script=script)

    def do_queue(self, line: str) -> None:
        """queue PORT [PORT...]: each class's queue (bytes, packets), marks, drops and
        whether it is paused, e.g. `queue e1-eth3`; without classes, the qdisc's backlog."""
        ports = line.split()
        if not ports:
            output("usage: queue PORT [PORT...]\n")
            return
        if self.live.fabric.qos is None:
            for port in ports:
                output(run(["tc", "-s", "qdisc", "show", "dev", port], check=False).stdout)
            return
        known = {p.port for p in self.live.queues()}
        for port in ports:
            if port not in known:
                output(f"no switch port {port!r}\n")
        for q in self.live.queues([p for p in ports if p in known]):
            output(f"{q.port} class {q.cls}: queue {q.queue_bytes} B / {q.queue_pkts} pkts, "
                   f"{q.enq_pkts} enqueued, {q.marks} marked, {q.drops} dropped"
                   f"{', PAUSED' if q.paused else ''}\n")

    def do_paths(self, line: str) -> None:
        """paths SRC DST: the shortest paths between two hosts, which ECMP hashes flows
        onto (single-path routing takes the first)."""
        args = line.split()
        topo = self.live.topo
        names = {h.name for h in topo.hosts}
        if len(args) != 2 or not set(args) <= names:
            output("usage: paths SRC DST (two hosts)\n")
            return
        paths = shortest_paths(topo, args[0], args[1])
        for path in paths:
            output(" -> ".join(path) + "\n")
        output(f"{len(paths)} path(s)\n")

    def do_link(self, line: str) -> None:
        """link NODE1 NODE2 up|down: the cables between two nodes pulled or put back (their
        switch ports), as `configLinkStatus`; returns once the controller has rerouted."""
        args = line.split()
        if len(args) != 3 or args[2] not in ("up", "down"):
            output("usage: link NODE1 NODE2 up|down\n")
            return
        ends = self.live.topo.switch_ends(args[0], args[1])
        if not ends:
            output(f"no link between {args[0]} and {args[1]}\n")
            return
        try:
            self.live.set_ports(ends, args[2] == "up")
        except TestbedError as exc:
            output(f"{exc}\n")

    def do_ports(self, line: str) -> None:
        """ports: the switch ports set down (faults, `set_ports`)."""
        down = sorted(self.live.fabric.ports_down)
        output(("down: " + ", ".join(ifname(n, p) for n, p in down) if down
                else "every port is up") + "\n")

    def do_routing(self, line: str) -> None:
        """routing [ecmp|single]: the fabric's routing mode, or switch it while traffic runs
        (the controller replans and sends only the difference)."""
        mode = line.strip()
        if not mode:
            output(f"routing {self.live.fabric.routing}\n")
            return
        try:
            done = self.live.set_routing(mode)
        except TestbedError as exc:
            output(f"{exc}\n")
            return
        output(f"routing {mode}: {done['changes']} changes on {done['switches']} switches, "
               f"decided in {done['decided_s'] * 1000:.1f} ms\n")
