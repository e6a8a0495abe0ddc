"""The plugin guard (controllers/plugin_guard.py): floods confined to a loop-free tree, plugin
entries below the router's and in their own cookie band, groups refused, and who sent a
message read from the call stack. Checked on Ryu's own message classes, without a switch."""
import subprocess
import sys
from pathlib import Path

import pytest

from controllers import plugin_guard as pg
from controllers.routing import PRIORITY_ARP, PRIORITY_MISS, PRIORITY_ROUTE
from topologies import bcube, fattree, leafspine


def tree_edges(topo, ports):
    """The switch-to-switch links both of whose ends are flood ports."""
    return [link for link in topo.links
            if not topo.is_host(link.a) and not topo.is_host(link.b)
            and link.a_port in ports[topo.node(link.a).dpid]
            and link.b_port in ports[topo.node(link.b).dpid]]


@pytest.mark.parametrize("topo", [fattree(4), fattree(6), leafspine(4, 2, 2)],
                         ids=["fattree4", "fattree6", "leafspine"])
def test_flood_ports_form_a_spanning_tree_with_every_host_port(topo):
    ports = pg.flood_ports(topo)
    edges = tree_edges(topo, ports)
    assert len(edges) == len(topo.switches) - 1  # a tree: n - 1 links ...
    reached, todo = {topo.switches[0].name}, [topo.switches[0].name]
    while todo:  # ... that connect every switch
        node = todo.pop()
        for link in edges:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if a == node and b not in reached:
                    reached.add(b)
                    todo.append(b)
    assert reached == {s.name for s in topo.switches}
    for host in topo.hosts:  # every host port floods
        for port in range(host.ports):
            sw, sw_port = topo.peer(host.name, port)
            assert sw_port in ports[topo.node(sw).dpid]


def test_flood_ports_in_a_relay_fabric_are_the_host_ports():
    topo = bcube(4, 1)  # switches meet only through servers: each one its own tree
    ports = pg.flood_ports(topo)
    for sw in topo.switches:
        assert ports[sw.dpid] == tuple(p for p, _, _ in topo.ports_of(sw.name))


def test_plugin_priorities_sit_between_the_routers_miss_and_its_routes():
    assert pg.plugin_priority(0) == (1, False)  # a plugin's table-miss, above the router's
    assert pg.plugin_priority(1) == (2, False)  # order among the plugin's own entries kept
    assert pg.plugin_priority(PRIORITY_ROUTE - 2) == (PRIORITY_ROUTE - 1, False)
    assert pg.plugin_priority(PRIORITY_ARP) == (PRIORITY_ROUTE - 1, True)
    assert PRIORITY_MISS < 1 and pg.PLUGIN_MAX_PRIORITY < PRIORITY_ROUTE


def test_plugin_cookies_stay_in_their_band():
    cookie, mask = pg.plugin_cookie(0x1234, 0)
    assert cookie == pg.PLUGIN_COOKIE | 0x1234 and mask == pg.COOKIE_BAND
    cookie, mask = pg.plugin_cookie(0xFFFF_0000_0000_0001, 0xFFFF_FFFF_FFFF_FFFF)
    assert cookie == pg.PLUGIN_COOKIE | 1 and mask == 0xFFFF_FFFF_FFFF_FFFF


