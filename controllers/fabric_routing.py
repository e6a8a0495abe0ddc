"""The survey fabrics' own routings, as pure data like `routing.py`'s plans (built with
`plans.py`'s builders; `routing.plan` hands these modes here).

- ``dcell`` (DCellRouting, Guo et al. 2008) and ``ficonn`` (FiConn's traffic-oblivious
  routing, Li et al. 2009): two servers in different sub-cells of a level-l cell meet
  through the one level-l link between their sub-cells; the path is the route to that
  link's near end, the link, and the route from its far end, recursively. The route from
  any server on such a path to the destination is the rest of the path, so each server
  only needs a next hop per destination (its kernel routing table).
- ``mdcube`` (Wu et al. 2009): the container coordinates are corrected one dimension at a
  time (m0, then m1), through the switch-to-switch link between the two containers;
  inside a container, BCube's routing (the highest differing digit first).
- ``vlb`` (VL2's Valiant load balancing): every flow between ToRs climbs to an
  intermediate switch chosen by hash, whatever the shortest path, and comes down to the
  destination's ToR: ToR -> aggregation -> intermediate -> aggregation -> ToR.
- ``dor`` (dimension-order routing on a torus, as Blue Gene/L's deterministic routing):
  dimension 0 is corrected first, then 1, ..., each the short way round the ring (a tie:
  upwards).
- ``rail`` (rail-aligned, as NCCL's PXN): traffic to another server leaves by the NIC of
  the destination accelerator's rail (its own server's internal switch carries it there),
  so it stays on one rail leaf and never crosses a spine; ``nic``: every accelerator sends
  through its own NIC, and traffic between rails crosses the spines (hashed over them).
- ``cthrough`` (c-Through / Helios): racks' traffic takes the packet fabric, except
  between two racks an optical circuit joins, which takes the circuit
  (`circuit_plan(topo, circuits)`; controllers/circuits.py decides the circuits).
  ``ecmp`` and ``single`` on a hybrid fabric route the packet fabric alone.
"""
from __future__ import annotations

import dataclasses

from topologies.graph import next_hops
from topologies.kinds import OWN_ROUTINGS, routings
from topologies.model import Host, Topology
from topologies.survey import torus_coords

from .circuits import Circuit, check_circuits
from .plans import (
    ETH_TYPE_IP,
    IN_PORT,
    PRIORITY_ROUTE,
    Group,
    RoutePlan,
    Rule,
    base_rules,
    decorrelated_buckets,
    relay_plan,
    switched_plan,
)

ALL_ROUTINGS = tuple(dict.fromkeys(["ecmp", "single", "hedera"]
                                   + [m for ms in OWN_ROUTINGS.values() for m in ms]))
PRIORITY_RETURN = 101  # VLB: an intermediate sending a packet back down the link it came by
PRIORITY_BOUNCE = 102  # VLB: what arrives at an aggregation switch from a ToR goes up
PRIORITY_CIRCUIT = 103  # c-Through: a rack pair's traffic onto its circuit


def plan(topo: Topology, mode: str, track: bool = False) -> RoutePlan:
    """A survey fabric's own routing `mode` (topologies.kinds.OWN_ROUTINGS), or ``ecmp`` /
    ``single`` on a hybrid fabric's packet part. ValueError for a mode the fabric does not
    have."""
    if mode not in routings(topo.kind):
        if mode in ALL_ROUTINGS:
            raise ValueError(f"routing mode {mode!r} is not one of a {topo.kind} fabric's "
                             f"({', '.join(routings(topo.kind))})")
        raise ValueError(f"routing mode must be one of {', '.join(ALL_ROUTINGS)} (got {mode!r})")
    if track:
        raise ValueError(f"routing mode {mode} does not track flows (flow priorities need "
                         "ecmp, single or hedera)")
    if topo.kind == "hybrid":
        return circuit_plan(topo, (), mode=mode)
    if mode in ("dcell", "ficonn"):
        return relay_plan(topo, mode, next_server=cell_next)
    if mode == "mdcube":
        return relay_plan(topo, mode, next_server=mdcube_next)
    if mode == "dor":
        return switched_plan(topo, mode, choose=dor_ports)
    if mode == "vlb":
        return vlb_plan(topo)
    return rail_plan(topo, mode)


def num(topo: Topology, node: str, key: str) -> int:
    """A node's label `key` (KeyError when it has none: a topology of another kind)."""
    value = topo.node(node).label(key)
    if value is None:
        raise KeyError(f"{node} has no label {key!r}")
    return value


