"""Routing decisions traced hop by hop through a fake flow table: every pair reaches its
destination, no path loops, and ECMP uses every equal-cost path."""
import pytest

from controllers.routing import PRIORITY_ARP, _decorrelated_buckets, arp_reply, hash_stages, plan
from topologies import bcube, dumbbell, fattree, leafspine, nonblocking
from topologies.graph import count_shortest_paths


class FakeFabric:
    """Applies a routing plan: flow tables per switch (matching in_port, eth_dst and
    ipv4_dst), kernel routes per relay host, direct links between servers."""

    def __init__(self, topo, p):
        self.topo, self.plan = topo, p
        self.groups = {(g.dpid, g.group_id): g for g in p.groups}
        self.routes = {(r.host, r.dst_ip): r for r in p.host_routes}

    def switch_out_ports(self, sw, in_port, eth_dst, ipv4_dst):
        dpid = self.topo.node(sw).dpid
        _, rules = self.plan.for_switch(dpid)
        matching = []
        for r in rules:
            m = dict(r.match)
            if m.get("eth_type", 0x0800) != 0x0800 and "eth_type" in m:
                continue
            if "ipv4_dst" in m and m["ipv4_dst"] != ipv4_dst:
                continue
            if "eth_dst" in m and m["eth_dst"] != eth_dst:
                continue
            if "in_port" in m and m["in_port"] != in_port:
                continue
            matching.append(r)
        best = max(matching, key=lambda r: r.priority)
        assert [r.priority for r in matching].count(best.priority) == 1, \
            f"{sw}: two rules of priority {best.priority} match"
        if best.group_id is not None:
            return set(self.groups[(dpid, best.group_id)].buckets)
        return {best.out_port} if best.out_port is not None else set()

    def paths(self, src, dst):
        """All paths (node lists) a packet from src to dst can take."""
        dst_host = self.topo.node(dst)
        done = []

        def host_send(host, path):
            h = self.topo.node(host)
            if h.relay:
                route = self.routes[(host, dst_host.ip)]
                hops = route.via
                assert hops, f"{host} has no route to {dst}"
            else:
                hops = [(0, dst_host.ip)]
            for port, nexthop_ip in hops:
                peer, in_port = self.topo.peer(host, port)
                if self.topo.is_host(peer):  # a direct link: the peer answers ARP itself
                    assert self.topo.node(peer).ip == nexthop_ip
                    arrive(peer, self.topo.node(peer).macs[in_port], path)
                    continue
                mac = arp_reply(self.topo, self.topo.node(peer).dpid, in_port, nexthop_ip)
                assert mac is not None, f"no ARP answer for {nexthop_ip} at {peer}"
                at_switch(peer, in_port, mac, path + [peer], {(peer, in_port)})

        def arrive(node, mac, path):
            assert node not in path, f"loop at {node}: {path}"
            if node == dst:
                done.append(path + [node])
            else:
                assert self.topo.node(node).relay, f"delivered to wrong host {node}"
                assert mac in self.topo.node(node).macs
                host_send(node, path + [node])

        def at_switch(sw, in_port, mac, path, seen):
            """`seen`: the (switch, in_port) the packet met since it left a host (VL2's
            bounce passes one aggregation switch twice, on different ports)."""
            assert len(path) <= 4 * len(self.topo.switches), f"loop: {path}"
            ports = self.switch_out_ports(sw, in_port, mac, dst_host.ip)
            assert ports, f"{sw} drops traffic to {dst} (path {path})"
            for port in ports:
                node, node_port = self.topo.peer(sw, port)
                if self.topo.is_host(node):
                    arrive(node, mac, path)
                else:
                    assert (node, node_port) not in seen, f"loop at {node}: {path}"
                    at_switch(node, node_port, mac, path + [node], seen | {(node, node_port)})

        host_send(src, [src])
        return done


TOPOS = [fattree(2), fattree(4), leafspine(2, 4, 4), leafspine(3, 3, 2, 10, 40), bcube(4, 1),
         bcube(2, 2), bcube(3, 1), nonblocking(4), dumbbell(2, 2)]