# The message checks build Ryu's own message classes: in a child process, because
# importing Ryu monkey-patches this one with eventlet (tests/conftest.py).
MESSAGES = r'''
import sys
from types import SimpleNamespace

from controllers import plugin_guard as pg
from controllers.compat import ofproto_v1_3 as ofp
from controllers.compat import ofproto_v1_3_parser as parser
from testbed.net.controller import plugin_warnings
from topologies import fattree


def fake_dp(dpid=1):
    return SimpleNamespace(ofproto=ofp, ofproto_parser=parser, id=dpid)


def guard(topo=None, warnings=None):
    topo = topo or fattree(4)
    return pg.Guard(ports=pg.flood_ports(topo),
                    warn=(lambda fmt, *a: warnings.append(fmt % a)) if warnings is not None
                    else None)


def outputs(actions):
    return [a.port for a in actions if a.type == ofp.OFPAT_OUTPUT]


def check_a_plugins_flooding_packet_out_goes_out_the_tree_ports_but_its_in_port():
    warnings: list[str] = []
    g, dp = guard(warnings=warnings), fake_dp(1)
    tree = g.ports[1]
    msg = parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=tree[0],
                              actions=[parser.OFPActionOutput(ofp.OFPP_FLOOD)], data=b"x")
    assert g.check(dp, msg, "Learner (my_app)") is msg
    assert outputs(msg.actions) == list(tree[1:])
    assert g.report()["packet_outs"] == {"1": len(tree) - 1}  # copies, for the accounting
    msg = parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                              actions=[parser.OFPActionOutput(3)], data=b"x")
    g.check(dp, msg, "Learner (my_app)")
    assert outputs(msg.actions) == [3]  # one port: left as it is
    assert g.counts["Learner (my_app)"]["flood_confined"] == 1
    assert len(warnings) == 1 and "Learner (my_app)" in warnings[0]


def check_a_plugins_entry_is_moved_below_the_router_and_its_flood_confined():
    g, dp = guard(), fake_dp(1)
    match = parser.OFPMatch(in_port=g.ports[1][0], eth_type=0x0800)
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                         [parser.OFPActionOutput(ofp.OFPP_ALL)])]
    msg = parser.OFPFlowMod(dp, cookie=7, priority=1000, match=match, instructions=inst)
    g.check(dp, msg, "ryu.app.ofctl_rest")
    assert msg.priority == pg.PLUGIN_MAX_PRIORITY and msg.cookie == pg.PLUGIN_COOKIE | 7
    assert outputs(msg.instructions[0].actions) == list(g.ports[1][1:])
    assert g.counts["ryu.app.ofctl_rest"]["priority_capped"] == 1
    assert plugin_warnings("reachability", g.report()["plugins"]) == [
        "reachability: plugin ryu.app.ofctl_rest: 1 floods confined to the fabric's loop-free "
        "tree, 1 entries capped below the router's priorities (the plugin guard keeps plugins "
        "from flooding the fabric or shadowing its routing; README)"]


def check_a_plugins_delete_reaches_its_own_entries_only():
    g, dp = guard(), fake_dp(2)
    msg = parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                            out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)
    g.check(dp, msg, "my_app")
    assert (msg.cookie, msg.cookie_mask) == (pg.PLUGIN_COOKIE, pg.COOKIE_BAND)
    assert plugin_warnings("p", g.report()["plugins"]) == []  # nothing to warn of


def check_a_plugins_group_change_is_refused():
    g, dp = guard(), fake_dp(1)
    msg = parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL)
    assert g.check(dp, msg, "my_app") is None
    stats = parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY)
    assert g.check(dp, stats, "my_app") is stats  # seeing is always allowed



globals()["check_" + sys.argv[1]]()
print("ok")
'''


@pytest.mark.parametrize("check", [
    "a_plugins_flooding_packet_out_goes_out_the_tree_ports_but_its_in_port",
    "a_plugins_entry_is_moved_below_the_router_and_its_flood_confined",
    "a_plugins_delete_reaches_its_own_entries_only",
    "a_plugins_group_change_is_refused"])
def test_messages(check):
    done = subprocess.run([sys.executable, "-c", MESSAGES, check], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _send(box):
    box.append(pg.sender(sys._getframe()))


def test_the_sender_is_read_from_the_call_stack():
    box: list = []
    _send(box)  # this test module: not the testbed's, not the framework's: a plugin
    assert box == [__name__]

    class App:
        OFP_VERSIONS = [4]

        def send(self):
            box.append(pg.sender(sys._getframe()))

    App().send()
    assert box[-1] == f"App ({__name__})"  # a Ryu app names itself by its class
    ns: dict = {"__name__": "controllers.apps.routing_app", "pg": pg, "box": box}
    exec("import sys\nbox.append(pg.sender(sys._getframe()))", ns)
    assert box[-1] is None  # the testbed's own apps pass unguarded
