"""A `Topology` as Mininet builds it: the one translation both the testbed's fabric and
plain Mininet (`mn --custom testbed/mntopo.py`) use, so that names, ports, dpids, MACs and
addresses are the same in both. Pure data; the callers hand it to Mininet.

A BCube server relays traffic: it owns one address on every port, so its first port gets
it as a /32 (the other ports get it from the fabric's relay routes), and every port has its
own MAC. A host of a switched fabric gets its address as a /8, like Mininet's default net.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .model import Topology, ifname

IP_BASE = "10.0.0.0/8"


@dataclass(frozen=True)
class MnHost:
    name: str
    ip: str    # with its prefix length, as Mininet's addHost takes it
    mac: str   # of its first port


@dataclass(frozen=True)
class MnSwitch:
    name: str
    dpid: str  # 16 hex digits


@dataclass(frozen=True)
class MnLink:
    a: str
    b: str
    port1: int
    port2: int
    intf1: str
    intf2: str
    params: dict[str, str] = field(default_factory=dict)  # addr1/addr2: a host port's MAC

    def kwargs(self) -> dict[str, object]:
        """Keyword arguments of Mininet's addLink after the two node names."""
        return {"port1": self.port1, "port2": self.port2, "intfName1": self.intf1,
                "intfName2": self.intf2, **self.params}


@dataclass(frozen=True)
class MnPlan:
    hosts: list[MnHost]
    switches: list[MnSwitch]
    links: list[MnLink]


def mininet_plan(topo: Topology) -> MnPlan:
    """What Mininet must create for `topo`, in creation order."""
    hosts = [MnHost(h.name, f"{h.ip}/{32 if h.relay else 8}", h.macs[0]) for h in topo.hosts]
    switches = [MnSwitch(s.name, f"{s.dpid:016x}") for s in topo.switches]
    links = []
    for link in topo.links:
        params = {}
        for end, (node, port) in (("1", (link.a, link.a_port)), ("2", (link.b, link.b_port))):
            if topo.is_host(node):
                params[f"addr{end}"] = topo.host(node).macs[port]
        links.append(MnLink(link.a, link.b, link.a_port, link.b_port,
                            ifname(link.a, link.a_port), ifname(link.b, link.b_port), params))
    return MnPlan(hosts, switches, links)


def populate(target: Any, topo: Topology,
             node_params: Callable[[str], dict[str, Any]] = lambda name: {},
             link_params: Callable[[int], dict[str, Any]] = lambda index: {}) -> MnPlan:
    """Add `topo`'s hosts, switches and links to `target`: a Mininet `Topo` or a `Mininet`
    network (both take addHost, addSwitch and addLink this way), each with the extra
    parameters `node_params(name)` and `link_params(index in topo.links)` give (a cluster's
    servers and tunnel ids). Returns the plan."""
    plan = mininet_plan(topo)
    for h in plan.hosts:
        target.addHost(h.name, ip=h.ip, mac=h.mac, **node_params(h.name))
    for s in plan.switches:
        target.addSwitch(s.name, dpid=s.dpid, **node_params(s.name))
    for i, link in enumerate(plan.links):
        target.addLink(link.a, link.b, **link.kwargs(), **link_params(i))
    return plan
