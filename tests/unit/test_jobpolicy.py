"""Cross-job policies (controllers/jobpolicy.py) and the gate / progress files between them
and the workers (testbed/workloads/model/jobsync.py): each policy's decisions from a round and
what the jobs report, without a fabric."""
import json
import time

import pytest

from controllers.jobpolicy import (
    FairShare,
    JobInfo,
    MltcpLike,
    Priority,
    Round,
    TimeShift,
    dscp_table,
    gated_model,
    intensity,
    policy_for,
    shift_plan,
)
from testbed.workloads.model.jobsync import Gate, GateSetting, Progress, Reporter, read_progress

C, M = 0.6, 0.4


def info(name, dscp=10, weight=1.0, compute=C, comm=M, nbytes=1_000_000, workers=2):
    return JobInfo(name, dscp, compute, comm, compute + comm, nbytes, link_s=comm,
                   workers=workers, weight=weight)


def rnd(policy, jobs, classes=(1, 2, 3), **args):
    return Round(id=1, policy=policy, jobs=jobs, job_classes=list(classes), args=args)


def test_fair_share_puts_every_job_in_the_shared_class():
    d = FairShare().start(0.0, rnd("none", [info("a"), info("b", 12)]))
    assert d.classes == {"a": 0, "b": 0} and d.weights is None and d.gates is None


def test_priority_by_weight_strict_gives_the_heaviest_job_the_top_class():
    jobs = [info("a", 10, weight=1), info("b", 12, weight=5), info("c", 14, weight=3)]
    d = Priority("weight", "strict").start(0.0, rnd("priority", jobs))
    assert d.classes == {"b": 1, "c": 2, "a": 3}
    assert d.priorities == [0, 3, 2, 1] and d.weights is None  # best effort last
    assert d.note["ranking"] == ["b", "c", "a"]


def test_priority_wrr_weights_fall_with_rank():
    jobs = [info("a", 10, weight=2), info("b", 12, weight=1)]
    d = Priority("weight", "wrr").start(0.0, rnd("priority", jobs))
    assert d.classes == {"a": 1, "b": 2} and d.weights == [1, 2, 1, 1]


def test_priority_by_intensity_favours_compute_per_byte():
    light = info("light", 10, compute=1.0, nbytes=100_000)   # 2e-5 s per byte
    heavy = info("heavy", 12, compute=1.0, nbytes=1_000_000)
    assert intensity(light) > intensity(heavy)
    d = Priority("intensity").start(0.0, rnd("priority", [heavy, light]))
    assert d.classes == {"light": 1, "heavy": 2}


def test_priority_needs_a_class_per_job():
    with pytest.raises(ValueError, match="a class per job"):
        Priority().start(0.0, rnd("priority", [info("a"), info("b", 12)], classes=(1,)))


def test_shift_plan_interleaves_two_identical_jobs():
    plan = shift_plan([info("a"), info("b", 12)], 0.03, 0.1)
    assert plan.period_s == pytest.approx(1.03)
    assert plan.overlap_unshifted == pytest.approx(1.0) and plan.overlap == pytest.approx(0.0)
    assert plan.offsets[0] == 0.0 and M <= plan.offsets[1] <= plan.period_s - M
    assert plan.gated_s == pytest.approx(1.03) and plan.fair_s == pytest.approx(1.4)
    assert plan.gains


def test_time_shift_does_not_gate_jobs_of_incompatible_periods():
    """A short job held to a long job's period loses more than interleaving wins: the
    model says so, and the policy leaves the group ungated."""
    long, short = info("long", compute=1.2, comm=0.4), info("short", 12, compute=0.4, comm=0.2)
    plan = shift_plan([long, short], 0.03, 0.1)
    assert not plan.gains
    p = TimeShift()
    p.start(0.0, rnd("time_shift", [long, short]))
    d = p.step(1.0, {n: Progress(1.0, 0, "gate", 0, 0) for n in ("long", "short")})
    assert d is not None and d.gates == {} and set(d.note["not_gated"]) == {"long", "short"}


