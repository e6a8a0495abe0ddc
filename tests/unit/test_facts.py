"""The facts that several layers use, each defined once (testbed/config/units.py,
config/qos.py, results/stats.py, topologies/mnplan.py), and the places that use them."""
from __future__ import annotations

import pytest

from testbed.config.qos import (
    PfcConfig,
    QosConfig,
    QosError,
    TrafficClass,
    check_pfc_thresholds,
    class_buffer,
    class_limit_bytes,
)
from testbed.config.units import (
    class_minor,
    frame_bytes,
    htb_burst_bytes,
    tcp_payload_fraction,
    udp_payload_fraction,
)
from testbed.dataplane import qos_render
from testbed.dataplane.qosplane import QosPlane
from testbed.dataplane.queues import PortQueue, htb_commands
from testbed.results.stats import median_or_none, percentile
from topologies import bcube, dumbbell, fattree
from topologies.kinds import KINDS, RELAY_KINDS, build
from topologies.mnplan import mininet_plan
from topologies.model import ifname, port_of


def test_frame_and_payload():
    assert frame_bytes(1500) == 1514 and frame_bytes(9000) == 9014
    assert tcp_payload_fraction(1500) == pytest.approx(1448 / 1514)
    assert udp_payload_fraction(1500) == pytest.approx(1472 / 1514)


def test_htb_burst_is_the_same_for_both_dataplanes():
    # 20 Mb/s for 10 ms = 25000 bytes; never below two frames; 0 keeps tc's default
    assert htb_burst_bytes(20, 10000, 1500) == 25000
    assert htb_burst_bytes(1, 1000, 9000) == 2 * 9014
    assert htb_burst_bytes(20, 0, 1500) == 0
    plain = htb_commands(PortQueue(ifname="s1-eth1", rate_mbps=20, buffer_pkts=10,
                                   burst_us=10000))
    assert plain[1][plain[1].index("burst") + 1] == "25000"
    port = qos_render.QosPort(id=0, ifname="s1-eth1", node="s1", is_host=False, rate_mbps=20,
                              peer=1, switch_index=0)
    cfg = QosConfig(classes=[TrafficClass(name="a")])
    classes = qos_render.htb_class_commands(port, cfg, 1500, 10000, [100000])
    assert classes[1][classes[1].index("burst") + 1] == "25000"


def test_class_id_is_the_minor_of_its_htb_class_and_gate():
    assert class_minor(0) == 0x10 and class_minor(7) == 0x17
    port = qos_render.QosPort(id=0, ifname="s1-eth1", node="s1", is_host=False, rate_mbps=20,
                              peer=1, switch_index=0)
    cfg = QosConfig(classes=[TrafficClass(name="a"), TrafficClass(name="b", dscp=[46])])
    cmds = qos_render.htb_class_commands(port, cfg, 1500, 0, [1, 1])
    htb, gate = cmds[4], cmds[5]  # class 1's HTB class and its tbf gate
    assert htb[htb.index("classid") + 1] == "1:11"
    assert gate[gate.index("parent") + 1] == "1:11" and gate[gate.index("handle") + 1] == "11:"


