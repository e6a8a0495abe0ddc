"""Recovery from failures, traced through the fake flow table of test_routing: after the
changes every pair that the degraded fabric still connects is reachable without touching
what is down; while the changes are applied one by one, no packet ever loops; a switch
that is down partitions exactly the hosts it alone connects."""
import dataclasses

import pytest

from controllers.recovery import changes, degraded, link_ports, replan, switch_ports
from controllers.routing import RoutePlan, plan
from topologies import fattree, leafspine

from .test_routing import FakeFabric


def apply(table: dict, change) -> None:
    item = change.item
    kind = "group" if hasattr(item, "buckets") else "rule"
    key = (kind, item.dpid, item.group_id) if kind == "group" else \
        (kind, item.dpid, item.priority, item.match)
    if change.op == "delete":
        del table[key]
    else:
        assert (key in table) == (change.op == "modify"), change
        table[key] = item


def as_plan(table: dict, mode: str) -> RoutePlan:
    return RoutePlan(mode=mode, groups=tuple(v for k, v in table.items() if k[0] == "group"),
                rules=tuple(v for k, v in table.items() if k[0] == "rule"))


def table_of(p: RoutePlan) -> dict:
    t = {("group", g.dpid, g.group_id): g for g in p.groups}
    t.update({("rule", r.dpid, r.priority, r.match): r for r in p.rules})
    return t


def walk_allowing_drops(topo, p: RoutePlan, src: str, dst: str) -> None:
    """Follow every branch from src to dst; a packet may be dropped (the change is not
    complete) but never come back to a node it passed, and never be sent into a cut link."""
    groups = {(g.dpid, g.group_id): g for g in p.groups}
    ip = topo.host(dst).ip

    def at(sw, path):
        dpid = topo.switch(sw).dpid
        rules = [r for r in p.for_switch(dpid)[1]
                 if dict(r.match).get("ipv4_dst") == ip and dict(r.match).get("eth_type") == 0x0800
                 and "in_port" not in dict(r.match)]
        if not rules:
            return
        best = max(rules, key=lambda r: r.priority)
        ports = set(groups[(dpid, best.group_id)].buckets) if best.group_id else {best.out_port}
        for port in ports:
            peer = topo.peer(sw, port)
            if peer is None:  # into a cut link: lost, as on the real switch (until replanned)
                continue
            node = peer[0]
            assert node not in path, f"loop: {path + [node]}"
            if node != dst and not topo.is_host(node):
                at(node, path + [node])

    first = topo.peer(src, 0)[0]
    at(first, [src, first])


def pairs(topo):
    return [(a.name, b.name) for a in topo.hosts for b in topo.hosts if a is not b]


@pytest.mark.parametrize("mode", ["ecmp", "single", "hedera"])
@pytest.mark.parametrize("topo,a,b", [(fattree(4), "a1", "c1"), (fattree(4), "e1", "a1"),
                                      (leafspine(2, 4, 4), "l1", "sp1")],
                         ids=["fattree-agg-core", "fattree-edge-agg", "leafspine-leaf-spine"])
def test_a_failed_link_is_routed_around_without_transient_loops(topo, a, b, mode):
    installed = plan(topo, mode)
    down = link_ports(topo, a, b)
    cut = degraded(topo, down)
    new = replan(topo, mode, down, installed)
    todo = changes(installed, new, cut)
    assert todo, "a failure on used links changes something"
    assert all(c.dpid in {s.dpid for s in topo.switches} for c in todo)
    table = table_of(installed)
    for change in todo:
        apply(table, change)
        state = as_plan(table, mode)
        for src, dst in pairs(topo)[::7]:  # a sample at every step; all pairs at the end
            walk_allowing_drops(cut, state, src, dst)
    assert table == table_of(new)
    fab = FakeFabric(cut, new)
    for src, dst in pairs(topo):
        paths = fab.paths(src, dst)
        assert paths and all(p[-1] == dst for p in paths)
        for path in paths:
            assert not {a, b} <= set(path) or abs(path.index(a) - path.index(b)) != 1


def test_only_switches_next_to_the_failure_or_choosing_it_change():
    topo = fattree(4)
    installed = plan(topo, "ecmp")
    down = link_ports(topo, "a1", "c1")
    todo = changes(installed, replan(topo, "ecmp", down, installed), degraded(topo, down))
    touched = {topo.switch_by_dpid(c.dpid).name for c in todo}
    # a1 and c1 themselves, and the aggregation switches of the other pods that hash onto
    # c1 towards pod 0 (a3, a5, a7: the first aggregation switch of each pod)
    assert touched == {"a1", "c1", "a3", "a5", "a7"}
    assert not any(c.op == "delete" and hasattr(c.item, "buckets") and c.dpid != 0
                   and topo.switch_by_dpid(c.dpid).name.startswith("e") for c in todo)


