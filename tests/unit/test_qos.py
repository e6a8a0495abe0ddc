"""The traffic-class dataplane's pure parts: spec validation, tc and netlink rendering, map
records, policies, the incast workload on loopback."""
import csv
import json
import struct
import threading
from dataclasses import asdict

import pytest

from controllers import qos_policy
from testbed.config import qos as qcfg
from testbed.config.loader import from_data
from testbed.config.replies import PFC_COLUMNS
from testbed.dataplane import qos_render as qos
from testbed.dataplane.nlqdisc import _stats, _stats_queue
from testbed.experiments.ecn_queue import _marks_below_k
from testbed.experiments.qos_common import pfc_summary
from testbed.results.stats import percentile
from testbed.spec import SpecError, loads
from testbed.workloads import incast as incast_wl

BASE = {"name": "t", "topology": {"kind": "dumbbell"},
        "experiments": [{"type": "reachability"}]}


def spec_with(qos_section):
    return loads({**BASE, "qos": qos_section})


def test_a_valid_qos_section_loads():
    spec, _ = spec_with({"scheduler": "wrr", "classes": [
        {"name": "bulk", "dscp": [0], "weight": 1, "ecn": {"k": 20}},
        {"name": "rdma", "dscp": [26], "weight": 3, "lossless": True}],
        "pfc": {"xoff_bytes": 12000, "xon_bytes": 6000, "headroom_bytes": 30000}})
    assert spec.qos.classes[1].lossless and spec.qos.pfc.xon_bytes == 6000
    assert spec.qos.class_of_dscp()[26] == 1 and spec.qos.class_of_dscp()[5] == 0


@pytest.mark.parametrize("section,field", [
    ({"classes": [{"name": "a", "lossless": True}],
      "pfc": {"xoff_bytes": 6000, "xon_bytes": 6000, "headroom_bytes": 30000}},
     "qos.pfc.xon_bytes"),
    ({"classes": [{"name": "a", "buffer_pkts": 20, "ecn": {"k": 20}}]}, "qos.classes[0].ecn.k"),
    ({"classes": [{"name": "a", "buffer_pkts": 0}]}, "qos.classes[0].buffer_pkts"),
    ({"classes": [{"name": "a", "dscp": [64]}]}, "qos.classes[0].dscp[0]"),
    ({"classes": [{"name": "a", "dscp": [-1]}]}, "qos.classes[0].dscp[0]"),
    ({"classes": [{"name": "a", "dscp": [1]}, {"name": "b", "dscp": [1]}]}, "qos.classes[1].dscp[0]"),
    ({"classes": [{"name": "a", "lossless": True}]}, "qos.classes[0].lossless"),
    ({"classes": [{"name": "a", "ecn": {"k": 20, "kmax": 10}}]}, "qos.classes[0].ecn.kmax"),
    ({"classes": [{"name": "a", "ecn": {"k": 20, "kmax": 40, "pmax": 1.5}}]}, "qos.classes[0].ecn.pmax"),
    ({"classes": [{"name": "a", "priority": 9}]}, "qos.classes[0].priority"),
    ({"classes": [{"name": "a", "weight": 0}]}, "qos.classes[0].weight"),
    ({"classes": []}, "qos.classes"),
    ({"classes": [{"name": "a"}], "port_schedulers": {"s1-eth1": "fifo"}},
     "qos.port_schedulers.s1-eth1"),
    ({"classes": [{"name": "a", "lossless": True}],
      "pfc": {"xoff_bytes": 12000, "xon_bytes": 6000, "headroom_bytes": 100}},
     "qos.pfc.headroom_bytes"),
    ({"classes": [{"name": "a", "ecn": {"k": 20, "unit": "frames"}}]}, "qos.classes.ecn.unit"),
])
def test_thresholds_that_cannot_work_name_their_field(section, field):
    with pytest.raises(SpecError) as err:
        spec_with(section)
    assert str(err.value).startswith(field.replace("qos.classes.ecn.unit", "qos.classes[0].ecn.unit"))


def test_incast_and_victim_parameters_are_checked():
    with pytest.raises(SpecError, match=r"experiments\[0\].variants\[0\]"):
        loads({**BASE, "experiments": [{"type": "incast", "variants": ["magic"]}]})
    with pytest.raises(SpecError, match=r"experiments\[0\].xon_bytes"):
        loads({**BASE, "experiments": [{"type": "incast", "xon_bytes": 20000}]})
    with pytest.raises(SpecError, match=r"experiments\[0\].k_pkts"):
        loads({**BASE, "experiments": [{"type": "ecn_queue", "k_pkts": 500}]})
    with pytest.raises(SpecError, match=r"experiments\[0\].phases\[0\]"):
        loads({**BASE, "experiments": [{"type": "pfc_victim", "phases": ["calm"]}]})


