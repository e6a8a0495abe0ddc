"""Fault specs and the pure parts of fault handling: what a fault names is checked
against the fabric, the timeline orders every down and up, iperf3's receiver intervals say
how long each flow carried nothing."""
import json

import pytest

from testbed.config.faults import FabricFault, fault_ports, timeline
from testbed.spec import SpecError, loads
from testbed.workloads.model.flows import outage, parse_iperf3
from topologies import fattree


def spec(**perm):
    return {"name": "f", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "permutation", "duration_s": 10, "omit_s": 1, **perm}]}


@pytest.mark.parametrize("faults,message", [
    ([{"at_s": 2}], "experiments[0].faults[0]: give exactly one of link, switch and controller"),
    ([{"controller": True, "switch": "c1", "at_s": 2}], "give exactly one"),
    ([{"controller": True, "at_s": 2, "for_s": -1}], "faults[0].for_s: must be > 0"),
    ([{"link": ["a1", "c1"], "switch": "c1", "at_s": 2}], "give exactly one"),
    ([{"link": ["a1"], "at_s": 2}], "experiments[0].faults[0].link: two different nodes"),
    ([{"link": ["a1", "a1"], "at_s": 2}], "faults[0].link: two different nodes"),
    ([{"link": ["a1", "zz"], "at_s": 2}], "faults[0].link: no node 'zz'"),
    ([{"link": ["a1", "a2"], "at_s": 2}], "faults[0].link: a1 and a2 are not linked"),
    ([{"switch": "h1", "at_s": 2}], "faults[0].switch: no switch 'h1'"),
    ([{"switch": "c1", "at_s": 11}], "faults[0].at_s: 11 s is not within the phase's 11 s"),
    ([{"switch": "c1", "at_s": -1}], "faults[0].at_s: out of range"),
    ([{"switch": "c1", "at_s": 1, "for_s": 0}], "faults[0].for_s: must be > 0"),
    ([{"switch": "c1"}], "faults[0]: give exactly one of at_s and at_iter"),
    ([{"switch": "c1", "at_s": 1, "at_iter": 2}], "give exactly one of at_s and at_iter"),
    ([{"switch": "c1", "at_iter": 2}], "faults[0].at_iter: only a training job has iterations"),
    ([{"switch": "c1", "at_s": 1, "when": 3}], "faults[0].when: unknown key"),
])
def test_bad_faults_name_the_field(faults, message):
    with pytest.raises(SpecError) as err:
        loads(spec(faults=faults))
    assert message in str(err.value)


def test_faults_with_finite_flows_or_odd_intervals_are_refused():
    with pytest.raises(SpecError, match="faults: not with flow_bytes"):
        loads(spec(faults=[{"switch": "c1", "at_s": 1}], flow_bytes=10000))
    with pytest.raises(SpecError, match="interval_s: must be in 0.1..10"):
        loads(spec(interval_s=0.01))


def test_timeline_orders_downs_and_ups_and_names_switch_ports():
    topo = fattree(4)
    link = FabricFault(link=["a1", "c1"], at_s=2, for_s=3)
    edge_link = FabricFault(link=["h1", "e1"], at_s=2)
    core = FabricFault(switch="c1", at_s=1, for_s=1)
    assert fault_ports(link, topo) == (("a1", 3), ("c1", 1))
    assert fault_ports(edge_link, topo) == (("e1", 1),)  # a host's end is not set down
    assert len(fault_ports(core, topo)) == 4
    steps = timeline([link, edge_link, core], topo)
    assert [(s.t_s, s.action, s.fault) for s in steps] == [
        (1, "down", 2), (2, "down", 0), (2, "down", 1), (2, "up", 2), (5, "up", 0)]


def test_outage_counts_only_what_follows_a_fault():
    # a congestion stall at 1.0-1.2 s, the fault at 2.0 s, dead until 2.4 s
    rates = [9.5] * 10 + [0.0] * 2 + [30.0] + [9.5] * 7 + [0.0] * 3 + [0.2] + [9.4] * 10
    assert outage(rates, 0.1, [2.0]) == {"blackholed_s": 0.4, "longest_s": 0.4, "resumed": True}
    assert outage(rates, 0.1, []) == {"blackholed_s": 0.0, "longest_s": 0.0, "resumed": True}
    # a run that starts more than the window after the fault is not the fault's
    assert outage(rates, 0.1, [2.0], window_s=0.0)["blackholed_s"] == 0.4  # starts at 2.0
    assert outage(rates, 0.1, [0.5], window_s=0.2)["blackholed_s"] == 0.0
    # the flow's clock starts a little after the runner started it: a fault placed up to
    # slack_s after the run's start is still its cause
    assert outage(rates, 0.1, [2.3], window_s=0.0)["blackholed_s"] == 0.4
    assert outage(rates, 0.1, [2.3], window_s=0.0, slack_s=0.1)["blackholed_s"] == 0.0
    assert outage([9.5] * 5 + [0.0] * 5, 0.1, [0.5])["resumed"] is False
    assert outage([], 0.1, [1.0])["blackholed_s"] is None


