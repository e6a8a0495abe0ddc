"""The fluid model of training jobs sharing one bottleneck (testbed/workloads/
interference.py): the closed forms for two identical jobs, weights, overlap, and the
offsets a time-shift policy would choose."""
import pytest

from testbed.workloads.model.interference import (
    Job,
    best_offsets,
    clearance_s,
    overlap_fraction,
    simulate,
    steady_iteration_s,
)

C, M = 0.6, 0.4  # communication 40% of an iteration alone


def test_one_job_alone_takes_compute_plus_communication():
    (run,) = simulate([Job("a", C, M)], 5)
    assert [round(it.duration, 9) for it in run] == [C + M] * 5
    assert run[1].start == pytest.approx(C + M) and run[1].comm_start == pytest.approx(2 * C + M)


def test_two_identical_jobs_in_step_share_the_link_and_take_c_plus_2m():
    runs = simulate([Job("a", C, M), Job("b", C, M)], 6)
    assert steady_iteration_s(runs) == pytest.approx([C + 2 * M] * 2)
    assert overlap_fraction(runs, 0, 3) == pytest.approx(1.0)


def test_interleaved_they_each_take_c_plus_m():
    # b starts half a period later: when C >= M, its communication fits in a's compute
    runs = simulate([Job("a", C, M), Job("b", C, M, offset_s=(C + M) / 2)], 8)
    assert steady_iteration_s(runs) == pytest.approx([C + M] * 2)
    assert overlap_fraction(runs, 0, 5) == pytest.approx(0.0)


def test_weights_split_the_link_while_both_communicate():
    # in step, a has 3 of 4 shares: it finishes its M after M/0.75 s; b gets the rest
    runs = simulate([Job("a", C, M, weight=3), Job("b", C, M)], 1)
    a, b = runs[0][0], runs[1][0]
    assert a.end - a.comm_start == pytest.approx(M / 0.75)
    # b did M/4 of its work meanwhile, then has the link to itself
    assert b.end - b.comm_start == pytest.approx(M / 0.75 + (M - M / 3))


def test_the_time_shift_offsets_recover_the_interleaved_iteration():
    jobs = [Job("a", C, M), Job("b", C, M)]
    offsets, mean = best_offsets(jobs)
    assert offsets[0] == 0 and 0 < offsets[1] < C + M
    assert mean == pytest.approx(C + M, rel=0.02)
    # three jobs whose communication cannot all fit apart: better than in step, not C + M
    three = [Job("a", C, M), Job("b", C, M), Job("c", C, M)]
    offs, mean3 = best_offsets(three)
    in_step = sum(steady_iteration_s(simulate(three, 12), 4)) / 3
    assert mean3 < in_step and mean3 > C + M


def test_the_offsets_split_the_link_idle_time_between_the_phases():
    # two unequal jobs on one period whose link times leave 84 ms idle: every offset that
    # keeps them apart ties, and the one chosen leaves half of it on each side of a phase
    period, ma, mb = 0.704, 0.25, 0.37
    jobs = [Job("a", period - ma, ma), Job("b", period - mb, mb)]
    offsets, mean = best_offsets(jobs)
    assert mean == pytest.approx(period)
    runs = simulate([Job(j.name, j.compute_s, j.comm_s, o) for j, o in zip(jobs, offsets)], 12)
    idle = period - ma - mb
    assert clearance_s(runs) == pytest.approx(idle / 2, abs=period / 200)


def test_replay_shares_the_link_among_phases_under_way():
    from testbed.workloads.model.interference import replay
    # together from 0: both take 2M; b half M late: a alone for M/2, then shared
    assert replay([(0.0, M, 1), (0.0, M, 1)]) == pytest.approx([2 * M, 2 * M])
    a, b = replay([(0.0, M, 1), (M / 2, M, 1)])
    assert a == pytest.approx(M / 2 + M) and b == pytest.approx(2 * M)
    # apart: each alone; weights split the link while both run
    assert replay([(0.0, M, 1), (1.0, M, 1)]) == pytest.approx([M, 1.0 + M])
    a, b = replay([(0.0, M, 3), (0.0, M, 1)])
    assert a == pytest.approx(M / 0.75) and b == pytest.approx(2 * M)