def test_group_ids_stay_with_their_buckets():
    topo = fattree(4)
    installed = plan(topo, "ecmp")
    new = replan(topo, "ecmp", link_ports(topo, "a1", "c1"), installed)
    old = {(g.dpid, g.buckets): g.group_id for g in installed.groups}
    for g in new.groups:
        if (g.dpid, g.buckets) in old:
            assert old[(g.dpid, g.buckets)] == g.group_id


def test_a_switch_down_partitions_exactly_its_hosts():
    topo = fattree(4)
    installed = plan(topo, "ecmp")
    down = switch_ports(topo, "e1")  # h1 and h2 hang off e1 alone
    new = replan(topo, "ecmp", down, installed)
    cut = degraded(topo, down)
    fab = FakeFabric(cut, new)
    for src, dst in pairs(topo):
        if {"h1", "h2"} & {src, dst}:
            continue
        assert fab.paths(src, dst)
    e1 = topo.switch("e1").dpid
    assert not any(r.dpid != e1 and dict(r.match).get("ipv4_dst") in
                   (topo.host("h1").ip, topo.host("h2").ip) for r in new.rules)


def test_recovering_the_link_restores_the_original_plan():
    topo = fattree(4)
    installed = plan(topo, "ecmp")
    down = link_ports(topo, "a1", "c1")
    failed = replan(topo, "ecmp", down, installed)
    healed = replan(topo, "ecmp", [], failed)
    assert table_of(healed) == table_of(dataclasses.replace(installed, _by_dpid={}))
    assert changes(installed, healed, topo) == []


def test_a_restarted_controller_changes_only_what_differs():
    from controllers.recovery import resync
    from controllers.routing import PRIORITY_FLOW, Rule
    topo = fattree(4)
    p = plan(topo, "ecmp")
    a1 = topo.switch("a1").dpid
    groups, rules = (list(x) for x in p.for_switch(a1))
    # the switch kept its tables: nothing to do
    assert resync(p, a1, groups, rules) == []
    # one entry lost, one changed by hand, one stray, and a flow a scheduler placed
    lost, changed = rules[2], rules[3]
    stray = Rule(dpid=a1, priority=5, match=(("eth_type", 0x0800), ("ipv4_dst", "10.9.9.9")),
                 out_port=1)
    placed = Rule(dpid=a1, priority=PRIORITY_FLOW, match=(("ipv4_dst", "10.0.0.9"),),
                  out_port=3, idle_timeout=10)
    have = [r for r in rules if r not in (lost, changed)]
    have += [dataclasses.replace(changed, out_port=99, group_id=None), stray, placed]
    todo = resync(p, a1, groups, have, keep_priorities=frozenset({PRIORITY_FLOW}))
    assert [(c.op, c.item) for c in todo] == [("add", lost), ("modify", changed),
                                              ("delete", stray)]
    # a switch that lost everything gets its groups before the rules that name them
    fresh = resync(p, a1, [], [])
    kinds = ["group" if hasattr(c.item, "buckets") else "rule" for c in fresh]
    assert kinds == sorted(kinds) and all(c.op == "add" for c in fresh)
    assert len(fresh) == len(groups) + len(rules)


