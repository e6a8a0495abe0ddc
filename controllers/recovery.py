"""Recovery from link and switch failures as pure decisions: the fabric without what is down,
the routing plan on it, and the OpenFlow changes that turn the installed plan into that one,
in an order that never sends a packet towards a switch that does not yet know where to
send it.

No Ryu import here; `controllers/apps/routing_app.py` feeds it port-status events and sends
what it returns.

- `degraded(topo, down)`: the topology without the links at the given (node, port) ends
  (a switch that is down: all of its ports). Port numbers, names and addresses do not
  change, so the plan on it is comparable entry by entry with the installed one.
- `replan(topo, mode, down, installed)`: `routing.plan` on the degraded fabric, with each
  switch's select groups keeping the ids the installed plan gave the same set of buckets
  (so a rule and the group it names never disagree halfway through the change).
- `changes(installed, new, degraded_topo)`: what to add, modify and delete, downstream
  first along the new paths.

Shortest paths on the degraded fabric stay loop-free (every switch forwards to a neighbour
one hop nearer the destination), so a core switch that lost its only link into a pod
still delivers what reaches it, the long way round, while every other switch stops
choosing it for that pod.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from testbed.config.replies import ControllerCommand
from topologies.graph import distances_to
from topologies.model import Topology, ifname

from .failover import plan
from .routing import Group, HostRoute, RoutePlan, Rule

Port = tuple[str, int]  # (node name, port number)


def degraded(topo: Topology, down: Iterable[Port]) -> Topology:
    """`topo` without every link that has an end in `down`."""
    cut = set(down)
    links = tuple(link for link in topo.links
                  if not any(end in cut for end in link.ends()))
    return dataclasses.replace(topo, links=links, _index={})


def switch_ports(topo: Topology, switch: str) -> list[Port]:
    """Every connected port of `switch`: what goes down when the switch does."""
    return [(switch, port) for port, _, _ in topo.ports_of(switch)]


def link_ports(topo: Topology, a: str, b: str) -> list[Port]:
    """Both ends of the link between nodes `a` and `b` (KeyError if there is none)."""
    link = topo.link_between(a, b)
    if link is None:
        raise KeyError(f"no link between {a} and {b}")
    return list(link.ends())


def replan(topo: Topology, mode: str, down: Iterable[Port], installed: RoutePlan,
           **plan_args: object) -> RoutePlan:
    """The routing plan on the fabric without `down` (with fast failover if `plan_args` say
    so), its group ids aligned with `installed`."""
    new = plan(degraded(topo, down), mode, **plan_args)  # type: ignore[arg-type]
    return _stable_group_ids(installed, new)


def _stable_group_ids(installed: RoutePlan, new: RoutePlan) -> RoutePlan:
    """Renumber `new`'s groups so that a switch's group with the same buckets as one it has
    keeps that id; other groups get ids the switch does not use yet."""
    old_ids = {(g.dpid, g.kind, g.buckets): g.group_id for g in installed.groups}
    used: dict[int, set[int]] = {}
    for g in installed.groups:
        used.setdefault(g.dpid, set()).add(g.group_id)
    remap: dict[tuple[int, int], int] = {}
    groups = []
    for g in new.groups:
        gid = old_ids.get((g.dpid, g.kind, g.buckets))
        if gid is None:
            taken = used.setdefault(g.dpid, set())
            gid = next(i for i in range(1, len(taken) + 2) if i not in taken)
        used.setdefault(g.dpid, set()).add(gid)
        remap[(g.dpid, g.group_id)] = gid
        groups.append(dataclasses.replace(g, group_id=gid))
    rules = tuple(dataclasses.replace(r, group_id=remap[(r.dpid, r.group_id)])
                  if r.group_id is not None else r for r in new.rules)
    return dataclasses.replace(new, groups=tuple(groups), rules=rules, _by_dpid={})


Op = Literal["add", "modify", "delete"]


@dataclass(frozen=True)
class Change:
    """One OpenFlow change: a group or a flow entry to add, modify or delete."""
    op: Op
    item: Group | Rule

    @property
    def dpid(self) -> int:
        return self.item.dpid


def _rule_key(r: Rule) -> tuple:
    return (r.dpid, r.priority, r.match)


def _hops_to_destination(topo: Topology, r: Rule) -> int:
    """How far the rule's switch is from the host its match names (0 if none): the order to
    install in, nearest the destination first."""
    ip = dict(r.match).get("ipv4_dst")
    host = topo.host_by_ip(ip) if isinstance(ip, str) else None
    sw = topo.switch_by_dpid(r.dpid)
    if host is None or sw is None:
        return 0
    return distances_to(topo, host.name).get(sw.name, 0)


def changes(installed: RoutePlan, new: RoutePlan, topo: Topology) -> list[Change]:
    """The changes that turn `installed` into `new`: new groups first (a rule may name
    them), then changed groups and added or changed rules from the switch nearest each
    destination outwards (downstream first), then deleted rules, then groups no rule uses
    any more. `topo` is the fabric as it is now (`degraded`): distances on it are the
    new paths', so every switch changes after the switches its new paths lead through,
    and none sends towards a neighbour still routing the old way (a core switch that lost
    its link into a pod, say, changes after the aggregation switches that stop using it)."""
    old_groups = {(g.dpid, g.group_id): g for g in installed.groups}
    new_groups = {(g.dpid, g.group_id): g for g in new.groups}
    old_rules = {_rule_key(r): r for r in installed.rules}
    new_rules = {_rule_key(r): r for r in new.rules}
    group_adds = [Change("add", g) for k, g in new_groups.items() if k not in old_groups]
    group_hops: dict[tuple[int, int], int] = {}
    for r in new.rules:
        if r.group_id is not None:
            key = (r.dpid, r.group_id)
            group_hops[key] = min(group_hops.get(key, 1 << 30), _hops_to_destination(topo, r))
    middle: list[tuple[int, Change]] = []
    for k, g in new_groups.items():
        if k in old_groups and old_groups[k] != g:
            middle.append((group_hops.get(k, 0), Change("modify", g)))
    for k, r in new_rules.items():
        old = old_rules.get(k)
        if old is None:
            middle.append((_hops_to_destination(topo, r), Change("add", r)))
        elif old != r:
            middle.append((_hops_to_destination(topo, r), Change("modify", r)))
    middle.sort(key=lambda hc: (hc[0], hc[1].dpid))
    rule_deletes = [Change("delete", r) for k, r in old_rules.items() if k not in new_rules]
    group_deletes = [Change("delete", g) for k, g in old_groups.items() if k not in new_groups]
    return group_adds + [c for _, c in middle] + rule_deletes + group_deletes


def resync(target: RoutePlan, dpid: int, groups: list[Group], rules: list[Rule],
           keep_priorities: frozenset[int] = frozenset()) -> list[Change]:
    """What a (re)started controller sends a switch that kept its tables: the changes from
    what the switch reports (`groups`, `rules`, read back from it) to `target`'s part for
    it, instead of clearing everything and reinstalling (which drops the traffic that was
    flowing). Entries at `keep_priorities` (per-flow entries a scheduler placed, not part
    of the plan) are left as they are."""
    want_groups, want_rules = target.for_switch(dpid)
    have = RoutePlan(mode=target.mode, groups=tuple(groups),
                rules=tuple(r for r in rules if r.priority not in keep_priorities))
    want = RoutePlan(mode=target.mode, groups=tuple(want_groups),
                rules=tuple(r for r in want_rules if r.priority not in keep_priorities))
    return _diff(have, want)


def _diff(have: RoutePlan, want: RoutePlan) -> list[Change]:
    """Groups added or changed, then rules added or changed, then rules and groups no longer
    wanted (a rule never names a group that is not there)."""
    old_g = {g.group_id: g for g in have.groups}
    new_g = {g.group_id: g for g in want.groups}
    old_r = {_rule_key(r): r for r in have.rules}
    new_r = {_rule_key(r): r for r in want.rules}
    out = [Change("add" if k not in old_g else "modify", g)
           for k, g in new_g.items() if old_g.get(k) != g]
    out += [Change("add" if k not in old_r else "modify", r)
            for k, r in new_r.items() if old_r.get(k) != r]
    out += [Change("delete", r) for k, r in old_r.items() if k not in new_r]
    out += [Change("delete", g) for k, g in old_g.items() if k not in new_g]
    return out


def host_route_line(route: HostRoute) -> str:
    """The `ip -batch` line that installs a relay host's /32 route (several next hops: a
    multipath route hashed on the 5-tuple)."""
    hops = [f"nexthop via {ip} dev {ifname(route.host, port)} onlink" for port, ip in route.via]
    if len(hops) == 1:
        hops = [hops[0].replace("nexthop ", "")]
    return f"route replace {route.dst_ip}/32 " + " ".join(hops)


def host_route_changes(installed: RoutePlan, new: RoutePlan) -> dict[str, list[str]]:
    """Per relay host (BCube's servers route for themselves), the `ip -batch` lines that
    turn its routes in `installed` into those of `new`: changed routes replaced, routes to
    destinations no longer reachable deleted (a packet to them is refused at its source,
    not sent into a dead link)."""
    old = {(r.host, r.dst_ip): r for r in installed.host_routes}
    want = {(r.host, r.dst_ip): r for r in new.host_routes if r.via}
    out: dict[str, list[str]] = {}
    for key, route in want.items():
        if old.get(key) != route:
            out.setdefault(route.host, []).append(host_route_line(route))
    for (host, dst), route in old.items():
        if (host, dst) not in want and route.via:
            out.setdefault(host, []).append(f"route del {dst}/32")
    return out


ROUTING_MODES = ("ecmp", "single")  # what a running fabric may be switched between


def command_error(cmd: ControllerCommand, mode: str, relay: bool) -> str | None:
    """Why the routing app cannot carry out `cmd` on a fabric routed by `mode` (None: it
    can). Only a change of routing mode is known: ECMP and a single path, on a switched
    fabric whose paths the router alone decides (not Hedera's, not a relay fabric's)."""
    if cmd.op != "routing":
        return f"unknown command {cmd.op!r} (known: routing)"
    target = cmd.mode
    if target not in ROUTING_MODES:
        return f"routing mode {target!r}: one of {', '.join(ROUTING_MODES)}"
    if relay:
        return "a relay fabric's servers route for themselves (BCube): its mode stays"
    if mode not in ROUTING_MODES:
        return f"the fabric is routed by {mode}, whose scheduler owns the paths: its mode stays"
    return None
