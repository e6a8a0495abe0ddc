"""Two data-parallel workers on loopback (no root): Gloo ring allreduce through DDP, the
per-iteration log, the Chrome trace, and a clear failure when a peer never comes."""
import json

import pytest

from testbed.workloads import commsched, models
from testbed.workloads.launch import free_port, start_local
from testbed.workloads.layerwise import layers
from testbed.workloads.model.commmodel import ring_allreduce_s

worker = start_local


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_two_workers_train_and_log(tmp_path, model):
    port = free_port()
    procs = [worker(r, 2, port, tmp_path, model=model, width=32, iters=10, eval_every=10)
             for r in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    rows = [json.loads(l) for l in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    grad = models.param_bytes(models.build(model, 32, 2))
    assert all(r["grad_bytes"] == grad for r in rows)
    assert all(r["messages"] >= 1 and r["comm_s"] > 0 for r in rows)
    assert "test_acc" in rows[-1]
    # ring allreduce of 2 workers: each sends about the whole gradient (2(p-1)/p = 1)
    sent = sum(r["tx_bytes"] for r in rows[1:]) / (len(rows) - 1)
    assert sent >= 0.9 * grad
    trace = json.loads((tmp_path / "rank1.trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"forward+backward", "step", "allreduce"} <= names


@pytest.mark.parametrize("bucket_mb,buckets", [(0.05, 2), (25, 1)])
def test_bucket_size_sets_tensor_fusion(tmp_path, bucket_mb, buckets):
    port = free_port()
    procs = [worker(r, 2, port, tmp_path, model="mlp", width=256, iters=3, bucket_mb=bucket_mb)
             for r in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    rows = [json.loads(l) for l in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    # DDP rebuilds its buckets after the first iteration
    assert all(r["messages"] >= buckets for r in rows[1:])
    if buckets == 1:
        assert all(r["messages"] == 1 for r in rows[1:])


def _two(tmp_path, name, model="mlp", **opts):
    port, out = free_port(), tmp_path / name
    procs = [worker(r, 2, port, out, model=model, width=64, iters=8, lr=0.05, **opts)
             for r in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    return [json.loads(l) for l in (out / "rank0.jsonl").read_text().splitlines()]


def test_fusion_modes_send_their_messages_and_train_as_ddp_does(tmp_path):
    """Every plan of fusionsync.py averages the same gradients as DDP, so the losses are
    DDP's step by step; what differs is the messages: one after backward, one per tensor
    (wait-free backpropagation), MG-WFBP's and the optimum's merges after the profile,
    Horovod's cycles with their negotiations. The CNN's residual blocks register their
    tensors in another order than backward makes them."""
    for model in ("mlp", "cnn"):
        _fusion_modes(tmp_path / model, model)


def _fusion_modes(tmp_path, model):
    ddp = [r["loss"] for r in _two(tmp_path, "ddp", model=model)]
    tensors = len(list(models.build(model, 64, 2).parameters()))
    for mode in ("one", "wfbp", "mgwfbp", "optimal", "horovod"):
        rows = _two(tmp_path, mode, fusion=mode, model=model)
        assert [r["loss"] for r in rows] == pytest.approx(ddp, rel=1e-4), mode
        assert all(r["fusion"] == mode and sum(r["message_bytes"]) == r["grad_bytes"]
                   for r in rows), mode
        counts = [r["messages"] for r in rows]
        if mode == "one":
            assert counts == [1] * 8
        elif mode == "wfbp":
            assert counts == [tensors] * 8
        elif mode == "horovod":
            assert all(r["negotiations"] >= 1 for r in rows)
        else:  # the profile's iterations send one message, then the plan's
            assert counts[:4] == [1] * 4 and not rows[3]["planned"] and rows[4]["planned"]
            assert all(r["messages"] == r["model_messages"] for r in rows[4:])
        assert all(0 < r["model_synced_s"] and r["backward_s"] <= r["synced_s"]
                   for r in rows)


def test_mlp_learns_digits(tmp_path):
    port = free_port()
    procs = [worker(r, 2, port, tmp_path, model="mlp", width=64, iters=150, eval_every=150,
                    lr=0.05) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    last = json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[-1])
    assert last["test_acc"] >= 0.85


def test_a_missing_peer_fails_with_a_clear_error(tmp_path):
    p = worker(0, 2, free_port(), tmp_path, timeout_s=3, iters=1)
    assert p.wait(timeout=120) == 1
    assert "rank0.error" in {f.name for f in tmp_path.iterdir()}
    assert (tmp_path / "rank0.error").read_text().strip()


def test_model_sizes_span_the_issue_range():
    assert models.param_bytes(models.build("mlp", 16, 1)) < 100_000
    assert models.param_bytes(models.build("cnn", 512, 2)) > 30_000_000
    assert ring_allreduce_s(4e6, 2, 1e9) > 0


def test_digits_are_scikit_learns_without_importing_it():
    """The workers read the digits file as scikit-learn's load_digits does, not through its
    import (2 s of every rank's start): the same pixels and labels."""
    import numpy as np
    from sklearn.datasets import load_digits
    pixels, labels = models.digits()
    d = load_digits()
    assert pixels.shape == (1797, 64) and np.array_equal(pixels, d.data)
    assert np.array_equal(labels, d.target) and set(labels) == set(range(10))


def test_schedulers_send_every_piece_and_train_as_fifo_does(tmp_path):
    """TicTac and ByteScheduler (commsched.py) change only when each layer's gradient goes
    and in how many pieces: the averaged gradients, so the losses, are FIFO's step by step,
    every piece's bytes add up to the gradient, and each rank's rounds agreed (a rank whose
    allreduces went in another order than its peer's would have failed or diverged)."""
    fifo = _two(tmp_path, "fifo", model="vgg", priority="fifo", forward_ms=20)
    grad = fifo[0]["grad_bytes"]
    assert all(r["model_iter_s"] > 0 for r in fifo)
    sizes = [sum(p.numel() for p in m.parameters(recurse=False)) * 4
             for m in layers(models.build("vgg", 64, 2))]
    for name, opts, pieces in (("tictac", {}, len(sizes)),
                               ("bytescheduler", dict(partition_bytes=65_536,
                                                      credit_bytes=131_072),
                                len(commsched.pieces(sizes, 65_536)))):
        rows = _two(tmp_path, name, model="vgg", priority=name, forward_ms=20, **opts)
        assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in fifo],
                                                          rel=1e-4), name
        # a row has the pieces that came back during its iteration: the iteration before's
        # (the first has none, the last also its own, flushed)
        assert all(r["pieces"] == r["messages"] == pieces for r in rows[1:-1]), name
        assert all(r["payload_bytes"] == grad for r in rows[1:-1]), name
        assert all(r["negotiations"] >= 1 and r["model_iter_s"] > 0 for r in rows), name