PORT = qos.QosPort(id=3, ifname="s1-eth2", node="s1", is_host=False, rate_mbps=100, peer=4,
                   switch_index=0)
TWO = qcfg.QosConfig(classes=[qcfg.TrafficClass(name="low", dscp=[0], weight=1),
                             qcfg.TrafficClass(name="high", dscp=[46], priority=7, weight=3)])


def test_strict_priority_classes_render_htb_prio_and_tbf_gates():
    cmds = qos.htb_class_commands(PORT, TWO, 1500, 1000, [10000, 20000])
    text = [" ".join(c) for c in cmds]
    assert text[0] == "qdisc replace dev s1-eth2 root handle 1: htb default 10"
    assert "classid 1:10 htb rate 8000bit ceil 100000000bit burst 12500 cburst 12500 prio 7" in text[2]
    assert "classid 1:11 htb rate 8000bit ceil 100000000bit burst 12500 cburst 12500 prio 0" in text[4]
    assert text[3].endswith("tbf rate 10000000000bit burst 65536 limit 10000")
    assert text[-1] == "qdisc replace dev s1-eth2 clsact"


def test_wrr_classes_get_rates_and_quanta_in_proportion_to_weights():
    port = qos.QosPort(**{**asdict(PORT), "scheduler": "wrr"})
    text = [" ".join(c) for c in qos.htb_class_commands(port, TWO, 1500, 0, [1, 1])]
    assert "classid 1:10 htb rate 25000000bit ceil 100000000bit prio 0 quantum 1514" in text[2]
    assert "classid 1:11 htb rate 75000000bit ceil 100000000bit prio 0 quantum 4542" in text[4]


def test_bpf_programs_attach_by_kind_of_port():
    sw = qos.bpf_attach_commands("s1-eth2", "/p", host=False)
    host = qos.bpf_attach_commands("h1-eth0", "/p", host=True)
    assert sw[0][-1] == "/p/tb_egress" and sw[1][-1] == "/p/tb_ingress"
    assert host[0][-1] == "/p/tb_egress_host" and host[1][-1] == "/p/tb_ingress_host"
    assert qos.if_key(7, None) == struct.pack("QII", 0, 7, 0)
    assert qos.if_key(7, "02:00:00:00:00:01") == struct.pack("QII", 0x0100_0000_0002, 0, 0)


def test_marking_records_step_red_and_speed_relative_thresholds():
    step = qos.QCFG.unpack(qos.qcfg_record(0, 100, qcfg.EcnProfile(k=20), 1514, 100))
    assert step[:6] == (0, 100, qos.ECN_STEP, 20 * 1514, 20 * 1514, 1_000_000)
    red = qos.QCFG.unpack(qos.qcfg_record(0, 100, qcfg.EcnProfile(k=5, kmax=50, pmax=0.2), 1514, 100))
    assert red[2:6] == (qos.ECN_RED, 5 * 1514, 50 * 1514, 200_000)
    us = qos.QCFG.unpack(qos.qcfg_record(0, 0, qcfg.EcnProfile(k=100, unit="us"), 1514, 1000))
    assert us[3] == 12_500  # 100 us at 1 Gb/s
    off = qos.QCFG.unpack(qos.qcfg_record(5, 0, qcfg.EcnProfile(k=20), 1514, 100, enabled=False))
    assert off[:3] == (5, 0, qos.ECN_OFF)


def test_tbf_gate_messages_are_well_formed_netlink():
    msg = qos.tbf_change_message(ifindex=9, minor=0x11, rate_bps=125, burst=1578, limit=90000)
    length, mtype, flags = struct.unpack_from("IHH", msg)
    assert length == len(msg) and mtype == qos.RTM_NEWQDISC and flags == 5
    _, _, _, ifindex, handle, parent, _ = struct.unpack_from("BBHiIII", msg, 16)
    assert (ifindex, handle, parent) == (9, 0x11 << 16, 0x10011)
    assert b"tbf\0" in msg
    # the burst attribute (so the kernel does not cap the bucket below one frame)
    assert struct.pack("HHI", 8, qos.TCA_TBF_BURST, 1578) in msg
    limit, buffer_ticks = struct.unpack_from("II", msg, msg.index(b"tbf\0") + 4 + 8 + 24)
    assert limit == 90000 and buffer_ticks == int(1578 * 1e9 / 125 / 64)
    with pytest.raises(ValueError):
        qos.tbf_change_message(ifindex=9, minor=0x10, rate_bps=1, burst=9000, limit=1)


