"""The plugin guard (controllers/plugin_guard.py): floods confined to a loop-free tree, plugin
entries below the router's and in their own cookie band, port-mods that stop or start a port
and every change of groups, meters, tables, settings or role refused, messages of unknown
kinds refused, and who sent a message read from the call stack. Checked on Ryu's own message
classes, and on what Ryu's spanning-tree library and learning switches send, without a
switch."""
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


STP_MASK = 0b1100101  # what ryu.lib.stplib's OpenFlow 1.2+ port-mods change: all four bits


@pytest.mark.parametrize("config, mask, kind", [
    (pg.OFPPC_NO_RECV | pg.OFPPC_NO_FWD, STP_MASK, "port_stop_refused"),  # stplib: disable
    (pg.OFPPC_NO_FWD | pg.OFPPC_NO_PACKET_IN, STP_MASK, "port_stop_refused"),  # block
    (pg.OFPPC_NO_PACKET_IN, STP_MASK, "port_stop_refused"),  # listen, learn
    (0, STP_MASK, "port_up_refused"),  # forward: clears PORT_DOWN too, undoing a link fault
    (pg.OFPPC_PORT_DOWN, pg.OFPPC_PORT_DOWN, "port_stop_refused"),
    (0, pg.OFPPC_PORT_DOWN, "port_up_refused"),
    (pg.OFPPC_NO_FWD, 0, None),  # outside the mask: changes nothing
    (0, pg.OFPPC_NO_RECV | pg.OFPPC_NO_FWD | pg.OFPPC_NO_PACKET_IN, None),  # clears: a no-op
    (0, 0, None)])  # `advertise` only
def test_port_mods_that_stop_or_start_a_port_are_refused(config, mask, kind):
    assert pg.port_mod_refusal(config, mask) == kind


def test_every_refusal_is_described_and_warned_in_order():
    kinds = {*pg.REFUSED.values(), *pg.REFUSALS, "port_stop_refused", "port_up_refused"}
    assert all(pg.describe(k) for k in kinds)
    assert pg.describe("messages") is None and pg.describe("flow_mods") is None  # counted only
    counts = {"messages": 9, "unknown:ONFBundleCtrlMsg": 1, "port_up_refused": 1,
              "port_stop_refused": 3, "flood_confined": 2, "unknown:OFPExperimenter": 2}
    assert pg.changes(counts) == [
        f"2 {pg.describe('flood_confined')}",
        "3 port-mods refused (would stop a port forwarding, receiving or sending the router "
        "its packet-ins)",
        "1 port-mods refused (would set a port up, undoing a link fault)",
        "2 OFPExperimenter messages refused (unknown message kind OFPExperimenter)",
        "1 ONFBundleCtrlMsg messages refused (unknown message kind ONFBundleCtrlMsg)"]


