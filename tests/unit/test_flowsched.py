"""Hedera's pure scheduling core: demand estimation worked by hand, Global First Fit."""
import pytest

from controllers.flowsched import (
    Reservations,
    estimate_demands,
    global_first_fit,
    is_elephant,
    overload,
    simulated_annealing,
)
from topologies import build
from topologies.graph import shortest_paths


def test_elephants_are_flows_above_a_tenth_of_the_nic():
    assert is_elephant(1.1e6, 10e6) and not is_elephant(1.0e6, 10e6)


def test_demands_worked_by_hand_in_the_form_of_the_papers_figure_7():
    # A sends to B, C and D; B sends two flows to A; C sends one to A; D one to C.
    flows = [("A", "B"), ("A", "C"), ("A", "D"), ("B", "A"), ("B", "A"), ("C", "A"),
             ("D", "C")]
    # Round 1, senders: A's flows 1/3 each, B's 1/2 each, C->A 1, D->C 1.
    # Receivers: C gets 1/3 + 1 > 1; A->C (1/3) is below the equal share 1/2, so it is
    # sender-limited and D->C gets the rest, 2/3 (converged). A gets 1/2 + 1/2 + 1 > 1 and
    # none is below 1/3: all three get 1/3 (converged). Round 2 changes nothing.
    d = estimate_demands(flows)
    assert d == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 2 / 3])


def test_a_sender_takes_back_what_a_congested_receiver_cannot_use():
    # S1 splits between R1 and R2; R2 also receives from S2, S3, S4 (each alone on its NIC).
    flows = [("S1", "R1"), ("S1", "R2"), ("S2", "R2"), ("S3", "R2"), ("S4", "R2")]
    # Round 1: S1's flows 1/2, the others 1. R2 receives 3.5: all four receiver-limited at
    # 1/4. Round 2: S1 has 1/4 converged, so S1->R1 rises to 3/4. Round 3: no change.
    assert estimate_demands(flows) == pytest.approx([3 / 4, 1 / 4, 1 / 4, 1 / 4, 1 / 4])


def test_demand_estimation_on_patterns():
    assert estimate_demands([("a", "x"), ("b", "x"), ("c", "x"), ("d", "x")]) == \
        pytest.approx([0.25] * 4)  # incast: the receiver's NIC split four ways
    assert estimate_demands([(i, (i + 1) % 8) for i in range(8)]) == pytest.approx([1.0] * 8)
    assert estimate_demands([]) == []


def test_global_first_fit_moves_the_second_elephant_off_a_full_uplink():
    ft = build("fattree", k=4)
    res = Reservations()
    p1, p2 = shortest_paths(ft, "h1", "h13"), shortest_paths(ft, "h2", "h14")
    placed = global_first_fit([("f1", 1.0, p1), ("f2", 1.0, p2)], res)
    assert placed[0].path == p1[0]  # e1 -> a1 -> c1
    # f2's first two paths climb e1 -> a1, which f1 fills; the third goes through a2
    assert placed[1].path == p2[2] and placed[1].path[2] == "a2"
    assert res.used[("e1", "a1")] == pytest.approx(1.0)


def test_global_first_fit_leaves_a_flow_no_path_can_hold():
    ft = build("fattree", k=4)
    res = Reservations()
    paths = shortest_paths(ft, "h1", "h13")
    placed = global_first_fit([("a", 0.6, paths), ("b", 0.6, paths), ("c", 0.6, paths)], res)
    # h1's own link (h1 -> e1) holds only one 0.6 flow: the others cannot be placed
    assert placed[0].path == paths[0]
    assert [p.path for p in placed[1:]] == [None, None]
    res.release(placed[0].path, 0.6)
    assert all(v == pytest.approx(0.0) for v in res.used.values())
    # capacity per link is configurable (a core link twice a NIC's rate)
    fast = Reservations(capacity={("a1", "c1"): 2.0})
    assert fast.fits(paths[0], 1.0)


def _two_links():
    # two parallel links s -> x -> t and s -> y -> t; every flow may take either
    return [["s", "x", "t"], ["s", "y", "t"]], {("s", "x"): 1.0, ("x", "t"): 1.0,
                                               ("s", "y"): 1.0, ("y", "t"): 1.0}