def test_receiver_intervals_come_from_the_server_output():
    text = json.dumps({"end": {"sum_received": {"bits_per_second": 9e6}},
                       "server_output_json": {"intervals": [
                           {"sum": {"seconds": 0.1, "bits_per_second": 9.5e6}},
                           {"sum": {"seconds": 0.1, "bits_per_second": 0.0}},
                           {"sum": {"seconds": 0.04, "bits_per_second": 9.0e6}}]}})
    r = parse_iperf3("h1", "h9", text)
    assert r.interval_s == 0.1 and r.intervals_mbps == (9.5, 0.0, 9.0)
    assert parse_iperf3("h1", "h9", json.dumps(
        {"start": {"connected": [{"local_port": 40000}]}, "end": {}})).local_port == 40000


def test_a_frame_names_its_connection_and_flows_match_both_directions():
    import socket
    import struct

    from testbed.measure.linkflows import parse_frame
    from testbed.workloads.model.flows import crosses
    ip = bytes([0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0]) + socket.inet_aton("10.0.0.1") \
        + socket.inet_aton("10.0.0.9")
    frame = b"\x02" * 12 + b"\x08\x00" + ip + struct.pack("!HH", 40000, 5201) + b"\x00" * 16
    assert parse_frame(frame) == ("10.0.0.1", "10.0.0.9", 40000, 5201)
    assert parse_frame(b"\x02" * 12 + b"\x08\x06" + b"\x00" * 28) is None  # ARP
    udp = frame[:23] + b"\x11" + frame[24:]
    assert parse_frame(udp) is None
    seen = [("10.0.0.9", "10.0.0.1", 5201, 40000)]  # only its ACKs crossed the link
    assert crosses(seen, ("10.0.0.1", "10.0.0.9", 40000, 5201))
    assert not crosses(seen, ("10.0.0.1", "10.0.0.9", 40002, 5201))  # iperf3's control one
    assert not crosses(seen, ("10.0.0.2", "10.0.0.9", 40000, 5201))


def test_a_dead_controller_is_reported_with_its_cause():
    from testbed.net.controller import controller_death
    assert controller_death(None, None, []) is None  # still running
    fault = controller_death(-9, 1795450000.0, ["x"])
    assert "killed by the spec's fault" in fault and "signal 9" in fault
    crash = controller_death(1, None, ["loading app", "Traceback", "KeyError: 'x'"])
    assert crash.startswith("the controller died during the phase (exit status 1)")
    assert "KeyError: 'x'" in crash
    assert "its log is empty" in controller_death(-15, None, [])
    import time
    seen = controller_death(-9, None, [], died_at=1795450000.0)
    assert seen.startswith("the controller died during the phase at "
                           f"{time.strftime('%H:%M:%S', time.localtime(1795450000.0))} "
                           "(killed by signal 9)")
    topo = fattree(4)
    assert fault_ports(FabricFault(controller=True, at_s=1), topo) == ()
    assert FabricFault(controller=True, at_s=1).target() == "controller"


def training(**exp):
    return {"name": "t", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "training", "iters": 10, **exp}]}


def test_training_faults_take_an_iteration_or_a_time():
    spec, _ = loads(training(faults=[{"link": ["a1", "c1"], "at_iter": 4},
                                  {"switch": "e1", "at_s": 3, "for_s": 2}]))
    assert [f.at_iter for f in spec.experiments[0].faults] == [4, None]
    for faults, message in [
            ([{"link": ["a1", "c1"], "at_iter": 10}], "faults[0].at_iter: must be in 0..9"),
            ([{"switch": "zz", "at_iter": 1}], "experiments[0].faults[0].switch: no switch"),
            ([{"switch": "e1"}], "faults[0]: give exactly one of at_s and at_iter")]:
        with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
            loads(training(faults=faults))


def test_an_iteration_timeline_waits_for_its_iteration():
    topo = fattree(4)
    faults = [FabricFault(link=["a1", "c1"], at_iter=3, for_s=2),
              FabricFault(switch="c2", at_s=1)]
    assert [(s.t_s, s.fault) for s in timeline(faults, topo)] == [(1, 1)]
    steps = timeline(faults, topo, triggered={0: 4.5})
    assert [(s.t_s, s.action, s.fault) for s in steps] == [
        (1, "down", 1), (4.5, "down", 0), (6.5, "up", 0)]