def test_htb_class_change_messages_carry_tcs_settings():
    c = qos.htb_class_params(PORT, 1, 1500, 1000, [1, 3])
    msg = qos.htb_class_change_message(ifindex=7, c=c, seq=5)
    length, mtype, flags, seq = struct.unpack_from("IHHI", msg)
    assert (length, mtype, flags, seq) == (len(msg), qos.RTM_NEWTCLASS, 5, 5)
    _, _, _, ifindex, handle, parent, _ = struct.unpack_from("BBHiIII", msg, 16)
    assert (ifindex, handle, parent) == (7, 0x10011, 0x10001)
    at = msg.index(b"htb\0") + 4 + 4 + 4  # TCA_OPTIONS, then TCA_HTB_PARMS
    rate = struct.unpack_from("BBHhHI", msg, at)
    ceil = struct.unpack_from("BBHhHI", msg, at + 12)
    buffer, cbuffer, quantum, _, prio = struct.unpack_from("IIIII", msg, at + 24)
    assert rate[1] == ceil[1] == qos.TC_LINKLAYER_ETHERNET
    assert rate[5] * 8 == c.rate_bit and ceil[5] * 8 == c.ceil_bit
    assert (quantum, prio) == (c.quantum, c.prio)
    # the bucket as a time in ticks at each rate (tc_calc_xmittime: whole microseconds)
    assert buffer == int(int(1e6 * c.burst / rate[5]) * 1000 / 64)
    assert cbuffer == int(int(1e6 * c.burst / ceil[5]) * 1000 / 64)
    assert c.burst and c.quantum == 1514 * 3 and c.rate_bit * 4 == 3 * c.ceil_bit
    assert qos.htb_class(PORT, 1, 1500, 1000, [1, 3], verb="change")[1] == "change"


def test_config_survives_the_dataplane_description():
    cfg = qcfg.QosConfig(classes=[qcfg.TrafficClass(name="a", ecn=qcfg.EcnProfile(k=3, kmax=9)),
                                 qcfg.TrafficClass(name="b", dscp=[26], lossless=True)],
                        pfc=qcfg.PfcConfig(xoff_bytes=9000, xon_bytes=3000, headroom_bytes=9000))
    assert from_data(qcfg.QosConfig, json.loads(json.dumps(asdict(cfg)))) == cfg


PORTS = [{"id": 0, "is_host": True, "peer": 1}, {"id": 1, "is_host": False, "peer": 0},
         {"id": 2, "is_host": False, "peer": 3}, {"id": 3, "is_host": False, "peer": 2}]


def test_policies_mark_and_pause_only_where_they_should():
    cfg = qcfg.QosConfig(classes=[qcfg.TrafficClass(name="a", ecn=qcfg.EcnProfile(k=3)),
                                 qcfg.TrafficClass(name="b", dscp=[26], lossless=True)],
                        pfc=qcfg.PfcConfig(xoff_bytes=9000, xon_bytes=3000, headroom_bytes=9000))
    ecn = qos_policy.ecn_settings(cfg, PORTS)
    assert {(p, c) for p, c, prof in ecn if prof} == {(1, 0), (2, 0), (3, 0)}  # no host NIC
    off = qcfg.QosConfig(**{**asdict(cfg), "classes": cfg.classes, "pfc": cfg.pfc,
                           "ecn_enabled": False})
    assert all(prof is None for _, _, prof in qos_policy.ecn_settings(off, PORTS))
    pfc = qos_policy.pfc_settings(cfg, PORTS)
    assert {(p, c) for p, c, th in pfc if th} == {(1, 1), (2, 1), (3, 1)}
    assert qos_policy.dscp_table(cfg)[26] == 1


def test_a_pause_acts_on_the_link_partner_of_the_congested_ingress():
    assert qos_policy.on_event(qcfg.EV_XOFF, 1, 1, PORTS) == qos_policy.PauseAction("pause", 0, 1)
    assert qos_policy.on_event(qcfg.EV_XON, 2, 1, PORTS) == qos_policy.PauseAction("resume", 3, 1)
    assert qos_policy.on_event(qcfg.EV_OVERFLOW, 2, 1, PORTS).verb == "none"
    with pytest.raises(ValueError):
        qos_policy.on_event(9, 1, 1, PORTS)


