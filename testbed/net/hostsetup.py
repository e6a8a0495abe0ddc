"""A phase's hosts and queues, set up once its network is built: each host's TCP settings
and offloads, BCube's relaying servers' addresses and routes (replanned when ports go
down), every port's MTU, and its queues: HTB and its buffer, or the traffic-class
dataplane of a phase with `qos` (dataplane/qosplane.py).
"""
from __future__ import annotations

import ipaddress
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controllers.recovery import degraded, host_route_changes, host_route_line
from controllers.routing import plan as routing_plan
from testbed.core.resources import BPF_PIN_ROOT as RESOURCES_BPF_ROOT
from testbed.core.system import (
    IP_BATCH,
    TestbedError,
    batch_input,
    route_with_initcwnd,
    sysctl_get,
    sysctl_script,
    sysctl_set,
)
from testbed.dataplane import queues
from testbed.dataplane.qosplane import QosPlane
from topologies.mnplan import IP_BASE
from topologies.model import ifname

if TYPE_CHECKING:
    from .fabric import Fabric


RESOLV_CONF = Path("/etc/resolv.conf")


def read_resolv_conf() -> str:
    try:
        return RESOLV_CONF.read_text()
    except OSError:
        return ""


def resolver_routes(resolv_conf: str, fabric_ips: set[str]) -> list[list[str]]:
    """Routes that make the machine's name servers unreachable from a host at once.

    Hosts share the machine's /etc/resolv.conf but have no way out of the fabric. A name
    server outside the fabric's addresses fails at once (no route). One inside them (a
    VM's 10.255.255.53 in Mininet's 10.0.0.0/8) is on the host's link: every lookup ARPs
    into the fabric and times out, 5 s or more. Gloo's rendezvous looks up its peers'
    names, so each rank waited that long before its first iteration. A fabric host's own
    address is left alone (it is a host's, not a server's)."""
    base = ipaddress.ip_network(IP_BASE)
    out = []
    for line in resolv_conf.splitlines():
        words = line.split()
        if len(words) < 2 or words[0] != "nameserver":
            continue
        try:
            addr = ipaddress.ip_address(words[1])
        except ValueError:
            continue
        if addr.version == 4 and addr in base and words[1] not in fabric_ips:
            out.append(["ip", "route", "replace", "unreachable", f"{addr}/32"])
    return out


