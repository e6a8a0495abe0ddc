"""The jobs app's decisions besides the policies' (controllers/jobsctl.py), without Ryu, a
dataplane or a clock: a round's lifecycle from its file, where a decision's schedule goes,
the ports where jobs meet, and the records the app logs."""
from __future__ import annotations

import pytest

from controllers import jobsctl
from controllers.jobpolicy import Decision, JobInfo, Round, RoundFile
from controllers.jobsctl import RoundControl, RoundStep, round_step
from testbed.config import qos as qcfg
from testbed.workloads.model.jobsync import GateSetting

PORTS = ["s1-eth3", "s1-eth4", "s2-eth3"]
CFG = qcfg.QosConfig(classes=[qcfg.TrafficClass(name="be", weight=2),
                              qcfg.TrafficClass(name="j1", dscp=[40], weight=3),
                              qcfg.TrafficClass(name="j2", dscp=[42])])


def round_file(rid: int = 7, ports: list[str] = PORTS) -> RoundFile:
    jobs = [JobInfo("a", 10, 0.6, 0.4, 1.0, 1_000_000), JobInfo("b", 12, 0.6, 0.4, 1.0, 1_000_000)]
    rnd = Round(id=rid, policy="mltcp", jobs=jobs, job_classes=[1, 2])
    return RoundFile(round=rnd, progress={"a": "/r/a/progress.json", "b": "/r/b/progress.json"},
                     gates={"a": "/r/a/gate.json", "b": "/r/b/gate.json"}, ports=list(ports),
                     period_s=0.02)


def counts(**by_port: tuple[int, int]) -> jobsctl.Counts:
    """Bytes enqueued per port for DSCPs 10 (job a) and 12 (job b); ports not named: 0."""
    return {p: dict(zip((10, 12), by_port.get(p.replace("-", "_"), (0, 0)))) for p in PORTS}


def test_a_round_begins_steps_and_ends_with_its_file():
    data = {"round": {"id": 7}}
    assert round_step(None, None, False) == RoundStep()  # no round, no file: wait
    assert round_step(None, data, False) == RoundStep(begin=True)
    assert round_step(7, data, True) == RoundStep(tick=True)
    assert round_step(7, data, False) == RoundStep()  # its policy failed: no more steps
    assert round_step(7, None, True) == RoundStep(end=True)  # the runner removed the file
    # the next round's file replaced this one's: end it, begin the next, no step
    assert round_step(7, {"round": {"id": 8}}, True) == RoundStep(end=True, begin=True)
    assert jobsctl.wait_s(None) == 0.05 and jobsctl.wait_s(round_file()) == 0.02
    assert jobsctl.unreadable_record({"round": {"id": 9}}, ValueError("x")) == {
        "round": 9, "error": "ValueError('x')"}


def test_the_start_goes_to_every_port_and_a_step_only_where_jobs_met():
    rc = RoundControl(round_file(), 100.0, counts())
    assert jobsctl.counted_dscps(rc.rf) == [10, 12]
    base = CFG.class_of_dscp()
    start = rc.apply(Decision(classes={"a": 1, "b": 2}, weights=[4, 4, 4]), "start", base)
    assert start.ports == PORTS and start.weights == [4, 4, 4] and start.priorities is None
    assert start.dscp_map is not None and (start.dscp_map[10], start.dscp_map[12]) == (1, 2)
    assert start.dscp_map[40] == 1 and start.dscp_map[42] == 2  # the classes' own stay
    assert start.gates == {}
    assert start.record(100.5, 1e9) == {"round": 7, "when": "start", "t_mono": 100.5,
                                        "t": 1e9, "classes": {"a": 1, "b": 2},
                                        "weights": [4, 4, 4]}
    step = rc.apply(Decision(weights=[4, 16, 4]), "step", base)
    assert step.ports == [] and step.dscp_map is None  # no port met yet: none changes
    rc.look(100.5, counts(s1_eth4=(9000, 9000), s2_eth3=(20000, 8999)))
    step = rc.apply(Decision(weights=[4, 4, 16]), "step", base)
    assert step.ports == ["s1-eth4"] and step.weights == [4, 4, 16]
    assert step.record(101.0, 2e9)["when"] == "step"
    gated = rc.apply(Decision(gates={"b": GateSetting(200.0, 1.03, 0.4, 3)}), "step", base)
    assert gated.ports is None and gated.gates == {"/r/b/gate.json": GateSetting(200.0, 1.03, 0.4, 3)}
    assert rc.apply(Decision(), "step", base).record(1.0, 2.0) == {
        "round": 7, "when": "step", "t_mono": 1.0, "t": 2.0}  # nothing else set


def test_a_port_found_later_gets_the_schedule_in_force():
    rc = RoundControl(round_file(), 100.0, counts(s1_eth3=(50_000, 50_000)))
    assert not rc.look_due(100.49) and rc.look_due(100.5)
    # since the last look: both jobs sent 9000 bytes on s1-eth3, one of them on s2-eth3
    found = rc.look(100.5, counts(s1_eth3=(59_000, 59_000), s2_eth3=(30_000, 0)))
    assert found is not None and found.ports is None  # no schedule in force yet: none sent
    assert found.record(100.5, 5.0) == {"round": 7, "when": "met", "t_mono": 100.5, "t": 5.0,
                                        "ports": ["s1-eth3"]}
    assert not rc.look_due(100.9)
    rc.apply(Decision(priorities=[0, 2, 1]), "start", CFG.class_of_dscp())
    # the counters are taken from the last look: s2-eth3 now sees job b too
    found = rc.look(101.0, counts(s1_eth3=(59_000, 59_000), s2_eth3=(40_000, 9000)))
    assert found is not None and found.ports == ["s2-eth3"]
    assert (found.weights, found.priorities) == (None, [0, 2, 1])
    assert found.record(101.0, 6.0)["ports"] == ["s1-eth3", "s2-eth3"]
    assert rc.look(101.5, counts(s1_eth3=(99_000, 99_000), s2_eth3=(80_000, 20_000))) is None


def test_the_fabric_goes_back_to_its_classes_when_a_round_ends():
    todo = jobsctl.reset(CFG, round_file(ports=["s1-eth3", "s2-eth3"]))
    assert todo.ports == ["s1-eth3", "s2-eth3"] and todo.weights == [2, 3, 1]
    assert todo.priorities is None and todo.note is None and not todo.gates
    assert todo.dscp_map == CFG.class_of_dscp() and todo.dscp_map[40] == 1


@pytest.mark.parametrize("when", ["start", "step"])
def test_a_decisions_record_leaves_out_what_it_did_not_set(when):
    rc = RoundControl(round_file(), 0.0, counts())
    record = rc.apply(Decision(classes={"a": 0, "b": 0}, note={"k": 1}), when,
                      CFG.class_of_dscp()).record(3.0, 4.0)
    assert record == {"round": 7, "when": when, "t_mono": 3.0, "t": 4.0,
                      "classes": {"a": 0, "b": 0}, "note": {"k": 1}}