# ---- DCell and FiConn ------------------------------------------------------------------

def cell_digits(topo: Topology, host: str) -> tuple[int, ...]:
    """A DCell or FiConn server's [a_0, ..., a_k]."""
    return tuple(num(topo, host, f"c{level}") for level in range(topo.param("k") + 1))


def _level_links(topo: Topology) -> dict[tuple, tuple[str, str]]:
    """(level, digits above it, sub-cell i, sub-cell j) -> (server in i, server in j) for
    every server-to-server link."""
    cache = topo._idx()
    if "cell_links" not in cache:
        out: dict[tuple, tuple[str, str]] = {}
        for link in topo.links:
            if not (topo.is_host(link.a) and topo.is_host(link.b)):
                continue
            a, b = cell_digits(topo, link.a), cell_digits(topo, link.b)
            level = max(i for i in range(len(a)) if a[i] != b[i])
            out[(level, a[level + 1:], a[level], b[level])] = (link.a, link.b)
            out[(level, a[level + 1:], b[level], a[level])] = (link.b, link.a)
        cache["cell_links"] = out
    return cache["cell_links"]


def cell_route(topo: Topology, src: str, dst: str) -> list[str] | None:
    """The servers DCellRouting (FiConn's TOR alike) visits from `src` to `dst`, both
    included; None when a link it needs is gone (a failure: the paper's fault-tolerant
    routing is not emulated)."""
    if src == dst:
        return [src]
    a, b = cell_digits(topo, src), cell_digits(topo, dst)
    level = max(i for i in range(len(a)) if a[i] != b[i])
    if level == 0:
        return [src, dst]  # one DCell_0: through its switch
    ends = _level_links(topo).get((level, a[level + 1:], a[level], b[level]))
    if ends is None:
        return None
    first, rest = cell_route(topo, src, ends[0]), cell_route(topo, ends[1], dst)
    if first is None or rest is None:
        return None
    return first + rest


def cell_next(topo: Topology, src: str, dst: str) -> str | None:
    path = cell_route(topo, src, dst)
    return path[1] if path and len(path) > 1 else None


# ---- MDCube ------------------------------------------------------------------------

def _mdcube_server(topo: Topology, container: int, digits: list[int]) -> str:
    n, k = topo.param("n"), topo.param("k")
    return f"h{container * n ** (k + 1) + sum(d * n ** i for i, d in enumerate(digits)) + 1}"