# The message checks build Ryu's own message classes: in a child process, because
# importing Ryu monkey-patches this one with eventlet (tests/conftest.py).
MESSAGES = r'''
import sys
from types import SimpleNamespace

from controllers import plugin_guard as pg
from controllers.apps.compat import ofproto_v1_3 as ofp
from controllers.apps.compat import ofproto_v1_3_parser as parser
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
    assert g.report().packet_outs == {"1": len(tree) - 1}  # copies, for the accounting
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
    assert plugin_warnings("reachability", g.report().plugins) == [
        "reachability: plugin ryu.app.ofctl_rest: 1 floods confined to the fabric's loop-free "
        "tree, 1 entries capped below the router's priorities (the plugin guard keeps plugins "
        "from flooding the fabric, shadowing its routing or taking its ports and switch "
        "settings; README)"]


def check_a_plugins_delete_reaches_its_own_entries_only():
    g, dp = guard(), fake_dp(2)
    msg = parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                            out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)
    g.check(dp, msg, "my_app")
    assert (msg.cookie, msg.cookie_mask) == (pg.PLUGIN_COOKIE, pg.COOKIE_BAND)
    assert plugin_warnings("p", g.report().plugins) == []  # nothing to warn of


def check_every_flow_mod_command_is_confined_to_the_plugin_band_in_every_table():
    from controllers.apps.ofmsgs import COOKIE  # the router's entries
    g, dp = guard(), fake_dp(1)
    strict = {ofp.OFPFC_ADD, ofp.OFPFC_MODIFY_STRICT, ofp.OFPFC_DELETE_STRICT}
    for command in (ofp.OFPFC_ADD, ofp.OFPFC_MODIFY, ofp.OFPFC_MODIFY_STRICT,
                    ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT):
        for table in (0, 1, ofp.OFPTT_ALL):
            msg = parser.OFPFlowMod(dp, command=command, table_id=table, cookie=0,
                                    cookie_mask=0, priority=5, out_port=ofp.OFPP_ANY,
                                    out_group=ofp.OFPG_ANY,
                                    match=parser.OFPMatch(eth_dst="00:00:00:00:00:01"))
            assert g.check(dp, msg, "my_app") is msg, (command, table)
            assert (msg.cookie, msg.cookie_mask) == (pg.PLUGIN_COOKIE, pg.COOKIE_BAND)
            assert COOKIE & msg.cookie_mask != msg.cookie & msg.cookie_mask  # not the router's
            assert msg.table_id == table  # a later table is the plugin's: only it goes there
            assert msg.priority == (6 if command in strict else 5), (command, table)


def check_every_message_class_of_the_parser_has_a_verdict():
    import inspect

    from ryu.ofproto.ofproto_parser import MsgBase
    classes = {n for n, c in inspect.getmembers(parser, inspect.isclass)
               if issubclass(c, MsgBase) and c.__module__ == parser.__name__}
    named = (pg.PASSED | pg.CONFINED | set(pg.REFUSED)
             | {"OFPPortMod", "OFPRoleRequest", "OFPTableFeaturesStatsRequest"})
    assert named <= classes, named - classes  # every name is one of Ryu's classes
    from_switch = {ofp.OFPT_PACKET_IN, ofp.OFPT_FLOW_REMOVED, ofp.OFPT_PORT_STATUS,
                   ofp.OFPT_FEATURES_REPLY, ofp.OFPT_GET_CONFIG_REPLY, ofp.OFPT_MULTIPART_REPLY,
                   ofp.OFPT_BARRIER_REPLY, ofp.OFPT_QUEUE_GET_CONFIG_REPLY, ofp.OFPT_ROLE_REPLY,
                   ofp.OFPT_GET_ASYNC_REPLY}
    unknown = {n for n in classes - named if getattr(parser, n).cls_msg_type not in from_switch}
    assert unknown == {"OFPHello", "OFPErrorMsg", "OFPExperimenter", "OFPMultipartRequest",
                       "OFPFlowStatsRequestBase", "OFPExperimenterStatsRequestBase",
                       "OFPExperimenterStatsRequest", "ONFFlowMonitorStatsRequest",
                       "ONFBundleCtrlMsg", "ONFBundleAddMsg"}, unknown
    assert (pg.OFPPC_PORT_DOWN, pg.OFPPC_NO_RECV, pg.OFPPC_NO_FWD, pg.OFPPC_NO_PACKET_IN,
            pg.OFPCR_ROLE_NOCHANGE, pg.OFPAT_EXPERIMENTER, pg.OFPIT_EXPERIMENTER) == (
        ofp.OFPPC_PORT_DOWN, ofp.OFPPC_NO_RECV, ofp.OFPPC_NO_FWD, ofp.OFPPC_NO_PACKET_IN,
        ofp.OFPCR_ROLE_NOCHANGE, ofp.OFPAT_EXPERIMENTER, ofp.OFPIT_EXPERIMENTER)


def check_changes_of_what_the_router_owns_are_refused_and_reading_passes():
    from ryu.ofproto import ofproto_v1_0_parser
    warnings: list[str] = []
    g, dp = guard(warnings=warnings), fake_dp(1)
    features = parser.OFPTableFeaturesStats(table_id=0, name="t", metadata_match=0,
                                            metadata_write=0, config=0, max_entries=10,
                                            properties=[])
    learn = parser.NXActionLearn(table_id=0, specs=[], priority=1000, cookie=0)
    refused = [
        (parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL),
         "group_refused"),
        (parser.OFPPortMod(dp, 3, "00:00:00:00:00:03", ofp.OFPPC_NO_FWD, ofp.OFPPC_NO_FWD, 0),
         "port_stop_refused"),
        (parser.OFPTableMod(dp, ofp.OFPTT_ALL, 3), "table_mod_refused"),
        (parser.OFPMeterMod(dp, command=ofp.OFPMC_ADD, flags=ofp.OFPMF_KBPS, meter_id=1,
                            bands=[parser.OFPMeterBandDrop(rate=1000)]), "meter_mod_refused"),
        (parser.OFPSetConfig(dp, ofp.OFPC_FRAG_DROP, 128), "set_config_refused"),
        (parser.OFPSetAsync(dp, [0, 0], [0, 0], [0, 0]), "set_async_refused"),
        (parser.OFPRoleRequest(dp, ofp.OFPCR_ROLE_SLAVE, 0), "role_refused"),
        (parser.OFPTableFeaturesStatsRequest(dp, 0, [features]), "table_features_refused"),
        (parser.OFPFlowMod(dp, instructions=[parser.OFPInstructionActions(
            ofp.OFPIT_APPLY_ACTIONS, [learn])]), "experimenter_refused"),
        (parser.OFPExperimenter(dp, experimenter=0x2320, exp_type=0, data=b""),
         "unknown:OFPExperimenter"),
        (parser.ONFBundleCtrlMsg(dp, bundle_id=1, type_=ofp.ONF_BCT_OPEN_REQUEST, flags=0,
                                 properties=[]), "unknown:ONFBundleCtrlMsg"),
        (parser.OFPHello(dp), "unknown:OFPHello"),
        (ofproto_v1_0_parser.OFPEchoRequest(dp),  # another version's class: not known
         "unknown:ryu.ofproto.ofproto_v1_0_parser.OFPEchoRequest")]
    for msg, kind in refused:
        assert pg.refusal(msg, parser.__name__) == kind, (msg, kind)
        assert g.check(dp, msg, "my_app") is None and g.check(dp, msg, "my_app") is None
        assert g.counts["my_app"][kind] == 2
    assert len(warnings) == len(refused)  # each kind logged once, with its reason
    assert "plugin my_app: OFPHello messages refused (unknown message kind OFPHello) (logged " \
        "once; counted in the run's summary)" in warnings
    passed = [parser.OFPEchoRequest(dp), parser.OFPEchoReply(dp), parser.OFPBarrierRequest(dp),
              parser.OFPFeaturesRequest(dp), parser.OFPGetConfigRequest(dp),
              parser.OFPGetAsyncRequest(dp), parser.OFPQueueGetConfigRequest(dp, ofp.OFPP_ANY),
              parser.OFPRoleRequest(dp, ofp.OFPCR_ROLE_NOCHANGE, 0),
              parser.OFPTableFeaturesStatsRequest(dp, 0),
              parser.OFPFlowStatsRequest(dp), parser.OFPAggregateStatsRequest(
                  dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch()),
              parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY), parser.OFPPortDescStatsRequest(dp),
              parser.OFPMeterConfigStatsRequest(dp), parser.OFPGroupDescStatsRequest(dp),
              parser.OFPPortMod(dp, 3, "00:00:00:00:00:03", 0, ofp.OFPPC_NO_FWD, 0)]
    for msg in passed:
        assert g.check(dp, msg, "my_app") is msg, msg
    line = plugin_warnings("p", g.report().plugins)[0]
    assert line.startswith("p: plugin my_app: 2 group changes refused (the router owns the "
                           "groups), 2 port-mods refused (would stop a port forwarding, ")
    assert "2 OFPHello messages refused (unknown message kind OFPHello)" in line


def check_a_packet_out_to_one_port_or_through_the_table_is_left_as_it_is():
    g, dp = guard(), fake_dp(1)
    for port in (3, ofp.OFPP_TABLE, ofp.OFPP_IN_PORT):
        msg = parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=1,
                                  actions=[parser.OFPActionOutput(port)], data=b"x")
        assert g.check(dp, msg, "my_app") is msg and outputs(msg.actions) == [port]
    assert g.report().packet_outs == {"1": 3} and "flood_confined" not in g.counts["my_app"]


def check_ryus_spanning_tree_and_learning_switches_through_the_installed_guard():
    from ryu.app import simple_switch_13, simple_switch_stp_13
    from ryu.lib import stplib
    from ryu.lib.packet import ethernet, packet
    from ryu.ofproto import ofproto_protocol

    from controllers.apps import guard
    from controllers.apps.compat import Datapath
    wire: list = []
    Datapath.send_msg = lambda self, msg, close_socket=False: wire.append(msg) or True
    warnings: list[str] = []
    g = guard.install(fattree(4), warn=lambda fmt, *a: warnings.append(fmt % a))
    dp = Datapath.__new__(Datapath)  # no socket: what reaches the wire is recorded
    ofproto_protocol.ProtocolDesc.__init__(dp, ofp.OFP_VERSION)
    dp.id = 1
    tree = g.ports[1]

    # stplib's own port control, as its port threads run it: every state of a port
    port = parser.OFPPort(port_no=tree[0], hw_addr="00:00:00:00:01:03", name=b"s1-eth3",
                          config=0, state=0, curr=0, advertised=0, supported=0, peer=0,
                          curr_speed=0, max_speed=0)
    ofctl = stplib.OfCtl_v1_2later(dp)
    ofctl.add_bpdu_pkt_in_flow()
    for state in (stplib.PORT_STATE_LISTEN, stplib.PORT_STATE_LEARN, stplib.PORT_STATE_BLOCK,
                  stplib.PORT_STATE_DISABLE, stplib.PORT_STATE_FORWARD):
        assert ofctl.set_port_status(port, state) is None  # refused, and stplib carries on
    ofctl.send_packet_out(tree[0], b"bpdu")
    assert not [m for m in wire if isinstance(m, parser.OFPPortMod)]
    stp = g.counts["ryu.lib.stplib"]
    assert (stp["port_stop_refused"], stp["port_up_refused"]) == (4, 1)
    flows = [m for m in wire if isinstance(m, parser.OFPFlowMod)]
    # the BPDU trap (0xffff), the no-packet-in drops (0xfffe) and their strict deletes
    assert [m.command for m in flows] == [ofp.OFPFC_ADD] * 4 + [ofp.OFPFC_DELETE_STRICT] * 2
    assert {m.priority for m in flows} == {pg.PLUGIN_MAX_PRIORITY}
    assert {m.cookie & m.cookie_mask for m in flows} == {pg.PLUGIN_COOKIE}
    bpdu = wire[-1]
    assert isinstance(bpdu, parser.OFPPacketOut) and outputs(bpdu.actions) == [tree[0]]
    stp_warnings = [w for w in warnings if "ryu.lib.stplib" in w]
    assert len(stp_warnings) == 3  # capped, stopped, set up: once each
    assert plugin_warnings("reachability", {"ryu.lib.stplib": stp}) == [
        "reachability: plugin ryu.lib.stplib: 6 entries capped below the router's priorities, "
        "4 port-mods refused (would stop a port forwarding, receiving or sending the router "
        "its packet-ins), 1 port-mods refused (would set a port up, undoing a link fault) "
        "(the plugin guard keeps plugins from flooding the fabric, shadowing its routing or "
        "taking its ports and switch settings; README)"]

    # the learning switch: a table-miss to the controller, floods, learnt entries
    del wire[:]
    app = simple_switch_13.SimpleSwitch13()
    app.switch_features_handler(SimpleNamespace(msg=SimpleNamespace(datapath=dp)))

    def packet_in(src, dst, in_port):
        pkt = packet.Packet()
        pkt.add_protocol(ethernet.ethernet(dst=dst, src=src, ethertype=0x0800))
        pkt.serialize()
        msg = parser.OFPPacketIn(dp, buffer_id=ofp.OFP_NO_BUFFER, total_len=len(pkt.data),
                                 reason=ofp.OFPR_NO_MATCH, table_id=0, cookie=0,
                                 match=parser.OFPMatch(in_port=in_port), data=pkt.data)
        msg.msg_len = len(pkt.data)
        app._packet_in_handler(SimpleNamespace(msg=msg))

    a, b = "00:00:00:00:00:0a", "00:00:00:00:00:0b"
    packet_in(a, b, tree[0])  # b unknown: flooded
    packet_in(b, a, tree[1])  # a learnt: an entry and a packet-out to its port
    miss, learnt = [m for m in wire if isinstance(m, parser.OFPFlowMod)]
    flood, back = [m for m in wire if isinstance(m, parser.OFPPacketOut)]
    assert (miss.priority, learnt.priority) == (1, 2)  # above the router's drop, below its routes
    assert outputs(miss.instructions[0].actions) == [ofp.OFPP_CONTROLLER]
    assert outputs(flood.actions) == list(tree[1:]) and outputs(back.actions) == [tree[0]]
    who = "SimpleSwitch13 (ryu.app.simple_switch_13)"
    assert g.counts[who]["flood_confined"] == 1 and g.counts[who]["flow_mods"] == 2

    # simple_switch_stp_13 flushes what it learnt on a topology change: its entries only
    del wire[:]
    stp_app = simple_switch_stp_13.SimpleSwitch13.__new__(simple_switch_stp_13.SimpleSwitch13)
    stp_app.mac_to_port = {1: {a: tree[0]}}
    stp_app.delete_flow(dp)
    (flush,) = wire
    assert flush.command == ofp.OFPFC_DELETE
    assert (flush.cookie, flush.cookie_mask) == (pg.PLUGIN_COOKIE, pg.COOKIE_BAND)



globals()["check_" + sys.argv[1]]()
print("ok")
'''


@pytest.mark.parametrize("check", [
    "a_plugins_flooding_packet_out_goes_out_the_tree_ports_but_its_in_port",
    "a_plugins_entry_is_moved_below_the_router_and_its_flood_confined",
    "a_plugins_delete_reaches_its_own_entries_only",
    "every_flow_mod_command_is_confined_to_the_plugin_band_in_every_table",
    "every_message_class_of_the_parser_has_a_verdict",
    "changes_of_what_the_router_owns_are_refused_and_reading_passes",
    "a_packet_out_to_one_port_or_through_the_table_is_left_as_it_is",
    "ryus_spanning_tree_and_learning_switches_through_the_installed_guard"])
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
