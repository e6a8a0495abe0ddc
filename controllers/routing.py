"""Routing decisions as pure data: given a topology and a mode, the flow entries, groups and
host routes that make every host pair reachable without loops.

No Ryu import here; `controllers/apps/routing_app.py` turns a `Plan` into OpenFlow messages
and the testbed installs `HostRoute`s in relay hosts (BCube servers).

Modes:
- ``ecmp``: every shortest path is used. A switch with several next hops towards a host
  sends to an OpenFlow 1.3 select group whose buckets are those ports (the switch hashes
  each flow's 5-tuple). Relay hosts get kernel multipath routes over every neighbour that
  corrects one BCube digit (hashed on the 5-tuple with fib_multipath_hash_policy=1).
- ``hedera``: ``ecmp``, plus what Hedera's scheduler needs (controllers/flowsched.py): a
  copy of the first packets of every TCP flow entering at an edge switch comes to the
  controller (the packets themselves go on), which gives the flow its own entry there (same action as the hash route, so its counters
  can be polled), and elephants the scheduler places get an exact entry per switch of their
  path. Switched fabrics only.
- ``single``: one deterministic path per destination, like a spanning tree: the
  lowest-numbered next-hop port at every switch, so all traffic climbs through the first
  aggregation/core/spine switch. In BCube, BCube's own routing: correct the highest
  differing digit first (the paper's permutation k..0).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from topologies.graph import distances_to, next_hops
from topologies.model import Topology

MODES = ("ecmp", "single", "hedera")

PRIORITY_ROUTE = 100
PRIORITY_DETOUR = 105   # fast failover: a detour's second hop, for packets from its first
PRIORITY_DETECT = 110   # hedera: new TCP flows from a host port -> controller
PRIORITY_FLOW = 120     # hedera: one flow's counting entry at its ingress edge switch
PRIORITY_PLACED = 130   # hedera: a scheduled elephant's entry on each switch of its path
PRIORITY_ARP = 200
PRIORITY_MISS = 0

ETH_TYPE_IP = 0x0800
ETH_TYPE_ARP = 0x0806
IP_PROTO_TCP = 6


FlowKey = tuple  # (ip_src, ip_dst, ip_proto, src_port, dst_port)
MAX_BUCKETS = 64  # OVS's dp_hash selection handles at most 64 hash slots


@dataclass(frozen=True, kw_only=True)
class Group:
    """A select group: one bucket per entry of `buckets` (an output port each; a port may
    appear several times, see `_decorrelated_buckets`); or (`kind` "ff") a fast-failover
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
    one of `out_port` or `group_id` forwards, `to_controller` alone sends to the controller,
    with one of them sends a copy there; none of them drops."""
    dpid: int
    priority: int
    match: tuple[tuple[str, object], ...]
    out_port: int | None = None
    group_id: int | None = None
    to_controller: bool = False
    idle_timeout: int = 0  # seconds without a packet before the switch removes it (0: never)
    set_dscp: int | None = None  # re-mark the packet's DSCP before forwarding

    @property
    def is_drop(self) -> bool:
        return self.out_port is None and self.group_id is None and not self.to_controller


@dataclass(frozen=True, kw_only=True)
class HostRoute:
    """A /32 route in a relay host: to `dst_ip` via one or more (port, next-hop IP)."""
    host: str
    dst_ip: str
    via: tuple[tuple[int, str], ...]


@dataclass(frozen=True, kw_only=True)
class Plan:
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


def plan(topo: Topology, mode: str = "ecmp", base: str = "ecmp", track: bool = False) -> Plan:
    """Proactive routing for the whole fabric. `base`: for ``hedera``, the routing new flows
    start on (``ecmp``; ``single`` makes every collision certain). `track`: give every TCP
    flow its own entry at its ingress edge (``hedera`` always does; a flow priority policy
    needs it too). With fast failover: `controllers.failover.plan`."""
    if mode not in MODES or topo.kind == "hybrid":
        from . import fabric_routing  # the survey fabrics' own routings build on this module
        return fabric_routing.plan(topo, mode, track)
    if any(h.relay for h in topo.hosts):
        if mode == "hedera" or track:
            raise ValueError("routing mode hedera and flow priorities need a switched fabric "
                             "(not BCube's server relays)")
        return _relay_plan(topo, mode)
    if mode == "hedera":
        if base not in ("ecmp", "single"):
            raise ValueError(f"hedera's base routing must be ecmp or single (got {base!r})")
        track = True
    start = _switched_plan(topo, base if mode == "hedera" else mode)
    if not track:
        return start
    return Plan(mode=mode, groups=start.groups,
                rules=start.rules + tuple(_detect_rules(topo, start)))


def _detect_rules(topo: Topology, start: Plan) -> list[Rule]:
    """Per host port and destination: TCP packets take their route as usual and a copy goes
    to the controller, which then gives the flow its own (counting) entry. Nothing waits for
    the controller and nothing is re-injected (no packet-out)."""
    rules = []
    for sw in topo.switches:
        routes = {dict(r.match).get("ipv4_dst"): r for r in start.for_switch(sw.dpid)[1]
                  if r.priority == PRIORITY_ROUTE}
        for port, peer, _ in topo.ports_of(sw.name):
            if not topo.is_host(peer):
                continue
            for host in topo.hosts:
                route = routes.get(host.ip)
                if host.name == peer or route is None:
                    continue
                rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_DETECT, to_controller=True,
                                  out_port=route.out_port, group_id=route.group_id,
                                  match=(("eth_type", ETH_TYPE_IP), ("in_port", port),
                                         ("ip_proto", IP_PROTO_TCP), ("ipv4_dst", host.ip))))
    return rules


def flow_match(key: tuple) -> tuple[tuple[str, object], ...]:
    """The exact match of one TCP flow, key = (ip_src, ip_dst, 6, src_port, dst_port)."""
    src, dst, proto, sport, dport = key
    return (("eth_type", ETH_TYPE_IP), ("ip_proto", proto), ("ipv4_dst", dst),
            ("ipv4_src", src), ("tcp_dst", dport), ("tcp_src", sport))


def flow_entry(plan_: Plan, dpid: int, key: tuple, idle_timeout: int) -> Rule | None:
    """A flow's own entry at its ingress switch, doing what the destination route there does
    (the ECMP group or the port): the packets keep their hash path, the entry counts them."""
    dst = key[1]
    for rule in plan_.for_switch(dpid)[1]:
        if rule.priority == PRIORITY_ROUTE and ("ipv4_dst", dst) in rule.match:
            return Rule(dpid=dpid, priority=PRIORITY_FLOW, match=flow_match(key),
                        out_port=rule.out_port, group_id=rule.group_id,
                        idle_timeout=idle_timeout)
    return None


def path_rules(topo: Topology, path: tuple[str, ...], key: tuple,
               idle_timeout: int) -> list[Rule]:
    """Entries that pin one flow to `path` (host, switch, ..., switch, host), in the order
    to install them: from the last switch back to the first, so that no switch sends the
    flow to a neighbour that does not know it yet. The first switch's entry has the
    counting entry's priority (`flow_entry`): it is meant to modify that entry."""
    rules = []
    for i, (here, nxt) in enumerate(zip(path[1:-1], path[2:])):
        port = next(p for p, peer, _ in topo.ports_of(here) if peer == nxt)
        # at the ingress switch the flow already has its counting entry: that one changes
        rules.append(Rule(dpid=topo.switch(here).dpid,
                          priority=PRIORITY_FLOW if i == 0 else PRIORITY_PLACED,
                          match=flow_match(key), out_port=port, idle_timeout=idle_timeout))
    return rules[::-1]


