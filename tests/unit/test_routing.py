"""Routing decisions traced hop by hop through a fake flow table: every pair reaches its
destination, no path loops, and ECMP uses every equal-cost path."""
import pytest

from controllers import trace
from controllers.routing import PRIORITY_ARP, arp_reply, decorrelated_buckets, hash_stages, plan
from topologies import bcube, dumbbell, fattree, leafspine, nonblocking
from topologies.graph import count_shortest_paths


class FakeFabric:
    """A routing plan applied: flow tables per switch, kernel routes per relay host, direct
    links between servers (controllers/trace.py); `paths` raises on a drop or a loop."""

    def __init__(self, topo, p):
        self.topo, self.plan = topo, p

    def paths(self, src, dst):
        """All paths (node lists) a packet from src to dst can take."""
        found = trace.paths(self.topo, self.plan, src, dst)
        assert abs(sum(found.values()) - 1) < 1e-9
        return [list(path) for path in found]


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
    assert decorrelated_buckets((1, 2, 3), 1) == (1, 2, 3)
    assert len(decorrelated_buckets(tuple(range(8)), 16)) == 8  # over 64 buckets: left alone


def test_udp_hashed_on_its_ports_takes_the_same_paths_as_ecmp():
    # every select-group route gets a UDP twin choosing among the same ports by a hash
    # seeded per stage; UDP then spreads exactly as TCP does over the shortest paths
    from controllers import failover
    from controllers.plans import IP_PROTO_UDP, PRIORITY_ROUTE, PRIORITY_UDP_HASH
    topo = fattree(4)
    base, hashed = plan(topo, "ecmp"), failover.plan(topo, "ecmp", udp_hash=True)
    select = {(g.dpid, g.group_id): g for g in base.groups}
    twins = [r for r in hashed.rules if r.priority == PRIORITY_UDP_HASH]
    routes = [r for r in base.rules if r.priority == PRIORITY_ROUTE and r.group_id]
    assert len(twins) == len(routes) > 0
    stage = hash_stages(topo)
    for route, twin in zip(routes, twins):
        assert dict(twin.match) == {**dict(route.match), "ip_proto": IP_PROTO_UDP}
        assert twin.hash_ports == select[(route.dpid, route.group_id)].ports
        assert twin.hash_basis == stage[topo.switch_by_dpid(twin.dpid).name]
        assert not twin.is_drop
    for src, dst in (("h1", "h16"), ("h1", "h2"), ("h5", "h9")):
        tcp = trace.paths(topo, hashed, src, dst)
        assert trace.paths(topo, hashed, src, dst, ip_proto=IP_PROTO_UDP) == tcp
        assert tcp == trace.paths(topo, base, src, dst)
    # single-path routes have nothing to hash
    single = failover.plan(topo, "single", udp_hash=True)
    assert not any(r.priority == PRIORITY_UDP_HASH for r in single.rules)


def test_unknown_mode():
    with pytest.raises(ValueError, match="routing mode"):
        plan(fattree(2), "valiant")