def test_global_first_fit_can_strand_a_flow_that_annealing_places():
    paths, cap = _two_links()
    flows = [("f1", 0.4, paths), ("f2", 0.4, paths), ("f3", 0.6, paths), ("f4", 0.6, paths)]
    res = Reservations(capacity=cap)
    placed = global_first_fit(flows, res)
    # first fit: f1 and f2 on x (0.8), f3 on y (0.6); f4 fits on neither (0.2 and 0.4 left)
    assert [p.path for p in placed] == [tuple(paths[0]), tuple(paths[0]), tuple(paths[1]),
                                        None]
    # annealing from that state with f4 forced onto x (1.4 there: 0.4 exceeded on s-x and
    # x-t) finds the assignment GFF missed: 0.4 + 0.6 on each link
    start = [(d, paths, i) for (_, d, _), i in zip(flows, [0, 0, 1, 0])]
    state, energy = simulated_annealing(start, cap, iterations=500, seed=1)
    assert energy == pytest.approx(0.0)
    load = {0: 0.0, 1: 0.0}
    for (_, d, _), i in zip(flows, state):
        load[i] += d
    assert load[0] == pytest.approx(1.0) and load[1] == pytest.approx(1.0)


def test_annealing_moves_nothing_when_nothing_is_exceeded():
    paths, cap = _two_links()
    start = [(0.5, paths, 0), (0.5, paths, 0), (0.9, paths, 1)]
    for seed in range(5):
        assert simulated_annealing(start, cap, iterations=300, seed=seed) == ([0, 0, 1], 0.0)


def test_annealing_energy_is_the_exceeded_capacity_and_runs_are_repeatable():
    assert overload({("a", "b"): 1.5, ("b", "c"): 0.5, ("c", "d"): 2.0},
                    {("c", "d"): 2.5}) == pytest.approx(0.5)
    ft = build("fattree", k=4)
    # stride 8 from pod 0 and 1 (h1-h8 -> h9-h16): a whole NIC each, 4 paths each
    flows = [(1.0, shortest_paths(ft, f"h{i}", f"h{i + 8}"), 0) for i in range(1, 9)]
    a = simulated_annealing(flows, iterations=2000, seed=7)
    assert a == simulated_annealing(flows, iterations=2000, seed=7)
    # all eight on their first path, through c1: each of the four edge up links carries two
    # (1 exceeded each), a1 -> c1 and a3 -> c1 four (3 each), and the way down mirrors it:
    # 2 x (4 x 1 + 2 x 3) = 20
    start = {}
    for d, paths, i in flows:
        for l in zip(paths[i], paths[i][1:]):
            start[l] = start.get(l, 0.0) + d
    assert overload(start, {}) == pytest.approx(20.0)
    assert a[1] == pytest.approx(0.0)  # a perfect placement exists (a full bisection)


def test_hedera_plan_detects_new_tcp_flows_at_host_ports_only():
    from controllers import routing
    ft = build("fattree", k=4)
    p = routing.plan(ft, "hedera")
    detect = [r for r in p.rules if r.priority == routing.PRIORITY_DETECT]
    # per host port and destination: the packet takes its route and a copy is sent up
    assert len(detect) == 16 * 15 and all(r.to_controller for r in detect)
    e1 = ft.node("e1").dpid
    routes = {dict(r.match)["ipv4_dst"]: r for r in p.for_switch(e1)[1]
              if r.priority == routing.PRIORITY_ROUTE}
    for r in detect:
        if r.dpid == e1:
            route = routes[dict(r.match)["ipv4_dst"]]
            assert (r.group_id, r.out_port) == (route.group_id, route.out_port)
            assert not r.is_drop
    # a flow's counting entry does what the ECMP route does there: the select group
    entry = routing.flow_entry(p, e1, ("10.0.0.1", ft.node("h13").ip, 6, 40000, 5201), 10)
    assert entry.group_id is not None and entry.priority == routing.PRIORITY_FLOW
    assert dict(entry.match)["tcp_src"] == 40000
    with pytest.raises(ValueError):
        routing.plan(build("bcube", n=4, k=1), "hedera")


def test_path_rules_install_from_the_last_switch_back():
    from controllers import routing
    ft = build("fattree", k=4)
    path = shortest_paths(ft, "h1", "h13")[2]  # h1 e1 a2 c3 a? e? h13
    rules = routing.path_rules(ft, path, ("a", "b", 6, 1, 2), 10)
    assert [r.dpid for r in rules] == [ft.node(n).dpid for n in reversed(path[1:-1])]
    # each switch sends towards the next node of the path
    for rule, (here, nxt) in zip(reversed(rules), zip(path[1:-1], path[2:])):
        assert ft.peer(here, rule.out_port)[0] == nxt
    # the ingress switch's entry is the flow's counting entry, modified in place
    assert rules[-1].priority == routing.PRIORITY_FLOW
    assert {r.priority for r in rules[:-1]} == {routing.PRIORITY_PLACED}


