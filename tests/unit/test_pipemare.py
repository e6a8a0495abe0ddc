"""PipeMare's asynchronous pipeline: the schedule without a flush, the delays it makes, its
replay and model, the two corrections' arithmetic, and a real job on loopback."""
from __future__ import annotations

import statistics

import pytest

from testbed.workloads.model.parallel.pipemare import PipeMare, gamma, lr_scale, tau
from testbed.workloads.model.parallel.schedule import (
    actions,
    simulate,
    staleness,
    stream,
)


@pytest.mark.parametrize("p,m,iters", [(1, 1, 3), (2, 1, 4), (4, 2, 5), (4, 4, 3), (3, 8, 2)])
def test_the_stream_is_1f1b_over_the_run_cut_at_each_update(p, m, iters):
    for s in range(p):
        chunks = stream(s, p, m, iters)
        assert len(chunks) == iters
        flat = [a for c in chunks for a in c]
        assert sorted(flat) == sorted([(k, g) for g in range(m * iters) for k in "FB"])
        for k, chunk in enumerate(chunks):  # each iteration ends with its last backward
            assert chunk[-1] == ("B", k * m + m - 1)
        # one iteration of it is 1F1B's iteration
        assert stream(s, p, m, 1) == [actions("1f1b", s, p, m)]


def weight_delays(s: int, p: int, m: int, iters: int) -> list[int]:
    """Replays the stream: per micro-batch, updates made between its forward and backward."""
    version, seen, out = 0, {}, []
    for kind, g in (a for c in stream(s, p, m, iters) for a in c):
        if kind == "F":
            seen[g] = version
            continue
        out.append(version - seen.pop(g))
        if g % m == m - 1:
            version += 1
    return out


@pytest.mark.parametrize("p,m", [(2, 1), (3, 1), (4, 2), (4, 4), (4, 3)])
def test_staleness_is_what_the_stream_makes(p, m):
    for s in range(p):
        steady = weight_delays(s, p, m, 6)[2 * m:4 * m]  # past the fill
        assert steady == staleness(s, p, m) * 2
        assert statistics.mean(staleness(s, p, m)) == pytest.approx((p - s - 1) / m)
    assert staleness(p - 1, p, m) == [0] * m  # the last stage is never late


def test_no_flush_no_bubble_in_the_steady_state():
    for p, m in ((2, 1), (4, 1), (4, 4), (4, 8)):
        r = simulate("pipemare", p, m, 1.0, 2.0)
        assert r["iteration_s"] == pytest.approx(3.0 * m)
        assert r["bubble"] == pytest.approx(0.0)
        # and 1F1B's memory: stage s holds p - s micro-batches
        assert r["peak_in_flight"] == [min(p - s, m * 8) for s in range(p)]
    # a slow stage sets the period; the others idle for the difference
    r = simulate("pipemare", 2, 4, [1.0, 2.0], [2.0, 4.0])
    assert r["iteration_s"] == pytest.approx(24.0)
    assert r["bubble"] == pytest.approx((0.5 + 0.0) / 2)
    # unequal stages, more stages than micro-batches: the period is the busiest stage's
    r = simulate("pipemare", 3, 1, [1.5, 1.0, 1.0], [3.0, 2.0, 2.0])
    assert r["iteration_s"] == pytest.approx(4.5)
    assert r["bubble"] == pytest.approx((0 + 1.5 / 4.5 + 1.5 / 4.5) / 3)
    # a stage's synchronisation stops it inside the period
    assert simulate("pipemare", 2, 2, 1.0, 2.0, sync_s=[1.0, 1.0])["iteration_s"] > 6.0


def test_the_model_prices_the_period_and_no_ideal_bubble():
    from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network, predict
    from testbed.workloads.model.parallel.desc import load_models
    from testbed.workloads.model.parallel.layout import Layout
    model = load_models()["gpt-tiny"]
    net = Network(bandwidth={k: 1e12 for k in KINDS})
    sync = predict(JobShape(model, Layout(pp=2), "1f1b", 4), net, 1e-9)
    asyn = predict(JobShape(model, Layout(pp=2), "pipemare", 4), net, 1e-9)
    assert asyn["bubble_ideal"] == 0.0 and sync["bubble_ideal"] == pytest.approx(1 / 5)
    assert asyn["iteration_s"] < sync["iteration_s"]
    assert asyn["iteration_s"] == pytest.approx(4 * max(f + b for f, b in zip(asyn["fwd_s"], asyn["bwd_s"])), rel=1e-3)


