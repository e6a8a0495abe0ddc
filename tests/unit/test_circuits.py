"""c-Through's circuit decisions: demand between racks from the ToRs' route counters, the
matching that places the circuits, and the dark/light steps of a change."""
import pytest

from controllers.circuits import check_circuits, choose, rack_demand, transition
from controllers.fabric_routing import circuit_plan
from topologies import hybrid


def test_demand_per_rack_pair_from_route_counters():
    topo = hybrid(racks=3, hosts_per_rack=2)
    e1, e2 = topo.switch("e1").dpid, topo.switch("e2").dpid
    ip = {h.name: h.ip for h in topo.hosts}  # h1 h2 rack 0, h3 h4 rack 1, h5 h6 rack 2
    route, circuit = 100, 103
    before = {(e1, ip["h3"], route): 1000, (e1, ip["h5"], route): 50,
              (e1, ip["h5"], circuit): 9000}
    after = {(e1, ip["h3"], route): 5000, (e1, ip["h4"], route): 700,
             (e1, ip["h5"], route): 60, (e1, ip["h2"], route): 999, (e2, ip["h1"], route): 300}
    # the circuit entry towards h5 went away (its circuit went dark): nothing more from it,
    # and the route entry's 10 new bytes; traffic inside rack 0 (h2) is no rack pair's
    assert rack_demand(topo, before, after) == {(0, 1): 4700, (0, 2): 10, (1, 0): 300}
    # an entry whose count went down was replaced: all of it is new
    assert rack_demand(topo, {(e1, ip["h3"], circuit): 500},
                       {(e1, ip["h3"], circuit): 200}) == {(0, 1): 200}


def test_the_busiest_pairs_get_the_circuits():
    demand = {(0, 1): 100, (1, 0): 50, (2, 3): 120, (0, 2): 200}
    # (0,2) alone is the heaviest pair, but (0,1) + (2,3) carry more together
    assert choose(demand, racks=4, ports=1) == ((0, 1, 0), (2, 3, 0))
    # two ports: the second matching gets the pairs left
    assert choose(demand, racks=4, ports=2) == ((0, 1, 0), (0, 2, 1), (2, 3, 0))
    assert choose({}, racks=4, ports=1) == ()
    assert choose({}, racks=4, ports=1, installed=((0, 1, 0),)) == ((0, 1, 0),)  # idle: kept
    assert choose({(0, 9): 5}, racks=4, ports=1) == ()  # no such rack


def test_hold_keeps_circuits_unless_clearly_beaten():
    installed = ((0, 1, 0),)
    demand = {(0, 1): 100, (2, 3): 30, (0, 2): 120}  # best: (0,2) alone (120), or (0,1)+(2,3)
    assert choose(demand, 4, 1) == ((0, 1, 0), (2, 3, 0))
    shifted = {(0, 1): 100, (1, 2): 140}
    assert choose(shifted, 4, 1) == ((1, 2, 0),)
    assert choose(shifted, 4, 1, installed, hold=1.5) == installed  # 140 <= 1.5 x 100
    assert choose({(0, 1): 10, (1, 2): 140}, 4, 1, installed, hold=1.5) == ((1, 2, 0),)


def test_a_port_carries_one_circuit():
    with pytest.raises(ValueError, match="rack 2's port 0 already carries a circuit"):
        check_circuits(hybrid(racks=4), ((0, 2, 0), (2, 3, 0)))
    with pytest.raises(ValueError, match="rack 1's port 0 already carries a circuit"):
        check_circuits(hybrid(racks=4), ((0, 1, 0), (1, 2, 0)))
    check_circuits(hybrid(racks=4, circuits=2), ((0, 1, 0), (1, 2, 1)))


def test_a_change_goes_dark_then_lights_after_the_dark_time():
    old, new = ((0, 1, 0), (2, 3, 0)), ((0, 3, 0), (1, 2, 0))
    steps = transition(10.0, old, new, 0.025)
    assert [(s.at, s.kind, s.circuits) for s in steps] == [
        (10.0, "dark", ()), (10.025, "light", ((0, 3, 0), (1, 2, 0)))]
    kept = transition(5.0, old, ((0, 1, 0),), 0.01)
    assert kept[0].circuits == ((0, 1, 0),) and kept[1].circuits == ((0, 1, 0),)
    assert transition(1.0, old, tuple(reversed(old)), 0.01) == []


def test_circuit_plan_refuses_a_port_twice():
    topo = hybrid(racks=4)
    with pytest.raises(ValueError, match="racks are 0..3"):
        circuit_plan(topo, [(0, 4, 0)])
    with pytest.raises(ValueError, match="already carries"):
        circuit_plan(topo, [(0, 1, 0), (1, 2, 0)])
