"""Routing decisions as pure data: given a topology and a mode, the flow entries, groups and
host routes that make every host pair reachable without loops.

No Ryu import here; `controllers/apps/routing_app.py` turns a `RoutePlan` into OpenFlow messages
and the testbed installs `HostRoute`s in relay hosts (BCube's, DCell's, FiConn's and
MDCube's servers). The plan's data and the builders every routing shares are in
`plans.py`; the survey fabrics' own routings (DCell's, VLB, dimension order, ...; the
modes of `topologies.kinds.routings`) in `fabric_routing.py`, which `plan` hands them to.

Modes:
- ``ecmp``: every shortest path is used. A switch with several next hops towards a host
  sends to an OpenFlow 1.3 select group whose buckets are those ports (the switch hashes
  each flow's 5-tuple). Relay hosts get kernel multipath routes over every neighbour that
  corrects one BCube digit (hashed on the 5-tuple with fib_multipath_hash_policy=1).
- ``hedera``: ``ecmp``, plus what Hedera's scheduler needs (controllers/flowsched.py): a
  copy of the first packets of every TCP flow entering at an edge switch comes to the
  controller (the packets themselves go on), which gives the flow its own entry there
  (same action as the hash route, so its counters can be polled), and elephants the scheduler places get an exact entry per switch of their
  path. Switched fabrics only.
- ``single``: one deterministic path per destination, like a spanning tree: the
  lowest-numbered next-hop port at every switch, so all traffic climbs through the first
  aggregation/core/spine switch. In BCube, BCube's own routing: correct the highest
  differing digit first (the paper's permutation k..0); in the other relay fabrics, the
  next server on the highest port among the shortest paths'.
"""
from __future__ import annotations

from topologies.model import Topology

from . import fabric_routing
from .plans import (
    ETH_TYPE_ARP,
    ETH_TYPE_IP,
    IP_PROTO_TCP,
    MAX_BUCKETS,
    PRIORITY_ARP,
    PRIORITY_DETECT,
    PRIORITY_DETOUR,
    PRIORITY_FLOW,
    PRIORITY_MISS,
    PRIORITY_PLACED,
    PRIORITY_ROUTE,
    FlowKey,
    Group,
    HostRoute,
    RoutePlan,
    Rule,
    arp_reply,
    decorrelated_buckets,
    hash_stages,
    relay_plan,
    segments,
    switched_plan,
)

__all__ = ["ETH_TYPE_ARP", "ETH_TYPE_IP", "IP_PROTO_TCP", "MAX_BUCKETS", "MODES",
           "PRIORITY_ARP", "PRIORITY_DETECT", "PRIORITY_DETOUR", "PRIORITY_FLOW",
           "PRIORITY_MISS", "PRIORITY_PLACED", "PRIORITY_ROUTE", "FlowKey", "Group",
           "HostRoute", "RoutePlan", "Rule", "arp_reply", "decorrelated_buckets", "flow_entry",
           "flow_match", "hash_stages", "path_rules", "plan", "segments"]

MODES = ("ecmp", "single", "hedera")


def plan(topo: Topology, mode: str = "ecmp", base: str = "ecmp", track: bool = False) -> RoutePlan:
    """Proactive routing for the whole fabric. `base`: for ``hedera``, the routing new flows
    start on (``ecmp``; ``single`` makes every collision certain). `track`: give every TCP
    flow its own entry at its ingress edge (``hedera`` always does; a flow priority policy
    needs it too). With fast failover: `controllers.failover.plan`."""
    if mode not in MODES or topo.kind == "hybrid":
        return fabric_routing.plan(topo, mode, track)
    if topo.relays:
        if mode == "hedera" or track:
            raise ValueError("routing mode hedera and flow priorities need a switched fabric "
                             "(not BCube's server relays)")
        return relay_plan(topo, mode)
    if mode == "hedera":
        if base not in ("ecmp", "single"):
            raise ValueError(f"hedera's base routing must be ecmp or single (got {base!r})")
        track = True
    start = switched_plan(topo, base if mode == "hedera" else mode)
    if not track:
        return start
    return RoutePlan(mode=mode, groups=start.groups,
                rules=start.rules + tuple(_detect_rules(topo, start)))


def _detect_rules(topo: Topology, start: RoutePlan) -> list[Rule]:
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


def flow_entry(plan_: RoutePlan, dpid: int, key: tuple, idle_timeout: int) -> Rule | None:
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