def mdcube_next(topo: Topology, src: str, dst: str) -> str | None:
    """The next server of MDCube's routing from `src` towards `dst`."""
    n, k, m = topo.param("n"), topo.param("k"), (topo.param("m0"), topo.param("m1"))
    here = [num(topo, src, "m0"), num(topo, src, "m1")]
    there = [num(topo, dst, "m0"), num(topo, dst, "m1")]
    digits = [num(topo, src, f"d{level}") for level in range(k + 1)]
    goal = [num(topo, dst, f"d{level}") for level in range(k + 1)]
    container = here[0] + here[1] * m[0]
    if here == there:
        level = max(i for i in range(k + 1) if digits[i] != goal[i])
        return _mdcube_server(topo, container, digits[:level] + [goal[level]]
                              + digits[level + 1:])
    d = 0 if here[0] != there[0] else 1
    i, j = here[d], there[d]
    offset = 0 if d == 0 else m[0] - 1
    near = offset + (j - 1 if i < j else j)
    far = offset + (i if i < j else i - 1)
    per_level = n ** k
    level, index = divmod(near, per_level)
    # the servers on switch (level, index): index's digits with `level` free
    others = [(index // n ** x) % n for x in range(k)]
    on_near = others[:level] + [digits[level]] + others[level:]
    if on_near == digits:  # attached to the near switch: cross to the far container
        other = container + (j - i) * (1 if d == 0 else m[0])
        far_level, far_index = divmod(far, per_level)
        far_others = [(far_index // n ** x) % n for x in range(k)]
        return _mdcube_server(topo, other, far_others[:far_level] + [goal[far_level]]
                              + far_others[far_level:])
    target = others[:level] + [goal[level]] + others[level:]
    diff = max(x for x in range(k + 1) if digits[x] != target[x])
    return _mdcube_server(topo, container, digits[:diff] + [target[diff]]
                          + digits[diff + 1:])


# ---- Torus -----------------------------------------------------------------------------

def dor_ports(topo: Topology, switch: str, host: str) -> list[int]:
    """Dimension-order routing: the port of `switch` towards `host` (port 1 if it is the
    host's own switch); none when that link is gone (a failure)."""
    sides = [int(x) for x in topo.param("sides").split("x")]
    here, there = torus_coords(topo, switch), torus_coords(topo, host)
    if here == there:
        port = 1
    else:
        d = next(i for i in range(len(sides)) if here[i] != there[i])
        up = (there[d] - here[d]) % sides[d]
        port = 2 + 2 * d if up <= sides[d] - up or sides[d] == 2 else 3 + 2 * d
    return [port] if topo.peer(switch, port) is not None else []


# ---- VL2 -------------------------------------------------------------------------------

def vlb_plan(topo: Topology) -> RoutePlan:
    """VLB on VL2's Clos, every flow hashed at each stage on its 5-tuple: at its ToR over
    the two aggregation switches, at the aggregation switch over the intermediates (for
    whatever arrives from a ToR, even for a host under the same switch), at the
    intermediate over the destination ToR's two aggregation switches; down from there.
    When the intermediate picks the aggregation switch the packet came up from, it sends it
    back down that link: an entry per such ingress port whose group names IN_PORT (an
    OpenFlow switch drops a packet sent out of the port it came in on otherwise)."""
    groups: list[Group] = []
    rules: list[Rule] = []
    half = topo.param("da") // 2
    tor_of = {h.name: f"t{num(topo, h.name, 'tor') + 1}" for h in topo.hosts}
    for sw in topo.switches:
        rules.extend(base_rules(sw.dpid))
        ports = topo.ports_of(sw.name)
        by_role: dict[str, list[int]] = {}
        for port, peer, _ in ports:
            role = "host" if topo.is_host(peer) else topo.switch(peer).role
            by_role.setdefault(role, []).append(port)
        ids: dict[tuple[int, ...], int] = {}

        def group(buckets: tuple[int, ...], sw_dpid: int = sw.dpid,
                  ids: dict[tuple[int, ...], int] = ids) -> int:
            if buckets not in ids:
                ids[buckets] = len(ids) + 1
                groups.append(Group(dpid=sw_dpid, group_id=ids[buckets], buckets=buckets))
            return ids[buckets]

        for host in topo.hosts:
            match = (("eth_type", ETH_TYPE_IP), ("ipv4_dst", host.ip))
            if sw.role == "tor":
                if tor_of[host.name] == sw.name:
                    port = next(p for p, peer, _ in ports if peer == host.name)
                    rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                                      out_port=port))
                elif by_role.get("agg"):
                    rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                                      group_id=group(tuple(by_role["agg"]))))
            elif sw.role == "agg":
                below = [p for p, peer, _ in ports if peer == tor_of[host.name]]
                if below:
                    rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                                      out_port=below[0]))
            else:  # intermediate: down to the destination ToR's aggregation switches
                aggs = tuple(p for p, peer, _ in ports
                             if any(x == tor_of[host.name] for _, x, _ in topo.ports_of(peer)))
                if not aggs:
                    continue
                down = decorrelated_buckets(aggs, 2 * half)
                rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE, match=match,
                                  group_id=group(down)))
                for came in aggs:  # bounced off one of them: back down the same link
                    rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_RETURN,
                                      match=match + (("in_port", came),),
                                      group_id=group(tuple(IN_PORT if b == came else b
                                                           for b in down))))
        if sw.role == "agg" and by_role.get("int"):
            up = group(decorrelated_buckets(tuple(by_role["int"]), 2))
            for port in by_role.get("tor", []):
                rules.append(Rule(dpid=sw.dpid, priority=PRIORITY_BOUNCE, group_id=up,
                                  match=(("eth_type", ETH_TYPE_IP), ("in_port", port))))
    return RoutePlan(mode="vlb", groups=tuple(groups), rules=tuple(rules))


# ---- Rail-optimised ----------------------------------------------------------------------

