"""Where a routing plan sends a packet, as pure data: the paths from one host to another
through the plan's flow tables and relay routes, each with the share of flows a hash puts
on it.

A switch applies its highest-priority matching entry (on in_port, eth_dst and ipv4_dst),
and drops what it would send back out of the port it came in on (unless IN_PORT says so);
a select group spreads flows over its buckets in proportion (a port listed twice takes
twice the share); a relay server's multipath route spreads them over its next hops
equally; a direct link between servers needs no switch. The shares treat every hashing
stage as independent of the ones before it, which the plans arrange for
(`plans.decorrelated_buckets`). The unit tests trace every plan hop by hop with this;
the permutation experiment's max-min model draws each flow's path from it.
"""
from __future__ import annotations

from topologies.model import Topology

from .plans import IN_PORT, IP_PROTO_TCP, RoutePlan, Rule, arp_reply

Path = tuple[str, ...]
MAX_HOPS = 64


class TraceError(AssertionError):
    """The plan drops, loops or misdelivers the packet (a routing bug, or a failure that
    left the destination unreachable)."""


def paths(topo: Topology, plan: RoutePlan, src: str, dst: str,
          ip_proto: int = IP_PROTO_TCP) -> dict[Path, float]:
    """Every path (host, node, ..., host) a packet of `ip_proto` from `src` to `dst` can
    take, with the share of flows on it (the shares add up to 1)."""
    tracer = _Tracer(topo, plan, dst, ip_proto)
    tracer.host_send(src, (src,), 1.0)
    return tracer.done


def matching_rule(plan: RoutePlan, dpid: int, in_port: int, eth_dst: str | None,
                  ipv4_dst: str, ip_proto: int = IP_PROTO_TCP) -> Rule | None:
    """The entry a switch applies to an IPv4 packet of `ip_proto` (None: nothing
    matches)."""
    found = []
    for r in plan.for_switch(dpid)[1]:
        m = dict(r.match)
        if m.get("eth_type", 0x0800) != 0x0800:
            continue
        if m.get("ipv4_dst", ipv4_dst) != ipv4_dst or m.get("in_port", in_port) != in_port:
            continue
        if "eth_dst" in m and m["eth_dst"] != eth_dst:
            continue
        if m.get("ip_proto", ip_proto) != ip_proto:
            continue
        found.append(r)
    if not found:
        return None
    top = max(r.priority for r in found)
    best = [r for r in found if r.priority == top]
    if len(best) > 1:
        raise TraceError(f"dpid {dpid}: {len(best)} entries of priority {top} match")
    return best[0]


class _Tracer:
    def __init__(self, topo: Topology, plan: RoutePlan, dst: str, ip_proto: int):
        self.topo, self.plan, self.dst, self.ip_proto = topo, plan, dst, ip_proto
        self.dst_ip = topo.host(dst).ip
        self.routes = {(r.host, r.dst_ip): r.via for r in plan.host_routes}
        self.groups = {(g.dpid, g.group_id): g.buckets for g in plan.groups}
        self.done: dict[Path, float] = {}

    def host_send(self, host: str, path: Path, share: float) -> None:
        if self.topo.host(host).relay:
            hops = self.routes.get((host, self.dst_ip), ())
            if not hops:
                raise TraceError(f"{host} has no route to {self.dst}")
        else:
            hops = ((0, self.dst_ip),)
        for port, nexthop_ip in hops:
            peer = self.topo.peer(host, port)
            if peer is None:
                raise TraceError(f"{host}'s port {port} is not connected")
            node, in_port = peer
            if self.topo.is_host(node):  # a direct link: the peer answers ARP itself
                if self.topo.host(node).ip != nexthop_ip:
                    raise TraceError(f"{host} sends to {nexthop_ip} over its link to {node}")
                self.arrive(node, self.topo.host(node).macs[in_port], path, share / len(hops))
                continue
            mac = arp_reply(self.topo, self.topo.switch(node).dpid, in_port, nexthop_ip)
            if mac is None:
                raise TraceError(f"no ARP answer for {nexthop_ip} at {node}")
            self.at_switch(node, in_port, mac, path + (node,), share / len(hops),
                           frozenset({(node, in_port)}))

    def arrive(self, host: str, mac: str, path: Path, share: float) -> None:
        if host in path:
            raise TraceError(f"loop at {host}: {path}")
        if host == self.dst:
            full = path + (host,)
            self.done[full] = self.done.get(full, 0.0) + share
            return
        if not self.topo.host(host).relay or mac not in self.topo.host(host).macs:
            raise TraceError(f"delivered to the wrong host {host}: {path}")
        self.host_send(host, path + (host,), share)

    def at_switch(self, sw: str, in_port: int, mac: str, path: Path, share: float,
                  seen: frozenset[tuple[str, int]]) -> None:
        """`seen`: the (switch, in_port) the packet met since it left a host (VL2's bounce
        passes one aggregation switch twice, on different ports)."""
        if len(path) > MAX_HOPS:
            raise TraceError(f"loop: {path}")
        rule = matching_rule(self.plan, self.topo.switch(sw).dpid, in_port, mac, self.dst_ip,
                             self.ip_proto)
        if rule is None or rule.is_drop or (rule.out_port is None and rule.group_id is None
                                            and not rule.hash_ports):
            raise TraceError(f"{sw} drops traffic to {self.dst} (path {path})")
        if rule.group_id is not None:
            buckets = self.groups[(self.topo.switch(sw).dpid, rule.group_id)]
        elif rule.hash_ports:   # a hash of every flow's own: flows spread evenly
            buckets = rule.hash_ports
        else:
            buckets = (rule.out_port,)  # type: ignore[assignment]
        for bucket in dict.fromkeys(buckets):
            part = share * buckets.count(bucket) / len(buckets)
            if bucket == in_port:  # OpenFlow: no output to the ingress port unless IN_PORT
                raise TraceError(f"{sw} sends traffic to {self.dst} back out of port "
                                 f"{in_port}, which it came in on: dropped (path {path})")
            port = in_port if bucket == IN_PORT else bucket
            peer = self.topo.peer(sw, port)
            if peer is None:
                raise TraceError(f"{sw} sends to {self.dst} out of port {port}, which is down")
            node, node_port = peer
            if self.topo.is_host(node):
                self.arrive(node, mac, path, part)
            elif (node, node_port) in seen:
                raise TraceError(f"loop at {node}: {path}")
            else:
                self.at_switch(node, node_port, mac, path + (node,), part,
                               seen | {(node, node_port)})
