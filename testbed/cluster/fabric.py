"""A fabric split across servers (the spec's `cluster`): the same `Fabric`, with its nodes
placed on servers (cluster/placement.py), built with the cluster edition's remote classes
and VXLAN links (cluster/engine.py), and every command on a node run on the node's server
(cluster/servers.py). One controller, on this machine, at this server's cluster address.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.config.cluster import ClusterSpec
from testbed.measure.conservation import SwitchCounters, switch_counters
from testbed.net import ovs
from testbed.net.fabric import Fabric
from testbed.resources import STATE_DIR
from testbed.system import TestbedError

from . import servers as srv
from .placement import Crossing, crossings, inner_mtu, place

TUNNEL_HEADROOM = 0.95  # a tunnel's links may use this share of the underlay's goodput
_UNDERLAY: dict[tuple[str, str, str], dict] = {}  # (run id, from, to): measured once per run



def on_servers(items: list[Any], fn: Any) -> list[Any]:
    """`fn(item)` for every item (a server, or a server's switches) at once, each in a
    thread; the results in order (the first error is raised here)."""
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int, item: Any) -> None:
        try:
            results[i] = fn(item)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, x)) for i, x in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@dataclass
class ClusterFabric(Fabric):
    cluster: ClusterSpec | None = None
    where: dict[str, str] = field(default_factory=dict)  # node -> server name
    conns: dict[str, srv.Conn] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # server -> its cluster address
    links_crossing: list[Crossing] = field(default_factory=list)
    servers_found: dict[str, dict] = field(default_factory=dict)
    mtu_report: dict = field(default_factory=dict)
    underlay: dict[tuple[str, str], dict] = field(default_factory=dict)  # (from, to) -> ...
    warnings: list[str] = field(default_factory=list)  # fidelity warnings for the summary

    def __post_init__(self) -> None:
        assert self.cluster is not None
        self.where = place(self.topo, self.cluster)
        self.links_crossing = crossings(self.topo, self.where, self.links.rate_mbps)
        self._vnis = {(c.a, c.a_port, c.b, c.b_port): c.vni for c in self.links_crossing}
        control = STATE_DIR / "ssh" / self.record.run_id
        self.conns = srv.conns(self.cluster, control)

    # ---- before anything is built -----------------------------------------------------
    def preflight(self) -> None:
        """Every server checked (reachable, SSH, OVS, the testbed, the tunnel type), then
        the MTU the tunnels leave; nothing is created on any server before this passes."""
        assert self.cluster is not None
        servers = self.cluster.servers
        self.addresses = {s.name: srv.address_of(s, servers) for s in servers}
        found = on_servers(list(self.conns.values()),
                           lambda c: srv.check_server(c, self.cluster.tunnel))
        self.servers_found = dict(zip(self.conns, found))
        ours = {s.name for s in self.topo.switches}
        for name, info in self.servers_found.items():
            left = ours & set(info.get("bridges", "").split())
            if left:
                raise TestbedError(f"server {name}: bridge {sorted(left)[0]} already exists "
                                   "(an interrupted run?); run `testbed clean` and retry")
        super().preflight()
        self._fit_mtu()
        self._measure_underlay()
        # what `testbed clean` must remove on each remote server if this run is interrupted
        self.record.servers = [srv.remote_entry(
            conn, [s.name for s in self.topo.switches if self.where[s.name] == name],
            self.switch_ifaces([s.name for s in self.topo.switches
                                if self.where[s.name] == name]))
            for name, conn in self.conns.items() if not conn.local]
        self.record.save()

    def _fit_mtu(self) -> None:
        assert self.cluster is not None
        pairs = {(c.a_server, c.b_server) for c in self.links_crossing}
        outer = {}
        for a, b in pairs:
            for here, there in ((a, b), (b, a)):
                outer[here] = srv.route_mtu(self.conns[here], self.addresses[there])
        worst = min((mtu for _, mtu in outer.values()), default=9216)
        mtu, needed = inner_mtu(self.links.mtu_bytes, worst, self.cluster.overhead,
                                self.cluster.tunnel_mtu)
        self.mtu_report = {"configured": self.links.mtu_bytes, "fabric": mtu,
                           "tunnel_overhead": self.cluster.overhead,
                           "outer": {s: {"dev": d, "mtu": m} for s, (d, m) in outer.items()},
                           "mode": self.cluster.tunnel_mtu}
        if mtu != self.links.mtu_bytes:
            said = (f"cluster: the servers' network carries {worst} bytes; the fabric's MTU "
                    f"is lowered from {self.links.mtu_bytes} to {mtu} for the "
                    f"{self.cluster.tunnel} header ({self.cluster.overhead} bytes)")
            self.log(said)
            self.warnings.append(said)
            self.links = replace(self.links, mtu_bytes=mtu)
        if needed > worst:
            raise TestbedError(
                f"cluster.tunnel_mtu: raise_outer needs an MTU of {needed} on the servers' "
                f"network (it carries {worst}); raise it on every server's "
                + ", ".join(f"{s}:{d}" for s, (d, _) in sorted(outer.items()))
                + " or use lower_inner")

    def _measure_underlay(self) -> None:
        """Each direction between two servers that tunnels join: its round trip and TCP
        goodput (once per run), the extra delay it adds to each link it carries, and a
        warning when it cannot carry all those links at their rate at once."""
        pairs = sorted({(c.a_server, c.b_server) for c in self.links_crossing}
                       | {(c.b_server, c.a_server) for c in self.links_crossing})
        for a, b in pairs:
            key = (self.record.run_id, a, b)
            if key not in _UNDERLAY:
                _UNDERLAY[key] = srv.underlay(self.conns[a], self.conns[b], self.addresses[b])
            self.underlay[(a, b)] = _UNDERLAY[key]
            need = sum(c.rate_mbps for c in self.links_crossing
                       if {c.a_server, c.b_server} == {a, b})
            got = _UNDERLAY[key]["goodput_mbps"]
            if got is None or need > TUNNEL_HEADROOM * got:
                self.warnings.append(
                    f"cluster: the {sum(1 for c in self.links_crossing if {c.a_server, c.b_server} == {a, b})} "
                    f"links from server {a} to {b} carry up to {need:g} Mb/s at once; the "
                    f"servers' network carried {got} Mb/s that way: a tunnel cannot carry its "
                    "link's rate when they are busy together")

    # ---- building -----------------------------------------------------------------------
    @property
    def controller_host(self) -> str:  # type: ignore[override]
        local = next((s for s in self.conns.values() if s.local), None)
        if local is None:
            raise TestbedError("cluster: one server must be this machine (address: localhost);"
                               " it runs the controller")
        return self.addresses[local.name]

    def _net_classes(self) -> tuple[Any, Any, Any]:
        from .engine import VxlanLink, remote_classes
        opts = ["-F", self.cluster.ssh_config] if self.cluster and self.cluster.ssh_config else []
        host, switch = remote_classes(opts)
        return host, switch, VxlanLink

    def _node_params(self, name: str) -> dict:
        conn = self.conns[self.where[name]]
        params: dict[str, Any] = {"server": conn.server.address if not conn.local else "localhost",
                                  "user": conn.user}
        if not conn.local:
            params["serverIP"] = self.addresses[conn.name]
            if conn.control_dir is not None:
                params["controlPath"] = f"{conn.control_dir}/%r@%h:%p"
        return params

    def _link_params(self, index: int) -> dict:
        link = self.topo.links[index]
        vni = self._vnis.get((link.a, link.a_port, link.b, link.b_port))
        return {"vni": vni} if vni is not None else {}

    @contextlib.contextmanager
    def _raised_buffers(self) -> Iterator[None]:
        """This machine's socket buffer defaults raised, and every remote server's too
        (a server in a namespace of this machine shares them: `net.core` is global)."""
        with super()._raised_buffers():
            remote = [c for c in self.conns.values() if not c.local]
            saved = [self._raise_remote(c) for c in remote]
            try:
                yield
            finally:
                for conn, old in zip(remote, saved):
                    if old:
                        conn.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in old.items())],
                                 check=False)

    def _raise_remote(self, conn: srv.Conn) -> dict[str, str]:
        """Raises a server's buffer defaults that are below what the fabric needs; the old
        values of those it raised."""
        need = min(self.needed_buffer_bytes, 2**31 - 1)
        text = conn.run(["sysctl", "-n", *ovs.BUFFER_SYSCTLS]).stdout.split()
        low = {k: v for k, v in zip(ovs.BUFFER_SYSCTLS, text) if int(v) < need}
        if low:
            entry = next(e for e in self.record.servers if e["name"] == conn.name)
            entry["sysctls"] = low
            self.record.save()
            conn.run(["sysctl", "-q", "-w", *(f"{k}={need}" for k in low)], check=False)
        return low

    def _first_packet(self) -> None:
        """Every server's OVS makes its send socket now (first host there pings another)."""
        for server in self.conns:
            mine = [h for h in self.topo.hosts if self.where[h.name] == server]
            other = next((h for h in self.topo.hosts if mine and h is not mine[0]), None)
            if other is not None:
                self.host_run(mine[0].name, ["ping", "-c", "1", "-W", "2", other.ip],
                              check=False)

    def send_buffers(self) -> dict[str, int | None]:
        return {name: ovs.send_socket_buffer(
                    conn.run(ovs.packet_sockets_argv(True), check=False).stdout)
                for name, conn in self.conns.items()
                if any(self.where[s.name] == name for s in self.topo.switches)}

    # ---- where commands run -------------------------------------------------------------
    def host_argv(self, host: str, argv: list[str], hangup: bool = False) -> list[str]:
        return self.conns[self.where[host]].argv(argv, netns_pid=self.host_pid(host),
                                                 tty=hangup)

    def switch_groups(self) -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for sw in self.topo.switches:
            groups.setdefault(self.where[sw.name], []).append(sw.name)
        return list(groups.values())

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return self.conns[self.where[switch]].run(argv, input=input, check=check)

    def switch_counters(self) -> dict[str, SwitchCounters]:
        groups = self.switch_groups()

        def read(group: list[str]) -> dict[str, SwitchCounters]:
            ports = {sw: self.switch_ifaces([sw]) for sw in group}
            conn = self.conns[self.where[group[0]]]
            if conn.local:
                return switch_counters(ports, self.traits.socket_drops)
            out = conn.run([str(srv.PYTHON), "-m",
                            "testbed.measure.conservation"],
                           input=json.dumps({"ports": ports,
                                             "socket_drops": self.traits.socket_drops})).stdout
            return {sw: SwitchCounters(**c) for sw, c in json.loads(out).items()}

        counters: dict[str, SwitchCounters] = {}
        for part in on_servers(groups, read):
            counters.update(part)
        return counters

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            for conn in self.conns.values():
                conn.close()

    def manifest(self) -> dict:
        """What the manifest records of the cluster: placement, tunnels, MTU."""
        assert self.cluster is not None
        return {"servers": {s.name: {"address": s.address, "cluster_address":
                                     self.addresses.get(s.name), "user": srv.ssh_user(s),
                                     "nodes": sorted(n for n, w in self.where.items()
                                                     if w == s.name)}
                            for s in self.cluster.servers},
                "placement": self.cluster.placement, "tunnel": self.cluster.tunnel,
                "mtu": self.mtu_report,
                "underlay": {f"{a}->{b}": u for (a, b), u in self.underlay.items()},
                "crossing_links": [{"link": c.name, "servers": [c.a_server, c.b_server],
                                    "vni": c.vni, "rate_mbps": c.rate_mbps,
                                    "extra_delay_ms": self._extra_delay_ms(c)}
                                   for c in self.links_crossing]}

    def _extra_delay_ms(self, c: Crossing) -> float | None:
        """What a tunnel adds to its link's one-way delay: half the servers' minimum
        round trip over their own network."""
        u = self.underlay.get((c.a_server, c.b_server)) or {}
        return round(u["rtt_min_ms"] / 2, 4) if u.get("rtt_min_ms") is not None else None
