"""Where each node of a fabric runs, and what crosses between servers: pure functions of a
`Topology` and the spec's `cluster` section.

A switch is one Open vSwitch bridge on one server: a fabric is cut at switch boundaries,
and every link whose ends are on different servers becomes a tunnel.

- `pods`: the fabric's natural groups stay whole on one server (a Fat-Tree pod with its
  hosts, a leaf with its hosts, a BCube level-0 switch with its servers); consecutive groups
  share a server, as evenly as they divide; the switches above them (cores, spines, BCube's
  higher levels) are dealt round-robin.
- `switch_bin`: switches in the topology's order cut into equal consecutive bins, a host
  with the switch its first port reaches (the cluster edition's SwitchBinPlacer, whose
  Python 3 division cannot place more than one host per bin, `servdict[hind / hbin]`).
- `explicit`: the nodes each server lists; the rest on the first server.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.config.cluster import ClusterSpec
from testbed.config.loader import SpecError
from topologies.model import Topology, ifname


def groups(topo: Topology) -> tuple[list[list[str]], list[str]]:
    """The fabric's groups that `pods` keeps whole, in order, and the switches it spreads."""
    keyed: dict[tuple, list[str]] = {}
    spread: list[str] = []
    for sw in topo.switches:
        if sw.label("pod") is not None:
            keyed.setdefault(("pod", sw.label("pod")), []).append(sw.name)
        elif sw.role == "leaf" or (sw.role == "bcube" and sw.label("level") == 0):
            keyed.setdefault((sw.role, sw.name), []).append(sw.name)
        else:
            spread.append(sw.name)
    for host in topo.hosts:
        peer = topo.peer(host.name, 0)
        pod = host.label("pod")
        key: tuple | None = ("pod", pod) if pod is not None else None
        if key is None and peer is not None:  # a leaf's or a level-0 cell's host
            key = (topo.switch(peer[0]).role, peer[0])
        if key not in keyed:
            raise SpecError(f"cluster.placement: pods: host {host.name} is in no group of "
                            f"this {topo.kind} topology; use switch_bin or explicit")
        keyed[key].append(host.name)
    if not keyed:
        raise SpecError(f"cluster.placement: pods: a {topo.kind} topology has no pods, "
                        "leaves or level-0 cells; use switch_bin or explicit")
    return list(keyed.values()), spread


def place(topo: Topology, cluster: ClusterSpec) -> dict[str, str]:
    """Node name -> server name, for every host and switch; SpecError naming the problem
    (a node unknown or listed on two servers, a server left without a switch)."""
    servers = [s.name for s in cluster.servers]
    n = len(servers)
    where: dict[str, str] = {}
    if cluster.placement == "pods":
        grouped, spread = groups(topo)
        for i, group in enumerate(grouped):
            for node in group:
                where[node] = servers[i * n // len(grouped)]
        for i, name in enumerate(spread):
            where[name] = servers[i % n]
    elif cluster.placement == "switch_bin":
        switches = [s.name for s in topo.switches]
        for i, name in enumerate(switches):
            where[name] = servers[i * n // len(switches)]
        for host in topo.hosts:
            peer = topo.peer(host.name, 0)
            where[host.name] = where[peer[0]] if peer else servers[0]
    else:
        known = {h.name for h in topo.hosts} | {s.name for s in topo.switches}
        for server, nodes in cluster.nodes.items():
            for node in nodes:
                if node not in known:
                    raise SpecError(f"cluster.nodes.{server}: no node {node!r} in this "
                                    f"{topo.kind} topology")
                if node in where and where[node] != server:
                    what = "switch" if not topo.is_host(node) else "host"
                    raise SpecError(f"cluster.nodes: {what} {node} is placed on both "
                                    f"{where[node]} and {server}; a {what} runs on one server "
                                    "(a fabric is cut at switch boundaries)")
                where[node] = server
        for node in sorted(known - set(where)):
            where[node] = servers[0]
    empty = [s for s in servers if not any(where[sw.name] == s for sw in topo.switches)]
    if empty:
        raise SpecError(f"cluster.placement: {cluster.placement} leaves server "
                        f"{empty[0]} without a switch ({len(topo.switches)} switches on "
                        f"{n} servers); use fewer servers or place nodes explicitly")
    return where


@dataclass(frozen=True)
class Crossing:
    """A link between two servers: a tunnel with its own id (VXLAN VNI or GRE key)."""
    a: str
    a_port: int
    b: str
    b_port: int
    a_server: str
    b_server: str
    vni: int
    rate_mbps: float

    @property
    def name(self) -> str:
        return f"{ifname(self.a, self.a_port)}-{ifname(self.b, self.b_port)}"


def crossings(topo: Topology, where: dict[str, str], rate_mbps: float | None = None
              ) -> list[Crossing]:
    """The links that cross servers, in the topology's link order; each one's tunnel id is
    its link's index + 1 (stable across runs of the same topology)."""
    out = []
    for i, link in enumerate(topo.links):
        if where[link.a] != where[link.b]:
            out.append(Crossing(link.a, link.a_port, link.b, link.b_port, where[link.a],
                                where[link.b], i + 1, rate_mbps or link.rate_mbps))
    return out


def inner_mtu(mtu_bytes: int, outer_mtu: int, overhead: int, mode: str) -> tuple[int, int]:
    """(the fabric's MTU, the servers' network MTU needed) for links of `mtu_bytes` over a
    network of `outer_mtu` with a tunnel of `overhead` bytes: `lower_inner` lowers the
    fabric's MTU to fit (all of it, so hosts never send a frame a tunnel must drop);
    `raise_outer` keeps it and asks for a larger outer MTU."""
    if mtu_bytes + overhead <= outer_mtu:
        return mtu_bytes, outer_mtu
    if mode == "raise_outer":
        return mtu_bytes, mtu_bytes + overhead
    return outer_mtu - overhead, outer_mtu