def test_the_iteration_a_failure_struck_and_its_spike():
    from testbed.experiments.training.analysis import fault_spike
    # two workers, 1 s iterations ending at t=1..8; the failure at t=4.2 strikes iteration 4
    # (ends at 5), which took 3 s on the slower worker
    def rows(slow):
        return [{"iteration": i, "t_end": i + 1.0, "iter_s": 3.0 if slow and i == 4 else 1.0}
                for i in range(8)]
    spike = fault_spike([rows(False), rows(True)], [4.2], warmup=1)
    assert spike == {"fault_iteration": 4, "fault_iter_s": 3.0, "steady_iter_s": 1.0,
                     "fault_spike": 3.0}
    assert fault_spike([rows(False)], [], 1) is None
    assert fault_spike([rows(False)], [99.0], 1) is None  # after the job


def test_a_failed_job_is_told_whether_the_fault_partitioned_it():
    from testbed.experiments.training.run import fault_context
    topo = fattree(4)
    steps = [{"fault": "switch e1", "action": "down", "at_s": 3.0}]
    said = fault_context(topo, [FabricFault(switch="e1", at_s=3)], steps,
                         ["h1", "h5", "h9", "h13"])
    assert said.startswith("a fault partitioned the job (switch e1 down leaves h5, h9, h13 "
                           "with no path to h1")
    said = fault_context(topo, [FabricFault(link=["a1", "c1"], at_s=3)],
                         [{"fault": "link a1-c1", "action": "down", "at_s": 3.0}],
                         ["h1", "h5", "h9", "h13"])
    assert said.startswith("the job failed under faults it could have survived")


PING = """PING 10.0.0.9 (10.0.0.9) 56(84) bytes of data.
[100.000500] 64 bytes from 10.0.0.9: icmp_seq=1 ttl=64 time=0.5 ms
[100.005500] 64 bytes from 10.0.0.9: icmp_seq=2 ttl=64 time=0.5 ms
[100.010500] 64 bytes from 10.0.0.9: icmp_seq=3 ttl=64 time=0.5 ms
[100.060500] 64 bytes from 10.0.0.9: icmp_seq=13 ttl=64 time=0.5 ms
[100.065500] 64 bytes from 10.0.0.9: icmp_seq=14 ttl=64 time=0.5 ms
[100.075500] 64 bytes from 10.0.0.9: icmp_seq=16 ttl=64 time=0.5 ms
[101.200500] 64 bytes from 10.0.0.9: icmp_seq=241 ttl=64 time=0.5 ms
[103.000500] 64 bytes from 10.0.0.9: icmp_seq=600 ttl=64 time=0.5 ms

--- 10.0.0.9 ping statistics ---
"""


def test_a_probe_times_the_break_a_failure_made_in_its_path():
    from testbed.workloads.model.flows import parse_probe, probe_argv, probe_outage
    replies = parse_probe(PING)
    assert replies[0] == (1, 100.0005) and len(replies) == 8
    # the failure at t=100.02: replies 4-12 missing (9 probes of 5 ms); the single loss
    # (15) is congestion (and 17-240 lost in between is the test's shorthand: 224 probes
    # would count); the silence beginning more than a second later is not this failure's
    assert probe_outage(replies[:6], 0.005, 100.02) == 0.045
    assert probe_outage(replies[:6], 0.005, 100.07) == 0.045  # the run that arrived before
    assert probe_outage(replies, 0.005, 102.0) == 1.79  # 358 probes lost
    assert probe_outage(replies[:6], 0.005, 100.07, min_lost=10) == 0.0
    assert probe_outage([], 0.005, 100.0) == 0.0
    assert probe_argv("10.0.0.9", 0.005, 16)[:5] == ["ping", "-n", "-D", "-i", "0.0050"]


def test_probe_outages_in_the_headline():
    from testbed.experiments.permutation.analysis import outage_headline
    row = ["ecmp", "stride:8", 0, "h1", "h9", "link a1-c1 down at 5 s", True, 0.2, 0.2, True,
           5.0, 0.1]
    rows = [row + [0.03, 0.0], row[:6] + [False, 0.0, 0.0, True, 5.0, 0.1, 0.0, 0.01],
            row + [0.01, 0.0]]
    head = outage_headline(rows)
    assert head["probes_cut_ecmp"] == "2/3" and head["probe_outage_max_ms_ecmp"] == 30.0
    assert head["probes_cut_before_ecmp"] == "1/3"
    assert head["probe_outage_median_ms_ecmp"] == 30.0  # the upper median of [10, 30]
    assert "probes_cut_ecmp" not in outage_headline([row + [None, None]])
    with pytest.raises(SpecError, match="probe_ms: probes time failures; give faults too"):
        loads(spec(probe_ms=5))
