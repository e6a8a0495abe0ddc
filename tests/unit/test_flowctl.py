"""The flow app's decisions without Ryu: given the time and the switches' counters, which
entries to send, in which order, and what to log (controllers/flowctl.py)."""
from __future__ import annotations

import dataclasses

from controllers import routing
from controllers.flowctl import FlowControl, FlowStat, link_capacities, nic_rates_bps
from testbed.config.controller import ControllerConfig, FlowPriority, HederaSpec, phase_config
from testbed.config.loader import dump_json
from topologies import fattree
from topologies.model import at_rate

TOPO = at_rate(fattree(4), 10)


def config(**changes) -> ControllerConfig:
    base = ControllerConfig(topology_json="t.json", state_json="s.json", routing="hedera",
                            results_dir=".", hedera=HederaSpec(period_s=1.0, base="single"))
    return dataclasses.replace(base, **changes)


def key(src: str, dst: str, sport: int = 40000) -> tuple:
    return (TOPO.host(src).ip, TOPO.host(dst).ip, 6, sport, 5201)


def stat(ctl: FlowControl, k: tuple, nbytes: int) -> FlowStat:
    src = ctl.host_of_ip[k[0]]
    edge = TOPO.switch(TOPO.neighbour(src, 0)).dpid
    return FlowStat(edge, routing.PRIORITY_FLOW,
                    {"ipv4_src": k[0], "ipv4_dst": k[1], "tcp_src": k[3], "tcp_dst": k[4]},
                    nbytes)


def test_capacities_are_in_nic_fractions():
    nic = nic_rates_bps(TOPO)
    assert set(nic) == {h.name for h in TOPO.hosts} and set(nic.values()) == {10e6}
    assert set(link_capacities(TOPO, nic).values()) == {1.0}


def test_a_new_flow_gets_its_counting_entry_and_the_policy_dscp():
    ctl = FlowControl(TOPO, config(routing="ecmp", flow_priority=FlowPriority(
        policy="by_hosts", hosts=["h1", "h2"], dscp=34)))
    k = key("h1", "h2")
    edge = TOPO.switch(TOPO.neighbour("h1", 0)).dpid
    mod, records = ctl.new_flow(100.0, edge, k)
    assert mod is not None and not mod.modify
    assert mod.rule.priority == routing.PRIORITY_FLOW and mod.rule.set_dscp == 34
    assert records == [{"t": 100.0, "flow": "/".join(map(str, k)), "dscp": 34, "why": "new"}]
    outside = key("h1", "h9")
    mod, _ = ctl.new_flow(100.0, edge, outside)
    assert mod.rule.set_dscp is None  # the spec's default leaves the host's marking


def test_hedera_moves_an_elephant_last_switch_first():
    ctl = FlowControl(TOPO, config())
    a, b = key("h1", "h9"), key("h2", "h10")  # both leave pod 1 on the single path
    assert ctl.period(0.0, [stat(ctl, a, 0), stat(ctl, b, 0)]).moves == []
    result = ctl.period(1.0, [stat(ctl, a, 1_250_000), stat(ctl, b, 1_250_000)])  # 10 Mb/s
    assert len(result.moves) == 2
    for planned in result.moves:
        path, mods = planned.move.path, planned.mods
        assert [m.rule.dpid for m in mods] == [TOPO.switch(n).dpid for n in path[-2:0:-1]]
        assert [m.modify for m in mods] == [False] * (len(mods) - 1) + [True]
        assert planned.record["flow"] == "/".join(map(str, planned.move.flow))
        assert planned.record["path"] == list(path)
    paths = {planned.move.path for planned in result.moves}
    assert len({p[2] for p in paths}) == 2  # GFF put them on different aggregation switches
    assert result.period["elephants"] == 2 and result.period["moved"] == 2


def test_priority_demotes_a_long_flow_in_place():
    ctl = FlowControl(TOPO, config(routing="ecmp", flow_priority=FlowPriority(
        policy="small_first", threshold_bytes=1000, high=46, low=0)))
    k = key("h1", "h5")
    edge = TOPO.switch(TOPO.neighbour("h1", 0)).dpid
    ctl.new_flow(0.0, edge, k)
    assert ctl.period(1.0, [stat(ctl, k, 500)]).remarks == []
    result = ctl.period(2.0, [stat(ctl, k, 5000)])
    assert len(result.remarks) == 1
    mod = result.remarks[0]
    assert mod.modify and mod.rule.set_dscp == 0 and mod.rule.dpid == edge
    assert result.priorities[0]["dscp"] == 0 and result.priorities[0]["why"] == "5000 bytes"


def test_the_phase_file_round_trips_through_the_strict_loader(tmp_path, monkeypatch):
    cfg = config(flow_priority=FlowPriority(policy="by_port", ports={5201: 46}),
                 dataplane_json="/x/dataplane.json", status_dir="/x")
    dump_json(cfg, tmp_path / "c.json")
    assert phase_config(tmp_path / "c.json") == cfg
    monkeypatch.setenv("TESTBED_CONTROLLER_CONFIG", str(tmp_path / "c.json"))
    assert phase_config() == cfg
    assert cfg.per_flow and cfg.period_s == 1.0
    assert config(routing="ecmp", flow_priority=FlowPriority(period_s=2.0)).period_s == 2.0


def test_a_failure_sends_the_flows_placed_across_it_back_to_their_hash_route():
    from controllers.recovery import degraded, link_ports, replan
    ctl = FlowControl(TOPO, config())
    a, b = key("h1", "h9"), key("h2", "h10")
    ctl.period(0.0, [stat(ctl, a, 0), stat(ctl, b, 0)])
    moves = ctl.period(1.0, [stat(ctl, a, 1_250_000), stat(ctl, b, 1_250_000)]).moves
    placed = {m.move.flow: m.move.path for m in moves}
    # fail a link of the first flow's path between its aggregation and core switches
    path = placed[a]
    agg, core = path[2], path[3]
    down = link_ports(TOPO, agg, core)
    ctl.plan = replan(TOPO, "hedera", down, ctl.plan, base="single", track=True)
    used_before = dict(ctl.scheduler.reservations.used)
    mods, records = ctl.fabric_changed(2.0, degraded(TOPO, down))
    # its exact entries beyond the ingress go, last switch first, then the ingress entry
    # follows the replanned route (modified in place: it keeps its byte counter)
    assert [m.delete for m in mods] == [True] * (len(path) - 3) + [False]
    assert [m.rule.dpid for m in mods[:-1]] == [TOPO.switch(n).dpid for n in path[-2:1:-1]]
    ingress = mods[-1]
    assert ingress.modify and ingress.rule.priority == routing.PRIORITY_FLOW
    assert ingress.rule == routing.flow_entry(ctl.plan, TOPO.switch(path[1]).dpid, a, 10)
    assert records == [{"t": 2.0, "flow": "/".join(map(str, a)), "unplaced": True,
                        "why": "its path crosses a failed link", "path": list(path)}]
    # its reservation is released, the other flow keeps its place, and the next period
    # places on what is left
    assert ctl.scheduler.flows[a].path is None and ctl.scheduler.flows[b].path == placed[b]
    assert sum(ctl.scheduler.reservations.used.values()) < sum(used_before.values())
    again = ctl.period(3.0, [stat(ctl, a, 2_500_000), stat(ctl, b, 2_500_000)]).moves
    assert [m.move.flow for m in again] == [a]
    assert (agg, core) not in zip(again[0].move.path, again[0].move.path[1:])
    # a failure no placed flow crosses changes nothing
    assert ctl.fabric_changed(4.0, degraded(TOPO, down))[0] == []