def test_shift_plan_releases_unequal_jobs_by_their_own_compute():
    """Two jobs measured on a 20 Mb/s uplink: a (compute 0.39 s, link 0.26 s) and b (0.18 s,
    0.38 s). A gate releases a job early by its padding to the common period; the gates'
    offsets carry it, so the phases the gates give are the ones the model kept apart."""
    a = JobInfo("a", 10, 0.3926, 0.2554, 0.6494, 631456, link_s=0.2563)
    b = JobInfo("b", 12, 0.1823, 0.3739, 0.5576, 946032, link_s=0.3836)
    plan = shift_plan([a, b], 0.03, margin=0.1)
    # 0.64 s of link time per period: the period grows to fit it with 10% to spare
    assert plan.period_s == pytest.approx((0.2563 + 0.3836) * 1.1)
    assert plan.overlap == pytest.approx(0.0) and plan.gains
    # where each job's link time falls in the period, as the workers run after a release
    spans = sorted(((o + j.period_s - j.link_s) % plan.period_s, j.link_s)
                   for j, o in zip((a, b), plan.offsets))
    (s0, l0), (s1, l1) = spans
    assert s0 + l0 <= s1 + 1e-9 and s1 + l1 <= s0 + plan.period_s + 1e-9
    # without the margin, the period is a's alone iteration plus 3%: the link times fill 96%
    assert shift_plan([a, b], 0.03, margin=0.0).period_s == pytest.approx(0.6494 * 1.03)
    # the analysis models a gated round from the decision's note, rounded to 4 decimals: the
    # same model the plan chose its offsets on
    again = gated_model([a, b], round(plan.period_s, 4), [round(o, 4) for o in plan.offsets])
    chosen = gated_model([a, b], plan.period_s, plan.offsets)
    for x, y in zip(again, chosen):
        assert x.offset_s == pytest.approx(y.offset_s, abs=2e-4)
        assert x.compute_s == pytest.approx(y.compute_s, abs=2e-4)


def test_time_shift_gates_once_every_job_has_reported():
    p = TimeShift(slack=0.03, lead=2)
    jobs = [info("a"), info("b", 12)]
    p.start(10.0, rnd("time_shift", jobs))
    seen = {"a": Progress(10.0, 3, "compute", 0, 0)}
    assert p.step(10.0, seen) is None  # b not started yet
    seen["b"] = Progress(10.5, 1, "sync", 100, 0)
    d = p.step(11.0, seen)
    assert d is not None and d.gates is not None
    ga, gb = d.gates["a"], d.gates["b"]
    assert ga.first_iter == 5 and gb.first_iter == 3
    assert ga.period_s == gb.period_s == pytest.approx(1.03)
    # the anchor leaves every job time to reach its first gated iteration
    assert ga.anchor >= 11.0 + 3 * (1.0 + 2 * M)
    assert d.note["predicted_overlap"] == {"a": 0.0, "b": 0.0}
    assert d.note["predicted_overlap_unshifted"]["a"] == pytest.approx(1.0)
    assert p.step(12.0, seen) is None  # once


def test_time_shift_leaves_a_job_that_meets_no_other_alone():
    p = TimeShift()
    jobs = [info("a"), info("b", 12), info("c", 14, compute=2.0)]
    p.start(0.0, Round(id=1, policy="time_shift", jobs=jobs, job_classes=[1, 2, 3],
                       groups=[["a", "b"], ["c"]]))
    d = p.step(1.0, {n: Progress(1.0, 0, "gate", 0, 0) for n in "abc"})
    assert d is not None and d.gates is not None and sorted(d.gates) == ["a", "b"]
    # the pair's period is theirs, not the slow job's
    assert d.gates["a"].period_s == pytest.approx(1.03)


def test_mltcp_weights_grow_with_the_share_of_the_iteration_sent():
    p = MltcpLike(gain=3, levels=4)
    jobs = [info("a", nbytes=1000), info("b", 12, nbytes=1000)]
    d = p.start(0.0, rnd("mltcp", jobs))
    assert d.classes == {"a": 1, "b": 2} and d.weights == [4, 4, 4, 4]
    d = p.step(0.1, {"a": Progress(0.1, 5, "sync", 750, 1000),
                     "b": Progress(0.1, 5, "sync", 250, 1000)})
    # a: 1 + 3 x 0.75 = 3.25 (x4 = 13); b: 1 + 3 x 0.25 = 1.75 (x4 = 7)
    assert d is not None and d.weights == [4, 13, 7, 4]
    # a job computing keeps weight 1; the previous iteration's bytes are the total
    d = p.step(0.2, {"a": Progress(0.2, 6, "compute", 0, 1000),
                     "b": Progress(0.2, 5, "sync", 1000, 1000)})
    assert d is not None and d.weights == [4, 4, 16, 4]
    assert p.step(0.3, {"a": Progress(0.3, 6, "compute", 0, 1000),
                        "b": Progress(0.3, 5, "sync", 1000, 1000)}) is None  # unchanged