READ_BACK = """
from controllers import failover, routing
from controllers.apps import ofmsgs
from controllers.apps.compat import ofproto_v1_3 as ofp, ofproto_v1_3_parser as parser
from topologies import fattree

class DP:
    id = None
    ofproto, ofproto_parser = ofp, parser

def wire(msg):  # serialise, then parse back what a switch's reply would carry
    msg.serialize()
    return bytes(msg.buf)

dp = DP()
topo = fattree(4)
p = failover.plan(topo, "hedera", fast_failover=True, track=True, udp_hash=True)
a1 = topo.switch("a1").dpid  # select and fast-failover groups, detours matching in_port
dp.id = a1
groups, rules = p.for_switch(a1)
assert {g.kind for g in groups} == {"select", "ff"}
assert any("in_port" in dict(r.match) for r in rules)
assert any(r.hash_ports for r in rules)  # UDP hashed on its ports (OVS's bundle action)
marked = routing.Rule(dpid=a1, priority=routing.PRIORITY_FLOW, set_dscp=46, group_id=1,
                      idle_timeout=10, match=routing.flow_match(("10.0.0.1", "10.0.0.9", 6,
                                                                 40000, 5201)))
for rule in [*rules, marked]:
    mod = ofmsgs.flow_mod(dp, rule)
    buf = bytearray()
    mod.match.serialize(buf, 0)
    match = parser.OFPMatch.parser(bytes(buf), 0)
    insts = []
    for inst in mod.instructions:
        b = bytearray()
        inst.serialize(b, 0)
        insts.append(parser.OFPInstructionActions.parser(bytes(b), 0))
    stat = parser.OFPFlowStats(priority=rule.priority, idle_timeout=rule.idle_timeout,
                               match=match, instructions=insts)
    assert ofmsgs.read_rule(dp, stat) == rule, (ofmsgs.read_rule(dp, stat), rule)
for group in groups:
    mod = ofmsgs.group_mod(dp, group)
    buckets = []
    for bucket in mod.buckets:
        b = bytearray()
        bucket.serialize(b, 0)
        buckets.append(parser.OFPBucket.parser(bytes(b), 0))
    desc = parser.OFPGroupDescStats(type_=mod.type, group_id=group.group_id, buckets=buckets)
    assert ofmsgs.read_group(dp, desc) == group, (ofmsgs.read_group(dp, desc), group)
print(len(rules), len(groups))
"""


def test_entries_read_back_from_a_switch_equal_the_rules_that_wrote_them():
    # What a restarted controller reads (a flow-stats and a group-description reply) must
    # compare equal to the plan's rules, or resync would rewrite every entry. The messages
    # are serialised and parsed by Ryu as on the wire; in a child process, because
    # importing Ryu monkey-patches this one with eventlet.
    import subprocess
    import sys
    from pathlib import Path
    done = subprocess.run([sys.executable, "-c", READ_BACK], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    n_rules, n_groups = map(int, done.stdout.split())
    assert n_rules > 10 and n_groups > 0


@pytest.mark.parametrize("mode", ["ecmp", "single"])
def test_bcube_servers_route_around_a_failed_link(mode):
    from controllers.recovery import host_route_changes
    from topologies import bcube
    topo = bcube(4, 1)
    installed = plan(topo, mode)
    server = topo.hosts[0].name
    level1 = topo.neighbour(server, 1)  # its level-1 switch
    down = link_ports(topo, server, level1)
    cut = degraded(topo, down)
    new = plan(cut, mode)
    fab = FakeFabric(cut, new)
    for src, dst in pairs(topo):  # every pair still delivered, never through the dead link
        for path in fab.paths(src, dst):
            assert (server, level1) not in zip(path, path[1:]), path
            assert (level1, server) not in zip(path, path[1:]), path
    lines = host_route_changes(installed, new)
    assert lines and all(line.startswith("route replace ") for v in lines.values() for line in v)
    # only routes that changed are replaced, and none may still use the dead port
    assert sum(len(v) for v in lines.values()) < len(installed.host_routes)
    assert not any(f"dev {server}-eth1 " in line for line in lines.get(server, []))
    # the server cut off from everything: the others' routes to it are deleted
    alone = degraded(topo, down + link_ports(topo, server, topo.neighbour(server, 0)))
    gone = host_route_changes(new, plan(alone, mode))
    ip = topo.host(server).ip
    assert all(f"route del {ip}/32" in v for h, v in gone.items() if h != server)
    assert len(gone) == len(topo.hosts)  # and its own routes go too


def test_commands_a_running_fabric_may_be_given():
    import json

    from controllers.recovery import command_error
    from testbed.config.replies import read_command

    def cmd(**fields):  # as the routing app reads a line of the commands file
        return read_command(json.dumps(fields))
    assert command_error(cmd(op="routing", mode="single"), "ecmp", relay=False) is None
    assert command_error(cmd(op="routing", mode="ecmp"), "single", relay=False) is None
    assert "one of ecmp, single" in command_error(cmd(op="routing", mode="x"), "ecmp",
                                                  relay=False)
    assert "unknown command 'reboot'" in command_error(cmd(op="reboot"), "ecmp", relay=False)
    assert "route for themselves" in command_error(cmd(op="routing", mode="single"),
                                                   "ecmp", relay=True)
    assert "scheduler owns" in command_error(cmd(op="routing", mode="single"), "hedera",
                                             relay=False)
