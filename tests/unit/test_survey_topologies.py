"""The survey's other fabrics: counts against their papers' formulas, the wiring each
construction promises, bad parameters named, and the same plain data as every topology
(JSON round trip, interface names, Mininet's plan)."""
import math

import pytest

from topologies import (
    Topology,
    TopologyError,
    build,
    dcell,
    ficonn,
    hybrid,
    mdcube,
    parse_params,
    rail,
    torus,
    vl2,
)
from topologies.graph import describe, distances_to
from topologies.mnplan import mininet_plan
from topologies.model import IFNAME_MAX


def roles(t):
    out = {}
    for s in t.switches:
        out[s.role] = out.get(s.role, 0) + 1
    return out


def degree(t, node):
    return len(t.ports_of(node))


@pytest.mark.parametrize("n,k", [(2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (3, 2)])
def test_dcell_counts_follow_the_recurrence(n, k):
    """Guo et al.: t_k = g_k t_{k-1}, g_k = t_{k-1} + 1; t_k / n switches; every server has
    k+1 links (one per level), so t_k (k+1) link ends on servers."""
    t_ = n
    for _ in range(k):
        t_ = t_ * (t_ + 1)
    topo = dcell(n, k)
    assert len(topo.hosts) == t_
    assert roles(topo) == {"cell": t_ // n}
    assert len(topo.links) == t_ + k * t_ // 2
    assert all(degree(topo, h.name) == k + 1 for h in topo.hosts)
    assert all(h.relay for h in topo.hosts)


def test_dcell_joins_every_two_sub_cells_by_one_link_on_the_paper_servers():
    topo = dcell(4, 1)  # DCell_1: 5 DCell_0s of 4 servers
    cells = {}
    for link in topo.links:
        if topo.is_host(link.a) and topo.is_host(link.b):
            a, b = topo.host(link.a), topo.host(link.b)
            pair = tuple(sorted((a.label("c1"), b.label("c1"))))
            cells[pair] = cells.get(pair, 0) + 1
            i, j = pair  # sub-cell i's server j-1 with sub-cell j's server i
            lo, hi = (a, b) if a.label("c1") == i else (b, a)
            assert (lo.label("c0"), hi.label("c0")) == (j - 1, i)
            assert link.a_port == link.b_port == 1  # a server's port l is its level-l link
    assert cells == {(i, j): 1 for i in range(5) for j in range(i + 1, 5)}


@pytest.mark.parametrize("n,k", [(2, 1), (4, 1), (6, 1), (4, 2), (8, 2)])
def test_ficonn_counts_follow_the_recurrence(n, k):
    """Li et al.: t_k = t_{k-1} (t_{k-1}/2^k + 1); each server uses at most its two ports;
    a FiConn_l's sub-cells are joined pairwise by one link each."""
    t_, links = n, n
    for level in range(1, k + 1):
        g = t_ // 2 ** level + 1
        links = links * g + g * (g - 1) // 2  # the g sub-cells' links, plus level l's
        t_ *= g
    topo = ficonn(n, k)
    assert len(topo.hosts) == t_
    assert roles(topo) == {"cell": t_ // n}
    assert len(topo.links) == links
    assert all(degree(topo, h.name) <= 2 for h in topo.hosts)
    # the paper's rule: at level 1, the even servers of each FiConn_0 use their backup port
    f1 = ficonn(n, 1)
    assert {h.label("c0") for h in f1.hosts if degree(f1, h.name) == 2} == set(range(0, n, 2))


@pytest.mark.parametrize("n,k,m0,m1", [(2, 1, 2, 2), (2, 1, 4, 1), (3, 1, 3, 2), (2, 2, 3, 3)])
def test_mdcube_counts(n, k, m0, m1):
    """Wu et al.: containers are BCube(n, k); containers differing in one coordinate are
    joined once, switch to switch, through the switches' one spare port."""
    per, switches = n ** (k + 1), (k + 1) * n ** k
    topo = mdcube(n, k, m0, m1)
    assert len(topo.hosts) == per * m0 * m1
    assert roles(topo) == {"bcube": switches * m0 * m1}
    inter = m0 * m1 * ((m0 - 1) + (m1 - 1)) // 2
    assert len(topo.links) == per * (k + 1) * m0 * m1 + inter
    joined = [link for link in topo.links if not topo.is_host(link.a) and not topo.is_host(link.b)]
    assert len(joined) == inter and all(link.a_port == link.b_port == n + 1 for link in joined)
    assert all(degree(topo, s.name) <= n + 1 for s in topo.switches)
    for link in joined:  # the two containers differ in exactly one coordinate
        a, b = topo.switch(link.a), topo.switch(link.b)
        assert (a.label("m0") != b.label("m0")) + (a.label("m1") != b.label("m1")) == 1


@pytest.mark.parametrize("da,di,hpt", [(4, 4, 4), (6, 4, 2), (4, 6, 1), (8, 8, 20)])
def test_vl2_counts(da, di, hpt):
    """Greenberg et al.: di aggregation switches, da/2 intermediates, da di/4 ToRs with two
    uplinks each; every aggregation switch reaches every intermediate."""
    topo = vl2(da, di, hpt)
    tors = da * di // 4
    assert roles(topo) == {"int": da // 2, "agg": di, "tor": tors}
    assert len(topo.hosts) == hpt * tors
    assert len(topo.links) == hpt * tors + 2 * tors + di * da // 2
    for s in topo.switches:
        expect = {"int": di, "agg": da, "tor": hpt + 2}[s.role]
        assert degree(topo, s.name) == expect


@pytest.mark.parametrize("sides", ["4x4", "3x3", "5x3", "3x3x2", "4x4x4", "2x2x2x2", "2x5"])
def test_torus_counts_are_the_k_ary_n_cube_s(sides):
    dims = [int(x) for x in sides.split("x")]
    nodes = math.prod(dims)
    topo = torus(sides=sides)
    assert len(topo.hosts) == len(topo.switches) == nodes
    ring_links = sum(nodes if s > 2 else nodes // 2 for s in dims)
    assert len(topo.links) == nodes + ring_links
    expect_degree = 1 + sum(2 if s > 2 else 1 for s in dims)
    assert all(degree(topo, s.name) == expect_degree for s in topo.switches)
    # the diameter of a torus: the sum of the half sides, plus the two host links
    assert max(distances_to(topo, "h1").get(h.name) for h in topo.hosts) == \
        sum(s // 2 for s in dims) + 2


def test_torus_k_ary_n_cube_and_its_ports():
    assert torus(4, 2) == torus(sides="4x4")
    topo = torus(sides="4x4")
    # port 2 + 2d: a step up dimension d (wrapping); port 3 + 2d: a step down
    assert topo.neighbour("t1", 2) == "t2" and topo.neighbour("t1", 3) == "t4"
    assert topo.neighbour("t1", 4) == "t5" and topo.neighbour("t1", 5) == "t13"
    assert topo.neighbour("t1", 1) == "h1"


@pytest.mark.parametrize("servers,rails,spines", [(4, 4, 2), (2, 8, 4), (8, 2, 1)])
def test_rail_counts_and_rails(servers, rails, spines):
    topo = rail(servers, rails, spines)
    assert len(topo.hosts) == servers * rails
    assert roles(topo) == {"spine": spines, "rail": rails, "server": servers}
    assert len(topo.links) == 2 * servers * rails + rails * spines
    for s in range(servers):  # NIC i of every server is on rail leaf i
        for i in range(rails):
            assert topo.neighbour(f"sv{s + 1}", rails + 1 + i) == f"r{i + 1}"


def test_hybrid_counts_and_optical_ports():
    topo = hybrid(racks=4, hosts_per_rack=4, circuits=2, cores=2)
    assert roles(topo) == {"core": 2, "ocs": 1, "tor": 4}
    assert len(topo.hosts) == 16 and len(topo.links) == 16 + 4 * (2 + 2)
    for r in range(4):
        for c in range(2):
            link = topo.link_at("o1", 1 + r * 2 + c)
            assert link.a == f"e{r + 1}" and link.rate_mbps == 200.0


BAD = [
    (lambda: dcell(1, 1), "dcell: n must be an integer in 2.."),
    (lambda: dcell(4, 3), "dcell: t_3 for n=4 = 176820 hosts is more than 4096"),
    (lambda: ficonn(3, 1), "ficonn: n must be an even integer"),
    (lambda: ficonn(16, 2), "ficonn: t_2 for n=16 = 5328 hosts is more than 4096"),
    (lambda: mdcube(2, 1, 6, 1), "mdcube: m0=6, m1=1 need 5 inter-container links per "
                                 "container but a BCube\\(2, 1\\) container has only 4"),
    (lambda: mdcube(2, 1, 1, 1), "mdcube: m0 must be an integer in 2.."),
    (lambda: vl2(5, 4), "vl2: da must be an even integer"),
    (lambda: vl2(4, 3), "vl2: di must be an even integer"),
    (lambda: vl2(64, 64, 20), "vl2: hosts_per_tor x da di / 4 = 20 x 1024 = 20480 hosts"),
    (lambda: torus(4, 1), "torus: n must be an integer in 2.."),
    (lambda: torus(1, 2), "torus: k must be an integer in 2.."),
    (lambda: torus(sides="4x1"), "torus: sides '4x1' has a side below 2"),
    (lambda: torus(sides="4"), "torus: sides '4' has 1 dimension"),
    (lambda: torus(sides="4xa"), "torus: sides must look like"),
    (lambda: torus(sides="20x20x20"), "torus: 20x20x20 = 8000 hosts is more than 4096"),
    (lambda: rail(4, 0), "rail: rails must be an integer in 1.."),
    (lambda: hybrid(circuit_rate=0), "hybrid: circuit_rate must be a rate in Mb/s"),
    (lambda: hybrid(circuit_rate=-5), "hybrid: circuit_rate must be a rate in Mb/s"),
    (lambda: hybrid(racks=3, circuits=3), "hybrid: circuits must be in 1..2"),
]


@pytest.mark.parametrize("make,message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in
                                                    enumerate(BAD)])
def test_bad_parameters_are_named(make, message):
    with pytest.raises(TopologyError, match=message):
        make()


SIXTEEN = [dcell(4, 1), dcell(3, 1), ficonn(4, 1), mdcube(2, 1, 2, 2), mdcube(2, 1, 4, 1),
           vl2(4, 4, 4), torus(4, 2), torus(sides="3x3x2"), rail(4, 4, 2), hybrid(4, 4)]


@pytest.mark.parametrize("topo", SIXTEEN, ids=lambda t: f"{t.kind}{dict(t.params)}")
def test_plain_data_like_every_topology(topo):
    assert Topology.from_json(topo.to_json()) == topo
    assert build(topo.kind, **dict(topo.params)) == topo  # its params rebuild it
    assert max(len(name) for _, _, name in topo.interfaces()) <= IFNAME_MAX
    assert len({h.ip for h in topo.hosts}) == len(topo.hosts)
    assert len({m for h in topo.hosts for m in h.macs}) == sum(h.ports for h in topo.hosts)
    for h in topo.hosts:  # every port a host has is linked (Mininet makes only those)
        assert [p for p, _, _ in topo.ports_of(h.name)] == list(range(h.ports))
    plan = mininet_plan(topo)
    assert len(plan.links) == len(topo.links) and len(plan.hosts) == len(topo.hosts)
    d = describe(topo)
    assert d["hosts"] == len(topo.hosts) and d["path_hops"] is not None


def test_cli_parameters():
    assert parse_params("torus", ["sides=3x3x2"]) == {"sides": "3x3x2"}
    assert parse_params("dcell", ["4", "1"]) == {"n": 4, "k": 1}
    assert parse_params("hybrid", ["racks=4", "circuit_rate=400"]) == {"racks": 4,
                                                                      "circuit_rate": 400}