def stepped(gain: float, iterations: int = 14, dt: float = 0.002) -> list[list[float]]:
    """Two jobs (b 5% of M behind a) on one link, stepped every `dt` with the MLTCP-like
    policy's weights; each job's communication phases as (start, end) per iteration."""
    p = MltcpLike(gain=gain, levels=8)
    jobs = [info("a", nbytes=1000), info("b", 12, nbytes=1000)]
    p.start(0.0, rnd("mltcp", jobs))
    left = {"a": C, "b": C + 0.05 * M}  # compute left, or link work left
    phase = {"a": "compute", "b": "compute"}
    spans: dict[str, list[list[float]]] = {"a": [], "b": []}
    t = 0.0
    while min(len(v) for v in spans.values()) < iterations:
        prog = {n: Progress(t, len(spans[n]), phase[n], int(1000 * (1 - left[n] / M)), 1000)
                for n in left if phase[n] == "sync"}
        w = p.weights(prog)
        comm = [n for n in left if phase[n] == "sync"]
        total = sum(w[p.classes[n]] for n in comm)
        for n in list(left):
            if phase[n] == "compute":
                left[n] -= dt
                if left[n] <= 0:
                    phase[n], left[n] = "sync", M
                    spans[n].append([t, t])
            else:
                left[n] -= dt * w[p.classes[n]] / total
                if left[n] <= 0:
                    phase[n], left[n] = "compute", C
                    spans[n][-1][1] = t
        t += dt
    return [[max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / (a[1] - a[0])
             for a, b in zip(spans["a"], spans["b"]) if a[1] > a[0]]]


def test_mltcp_like_weights_interleave_two_jobs_that_fair_sharing_keeps_together():
    """The MLTCP paper's shape: the job further into its iteration's bytes gets more of the
    link, finishes first, and the phases drift apart until they no longer meet; with
    gain 0 (fair sharing) they stay overlapped."""
    fair = stepped(0.0)[0]
    mltcp = stepped(3.0)[0]
    assert min(fair[-4:]) > 0.8
    assert max(mltcp[-4:]) < 0.2
    assert mltcp[0] > 0.5  # they started together


def test_dscp_table_moves_only_the_jobs_code_points():
    base = [0] * 64
    base[46] = 3
    t = dscp_table(base, [info("a", 10), info("b", 12)], {"a": 1, "b": 2})
    assert t[10] == 1 and t[12] == 2 and t[46] == 3 and t[0] == 0


def test_policy_for_loads_builtins_and_plugins(tmp_path):
    assert isinstance(policy_for("mltcp", {"gain": 2}), MltcpLike)
    with pytest.raises(ValueError, match="unknown job policy"):
        policy_for("fifo", {})
    plugin = tmp_path / "mine.py"
    plugin.write_text("class Mine:\n    def __init__(self, k=1):\n        self.k = k\n"
                      "    def start(self, now, rnd):\n        return None\n"
                      "    def step(self, now, progress):\n        return None\n")
    assert policy_for(f"{plugin}:Mine", {"k": 3}).k == 3
    plugin.write_text("class Mine:\n    pass\n")
    with pytest.raises(TypeError, match="no start"):
        policy_for(f"{plugin}:Mine", {})


def test_gate_releases_iterations_on_its_period(tmp_path):
    path = tmp_path / "gate.json"
    g = Gate(str(path))
    assert g.wait(0) == 0.0  # no gate yet
    now = time.monotonic()
    setting = GateSetting(anchor=now + 0.2, period_s=1.0, offset_s=0.1, first_iter=2)
    assert setting.release(1) is None and setting.release(3) == pytest.approx(now + 1.3)
    path.write_text(json.dumps(setting.__dict__))
    assert g.wait(1) == 0.0
    waited = g.wait(2)
    assert 0.25 <= waited <= 0.31
    assert g.wait(0) == 0.0


def test_a_late_job_starts_at_once():
    s = GateSetting(anchor=0.0, period_s=1.0, offset_s=0.0)
    assert s.release(5) == 5.0  # a job at iteration 5 after t=5 is not held


def test_reporter_counts_bytes_per_iteration(tmp_path):
    sent = [0]
    r = Reporter(str(tmp_path / "p.json"), lambda: sent[0], period_s=0.01)
    r.start()
    sent[0] = 500
    r.begin(1, "compute")
    sent[0] = 800
    r.set_phase("sync")
    time.sleep(0.05)
    p = read_progress(tmp_path / "p.json")
    assert p is not None and (p.iteration, p.phase, p.sent_bytes, p.last_bytes) == \
        (1, "sync", 300, 500)
    r.stop()
    assert read_progress(tmp_path / "p.json").phase == "done"
    assert read_progress(tmp_path / "missing.json") is None


def test_meeting_ports_are_where_two_jobs_sent():
    from controllers.jobpolicy import meeting_ports
    deltas = {"s1-eth1": {10: 50_000, 12: 40_000}, "s1-eth2": {10: 50_000, 12: 0},
              "s1-eth3": {10: 100, 12: 90_000, 14: 9000}}
    assert meeting_ports(deltas, 9000) == {"s1-eth1", "s1-eth3"}
