import pytest

from topologies import (
    Topology,
    TopologyError,
    bcube,
    build,
    dumbbell,
    fattree,
    leafspine,
    nonblocking,
    oversubscription,
    parse_params,
)
from topologies.graph import bisection_mbps, count_shortest_paths, describe
from topologies.model import IFNAME_MAX, host_ip, ifname


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fattree_counts(k):
    t = fattree(k)
    assert len(t.hosts) == k ** 3 // 4
    assert len(t.switches) == 5 * k * k // 4
    roles = [s.role for s in t.switches]
    assert roles.count("core") == (k // 2) ** 2
    assert roles.count("agg") == roles.count("edge") == k * k // 2
    assert len(t.links) == 3 * k ** 3 // 4
    for s in t.switches:  # every switch has exactly k ports, numbered 1..k
        assert [p for p, _, _ in t.ports_of(s.name)] == list(range(1, k + 1)) or s.role == "core"


def test_fattree_ports_follow_convention():
    t = fattree(4)
    # edge ports 1..2 face hosts, 3..4 face aggregation; core port p+1 faces pod p
    assert all(t.is_host(peer) for p, peer, _ in t.ports_of("e1") if p <= 2)
    assert all(t.node(peer).role == "agg" for p, peer, _ in t.ports_of("e1") if p > 2)
    for port, peer, _ in t.ports_of("c1"):
        assert t.node(peer).label("pod") == port - 1


@pytest.mark.parametrize("k", [0, 1, 3, -2, "4", 4.0, True])
def test_fattree_rejects_bad_k(k):
    with pytest.raises(TopologyError, match="fattree: k"):
        fattree(k)


def test_identities_are_deterministic_and_unique():
    a, b = fattree(4), fattree(4)
    assert a == b
    t = fattree(6)
    assert len({h.ip for h in t.hosts}) == len(t.hosts)
    assert len({m for h in t.hosts for m in h.macs}) == len(t.hosts)
    assert len({s.dpid for s in t.switches}) == len(t.switches)
    assert t.hosts[0].ip == "10.0.0.1" and t.hosts[0].macs[0] == "02:00:00:00:00:01"


@pytest.mark.parametrize("topo", [fattree(4), leafspine(), bcube(4, 1), bcube(2, 2),
                                  nonblocking(5), dumbbell(2, 3)])
def test_json_round_trip(topo):
    assert Topology.from_json(topo.to_json()) == topo


@pytest.mark.parametrize("topo", [fattree(8), leafspine(4, 8, 16), bcube(4, 2), nonblocking(128)])
def test_interface_names_fit_kernel_limit(topo):
    assert max(len(name) for _, _, name in topo.interfaces()) <= IFNAME_MAX


def test_name_over_limit_is_rejected():
    from topologies.model import Builder
    b = Builder("custom", {})
    b.link(b.switch("spine_switch1", "spine"), b.host("h1"), 10)
    with pytest.raises(TopologyError, match="'spine_switch1-eth1' exceeds the kernel's 15-character"):
        b.build()


def test_too_many_hosts_is_rejected():
    with pytest.raises(TopologyError, match="hosts must be an integer in 1..4096"):
        nonblocking(100_000)
    with pytest.raises(TopologyError, match="k\\^3/4 = 4394 hosts is more than 4096"):
        fattree(26)  # refused before a single node is built
    with pytest.raises(TopologyError, match="host number 65536"):  # the addressing's own limit
        host_ip(65_536)


def test_leafspine_oversubscription_and_bisection():
    t = leafspine(spines=2, leaves=4, hosts_per_leaf=4, host_rate=100, uplink_rate=100)
    assert oversubscription(t) == 2.0
    assert bisection_mbps(t) == 400.0  # 2 leaves x 2 uplinks x 100 on each side
    assert len(t.hosts) == 16 and len(t.switches) == 6
    assert oversubscription(leafspine(4, 4, 4, 100, 100)) == 1.0


@pytest.mark.parametrize("n,k", [(4, 1), (2, 2), (3, 1), (2, 0)])
def test_bcube_counts(n, k):
    t = bcube(n, k)
    assert len(t.hosts) == n ** (k + 1)
    assert len(t.switches) == (k + 1) * n ** k
    for h in t.hosts:
        assert h.ports == k + 1 and h.relay
        # server port l faces a level-l switch
        for port, peer, _ in t.ports_of(h.name):
            assert t.node(peer).label("level") == port
    for s in t.switches:
        assert len(t.ports_of(s.name)) == n


def test_bcube_neighbours_differ_in_one_digit():
    t = bcube(4, 1)
    for s in t.switches:
        level = s.label("level")
        servers = [t.node(peer) for _, peer, _ in t.ports_of(s.name)]
        other = 1 - level
        assert len({h.label(f"d{other}") for h in servers}) == 1
        assert sorted(h.label(f"d{level}") for h in servers) == [0, 1, 2, 3]


def test_equal_cost_paths():
    t = fattree(4)
    assert count_shortest_paths(t, "h1", "h2") == 1  # same edge
    assert count_shortest_paths(t, "h1", "h3") == 2  # same pod
    assert count_shortest_paths(t, "h1", "h16") == 4  # other pod: (k/2)^2
    assert count_shortest_paths(fattree(6), "h1", "h54") == 9
    assert count_shortest_paths(leafspine(3, 2, 1), "h1", "h2") == 3
    b = bcube(4, 1)  # servers differing in both digits: 2 orders of correction
    assert count_shortest_paths(b, "h1", "h6") == 2
    assert count_shortest_paths(b, "h1", "h2") == 1


def test_bisection():
    assert bisection_mbps(fattree(4, rate_mbps=10)) == 80.0
    assert bisection_mbps(nonblocking(16, 20)) == 160.0
    assert bisection_mbps(bcube(4, 1)) == 800.0  # N/2 links x 100


def test_describe_and_params():
    d = describe(fattree(4))
    assert d["hosts"] == 16 and d["equal_cost_paths"] == 4 and d["path_hops"] == 6
    assert parse_params("fattree", ["4"]) == {"k": 4}
    assert parse_params("leafspine", ["spines=2", "host_rate=25.5"]) == {"spines": 2, "host_rate": 25.5}
    with pytest.raises(TopologyError, match="unknown topology kind"):
        build("dragonfly")
    with pytest.raises(TopologyError, match="unknown parameter 'kk'"):
        build("fattree", kk=4)
    with pytest.raises(TopologyError, match="rate_mbps"):
        fattree(4, rate_mbps=0)


def test_ifname():
    assert ifname("e1", 3) == "e1-eth3"
