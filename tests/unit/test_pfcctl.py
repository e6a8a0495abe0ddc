"""The PFC executor's decisions without Ryu or a dataplane (controllers/pfcctl.py): what it
sets up, which of a batch's actions it applies, each event's record with its reaction
times, and the log lines those records become (pfc.txt, pfc_events.csv, read back by
testbed/results/pfc.py)."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from controllers import pfcctl, qos_policy
from controllers.qos_policy import PauseAction
from testbed.config import qos as qcfg
from testbed.config.loader import SpecError
from testbed.config.qos import EV_OVERFLOW, EV_XOFF, EV_XON
from testbed.config.replies import PFC_COLUMNS, PFC_HEADER, PfcRecord, pfc_line
from testbed.results.pfc import pause_intervals, read_pfc_events

# h1's NIC (0) feeds s1's ingress 1; s1's egress 2 feeds s2's ingress 3, and back
PORTS = [{"id": 0, "is_host": True, "peer": 1, "node": "h1", "ifname": "h1-eth0"},
         {"id": 1, "is_host": False, "peer": 0, "node": "s1", "ifname": "s1-eth1"},
         {"id": 2, "is_host": False, "peer": 3, "node": "s1", "ifname": "s1-eth2"},
         {"id": 3, "is_host": False, "peer": 2, "node": "s2", "ifname": "s2-eth1"}]
PFC = qcfg.PfcConfig(xoff_bytes=9000, xon_bytes=3000, headroom_bytes=9000)


@dataclass(frozen=True)
class Ev:
    """A decoded event, as testbed/dataplane/dpapi.py's PfcEvent."""
    ns: int
    kind: int
    rx_port: int
    cls: int = 1
    bytes: int = 12000
    xoff_ns: int = 0
    last_arrival_ns: int = 0
    bytes_after_xoff: int = 0

    @property
    def name(self) -> str:
        return {EV_XOFF: "pause", EV_XON: "resume", EV_OVERFLOW: "overflow"}[self.kind]


def classes(pfc=PFC):
    return qcfg.QosConfig(classes=[qcfg.TrafficClass(name="be"),
                                   qcfg.TrafficClass(name="rdma", dscp=[26], lossless=True),
                                   qcfg.TrafficClass(name="bulk", dscp=[10])], pfc=pfc)


def test_setup_makes_only_the_lossless_class_lossless_and_only_with_pfc():
    plan = pfcctl.setup(classes(), PORTS)
    assert plan.lossless == [False, True, False] and plan.prepare == [1]
    assert plan.reconcile == [1]
    # thresholds on the three switch ingresses of the lossless class, none on a host NIC
    assert [(p, c) for p, c, t in plan.thresholds if t is not None] == [(1, 1), (2, 1), (3, 1)]
    assert len(plan.thresholds) == 9
    status = plan.status(True, [PauseAction("pause", 0, 1), PauseAction("resume", 2, 1)])
    assert status == {"lossless_ingress_queues": 3, "realtime_priority": True,
                      "pauses_at_start": 1,
                      "pfc": {"xoff_bytes": 9000, "xon_bytes": 3000, "headroom_bytes": 9000,
                              "enabled": True}}
    off = pfcctl.setup(classes(pfc=None), PORTS)
    assert off.lossless == [False, False, False] and off.prepare == [1]
    assert off.reconcile == [] and off.status(False, [])["lossless_ingress_queues"] == 0
    assert off.status(False, [])["pfc"] is None


def test_a_batch_applies_only_what_changes_a_transmitter():
    actions = [PauseAction("pause", 0, 1), PauseAction("pause", 2, 1),
               PauseAction("resume", 3, 1), PauseAction("resume", 0, 0)]
    paused = {(2, 1), (3, 1)}
    # 0/1 is paused now; 2/1 already is; 3/1 is resumed; 0/0 was never paused
    assert pfcctl.to_apply(actions, paused) == [PauseAction("pause", 0, 1),
                                                PauseAction("resume", 3, 1)]
    # with plan_batch: a pause and its resume in one batch cancel out, the last one wins
    planned = qos_policy.plan_batch([(EV_XOFF, 1, 1), (EV_XON, 1, 1), (EV_XOFF, 3, 1)], PORTS)
    assert pfcctl.to_apply(planned, set()) == [PauseAction("pause", 2, 1)]
    assert pfcctl.to_apply(planned, {(0, 1), (2, 1)}) == [PauseAction("resume", 0, 1)]


def test_a_pause_reports_the_time_from_xoff_to_it_taking_effect():
    ev = Ev(ns=1_000_000, kind=EV_XOFF, rx_port=1)
    rec = pfcctl.event_record(ev, PORTS, {(0, 1): 1_150_000}, {(0, 1)}, 1_200_000)
    assert rec == PfcRecord(time_ns=1_000_000, node="s1", port="s1-eth1", cls=1,
                            event="pause", upstream_port="h1-eth0", bytes_held=12000,
                            xoff_to_applied_us=150.0)
    # not applied in this batch but paused (an earlier pause): in effect when the batch ends
    rec = pfcctl.event_record(ev, PORTS, {}, {(0, 1)}, 1_234_567)
    assert rec.xoff_to_applied_us == 234.6
    # neither applied nor paused (the pause failed, or its resume came in the same batch)
    assert pfcctl.event_record(ev, PORTS, {}, set(), 1_234_567).xoff_to_applied_us is None