def test_a_batch_of_events_acts_once_per_link_pauses_first():
    E = qcfg
    plan = qos_policy.plan_batch([(E.EV_XON, 1, 1), (E.EV_XOFF, 2, 1), (E.EV_XOFF, 1, 1),
                                  (E.EV_OVERFLOW, 2, 1), (E.EV_XON, 3, 1)], PORTS)
    assert plan == [qos_policy.PauseAction("pause", 0, 1), qos_policy.PauseAction("pause", 3, 1),
                    qos_policy.PauseAction("resume", 2, 1)]


def test_netlink_queue_stats_are_parsed():
    queue = struct.pack("IIIII", 7, 10598, 3, 0, 0)           # qlen, backlog, drops, ...
    inner = struct.pack("HH", 4 + len(queue), 3) + queue        # TCA_STATS_QUEUE
    stats2 = struct.pack("HH", 4 + len(inner), 7) + inner       # TCA_STATS2
    kind = struct.pack("HH", 8, 1) + b"tbf\0"
    data = kind + stats2
    assert _stats_queue(data, 0, len(data)) == (10598, 7, 3)  # backlog, qlen, drops
    assert _stats(data, 0, len(data)) == (10598, 7, 3, 0)  # no basic counters: none sent
    basic = struct.pack("HH", 16, 1) + struct.pack("QI", 9_000_000, 6001)  # TCA_STATS_BASIC
    inner = basic + inner
    data = kind + struct.pack("HH", 4 + len(inner), 7) + inner
    assert _stats(data, 0, len(data)) == (10598, 7, 3, 6001)  # ... and packets sent


def test_marks_below_k_and_time_weighted_percentiles():
    # (t, bpf_before, qdisc, bpf_after, marks_before, marks_after)
    pairs = [(0.0, 0, 0, 0, 0, 0), (0.001, 40000, 39000, 41000, 0, 10),
             (0.002, 1000, 500, 1000, 12, 12), (0.003, 800, 400, 800, 14, 14),
             (0.004, 31000, 30000, 31500, 14, 15),    # marking; the qdisc holds exactly K
             (0.005, 30500, 31000, 29000, 15, 16),    # the marker's count dips to K: not marking
             (0.006, 800, 700, 800, 20, 20)]
    res = _marks_below_k(pairs, k_bytes=30000, frame=1000, lo=0, hi=1)
    # at the ticks where the marker read above K both times, the qdisc at or below K
    assert res["ticks_marking"] == 2 and res["ticks_marking_qdisc_at_or_below_k"] == 1
    assert res["ticks_marking_qdisc_below_k"] == 0          # it held exactly K
    assert res["fraction"] == 0.5
    # marks between two ticks whose qdisc readings were at or below K: 2 + 1 of 20; between
    # two whose marker readings were: only the 2 (the last interval began at 30500)
    assert res["marks"] == 20 and res["marks_below_k"] == 3
    assert res["interval_bound"] == round(3 / 20, 4)
    assert res["interval_bound_own_view"] == round(2 / 20, 4)
    assert _marks_below_k(pairs, 30000, 1000, lo=0.0045, hi=1)["fraction"] is None
    unmarked = [(t, b0, q, b1, 0, 0) for t, b0, q, b1, _, _ in pairs]   # drop-tail: no ECN
    assert _marks_below_k(unmarked, 30000, 1000, lo=0, hi=1)["fraction"] is None
    assert percentile([1, 5, 9], 50, weights=[0.1, 0.8, 0.1]) == 5


def test_pfc_summary_counts_pauses_and_reaction(tmp_path):
    path = tmp_path / "pfc_events.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PFC_COLUMNS)
        w.writerow([100, "s1", "s1-eth1", 1, "pause", "h1-eth0", 12000, 150.0, "", ""])
        w.writerow([900, "s1", "s1-eth1", 1, "resume", "h1-eth0", 5000, "", 30.5, 3028])
        w.writerow([1000, "s2", "s2-eth1", 1, "pause", "s1-eth2", 12000, 90.0, "", ""])
    s = pfc_summary(tmp_path)
    assert s["pauses"] == 2 and s["resumes"] == 1
    assert s["paused_links"] == {"h1-eth0->s1-eth1": 1, "s1-eth2->s2-eth1": 1}
    assert s["reaction_applied_us"]["max"] == 150.0
    assert s["bytes_after_xoff"]["max"] == 3028
    assert pfc_summary(tmp_path, t_from_ns=950)["pauses"] == 1


