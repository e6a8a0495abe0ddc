"""A cluster fabric's preflight: every server checked (reachable, SSH, OVS, the testbed, the
tunnel type, the BPF tools a class dataplane needs), the MTU the tunnels leave, this
machine's own checks, then the servers' network measured between each two that tunnels
join; nothing is created on any server before it passes. What it finds is kept on the
cluster's executor (cluster/fabric.py) for building and for the manifest.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from testbed.config.placement import inner_mtu
from testbed.core.system import TestbedError

from . import servers as srv
from .servers import on_servers

if TYPE_CHECKING:
    from .fabric import ClusterExecutor

TUNNEL_HEADROOM = 0.95  # a tunnel's links may use this share of the underlay's goodput
_UNDERLAY: dict[tuple[str, str, str], dict] = {}  # (run id, from, to): measured once per run


def preflight(ex: ClusterExecutor, here: Callable[[], None]) -> None:
    """Every server checked (reachable, SSH, OVS, the testbed, the tunnel type), then
    the MTU the tunnels leave; nothing is created on any server before this passes.
    `here`: this machine's checks (net/fabric.py)."""
    fab = ex.fab
    servers = ex.cluster.servers
    ex.addresses = {s.name: srv.address_of(s, servers) for s in servers}
    found = on_servers(list(ex.conns.values()),
                       lambda c: srv.check_server(c, ex.cluster.tunnel))
    ex.servers_found = dict(zip(ex.conns, found))
    ours = {s.name for s in fab.topo.switches}
    for name, info in ex.servers_found.items():
        left = ours & set(info.get("bridges", "").split())
        if left:
            raise TestbedError(f"server {name}: bridge {sorted(left)[0]} already exists "
                               "(an interrupted run?); run `testbed clean` and retry")
    if fab.qos is not None:
        _check_bpf_tools(ex)
    _fit_mtu(ex)  # first: the class dataplane is sized for the fabric's MTU
    here()
    _measure_underlay(ex)
    # what `testbed clean` must remove on each remote server if this run is interrupted
    # (this server's entry holds only what the class dataplane adds to its own device)
    fab.record.servers = [srv.remote_entry(
        conn, [s.name for s in fab.topo.switches if ex.where[s.name] == name],
        fab.switch_ifaces([s.name for s in fab.topo.switches
                           if ex.where[s.name] == name])) if not conn.local
        else srv.remote_entry(conn, [], [])
        for name, conn in ex.conns.items()]
    fab.record.save()


def _check_bpf_tools(ex: ClusterExecutor) -> None:
    """Every server compiles and loads the class dataplane's BPF programs itself."""
    def missing(conn: srv.Conn) -> list[str]:
        return conn.run(["sh", "-c", "command -v bpftool >/dev/null || echo bpftool; "
                         "command -v clang-14 >/dev/null || command -v clang >/dev/null "
                         "|| echo clang"], check=False).stdout.split()
    for name, lacks in zip(ex.conns, on_servers(list(ex.conns.values()), missing)):
        if lacks:
            raise TestbedError(f"server {name}: {' '.join(lacks)} not installed (the class "
                               "dataplane's BPF programs are built and loaded on every "
                               "server); run scripts/bootstrap.sh there")


def _fit_mtu(ex: ClusterExecutor) -> None:
    fab, cluster = ex.fab, ex.cluster
    pairs = {(c.a_server, c.b_server) for c in ex.links_crossing}
    outer = {}
    for a, b in pairs:
        for here, there in ((a, b), (b, a)):
            outer[here] = srv.route_mtu(ex.conns[here], ex.addresses[there])
            ex.underlay_devs.setdefault(here, set()).add(outer[here][0])
    worst = min((mtu for _, mtu in outer.values()), default=9216)
    mtu, needed = inner_mtu(fab.links.mtu_bytes, worst, cluster.overhead,
                            cluster.tunnel_mtu)
    ex.mtu_report = {"configured": fab.links.mtu_bytes, "fabric": mtu,
                     "tunnel_overhead": cluster.overhead,
                     "outer": {s: {"dev": d, "mtu": m} for s, (d, m) in outer.items()},
                     "mode": cluster.tunnel_mtu}
    if mtu != fab.links.mtu_bytes:
        said = (f"cluster: the servers' network carries {worst} bytes; the fabric's MTU "
                f"is lowered from {fab.links.mtu_bytes} to {mtu} for the "
                f"{cluster.tunnel} header ({cluster.overhead} bytes)")
        fab.log(said)
        ex.warnings.append(said)
        fab.links = replace(fab.links, mtu_bytes=mtu)
    if needed > worst:
        raise TestbedError(
            f"cluster.tunnel_mtu: raise_outer needs an MTU of {needed} on the servers' "
            f"network (it carries {worst}); raise it on every server's "
            + ", ".join(f"{s}:{d}" for s, (d, _) in sorted(outer.items()))
            + " or use lower_inner")


def _measure_underlay(ex: ClusterExecutor) -> None:
    """Each direction between two servers that tunnels join: its round trip and TCP
    goodput (once per run), the extra delay it adds to each link it carries, and a
    warning when it cannot carry all those links at their rate at once."""
    pairs = sorted({(c.a_server, c.b_server) for c in ex.links_crossing}
                   | {(c.b_server, c.a_server) for c in ex.links_crossing})
    for a, b in pairs:
        key = (ex.fab.record.run_id, a, b)
        if key not in _UNDERLAY:
            _UNDERLAY[key] = srv.underlay(ex.conns[a], ex.conns[b], ex.addresses[b])
        ex.underlay[(a, b)] = _UNDERLAY[key]
        need = sum(c.rate_mbps for c in ex.links_crossing
                   if {c.a_server, c.b_server} == {a, b})
        got = _UNDERLAY[key]["goodput_mbps"]
        if got is None or need > TUNNEL_HEADROOM * got:
            ex.warnings.append(
                f"cluster: the {sum(1 for c in ex.links_crossing if {c.a_server, c.b_server} == {a, b})} "
                f"links from server {a} to {b} carry up to {need:g} Mb/s at once; the "
                f"servers' network carried {got} Mb/s that way: a tunnel cannot carry its "
                "link's rate when they are busy together")
