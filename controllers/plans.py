"""A routing plan as pure data, and the builders every routing shares: the flow entries,
groups and relay routes a fabric is given, entries matched on a switch's IPv4 destination
(`switched_plan`) or a server port's MAC with the servers' own routes (`relay_plan`), and
the controller's ARP answers.

controllers/routing.py plans ecmp, single and Hedera with these; controllers/
fabric_routing.py the survey fabrics' own routings. No Ryu import here.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from topologies.graph import distances_to, next_hops
from topologies.model import Topology

PRIORITY_ROUTE = 100
# UDP to a host with several next hops, chosen by a hash with its ports (hash_udp); above
# the routes, below fast failover's detours (the survey fabrics' own 101-103 do not meet
# it: only ecmp, single and hedera hash UDP)
PRIORITY_UDP_HASH = 104
PRIORITY_DETOUR = 105   # fast failover: a detour's second hop, for packets from its first
PRIORITY_DETECT = 110   # hedera: new TCP flows from a host port -> controller
PRIORITY_FLOW = 120     # hedera: one flow's counting entry at its ingress edge switch
PRIORITY_PLACED = 130   # hedera: a scheduled elephant's entry on each switch of its path
PRIORITY_ARP = 200
PRIORITY_MISS = 0

ETH_TYPE_IP = 0x0800
ETH_TYPE_ARP = 0x0806
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
# OVS's bundle action hashes these: IP addresses, protocol, TCP and UDP ports (nicira-ext.h
# NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP; a select group's default hash leaves UDP ports out)
HASH_FIELDS_L3L4_UDP = 3


FlowKey = tuple  # (ip_src, ip_dst, ip_proto, src_port, dst_port)
# OpenFlow's OFPP_IN_PORT: the port the packet came in on. A switch silently drops a packet
# whose output port is the one it arrived on unless the action names IN_PORT (VL2's
# intermediate switch sends a bounced packet back down the link it came up by, when the
# hash picks that aggregation switch).
IN_PORT = 0xFFFFFFF8
MAX_BUCKETS = 64  # OVS's dp_hash selection handles at most 64 hash slots


@dataclass(frozen=True, kw_only=True)
class Group:
    """A select group: one bucket per entry of `buckets` (an output port each, IN_PORT
    included; a port may appear several times, see `decorrelated_buckets`); or (`kind` "ff") a fast-failover
    group, whose first bucket whose port is up forwards (controllers/failover.py)."""
    dpid: int
    group_id: int
    buckets: tuple[int, ...]
    kind: Literal["select", "ff"] = "select"

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.buckets)))


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A flow entry. `match` is a sorted tuple of OXM field/value pairs (Ryu's names);
    one of `out_port`, `group_id` or `hash_ports` forwards, `to_controller` alone sends to
    the controller, with one of them sends a copy there; none of them drops. `hash_ports`:
    one of these ports, those up, chosen per flow by a hash of its addresses, protocol and
    TCP or UDP ports seeded with `hash_basis` (OVS's bundle action, highest random weight)."""
    dpid: int
    priority: int
    match: tuple[tuple[str, object], ...]
    out_port: int | None = None
    group_id: int | None = None
    to_controller: bool = False
    idle_timeout: int = 0  # seconds without a packet before the switch removes it (0: never)
    set_dscp: int | None = None  # re-mark the packet's DSCP before forwarding
    hash_ports: tuple[int, ...] = ()
    hash_basis: int = 0

    @property
    def is_drop(self) -> bool:
        return (self.out_port is None and self.group_id is None and not self.hash_ports
                and not self.to_controller)


@dataclass(frozen=True, kw_only=True)
class HostRoute:
    """A /32 route in a relay host: to `dst_ip` via one or more (port, next-hop IP)."""
    host: str
    dst_ip: str
    via: tuple[tuple[int, str], ...]


@dataclass(frozen=True, kw_only=True)
class RoutePlan:
    mode: str
    groups: tuple[Group, ...]
    rules: tuple[Rule, ...]
    host_routes: tuple[HostRoute, ...] = ()
    _by_dpid: dict = field(default_factory=dict, compare=False, repr=False)

    def for_switch(self, dpid: int) -> tuple[list[Group], list[Rule]]:
        if not self._by_dpid:
            for g in self.groups:
                self._by_dpid.setdefault(g.dpid, ([], []))[0].append(g)
            for r in self.rules:
                self._by_dpid.setdefault(r.dpid, ([], []))[1].append(r)
        return self._by_dpid.get(dpid, ([], []))



def base_rules(dpid: int) -> list[Rule]:
    """ARP goes to the controller (it answers every request itself; nothing is flooded);
    anything unmatched is dropped by an explicit, counted entry."""
    return [Rule(dpid=dpid, priority=PRIORITY_ARP, match=(("eth_type", ETH_TYPE_ARP),),
                 to_controller=True),
            Rule(dpid=dpid, priority=PRIORITY_MISS, match=())]