def test_scheduler_places_two_colliding_elephants_on_disjoint_uplinks():
    from controllers.flowsched import HederaScheduler
    ft = build("fattree", k=4)
    nic = {h.name: 10e6 for h in ft.hosts}
    sched = HederaScheduler(lambda s, d: shortest_paths(ft, s, d), nic, expire_s=3)
    f1, f2, mouse = ("ip1", "ip13", 6, 1, 5201), ("ip2", "ip14", 6, 2, 5201), \
        ("ip3", "ip4", 6, 3, 80)
    sched.observe(0.0, {f1: ("h1", "h13", 0), f2: ("h2", "h14", 0), mouse: ("h3", "h4", 0)})
    assert sched.schedule() == []  # no rates yet
    # both share one uplink under the hash path: 5 Mb/s each; the mouse sends 0.5 Mb/s
    sched.observe(2.0, {f1: ("h1", "h13", 1_250_000), f2: ("h2", "h14", 1_250_000),
                        mouse: ("h3", "h4", 125_000)})
    assert sorted(sched.elephants()) == sorted([f1, f2])
    moves = {m.flow: m for m in sched.schedule()}
    assert set(moves) == {f1, f2}
    assert moves[f1].demand == pytest.approx(1.0)  # each NIC-limited: a whole link
    assert moves[f1].path[2] != moves[f2].path[2]  # different aggregation switches
    # next period: already placed, nothing moves; their reservations stay
    sched.observe(4.0, {f1: ("h1", "h13", 3_600_000), f2: ("h2", "h14", 3_600_000)})
    assert sched.schedule() == []
    assert sched.reservations.used[("e1", moves[f1].path[2])] == pytest.approx(1.0)
    # a flow that stops being seen releases its path
    sched.observe(8.0, {f2: ("h2", "h14", 6_000_000)})
    assert f1 not in sched.flows
    assert sched.reservations.used[("e1", moves[f1].path[2])] == pytest.approx(0.0)


def test_an_ended_elephant_frees_its_path_for_the_next_one_at_once():
    """The next traffic pattern's elephants must not wait for the last one's flows to
    expire: a placed flow that no longer sends releases its reservation in the next period."""
    from controllers.flowsched import HederaScheduler
    ls = build("leafspine", spines=1, leaves=3, hosts_per_leaf=2, host_rate=10, uplink_rate=10)
    nic = {h.name: 10e6 for h in ls.hosts}
    sched = HederaScheduler(lambda s, d: shortest_paths(ls, s, d), nic, expire_s=60)
    old, new = ("ip1", "ip3", 6, 1, 5201), ("ip2", "ip5", 6, 2, 5201)  # both up l1 -> sp1
    sched.observe(0.0, {old: ("h1", "h3", 0)})
    sched.observe(2.0, {old: ("h1", "h3", 2_500_000)})
    assert [m.flow for m in sched.schedule()] == [old]  # the one uplink reserved in full
    # old's entries timed out (it is no longer in the counters); new starts on the uplink
    sched.observe(4.0, {new: ("h2", "h5", 0)})
    assert sched.schedule() == []
    sched.observe(6.0, {new: ("h2", "h5", 2_500_000)})
    assert old in sched.flows  # not expired yet, but no longer an elephant
    moves = sched.schedule()
    assert [m.flow for m in moves] == [new]  # placed now: old's reservation was released
    assert sched.reservations.used[("l1", "sp1")] == pytest.approx(1.0)


