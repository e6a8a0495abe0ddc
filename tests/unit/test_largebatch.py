"""Large-batch training's arithmetic: the linear scaling rule's warm-up, the epochs a job
takes, LARS's and LAMB's trust ratios, and their optimizers' steps against the papers'
algorithms written out by hand."""
import math

import pytest
import torch

from testbed.experiments.training.spec import job_iters, job_schedule
from testbed.spec import TrainingJob, loads
from testbed.workloads import optimizers
from testbed.workloads.largebatch import (
    iterations,
    lamb_ratio,
    lars_ratio,
    learning_rate,
    train_samples,
)
from testbed.workloads.models import dataset


def test_gradual_warmup_climbs_in_equal_steps_to_the_scaled_rate():
    rates = [learning_rate(it, 0.1, 8, 4) for it in range(6)]
    assert rates == pytest.approx([0.1, 0.275, 0.45, 0.625, 0.8, 0.8])
    assert learning_rate(0, 0.1, 8, 0) == pytest.approx(0.8)  # no warm-up: the target at once
    assert learning_rate(3, 0.1, 1, 10) == pytest.approx(0.1)  # nothing to climb


def test_epochs_are_iterations_of_the_training_split():
    for data in ("digits", "synthetic"):
        assert train_samples(data) == len(dataset(data, "mlp")[0])
    assert train_samples("digits") == 1437
    assert iterations(1, "digits", 32) == 45          # 1437 / 32 = 44.9
    assert iterations(10, "digits", 2048) == 8        # 7.02 rounds up
    assert iterations(0.001, "digits", 4096) == 1


def test_a_jobs_iterations_and_schedule_follow_its_batch():
    spec, _ = loads({"name": "t", "topology": {"kind": "fattree", "params": {"k": 4}},
                     "experiments": [{"type": "training", "batch": 8, "lr": 0.05,
                                      "iters": 30}]})
    (exp,) = spec.experiments
    plain = TrainingJob()
    big = TrainingJob(batch=128, epochs=20, lr_scaling="linear", warmup_epochs=5)
    assert job_iters(exp, plain, 4) == 30 and job_schedule(exp, plain, 4) == (0.05, 1.0, 0)
    assert job_iters(exp, big, 4) == math.ceil(20 * 1437 / 512)
    assert job_schedule(exp, big, 4) == (0.05, 16.0, math.ceil(5 * 1437 / 512))
    # k is the global batch's ratio: the same job with 8 workers instead of its 4
    assert job_schedule(exp, big, 8)[1] == 32.0
    lamb = TrainingJob(optimizer="lamb", batch=128, lr=0.01, lr_scaling="sqrt")
    assert job_schedule(exp, lamb, 4) == (0.01, 4.0, 0)
    assert TrainingJob(optimizer="lars", batch=128).label() == "ring-lars-b128-4w"


def test_lars_ratio_is_the_papers_local_rate():
    assert lars_ratio(2.0, 0.5, trust=0.001, weight_decay=5e-4) == pytest.approx(
        0.001 * 2.0 / (0.5 + 5e-4 * 2.0))
    assert lars_ratio(0.0, 1.0) == 1.0 and lars_ratio(1.0, 0.0) == 1.0
    assert lamb_ratio(3.0, 1.5) == 2.0 and lamb_ratio(0.0, 1.0) == 1.0


def _params():
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(4))]


def test_lars_steps_as_algorithm_1():
    params = _params()
    grads = [[torch.randn_like(p) for p in params] for _ in range(2)]
    w = [p.detach().clone() for p in params]
    v = [torch.zeros_like(p) for p in params]
    opt = optimizers.build("lars", params, lr=2.0, momentum=0.9)
    for step in grads:
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(step):  # by hand: v = m v + lr * local * (g + beta w); w -= v
            local = 0.001 * w[i].norm() / (g.norm() + 5e-4 * w[i].norm())
            v[i] = 0.9 * v[i] + 2.0 * local * (g + 5e-4 * w[i])
            w[i] = w[i] - v[i]
    for p, ref in zip(params, w):
        assert torch.allclose(p.detach(), ref, atol=1e-6)


def test_lamb_steps_as_algorithm_2():
    params = _params()
    grads = [[torch.randn_like(p) for p in params] for _ in range(3)]
    x = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    opt = optimizers.build("lamb", params, lr=0.01)
    for t, step in enumerate(grads, start=1):
        for p, g in zip(params, step):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(step):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            r = (m[i] / (1 - 0.9 ** t)) / ((v[i] / (1 - 0.999 ** t)).sqrt() + 1e-6)
            u = r + 0.01 * x[i]
            x[i] = x[i] - 0.01 * (x[i].norm() / u.norm()) * u
    for p, ref in zip(params, x):
        assert torch.allclose(p.detach(), ref, atol=1e-6)


def test_sgd_is_torchs_and_unknown_names_are_refused():
    opt = optimizers.build("sgd", _params(), lr=0.1)
    assert isinstance(opt, torch.optim.SGD) and opt.defaults["weight_decay"] == 0.0
    with pytest.raises(ValueError, match="unknown optimizer 'adam'"):
        optimizers.build("adam", _params(), lr=0.1)