def hash_stages(topo: Topology) -> dict[str, int]:
    """Hashing stage of each switch: hops from the nearest host minus one (edge/leaf 0,
    aggregation 1, ...)."""
    stage: dict[str, int] = {}
    for host in topo.hosts:
        for node, d in distances_to(topo, host.name).items():
            if not topo.is_host(node):
                stage[node] = min(stage.get(node, d - 1), d - 1)
    for sw in topo.switches:  # cut off from every host (a failure): it routes nothing
        stage.setdefault(sw.name, 0)
    return stage


def decorrelated_buckets(ports: tuple[int, ...], multiplier: int) -> tuple[int, ...]:
    """Buckets so that a switch at a later hashing stage decides on a different part of the
    flow hash than the stages before it.

    OVS's userspace datapath computes the same 5-tuple hash at every bridge and a select
    group maps (hash mod slots) onto its buckets in turn, so with one bucket per port an
    aggregation switch re-uses exactly the hash digit the edge switch already used: all flows
    that reached it pick the same core (measured: 2 of 4 cores idle on a k=4 Fat-Tree).
    Bucket i -> ports[(i // multiplier) % n] makes the choice depend on the next digit."""
    n = len(ports)
    if multiplier <= 1 or n * multiplier > MAX_BUCKETS:
        return ports
    return tuple(ports[(i // multiplier) % n] for i in range(n * multiplier))


def hash_udp(topo: Topology, plan: RoutePlan) -> RoutePlan:
    """`plan` with UDP hashed on its ports too, as a switch's ECMP hashes RoCEv2's source
    port: beside every route through a select group, an entry for UDP to the same host that
    picks among the group's ports by a hash of addresses, protocol and ports, seeded by the
    switch's hashing stage so that successive stages choose independently. (OVS hashes a
    select group's packets on addresses and TCP ports only; UDP's ports are left out, so
    every queue pair between two hosts would take one path.)"""
    stage = hash_stages(topo)
    select = {(g.dpid, g.group_id): g for g in plan.groups if g.kind == "select"}
    extra = []
    for r in plan.rules:
        group = (select.get((r.dpid, r.group_id))
                 if r.priority == PRIORITY_ROUTE and r.group_id is not None else None)
        sw = topo.switch_by_dpid(r.dpid)
        if group is None or sw is None:
            continue
        extra.append(Rule(dpid=r.dpid, priority=PRIORITY_UDP_HASH,
                          match=tuple(sorted((*r.match, ("ip_proto", IP_PROTO_UDP)))),
                          hash_ports=group.ports, hash_basis=stage[sw.name],
                          set_dscp=r.set_dscp))
    return replace(plan, rules=plan.rules + tuple(extra), _by_dpid={})


def switched_plan(topo: Topology, mode: str,
                   choose: Callable[[Topology, str, str], list[int]] = next_hops) -> RoutePlan:
    """Switches route on the IPv4 destination; hosts are never transited. `choose(topo,
    switch, host)`: the ports towards the host (every shortest path's, or a fabric's own
    routing's, e.g. the torus's dimension order); several make a select group."""
    groups: list[Group] = []
    rules: list[Rule] = []
    stage = hash_stages(topo)
    hops = {(sw.name, host.name): tuple(choose(topo, sw.name, host.name))
            for sw in topo.switches for host in topo.hosts}
    fanout: dict[int, int] = {}
    for (sw_name, _), ports in hops.items():
        fanout[stage[sw_name]] = max(fanout.get(stage[sw_name], 1), len(ports))
    for sw in topo.switches:
        multiplier = 1
        for earlier in range(stage[sw.name]):
            multiplier *= fanout.get(earlier, 1)
        rules.extend(base_rules(sw.dpid))
        group_ids: dict[tuple[int, ...], int] = {}
        for host in topo.hosts:
            ports = hops[(sw.name, host.name)]
            if not ports:
                continue
            match = (("eth_type", ETH_TYPE_IP), ("ipv4_dst", host.ip))
            if mode == "single" or len(ports) == 1:
                rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                                  out_port=ports[0]))
                continue
            if ports not in group_ids:
                group_ids[ports] = len(group_ids) + 1
                groups.append(Group(dpid=sw.dpid, group_id=group_ids[ports],
                                    buckets=decorrelated_buckets(ports, multiplier)))
            rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                              group_id=group_ids[ports]))
    return RoutePlan(mode=mode, groups=tuple(groups), rules=tuple(rules))


