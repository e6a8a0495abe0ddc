"""Fast failover precomputed for every link, as pure data: a switch whose route to a host
has a single next hop sends through an OpenFlow 1.3 fast-failover group instead, whose
first bucket is that port and whose second goes to a neighbour that can still deliver
without coming back; the switch takes the second bucket by itself the moment the first
port goes down, before the controller hears of it.

ECMP's select groups already skip a dead bucket on their own (each bucket watches its
port), so what is left are the single next hops: in a Fat-Tree the way down (core to
aggregation, aggregation to edge), and every hop under ``single`` routing. There a plain
loop-free alternate (RFC 5286) rarely exists: the other pods' aggregation switches reach a
pod through the same core switch, and would send the packet straight back. The detour is
therefore two hops, S -> N -> M, with a rule at N that matches packets arriving from S
(`in_port`) for that host and sends them to M, a neighbour of N none of whose shortest
paths to the host passes S; from M on, ordinary routing delivers it (every node on a
shortest path from M avoids S as well). E.g. c1 losing its link to a1: c1 -> a3 -> c2 ->
a1; a1 losing its link to e1: a1 -> e2 -> a2 -> e1.

One failure at a time: a detour is not itself protected. The controller still replans when
it hears of the failure (controllers/recovery.py), which replaces the detours with
shortest paths on what is left.
"""
from __future__ import annotations

import dataclasses

from topologies.graph import distances_to
from topologies.model import Topology

from . import routing
from .plans import hash_udp
from .routing import (
    ETH_TYPE_IP,
    PRIORITY_DETECT,
    PRIORITY_DETOUR,
    PRIORITY_ROUTE,
    Group,
    RoutePlan,
    Rule,
)


def plan(topo: Topology, mode: str = "ecmp", fast_failover: bool = False,
         udp_hash: bool = False, **plan_args: object) -> RoutePlan:
    """`routing.plan`, with UDP's ports hashed at every ECMP choice (`plans.hash_udp`) and
    protected by fast-failover groups, when asked (what the controller installs and
    replans)."""
    if fast_failover and topo.relays:
        raise ValueError("fast failover needs a switched fabric (not BCube's server relays)")
    base = routing.plan(topo, mode, **plan_args)  # type: ignore[arg-type]
    if udp_hash:
        base = hash_udp(topo, base)
    return protect(topo, base) if fast_failover else base


@dataclasses.dataclass(frozen=True)
class Detour:
    """Where a switch sends a host's traffic when its port towards it is down: out of
    `port`, to `via` (arriving on its `via_in` port), which sends it out of `via_out`."""
    port: int
    via: str
    via_in: int
    via_out: int


def detour(topo: Topology, switch: str, port: int, host: str) -> Detour | None:
    """The shortest two-hop detour around `switch`'s link on `port` towards `host` (ties:
    lowest ports), or None if the fabric has none."""
    dist = distances_to(topo, host)
    to_switch = distances_to(topo, switch)
    if switch not in dist:
        return None
    best: tuple[int, Detour] | None = None
    for out, via, via_in in topo.ports_of(switch):
        if out == port or topo.is_host(via):
            continue
        for via_out, nxt, _ in topo.ports_of(via):
            if nxt == switch or nxt not in dist:
                continue
            if topo.is_host(nxt) and nxt != host:
                continue
            # every shortest path from nxt to the host avoids `switch`
            if nxt != host and not dist[nxt] < to_switch.get(nxt, 1 << 30) + dist[switch]:
                continue
            cost = 2 + dist[nxt]
            if best is None or cost < best[0]:
                best = (cost, Detour(port=out, via=via, via_in=via_in, via_out=via_out))
    return best[1] if best else None


def protect(topo: Topology, plan: RoutePlan) -> RoutePlan:
    """`plan` with every single-next-hop route between switches (and Hedera's detection
    entries that copy one) sent through a fast-failover group (its port, then the detour's
    first hop) and the detour's rule at the neighbour. Routes to a host's own port stay as
    they are (nothing to fail over to)."""
    groups = list(plan.groups)
    next_id: dict[int, int] = {}
    for g in groups:
        next_id[g.dpid] = max(next_id.get(g.dpid, 0), g.group_id)
    ff_ids: dict[tuple[int, int, int], int] = {}
    rules: list[Rule] = []
    detours: dict[tuple[int, tuple], Rule] = {}
    for rule in plan.rules:
        ip = dict(rule.match).get("ipv4_dst")
        host = topo.host_by_ip(ip) if isinstance(ip, str) else None
        sw = topo.switch_by_dpid(rule.dpid)
        if (rule.priority not in (PRIORITY_ROUTE, PRIORITY_DETECT) or rule.out_port is None
                or host is None
                or sw is None or topo.is_host(topo.neighbour(sw.name, rule.out_port))):
            rules.append(rule)
            continue
        alt = detour(topo, sw.name, rule.out_port, host.name)
        if alt is None:
            rules.append(rule)
            continue
        key = (rule.dpid, rule.out_port, alt.port)
        if key not in ff_ids:
            next_id[rule.dpid] = ff_ids[key] = next_id.get(rule.dpid, 0) + 1
            groups.append(Group(dpid=rule.dpid, group_id=ff_ids[key], kind="ff",
                                buckets=(rule.out_port, alt.port)))
        rules.append(dataclasses.replace(rule, out_port=None, group_id=ff_ids[key]))
        via = topo.switch(alt.via).dpid
        match = (("eth_type", ETH_TYPE_IP), ("in_port", alt.via_in), ("ipv4_dst", host.ip))
        detours[(via, match)] = Rule(dpid=via, priority=PRIORITY_DETOUR, match=match,
                                     out_port=alt.via_out)
    return dataclasses.replace(plan, groups=tuple(groups),
                               rules=tuple(rules) + tuple(detours.values()), _by_dpid={})