@pytest.mark.parametrize("topo", TOPOS, ids=lambda t: f"{t.kind}{dict(t.params)}")
def test_ecmp_reaches_every_pair_on_every_shortest_path(topo):
    fab = FakeFabric(topo, plan(topo, "ecmp"))
    for src in topo.hosts:
        for dst in topo.hosts:
            if src is dst:
                continue
            paths = fab.paths(src.name, dst.name)
            assert paths and all(p[-1] == dst.name for p in paths)
            assert len({tuple(p) for p in paths}) == count_shortest_paths(topo, src.name, dst.name)
            assert all(len(p) - 1 == len(paths[0]) - 1 for p in paths)  # all equal cost


@pytest.mark.parametrize("topo", TOPOS, ids=lambda t: f"{t.kind}{dict(t.params)}")
def test_single_path_is_one_deterministic_path(topo):
    fab = FakeFabric(topo, plan(topo, "single"))
    for src in topo.hosts:
        for dst in topo.hosts:
            if src is not dst:
                assert len(fab.paths(src.name, dst.name)) == 1


def test_single_path_climbs_through_one_core_like_a_spanning_tree():
    topo = fattree(4)
    fab = FakeFabric(topo, plan(topo, "single"))
    cores = {n for s in topo.hosts for d in topo.hosts if s is not d
             for n in fab.paths(s.name, d.name)[0] if n.startswith("c")}
    assert cores == {"c1"}


def test_bcube_single_path_corrects_highest_digit_first():
    topo = bcube(4, 1)
    fab = FakeFabric(topo, plan(topo, "single"))
    path = fab.paths("h1", "h6")[0]  # h1 = (0,0), h6 = (1,1): level-1 switch first
    assert topo.node(path[1]).label("level") == 1
    assert path[2] in ("h5",)  # relay (d0=0, d1=1)


def test_every_switch_answers_arp_and_drops_the_rest():
    p = plan(fattree(4), "ecmp")
    for sw in fattree(4).switches:
        _, rules = p.for_switch(sw.dpid)
        assert any(r.to_controller and r.priority == PRIORITY_ARP for r in rules)
        assert any(r.is_drop and r.match == () for r in rules)


def test_arp_reply_in_relay_fabric_names_the_port_on_that_switch():
    topo = bcube(4, 1)
    h2 = topo.node("h2")  # neighbour of h1 at level 0 (differs in digit 0)
    sw, in_port = topo.peer("h1", 0)
    assert arp_reply(topo, topo.node(sw).dpid, in_port, h2.ip) == h2.macs[0]
    assert arp_reply(topo, 999, 1, h2.ip) is None
    assert arp_reply(topo, 1, 1, "10.9.9.9") is None


def test_arp_requests_are_answered_at_host_ports_only():
    """A request that reached a switch from another switch is a plugin's flood (the
    router never floods): the asker's own edge switch has answered it already."""
    topo = fattree(4)
    h16 = topo.node("h16")
    edge, host_port = topo.peer("h1", 0)
    assert arp_reply(topo, topo.node(edge).dpid, host_port, h16.ip) == h16.macs[0]
    trunks = [port for port, peer, _ in topo.ports_of(edge) if not topo.is_host(peer)]
    assert trunks and all(arp_reply(topo, topo.node(edge).dpid, p, h16.ip) is None
                          for p in trunks)


def test_hash_stages_and_bucket_decorrelation():
    topo = fattree(4)
    st = hash_stages(topo)
    assert st["e1"] == 0 and st["a1"] == 1 and st["c1"] == 2
    groups = {topo.switch_by_dpid(g.dpid).role: g for g in plan(topo, "ecmp").groups}
    assert groups["edge"].buckets == (3, 4)
    assert groups["agg"].buckets == (3, 3, 4, 4)  # decides on the next hash digit
    # hash h: edge picks h % 2, agg picks (h % 4) // 2: independent bits
    for h in range(16):
        assert groups["agg"].buckets[h % 4] == (3, 4)[(h // 2) % 2]
    assert _decorrelated_buckets((1, 2, 3), 1) == (1, 2, 3)
    assert len(_decorrelated_buckets(tuple(range(8)), 16)) == 8  # over 64 buckets: left alone


def test_unknown_mode():
    with pytest.raises(ValueError, match="routing mode"):
        plan(fattree(2), "valiant")