def test_incast_workload_on_loopback():
    server = threading.Thread(target=incast_wl.serve, args=(47811, 0), daemon=True)
    server.start()
    import socket
    import time
    for _ in range(50):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", 47811)) == 0:
                break
        time.sleep(0.05)
    res = incast_wl.read([("127.0.0.1", 47811)], block_bytes=300_000, rounds=3, dscp=0,
                         timeout_s=5)
    assert res["part_bytes"] == 300_000 and len(res["round_s"]) == 3
    assert all(t > 0 for t in res["round_s"])


def test_pfc_events_are_named_by_their_kind():
    from testbed.dataplane.dpapi import Dataplane
    record = qos.EVENT.pack(10, 5, 9, 3000, qcfg.EV_XOFF, 2, 1, 3, 12000)
    ev = Dataplane.decode(record)
    assert (ev.name, ev.rx_port, ev.cls) == ("pause", 2, 3)
    assert [Dataplane.decode(qos.EVENT.pack(0, 0, 0, 0, k, 0, 0, 0, 0)).name
            for k in (qcfg.EV_XON, qcfg.EV_OVERFLOW)] == ["resume", "overflow"]


def test_a_pause_expires_unless_its_ingress_still_asks():
    # transmitter 1 feeds ingress 2 (still above XON), transmitter 3 feeds ingress 4 (below)
    ports = [{"peer": 1}, {"peer": 2}, {"peer": 1}, {"peer": 4}, {"peer": 3}]
    held = {(2, 1): (True, 9000), (4, 1): (True, 1000), (2, 0): (False, 9000)}
    out = qos_policy.expired_pauses({(1, 1), (3, 1), (1, 0)}, ports,
                                    lambda rx, cls: held[(rx, cls)], xon_bytes=6000)
    assert [(a.verb, a.port, a.cls) for a in out] == [("resume", 1, 0), ("resume", 3, 1)]


def test_the_watchdog_pauses_where_an_ingress_asks_in_vain():
    """An ingress whose flag asks for a pause and holds more than XOFF while its partner
    transmits (its XOFF event never came) gets the pause; one already paused, one below
    XOFF, one not asking and a host NIC (never an ingress here) do not."""
    ports = [{"id": 0, "peer": 5, "is_host": True}, {"id": 1, "peer": 2, "is_host": False},
             {"id": 2, "peer": 1, "is_host": False}, {"id": 3, "peer": 4, "is_host": False},
             {"id": 4, "peer": 3, "is_host": False}, {"id": 5, "peer": 0, "is_host": False}]
    state = {(1, 1): (True, 50000), (2, 1): (True, 50000), (3, 1): (True, 20000),
             (4, 1): (False, 90000), (5, 1): (True, 60000), (0, 1): (True, 99999)}
    out = qos_policy.missed_pauses({(1, 1)}, ports, [1], lambda rx, cls: state[(rx, cls)],
                                   xoff_bytes=36000)
    # ingress 1 asks (partner 2 not paused): pause 2; ingress 2 asks but partner 1 is
    # paused already; 3 is below XOFF; 4 does not ask; 5 asks: pause its partner, host 0
    assert [(a.verb, a.port, a.cls) for a in out] == [("pause", 2, 1), ("pause", 0, 1)]
    assert qos_policy.missed_pauses(set(), ports, [], lambda rx, cls: (True, 1 << 30),
                                    36000) == []          # no lossless class


def test_a_restarted_executor_pauses_exactly_where_an_ingress_asks():
    # switch ingress ports 2 and 4 ask for pauses of class 1; 1 and 5 do not (a pause of
    # their partner may still be in force from before, with nobody asking); port 0 is a
    # host's NIC (it never asks, and is a transmitter only)
    ports = [{"id": 0, "peer": 5, "is_host": True}, {"id": 1, "peer": 2, "is_host": False},
             {"id": 2, "peer": 1, "is_host": False}, {"id": 3, "peer": 4, "is_host": False},
             {"id": 4, "peer": 3, "is_host": False}, {"id": 5, "peer": 0, "is_host": False}]
    asking = {(2, 1), (4, 1), (0, 1)}
    found = qos_policy.reconcile_pauses(ports, [1], lambda rx, cls: (rx, cls) in asking)
    assert [(a.verb, a.port, a.cls) for a in found] == [
        ("resume", 2, 1), ("pause", 1, 1), ("resume", 4, 1), ("pause", 3, 1),
        ("resume", 0, 1)]
    assert qos_policy.reconcile_pauses(ports, [], lambda rx, cls: True) == []  # no PFC