def test_a_resume_reports_what_still_arrived_after_xoff():
    ev = Ev(ns=5_000_000, kind=EV_XON, rx_port=3, bytes=2500, xoff_ns=1_000_000,
            last_arrival_ns=1_030_500, bytes_after_xoff=3028)
    rec = pfcctl.event_record(ev, PORTS, {(2, 1): 5_010_000}, set(), 5_020_000)
    assert (rec.event, rec.port, rec.upstream_port) == ("resume", "s2-eth1", "s1-eth2")
    assert rec.xoff_to_applied_us is None  # only a pause has one
    assert rec.xoff_to_last_arrival_us == 30.5 and rec.bytes_after_xoff == 3028
    # nothing arrived after XOFF: the last arrival is older
    early = Ev(ns=5_000_000, kind=EV_XON, rx_port=3, xoff_ns=1_000_000,
               last_arrival_ns=999_000, bytes_after_xoff=0)
    rec = pfcctl.event_record(early, PORTS, {}, set(), 5_020_000)
    assert rec.xoff_to_last_arrival_us is None and rec.bytes_after_xoff == 0
    overflow = pfcctl.event_record(Ev(ns=7, kind=EV_OVERFLOW, rx_port=1), PORTS, {}, set(), 9)
    assert (overflow.event, overflow.xoff_to_applied_us, overflow.bytes_after_xoff) == (
        "overflow", None, None)


def test_the_watchdogs_resume_names_the_partner_ingress():
    assert pfcctl.partner(PORTS, 2) == 3
    rec = pfcctl.timeout_record(9_000_000, PauseAction("resume", 2, 1), PORTS, held=1500)
    assert rec == PfcRecord(time_ns=9_000_000, node="s2", port="s2-eth1", cls=1,
                            event="resume-timeout", upstream_port="s1-eth2", bytes_held=1500)
    assert pfc_line(rec) == "9000000,s2,s2-eth1,1,resume-timeout,s1-eth2,1500,,,\n"
    assert pfcctl.txt_line(rec) == "9000000 s2 s2-eth1 1 resume\n"  # pfc.txt knows resume


def test_a_batch_is_slow_past_three_milliseconds():
    assert pfcctl.slow_batch(t_start=2_500_000, t_acted=3_000_000, oldest_ns=0) is None
    assert pfcctl.slow_batch(t_start=2_500_000, t_acted=3_500_000, oldest_ns=0) == (2.5, 1.0)


def test_the_log_is_written_and_read_back_with_one_set_of_columns(tmp_path):
    assert PFC_COLUMNS == ("time_ns", "node", "port", "class", "event", "upstream_port",
                           "bytes_held", "xoff_to_applied_us", "xoff_to_last_arrival_us",
                           "bytes_after_xoff")
    assert PFC_HEADER == ",".join(PFC_COLUMNS) + "\n"
    pause = pfcctl.event_record(Ev(ns=100, kind=EV_XOFF, rx_port=1), PORTS,
                                {(0, 1): 150_100}, {(0, 1)}, 160_000)
    resume = pfcctl.event_record(Ev(ns=900_000, kind=EV_XON, rx_port=1, bytes=5000,
                                    xoff_ns=100, last_arrival_ns=30_600,
                                    bytes_after_xoff=3028), PORTS, {}, set(), 910_000)
    assert pfc_line(pause) == "100,s1,s1-eth1,1,pause,h1-eth0,12000,150.0,,\n"
    assert pfc_line(resume) == "900000,s1,s1-eth1,1,resume,h1-eth0,5000,,30.5,3028\n"
    log = tmp_path / "pfc_events.csv"
    log.write_text(PFC_HEADER + pfc_line(pause) + pfc_line(resume))
    assert read_pfc_events(log) == [pause, resume]
    closed, still_open = pause_intervals([resume, pause])  # sorted by time
    assert closed == {("h1-eth0", "s1-eth1", 1): [(100, 900_000, "resume")]}
    assert still_open == {}
    # a controller killed mid-line: its successor's first line follows the cut one
    log.write_text(PFC_HEADER + pfc_line(pause) + "900000,s1,s1-e" + pfc_line(resume))
    assert read_pfc_events(log) == [pause]
    log.write_text(PFC_HEADER + pfc_line(pause).replace(",12000,", ",12k,"))
    with pytest.raises(SpecError, match="pfc_events.bytes_held: expected an integer"):
        read_pfc_events(log)


def test_the_dataplanes_decoded_event_is_what_the_executor_reads():
    from testbed.dataplane import qos_render as qos
    from testbed.dataplane.dpapi import Dataplane
    # an XON on s2's ingress 3, class 1: XOFF at 1 ms, last arrival 40 us later
    ev = Dataplane.decode(qos.EVENT.pack(2_000_000, 1_000_000, 1_040_000, 1514, EV_XON,
                                         3, 2, 1, 800))
    rec = pfcctl.event_record(ev, PORTS, {}, set(), 2_100_000)
    assert pfc_line(rec) == "2000000,s2,s2-eth1,1,resume,s1-eth2,800,,40.0,1514\n"
