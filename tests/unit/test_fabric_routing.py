"""The survey fabrics' routings traced hop by hop through the fake flow table and kernel
routes of test_routing: every pair arrives, on the path the fabric's paper prescribes."""
import pytest

from controllers.fabric_routing import cell_route, circuit_plan
from controllers.fabric_routing import plan as native_plan
from controllers.routing import plan
from topologies import dcell, ficonn, hybrid, mdcube, rail, torus, vl2
from topologies.graph import count_shortest_paths, distances_to
from topologies.kinds import OWN_ROUTINGS, own_routing, routings
from topologies.survey import torus_coords

from .test_routing import FakeFabric

SURVEY = [dcell(4, 1), dcell(3, 1), dcell(2, 2), ficonn(4, 1), ficonn(4, 2), ficonn(2, 2),
          mdcube(2, 1, 2, 2), mdcube(2, 1, 4, 1), mdcube(3, 1, 3, 1), vl2(4, 4, 4),
          vl2(6, 4, 2), torus(4, 2), torus(sides="3x3x2"), torus(sides="5x3"),
          torus(sides="2x2x2x2"), rail(4, 4, 2), rail(2, 3, 1), hybrid(4, 4)]


def ident(t):
    return f"{t.kind}{dict(t.params)}"


def pairs(topo):
    return [(s.name, d.name) for s in topo.hosts for d in topo.hosts if s is not d]


@pytest.mark.parametrize("topo", SURVEY, ids=ident)
def test_ecmp_reaches_every_pair_on_every_shortest_path(topo):
    """Shortest-path routing, the baseline on every fabric (a hybrid's: its packet part)."""
    fab = FakeFabric(topo, plan(topo, "ecmp"))
    for src, dst in pairs(topo):
        paths = fab.paths(src, dst)
        assert paths and all(p[-1] == dst for p in paths)
        if topo.kind != "hybrid":
            assert len({tuple(p) for p in paths}) == count_shortest_paths(topo, src, dst)
            assert all(len(p) - 1 == distances_to(topo, dst)[src] for p in paths)
        else:
            assert all("o1" not in p for p in paths)


@pytest.mark.parametrize("topo", SURVEY, ids=ident)
def test_own_routing_reaches_every_pair_on_one_path(topo):
    for mode in OWN_ROUTINGS[topo.kind]:
        fab = FakeFabric(topo, plan(topo, mode))
        for src, dst in pairs(topo):
            paths = fab.paths(src, dst)
            if mode in ("vlb", "nic"):  # hashed over intermediates / spines
                assert paths and all(p[-1] == dst for p in paths)
            else:
                assert len(paths) == 1, (mode, src, dst, paths)


def servers_on(path, topo):
    return [n for n in path if topo.is_host(n)]


@pytest.mark.parametrize("topo", [dcell(4, 1), dcell(2, 2), ficonn(4, 2)], ids=ident)
def test_cell_routing_is_the_papers_recursion(topo):
    """The path goes through the one link between the two sub-cells of the highest level
    at which the servers differ, and the kernel routes follow it hop by hop (every suffix
    of a path is the path from there, so next hops per destination suffice)."""
    fab = FakeFabric(topo, plan(topo, topo.kind))
    for src, dst in pairs(topo):
        path = cell_route(topo, src, dst)
        assert servers_on(fab.paths(src, dst)[0], topo) == path
        for i, here in enumerate(path[1:-1], 1):
            assert cell_route(topo, here, dst) == path[i:]
    # DCell(4, 1): h1 (cell 0, server 0) to h20 (cell 4, server 3): the 0-4 link is
    # cell 0's server 3 (h4) to cell 4's server 0 (h17)
    if topo.kind == "dcell" and dict(topo.params)["n"] == 4:
        assert cell_route(topo, "h1", "h20") == ["h1", "h4", "h17", "h20"]


def test_dcell_routing_is_at_most_the_papers_bound_and_not_always_shortest():
    """Guo et al.: DCellRouting's paths are at most 2^(k+1) - 1 server-to-server hops;
    they are not always shortest (the paper's Table: longer on average than shortest)."""
    topo = dcell(2, 2)
    longer = 0
    for src, dst in pairs(topo):
        path = cell_route(topo, src, dst)
        assert len(path) - 1 <= 2 ** 3 - 1
        shortest = FakeFabric(topo, plan(topo, "ecmp")).paths(src, dst)[0]
        longer += len(path) > len(servers_on(shortest, topo))
    assert longer > 0