def test_buffer_precedence_is_what_the_dataplane_enforces():
    own_bytes = TrafficClass(name="a", buffer_bytes=5000)
    own_pkts = TrafficClass(name="b", buffer_pkts=7)
    links = TrafficClass(name="c")
    assert class_buffer(own_bytes, 100, None) == (5000, 0)
    assert class_buffer(own_pkts, 100, None) == (0, 7)
    assert class_buffer(links, 100, None) == (0, 100)
    assert class_buffer(links, None, 30000) == (30000, 0)
    assert class_limit_bytes(own_pkts, 1514, 100, None) == 7 * 1514
    # enforcement: a QoS plane's limits per switch port, host NICs and lossless classes aside
    lossless = TrafficClass(name="d", dscp=[26], lossless=True)
    cfg = QosConfig(classes=[own_bytes, own_pkts, links, lossless],
                    pfc=PfcConfig(xoff_bytes=12000, xon_bytes=6000, headroom_bytes=64000))
    plane = QosPlane(dumbbell(), cfg, rate_of=lambda link: link.rate_mbps, host_pid=None,
                     mtu_bytes=1500, burst_us=0, buffer_pkts=100, buffer_bytes=None,
                     host_queue_pkts=1000, pin_dir=None, out_dir=__import__("pathlib").Path("."))
    switch = next(p for p in plane.ports if not p.is_host)
    host = next(p for p in plane.ports if p.is_host)
    assert [plane.limits(switch, c) for c in range(3)] == [(5000, 0), (0, 7), (0, 100)]
    assert plane.limits(switch, 3) == (0, 0)  # PFC bounds it
    assert plane.limits(host, 0) == (0, 1000)
    # OVS's send buffer is charged for the switch queues: a packet-limited class as that
    # many packets (of any size), a byte-limited or lossless one as its qdisc's bytes
    pkts, nbytes = plane.switch_buffer_limits()
    switches = sum(1 for p in plane.ports if not p.is_host)
    assert sorted(set(pkts)) == [11, 104] and len(pkts) == 2 * switches
    assert len(nbytes) == 2 * switches and min(nbytes) == 5000 + 4 * 1514


def test_pfc_thresholds_checked_once_for_every_caller():
    check_pfc_thresholds(12000, 6000, 64000, 1500, "qos.pfc")
    with pytest.raises(QosError, match=r"^x\.xon_bytes: must be below xoff_bytes"):
        check_pfc_thresholds(6000, 6000, 64000, 1500, "x")
    with pytest.raises(QosError, match=r"^x\.headroom_bytes: at least two full-size frames"):
        check_pfc_thresholds(12000, 6000, 2000, 1500, "x")
    with pytest.raises(QosError, match=r"^x\.xoff_bytes: must hold one full-size frame"):
        check_pfc_thresholds(1000, 500, 64000, 1500, "x")
    with pytest.raises(QosError, match=r"^x\.xoff_bytes: must be > 0"):
        check_pfc_thresholds(0, 500, 64000, 1500, "x")


def test_one_percentile():
    assert percentile([3, 1, 2, 4], 50) == 2
    assert percentile(range(1, 101), 99) == 99 and percentile(range(1, 101), 100) == 100
    assert percentile([7], 1) == 7
    assert percentile([1, 5, 9], 50, weights=[0.1, 0.8, 0.1]) == 5
    assert percentile([1, 5, 9], 95, weights=[0.1, 0.8, 0.1]) == 9
    with pytest.raises(ValueError):
        percentile([], 50)
    assert median_or_none([]) is None and median_or_none([1, 2]) == 1.5


def test_one_mininet_translation_for_fabric_and_plain_mn():
    t = fattree(4)
    plan = mininet_plan(t)
    assert [h.name for h in plan.hosts] == [h.name for h in t.hosts]
    assert plan.hosts[0].ip == f"{t.hosts[0].ip}/8" and plan.hosts[0].mac == t.hosts[0].macs[0]
    assert plan.switches[0].dpid == f"{t.switches[0].dpid:016x}"
    link = plan.links[0]
    assert link.kwargs()["intfName1"] == f"{link.a}-eth{link.port1}"


def test_bcube_servers_get_their_relay_address_and_a_mac_per_port():
    t = bcube(4, 1)
    plan = mininet_plan(t)
    server = t.hosts[0]
    assert server.relay and server.ports == 2
    assert plan.hosts[0].ip == f"{server.ip}/32"
    macs = {}
    for link in plan.links:
        for node, port, key in ((link.a, link.port1, "addr1"), (link.b, link.port2, "addr2")):
            if node == server.name:
                macs[port] = link.params[key]
    assert macs == {0: server.macs[0], 1: server.macs[1]} and macs[0] != macs[1]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_fabric_relays_exactly_when_its_kind_says_so(kind):
    """`Topology.relays` (what the routing, the controller and the checks ask) and
    `RELAY_KINDS` (what a spec's kind offers before a fabric is built) are one fact."""
    assert build(kind).relays == (kind in RELAY_KINDS)


def test_an_interface_name_reads_back_to_its_node_and_port():
    for node, port in (("h1", 0), ("e1", 3), ("bc-1-2", 12)):
        assert port_of(ifname(node, port)) == (node, port)