def test_annealing_scheduler_places_and_then_keeps_colliding_elephants():
    from controllers.flowsched import HederaScheduler
    ft = build("fattree", k=4)
    nic = {h.name: 10e6 for h in ft.hosts}
    sched = HederaScheduler(lambda s, d: shortest_paths(ft, s, d), nic, expire_s=60,
                            placement="annealing", iterations=500, seed=3)
    flows = {("ip%d" % i, "ip%d" % (i + 8), 6, i, 5201): (f"h{i}", f"h{i + 8}")
             for i in range(1, 9)}
    sched.observe(0.0, {k: (s, d, 0) for k, (s, d) in flows.items()})
    sched.observe(2.0, {k: (s, d, 2_500_000) for k, (s, d) in flows.items()})
    moves = sched.schedule()
    assert {m.flow for m in moves} == set(flows)  # all were on hash paths
    assert sched.last_energy[1] == pytest.approx(0.0)
    assert max(sched.reservations.used.values()) == pytest.approx(1.0)
    # the next period, the same demands: every flow keeps its path
    sched.observe(4.0, {k: (s, d, 5_000_000) for k, (s, d) in flows.items()})
    assert sched.schedule() == [] and sched.last_energy == (0.0, 0.0)
    with pytest.raises(ValueError, match="placement"):
        HederaScheduler(lambda s, d: [], nic, placement="tabu")


def policy_of(data: dict):
    """A policy as a run builds it: the spec's section through the strict loader."""
    from controllers.priority import make_policy
    from testbed.config.controller import FlowPriority
    from testbed.config.loader import from_data
    return make_policy(from_data(FlowPriority, data, "controller.flow_priority"))


def test_priority_policies():
    from controllers.priority import FlowInfo
    f = FlowInfo(("10.0.0.1", "10.0.0.2", 6, 40000, 5201), "h1", "h2")
    assert policy_of({"policy": "none"}) is None
    by_port = policy_of({"policy": "by_port", "ports": {"5201": 46}, "default": 0})
    assert by_port.dscp(f) == 46
    assert by_port.dscp(FlowInfo(("a", "b", 6, 1, 80), "h1", "h2")) == 0
    job = policy_of({"policy": "by_hosts", "hosts": ["h1", "h2"], "dscp": 34})
    # the spec's default (None) leaves what the host marked on flows outside the set
    assert job.dscp(f) == 34 and job.dscp(FlowInfo(f.key, "h1", "h3")) is None
    job0 = policy_of({"policy": "by_hosts", "hosts": ["h1", "h2"], "dscp": 34, "default": 0})
    assert job0.dscp(FlowInfo(f.key, "h1", "h3")) == 0
    small = policy_of({"policy": "small_first", "threshold_bytes": 100_000, "high": 46})
    assert small.dscp(f) == 46  # new flows start high
    assert small.dscp(FlowInfo(f.key, "h1", "h2", bytes=100_000)) == 0  # then demoted


def test_a_plugin_supplies_its_own_policy(tmp_path):
    from controllers.priority import FlowInfo
    plugin = tmp_path / "mypolicy.py"
    plugin.write_text(
        "from controllers.flowsched import PriorityPolicy\n"
        "class EvenPorts(PriorityPolicy):\n"
        "    def __init__(self, dscp):\n"
        "        self.value = dscp\n"
        "    def dscp(self, flow):\n"
        "        return self.value if flow.ports[1] % 2 == 0 else None\n")
    policy = policy_of({"policy": "plugin", "plugin": f"{plugin}:EvenPorts",
                        "args": {"dscp": 26}})
    assert policy.dscp(FlowInfo(("a", "b", 6, 1, 5202), "h1", "h2")) == 26
    assert policy.dscp(FlowInfo(("a", "b", 6, 1, 5201), "h1", "h2")) is None


RYU_CHECK = """
from controllers.apps import ofmsgs
from controllers import routing
from controllers.apps.compat import ofproto_v1_3 as ofp, ofproto_v1_3_parser as parser

class DP:
    ofproto, ofproto_parser = ofp, parser
rule = routing.Rule(dpid=1, priority=120, match=(), group_id=3, set_dscp=46)
acts = ofmsgs.actions(DP(), rule)
assert acts[0].key == "ip_dscp" and acts[0].value == 46, acts
assert acts[1].group_id == 3, acts
copy = routing.Rule(dpid=1, priority=110, match=(), to_controller=True, out_port=2)
names = [type(a).__name__ for a in ofmsgs.actions(DP(), copy)]
assert names == ["OFPActionOutput", "OFPActionOutput"], names  # the controller's copy, then the route
"""


def test_a_dscp_marking_rule_renders_set_field_first():
    # In a child process: importing Ryu monkey-patches this process with eventlet, which
    # removes select.poll that Mininet needs in the integration tests run after this one.
    import subprocess
    import sys
    from pathlib import Path
    done = subprocess.run([sys.executable, "-c", RYU_CHECK], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