def test_mdcube_corrects_containers_one_dimension_at_a_time():
    topo = mdcube(2, 1, 2, 2)
    fab = FakeFabric(topo, plan(topo, "mdcube"))
    for src, dst in pairs(topo):
        path = fab.paths(src, dst)[0]
        coords = [(topo.host(h).label("m0"), topo.host(h).label("m1"))
                  for h in servers_on(path, topo)]
        changes = [(a, b) for a, b in zip(coords, coords[1:]) if a != b]
        goal = (topo.host(dst).label("m0"), topo.host(dst).label("m1"))
        start = coords[0]
        assert len(changes) == (start[0] != goal[0]) + (start[1] != goal[1])
        for a, b in changes:  # one coordinate per crossing, m0 first, over two switches
            assert (a[0] != b[0]) + (a[1] != b[1]) == 1
            if start[0] != goal[0] and a[0] == start[0]:
                assert b[0] == goal[0]


def test_torus_dimension_order_routing():
    topo = torus(sides="5x3")
    fab = FakeFabric(topo, plan(topo, "dor"))
    for src, dst in pairs(topo):
        path = [n for n in fab.paths(src, dst)[0] if not topo.is_host(n)]
        coords = [torus_coords(topo, n) for n in path]
        dims = [next(d for d in range(2) if a[d] != b[d]) for a, b in zip(coords, coords[1:])]
        assert dims == sorted(dims)  # dimension 0 done before dimension 1 starts
        # each dimension the short way round: at most half the ring
        assert dims.count(0) <= 5 // 2 and dims.count(1) <= 3 // 2
        assert len(path) - 1 == distances_to(topo, dst)[src] - 2  # DOR is minimal


def test_vlb_bounces_every_inter_tor_flow_off_an_intermediate():
    topo = vl2(4, 4, 4)
    fab = FakeFabric(topo, plan(topo, "vlb"))
    for src, dst in pairs(topo):
        paths = fab.paths(src, dst)
        same_tor = topo.host(src).label("tor") == topo.host(dst).label("tor")
        for p in paths:
            roles = [topo.switch(n).role for n in p[1:-1]]
            assert roles == (["tor"] if same_tor else ["tor", "agg", "int", "agg", "tor"])
        if not same_tor:  # hashed over both uplinks and both intermediates
            assert {p[3] for p in paths} == {"i1", "i2"}
            assert len({p[2] for p in paths}) == 2
    # ToRs under one aggregation pair: shortest is 4 hops, VLB still goes up (6)
    assert distances_to(topo, "h5")["h1"] == 4
    assert all(len(p) == 7 for p in fab.paths("h1", "h5"))


def test_rail_aligned_routing_stays_on_one_rail():
    topo = rail(4, 4, 2)
    aligned = FakeFabric(topo, plan(topo, "rail"))
    own_nic = FakeFabric(topo, plan(topo, "nic"))
    for src, dst in pairs(topo):
        s, d = topo.host(src), topo.host(dst)
        for p in aligned.paths(src, dst):
            assert not any(n.startswith("sp") for n in p)
            if s.label("server") != d.label("server"):
                assert f"r{d.label('rail') + 1}" in p  # the destination's rail
        for p in own_nic.paths(src, dst):
            if s.label("server") != d.label("server"):
                assert p[2] == f"r{s.label('rail') + 1}"  # its own NIC's rail
                crosses = s.label("rail") != d.label("rail")
                assert any(n.startswith("sp") for n in p) == crosses


def test_circuits_carry_their_rack_pairs_only():
    topo = hybrid(4, 4, circuits=1)
    lit = FakeFabric(topo, circuit_plan(topo, [(0, 2, 0), (1, 3, 0)]))
    for src, dst in pairs(topo):
        a, b = topo.host(src).label("rack"), topo.host(dst).label("rack")
        path = lit.paths(src, dst)[0]
        on_circuit = {a, b} in ({0, 2}, {1, 3})
        assert ("o1" in path) == on_circuit
        assert ("c1" in path) == (a != b and not on_circuit)
    dark = FakeFabric(topo, circuit_plan(topo, []))
    assert all("o1" not in dark.paths(s, d)[0] for s, d in pairs(topo))


def test_modes_a_fabric_does_not_have_are_refused():
    with pytest.raises(ValueError, match="routing mode 'dor' is not one of a dcell fabric's "
                                         "\\(ecmp, single, dcell\\)"):
        plan(dcell(4, 1), "dor")
    with pytest.raises(ValueError, match="routing mode must be one of"):
        plan(torus(4, 2), "nonsense")
    with pytest.raises(ValueError, match="does not track flows"):
        native_plan(torus(4, 2), "dor", track=True)
    with pytest.raises(ValueError, match="'hedera' is not one of a hybrid fabric's"):
        plan(hybrid(), "hedera")


def test_every_kind_names_its_routings():
    assert routings("fattree") == ("ecmp", "single", "hedera")
    assert routings("bcube") == ("ecmp", "single")
    assert routings("torus") == ("ecmp", "single", "hedera", "dor")
    assert routings("hybrid") == ("ecmp", "single", "cthrough")
    assert own_routing("vl2", "own") == "vlb" and own_routing("fattree", "own") == "ecmp"
    assert own_routing("vl2", "single") == "single"