def _base_rules(dpid: int) -> list[Rule]:
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


def _decorrelated_buckets(ports: tuple[int, ...], multiplier: int) -> tuple[int, ...]:
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


def _switched_plan(topo: Topology, mode: str,
                   choose: Callable[[Topology, str, str], list[int]] = next_hops) -> Plan:
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
        rules.extend(_base_rules(sw.dpid))
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
                                    buckets=_decorrelated_buckets(ports, multiplier)))
            rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                              group_id=group_ids[ports]))
    return Plan(mode=mode, groups=tuple(groups), rules=tuple(rules))


def _relay_plan(topo: Topology, mode: str,
                next_server: Callable[[Topology, str, str], str | None] | None = None) -> Plan:
    """Server-centric fabrics (BCube, DCell, FiConn, MDCube): switches deliver to the
    server port that owns the destination MAC (through other switches when switches are
    joined, as MDCube's containers are); servers choose the next server with their kernel
    routing table. `next_server(topo, server, dst)`: a fabric's own routing (the next
    server on its path, None: unreachable); without it every next server on a shortest
    path (``ecmp``) or the one on the highest port (``single``)."""
    rules: list[Rule] = []
    for sw in topo.switches:
        rules.extend(_base_rules(sw.dpid))
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
    return Plan(mode=mode, groups=(), rules=tuple(rules), host_routes=tuple(routes))


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