def relay_plan(topo: Topology, mode: str,
                next_server: Callable[[Topology, str, str], str | None] | None = None) -> RoutePlan:
    """Server-centric fabrics (BCube, DCell, FiConn, MDCube): switches deliver to the
    server port that owns the destination MAC (through other switches when switches are
    joined, as MDCube's containers are); servers choose the next server with their kernel
    routing table. `next_server(topo, server, dst)`: a fabric's own routing (the next
    server on its path, None: unreachable); without it every next server on a shortest
    path (``ecmp``) or the one on the highest port (``single``)."""
    rules: list[Rule] = []
    for sw in topo.switches:
        rules.extend(base_rules(sw.dpid))
    rules += _mac_rules(topo)
    routes: list[HostRoute] = []
    for src in topo.hosts:
        for dst in topo.hosts:
            if src is dst:
                continue
            if next_server is not None:
                nxt = next_server(topo, src.name, dst.name)
                via = [] if nxt is None else [
                    (port, topo.host(nxt).ip) for port, relay, _, _ in
                    sorted(segments(topo, src.name), key=lambda s: (s[3], s[0]))
                    if relay == nxt][:1]
            else:
                dist = distances_to(topo, dst.name)
                dist_src = dist.get(src.name)
                via = sorted({(port, topo.host(relay).ip)
                              for port, relay, _, hops in segments(topo, src.name)
                              if dist_src is not None and relay in dist
                              and dist[relay] + hops == dist_src})
                if mode == "single" and via:  # none: unreachable (a failure cut it off)
                    via = [_bcube_first_choice(topo, src.name, via)]
            routes.append(HostRoute(host=src.name, dst_ip=dst.ip, via=tuple(via)))
    return RoutePlan(mode=mode, groups=(), rules=tuple(rules), host_routes=tuple(routes))


def segments(topo: Topology, host: str) -> list[tuple[int, str, int, int]]:
    """The servers a relay server reaches without another server in between:
    (its port, that server, that server's port, hops), through a direct link (1 hop) or
    through switches only (a switch: 2 hops; two joined switches, MDCube's: 3)."""
    cache = topo._idx().setdefault("segments", {})
    if host in cache:
        return cache[host]
    out = []
    for port, peer, peer_port in topo.ports_of(host):
        if topo.is_host(peer):
            out.append((port, peer, peer_port, 1))
            continue
        seen = {peer: 0}
        queue = deque([peer])
        while queue:
            sw = queue.popleft()
            for _, node, node_port in topo.ports_of(sw):
                if topo.is_host(node):
                    if node != host:
                        out.append((port, node, node_port, seen[sw] + 2))
                elif node not in seen:
                    seen[node] = seen[sw] + 1
                    queue.append(node)
    cache[host] = out
    return out


def _mac_rules(topo: Topology) -> list[Rule]:
    """Every switch forwards a server port's MAC towards it, along the fewest switch hops
    (ties: the lowest port): in BCube and DCell the port itself, in MDCube also from the
    switch joined to it."""
    rules = []
    for host in topo.hosts:
        for port, sw, sw_port in topo.ports_of(host.name):
            if topo.is_host(sw):
                continue
            match = (("eth_dst", host.macs[port]),)
            rules.append(Rule(dpid=topo.switch(sw).dpid, priority=PRIORITY_ROUTE, match=match,
                              out_port=sw_port))
            seen = {sw}
            queue = deque([sw])
            while queue:
                here = queue.popleft()
                for _, nxt, nxt_port in topo.ports_of(here):
                    if topo.is_host(nxt) or nxt in seen:
                        continue
                    seen.add(nxt)
                    queue.append(nxt)
                    rules.append(Rule(dpid=topo.switch(nxt).dpid, priority=PRIORITY_ROUTE,
                                      match=match, out_port=nxt_port))
    return rules


def _bcube_first_choice(topo: Topology, src: str, via: list[tuple[int, str]]) -> tuple[int, str]:
    """BCube routing corrects the highest differing digit first: the highest server port
    (server port l faces level l)."""
    return max(via)


def arp_reply(topo: Topology, dpid: int, in_port: int, target_ip: str) -> str | None:
    """The MAC to answer an ARP request for `target_ip` arriving on (dpid, in_port), or None
    (an unknown address, or a port that does not face a host).

    In a switched fabric it is the target host's MAC. In a relay fabric the request comes
    from a server asking for a neighbour it reaches through switches, so the answer is the
    MAC of the neighbour's port on that switch (or on the switch joined to it)."""
    host = topo.host_by_ip(target_ip)
    sw = topo.switch_by_dpid(dpid)
    if host is None or sw is None:
        return None
    asker = topo.peer(sw.name, in_port)
    if asker is None or not topo.is_host(asker[0]):
        return None  # a request from another switch: a plugin's flood, answered at its edge
    if not host.relay:
        return host.macs[0]
    for port, relay, relay_port, _ in segments(topo, asker[0]):
        if port == asker[1] and relay == host.name:
            return host.macs[relay_port]
    return None