def test_the_corrections_arithmetic():
    assert tau(0, 4, 1) == 3 and tau(0, 4, 4) == 1 and tau(3, 4, 1) == 1
    assert tau(0, 4, 2) == 2  # the most of its micro-batches': 2 and 1
    # T1: lr / tau at the first update, annealed geometrically to lr at step K
    assert lr_scale(0, 4, 100) == pytest.approx(0.25)
    assert lr_scale(50, 4, 100) == pytest.approx(0.5)
    assert lr_scale(100, 4, 100) == 1.0 and lr_scale(0, 4, 0) == 1.0
    # T2: the average keeps `decay` of an update after the stage's delay
    assert gamma(0.1, 2) ** 2 == pytest.approx(0.1)
    assert PipeMare().label() == "" and PipeMare(lr_steps=0, backward="current").label() == \
        "no-lr-current-weights"
    assert PipeMare(lr_steps=100, decay=0.5).label() == "lr100-decay0.5"


def test_an_asynchronous_real_job_on_loopback(tmp_path):
    """Three stages, one micro-batch: every rank reports the delays the schedule makes, the
    first iteration's loss is the synchronous job's (no update has happened yet), and
    the run trains."""
    from testbed.workloads.model.parallel.job import JobConfig, RealModel
    from testbed.workloads.model.parallel.layout import Layout
    from testbed.workloads.parallel.worker import local_job
    real = RealModel(width=32, depth=4, batch=16, lr=0.05, momentum=0.0)
    lay = Layout(pp=3)
    rows = {}
    for name, sched in (("sync", "1f1b"), ("async", "pipemare")):
        cfg = JobConfig(layout=lay, compute="real", iters=12, real=real, schedule=sched,
                        pipemare=PipeMare(lr_steps=4))
        rows[name] = local_job(cfg, tmp_path / name)
    for s in range(3):
        got = [r["staleness"] for r in rows["async"][s][3:]]
        assert got == [staleness(s, 3, 1)[0]] * len(got)
        assert all(r["staleness"] == 0 for r in rows["sync"][s])
    sync_loss = [r["loss"] for r in rows["sync"][2]]
    async_loss = [r["loss"] for r in rows["async"][2]]
    assert async_loss[0] == pytest.approx(sync_loss[0], rel=1e-6)
    assert async_loss[1:] != pytest.approx(sync_loss[1:], rel=1e-6)  # late gradients
    assert all(r["loss"] is None for r in rows["async"][0])  # only the last stage's


def test_discrepancy_correction_predicts_the_forward_weights():
    """T2 on a stage whose weights move by the same step every update: the moving average
    converges to that step, and today's weights less `lag` of it are the weights `lag`
    updates ago."""
    import torch

    from testbed.workloads.parallel.real import RealStage
    stage = object.__new__(RealStage)
    stage.velocity = [torch.zeros(3)]
    stage.gamma = gamma(0.1, 2)
    stage.shapes = [[(3,)]]
    step = torch.tensor([0.5, -1.0, 2.0])
    history = [torch.tensor([1.0, 1.0, 1.0])]

    class Shards:
        params = [history[0].clone()]

        def full(self, j):
            return self.params[j]
    stage.shards = Shards()
    for _ in range(40):
        before = [p.clone() for p in stage.shards.params]
        stage.shards.params[0] += step
        history.append(stage.shards.params[0].clone())
        stage.moved(before)
    assert stage.velocity[0] == pytest.approx(step.tolist(), rel=1e-6)
    (predicted,) = stage.weights(0, 2, None)
    assert predicted.tolist() == pytest.approx(history[-3].tolist(), rel=1e-6)
    # stashed weights win over the prediction; no lag, today's
    assert stage.weights(0, 2, [history[0]])[0].tolist() == history[0].tolist()
    assert stage.weights(0, 0, None)[0].tolist() == history[-1].tolist()