def rail_plan(topo: Topology, mode: str) -> RoutePlan:
    """``rail``: a server's switch sends traffic for another server out of the NIC on the
    destination's rail; ``nic``: out of the sender's own NIC (matched on the port it came
    in on), and a rail leaf sends traffic for another rail to the spines (a select group).
    Everything else goes the one shortest way."""
    rails = topo.param("rails")
    base = switched_plan(topo, mode, choose=lambda t, sw, h: _rail_ports(t, sw, h, mode))
    if mode == "rail":
        return base
    extra = []
    for sw in topo.switches:
        if sw.role != "server":
            continue
        for port, peer, _ in topo.ports_of(sw.name):
            if topo.is_host(peer):
                nic = rails + 1 + num(topo, peer, "rail")
                if topo.peer(sw.name, nic) is not None:
                    extra.append(Rule(dpid=sw.dpid, priority=PRIORITY_ROUTE - 1, out_port=nic,
                                      match=(("eth_type", ETH_TYPE_IP), ("in_port", port))))
    # what leaves by its own NIC is routed by the rules of the destinations on this server
    # only (priority ROUTE); for the others the in_port rule decides, so the server switch's
    # ROUTE rules to other servers go
    keep = tuple(r for r in base.rules if not _remote_on_server(topo, r))
    return dataclasses.replace(base, rules=keep + tuple(extra), _by_dpid={})


def _remote_on_server(topo: Topology, rule: Rule) -> bool:
    sw = topo.switch_by_dpid(rule.dpid)
    dst = dict(rule.match).get("ipv4_dst")
    if sw is None or sw.role != "server" or rule.priority != PRIORITY_ROUTE or dst is None:
        return False
    host = topo.host_by_ip(str(dst))
    return host is not None and host.label("server") != sw.label("server")


def _rail_ports(topo: Topology, switch: str, host: str, mode: str) -> list[int]:
    sw, h = topo.switch(switch), topo.host(host)
    rails = topo.param("rails")
    if sw.role == "server":
        if sw.label("server") == h.label("server"):
            return [p for p, peer, _ in topo.ports_of(switch) if peer == host]
        port = rails + 1 + num(topo, host, "rail")
        return [port] if topo.peer(switch, port) is not None else []
    if sw.role == "rail" and sw.label("rail") != h.label("rail"):
        return [p for p, peer, _ in topo.ports_of(switch) if topo.switch(peer).role == "spine"]
    if sw.role == "spine":  # down to the destination's rail, not to any leaf its server is on
        port = 1 + num(topo, host, "rail")
        return [port] if topo.peer(switch, port) is not None else []
    return next_hops(topo, switch, host)


# ---- Hybrid electrical/optical -------------------------------------------------------------

def circuit_plan(topo: Topology, circuits: tuple[Circuit, ...] | list[Circuit],
                 mode: str = "cthrough") -> RoutePlan:
    """The hybrid fabric with these circuits lit: the packet fabric routed by shortest
    paths (``single``: one core), the optical switch joining each circuit's two ports in
    both directions, and each circuit's two ToRs sending the traffic for the other rack
    onto it. A rack's c-th optical port joins the other rack's c-th (the OCS's ports are
    numbered rack by rack)."""
    check_circuits(topo, circuits)
    per = topo.param("circuits")
    ocs = topo.switch("o1")
    packet = _packet_fabric(topo)
    base = switched_plan(packet, "single" if mode == "single" else "ecmp")
    rules = list(base.rules) + base_rules(ocs.dpid)
    tor = {topo.switch(s.name).label("rack"): s for s in topo.switches if s.role == "tor"}
    hosts_in: dict[int, list[Host]] = {}
    for h in topo.hosts:
        hosts_in.setdefault(num(topo, h.name, "rack"), []).append(h)
    for a, b, c in circuits:
        pa, pb = 1 + a * per + c, 1 + b * per + c
        for src, dst, p_in, p_out in ((a, b, pa, pb), (b, a, pb, pa)):
            rules.append(Rule(dpid=ocs.dpid, priority=PRIORITY_CIRCUIT, out_port=p_out,
                              match=(("in_port", p_in),)))
            optical = topo.peer("o1", p_in)
            assert optical is not None and optical[0] == tor[src].name
            for h in hosts_in[dst]:
                rules.append(Rule(dpid=tor[src].dpid, priority=PRIORITY_CIRCUIT,
                                  out_port=optical[1],
                                  match=(("eth_type", ETH_TYPE_IP), ("ipv4_dst", h.ip))))
    return RoutePlan(mode=mode, groups=base.groups, rules=tuple(rules))


def _packet_fabric(topo: Topology) -> Topology:
    """The hybrid fabric without its optical switch's links (routing's graph must not take
    the OCS for a packet switch)."""
    links = tuple(link for link in topo.links if "o1" not in (link.a, link.b))
    return dataclasses.replace(topo, links=links, _index={})