class HostSetup:
    """The hosts' settings and routes and the ports' queues of one fabric."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.host_cc: dict[str, str] = {}
        self.relay_plan: Any = None  # BCube: the relay routes the servers have now
        # the hosts' TCP initial window now (hosts.initial_window_pkts, or a phase's own)
        self.window_pkts: int | None = fab.hosts.initial_window_pkts
        self.relay_reroutes: list[dict] = []

    # ---- queues ------------------------------------------------------------------
    def port_queues(self) -> tuple[list[queues.PortQueue], dict[str, list[queues.PortQueue]]]:
        """Switch egress queues (root namespace) and host NIC queues (per host)."""
        fab = self.fab
        switch_q: list[queues.PortQueue] = []
        host_q: dict[str, list[queues.PortQueue]] = {}
        for link in fab.topo.links:
            rate = fab.links.rate_mbps or link.rate_mbps
            for node, port in link.ends():
                name = ifname(node, port)
                if fab.topo.is_host(node):
                    host_q.setdefault(node, []).append(queues.PortQueue(
                        ifname=name, rate_mbps=rate, buffer_pkts=fab.links.host_queue_pkts,
                        mtu_bytes=fab.links.mtu_bytes,
                        fair=fab.links.host_queue == "fair"))
                else:
                    switch_q.append(queues.PortQueue(
                        ifname=name, rate_mbps=rate, buffer_pkts=fab.links.buffer_pkts,
                        buffer_bytes=fab.links.buffer_bytes, delay_us=fab.links.delay_us,
                        loss_pct=fab.links.loss_pct, drop=fab.links.drop,
                        mtu_bytes=fab.links.mtu_bytes, burst_us=fab.links.burst_us))
        return switch_q, host_q

    # ---- hosts -------------------------------------------------------------------
    def allow_congestion_control(self) -> None:
        """A host namespace can only select algorithms in the initial namespace's allowed
        list; otherwise it silently stays on the system default (bbr here)."""
        name = "net.ipv4.tcp_allowed_congestion_control"
        allowed = sysctl_get(name).split()
        if self.fab.hosts.congestion_control not in allowed:
            self.fab.record.remember_sysctl(name, " ".join(allowed))
            sysctl_set(name, " ".join(allowed + [self.fab.hosts.congestion_control]))

    def configure_hosts(self) -> None:
        fab = self.fab
        relay_plan = routing_plan(fab.topo, fab.routing) if fab.topo.relays else None
        self.relay_plan = relay_plan
        no_resolver = resolver_routes(read_resolv_conf(), {h.ip for h in fab.topo.hosts})
        argvs = {}
        for host in fab.topo.hosts:
            settings = [f"net.ipv4.tcp_congestion_control={fab.hosts.congestion_control}",
                        f"net.ipv4.tcp_ecn={1 if fab.hosts.ecn else 0}",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"]
            if fab.hosts.rto_min_us is not None:
                settings.append(f"net.ipv4.tcp_rto_min_us={fab.hosts.rto_min_us}")
            if not fab.hosts.slow_start_after_idle:
                settings.append("net.ipv4.tcp_slow_start_after_idle=0")
            if host.relay:
                settings += ["net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                             "net.ipv4.conf.default.rp_filter=0",
                             "net.ipv4.fib_multipath_hash_policy=1"]
            # ends by reading back the congestion control the host took
            argvs[host.name] = ["sh", "-c", " && ".join(
                [sysctl_script(settings)]
                + [shlex.join(queues.offload_command(ifname(host.name, port)))
                   for port in range(host.ports)]
                + [shlex.join(route) for route in no_resolver]
                + ["read cc < /proc/sys/net/ipv4/tcp_congestion_control", 'echo "$cc"'])]
        for name, done in fab.hosts_run(argvs).items():
            self.host_cc[name] = (done.stdout.split() or [""])[-1]  # after any ethtool says
        for host in fab.topo.hosts:
            if host.relay:
                self._relay_routes(host, relay_plan)
            if fab.hosts.initial_window_pkts is not None:
                self.initial_window(host.name, fab.hosts.initial_window_pkts)
        wrong = {h: cc for h, cc in self.host_cc.items() if cc != fab.hosts.congestion_control}
        if wrong:
            raise TestbedError(f"hosts did not take congestion control "
                               f"{fab.hosts.congestion_control}: {wrong}")
        # IPv6 off on switch ports: the root namespace must not send ND/MLD out of them.
        for group in fab.switch_groups():
            names = fab.switch_ifaces(group)
            fab.root_run(group[0], ["sysctl", "-q", "-w", *(
                f"net.ipv6.conf.{name}.disable_ipv6=1" for name in names)], check=False)
            fab.executor.offloads_off(group[0], names)

    def initial_window(self, host: str, n: int) -> None:
        """A TCP initial window of `n` segments on every route of the host (the kernel reads
        a new connection's window, and the one an idle connection restarts from, off its
        route): hosts.initial_window_pkts."""
        self.window_pkts = n
        routes = self.fab.host_run(host, ["ip", "-o", "-4", "route", "show"]).stdout
        self.fab.host_run(host, IP_BATCH, input=batch_input(
            [route_with_initcwnd(r, n) for r in routes.splitlines() if r.strip()]))

    def _relay_routes(self, host, relay_plan) -> None:
        """BCube servers: their address on every port, and a /32 route per destination."""
        lines = [f"addr replace {host.ip}/32 dev {ifname(host.name, p)}"
                 for p in range(1, host.ports)]
        for route in relay_plan.host_routes:
            if route.host != host.name:
                continue
            lines.append(host_route_line(route))
        self.fab.host_run(host.name, IP_BATCH, input=batch_input(lines))

    def reroute_relays(self) -> None:
        """BCube's servers route for themselves: their /32 routes are replanned on the
        fabric without the ports that are down and only the changed ones replaced
        (recovery.host_route_changes), at once. An oracle: BCube's own protocol (BSR)
        would find a broken path by probing; here the runner knows when it breaks one."""
        fab = self.fab
        t0 = time.time()
        new = routing_plan(degraded(fab.topo, fab.ports_down), fab.routing)
        changes = host_route_changes(self.relay_plan, new)
        for host, lines in changes.items():
            fab.host_run(host, IP_BATCH, input=batch_input(lines))
            if self.window_pkts is not None:   # the new routes carry it too
                self.initial_window(host, self.window_pkts)
        self.relay_plan = new
        self.relay_reroutes.append({"time": t0, "ports_down": len(fab.ports_down),
                                    "hosts": len(changes),
                                    "routes": sum(len(v) for v in changes.values()),
                                    "took_s": round(time.time() - t0, 4)})

    # ---- the ports' queues -------------------------------------------------------------
    def make_qos_plane(self) -> QosPlane:
        fab = self.fab
        slug = fab.slug
        return QosPlane(
            fab.topo, fab.qos, rate_of=lambda link: fab.links.rate_mbps or link.rate_mbps,
            host_pid=fab.host_pid, mtu_bytes=fab.links.mtu_bytes, burst_us=fab.links.burst_us,
            buffer_pkts=fab.links.buffer_pkts, buffer_bytes=fab.links.buffer_bytes,
            host_queue_pkts=fab.links.host_queue_pkts,
            pin_dir=RESOURCES_BPF_ROOT / f"{fab.record.run_id}-{slug}",
            out_dir=fab.qos_status_dir)

    def configure_queues(self) -> None:
        fab = self.fab
        switch_q, host_q = self.port_queues()
        mtu = fab.links.mtu_bytes
        if mtu != 1500:
            for group in fab.switch_groups():
                fab.root_run(group[0], IP_BATCH, input=batch_input(
                    queues.mtu_commands(fab.switch_ifaces(group), mtu)))
            fab.hosts_run({host: IP_BATCH for host in host_q}, inputs={
                host: batch_input(queues.mtu_commands([q.ifname for q in mine], mtu))
                for host, mine in host_q.items()})
        if fab.qos_plane is not None:
            fab.executor.install_qos(fab.qos_plane)
            return
        for group in fab.switch_groups():
            names = set(fab.switch_ifaces(group))
            fab.root_run(group[0], queues.TC_BATCH, input=queues.tc_lines(
                [c for q in switch_q if q.ifname in names for c in queues.htb_commands(q)]))
        fab.hosts_run({host: queues.TC_BATCH for host in host_q}, inputs={
            host: queues.tc_lines([c for q in mine for c in queues.htb_commands(
                q, fab.fair_object)]) for host, mine in host_q.items()})
