"""The parameter server on loopback (no root): the protocol (BSP equals ring allreduce step
for step), the staleness bound of SSP, ASP without one, and the pure gate."""
import json
import statistics

import pytest

from testbed.workloads.launch import free_port
from testbed.workloads.launch import start_local as worker
from testbed.workloads.ps import StalenessGate, shard_bounds
from testbed.workloads.staleness import expected_weight, staleness_weight


def rows(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


def run_job(out, world, **extra):
    port = free_port()
    procs = [worker(r, world, port, out, **extra) for r in range(world)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()


def test_shards_are_contiguous_and_balanced():
    b = shard_bounds(10, 3)
    assert b == [(0, 4), (4, 7), (7, 10)]
    assert shard_bounds(5, 1) == [(0, 5)]


def test_gate_bsp_ssp_asp():
    bsp = StalenessGate([1, 2], bound=0)
    bsp.push(1)
    assert bsp.release() == []          # 1 is one ahead of 2
    bsp.push(2)
    assert bsp.release() == [1, 2]
    ssp = StalenessGate([1, 2], bound=2)
    for _ in range(2):
        ssp.push(1)
        assert ssp.release() == [1]
    ssp.push(1)
    assert ssp.release() == []          # three ahead: waits
    ssp.push(2)
    assert ssp.release() == [1, 2]
    asp = StalenessGate([1, 2], bound=None)
    for _ in range(10):
        asp.push(1)
        assert asp.release() == [1]


def test_bsp_parameter_server_matches_ring_allreduce(tmp_path):
    """Same batches, same optimiser: a BSP server with 2 shards takes the very steps ring
    allreduce does (losses equal to float rounding), and no push is ever stale."""
    run_job(tmp_path / "ring", 2, sync="ring", iters=12, width=32)
    run_job(tmp_path / "ps", 4, sync="ps", ps_shards=2, iters=12, width=32)
    ring = rows(tmp_path / "ring" / "rank0.jsonl")
    ps = rows(tmp_path / "ps" / "rank2.jsonl")  # worker 0 (ranks 0 and 1 are the shards)
    for a, b in zip(ring, ps):
        assert abs(a["loss"] - b["loss"]) < 1e-4
    for shard in (0, 1):
        log = rows(tmp_path / "ps" / f"rank{shard}.jsonl")
        assert len(log) == 2 * 12
        assert all(r["staleness"] == 0 for r in log)
        assert log[-1]["version"] == 12
    assert ps[-1]["versions"] == [12, 12]


def test_ssp_bounds_how_far_a_worker_runs_ahead_of_a_straggler(tmp_path):
    # rank 3 is the straggler (compute delay); the bound holds at every reply
    for mode, bound in (("ssp", 2), ("asp", None)):
        out = tmp_path / mode
        port = free_port()
        procs = [worker(r, 4, port, out, sync="ps", ps_shards=1, iters=15, consistency=mode,
                        staleness=2, compute_delay_ms=40 if r == 3 else 0) for r in range(4)]
        for p in procs:
            assert p.wait(timeout=240) == 0, p.stderr.read()
        log = rows(out / "rank0.jsonl")
        leads = [lead for r in log for lead in r["replied"].values()]
        assert len(leads) == 3 * 15
        if bound is not None:
            assert max(leads) <= bound
            assert max(r["lead_at_push"] for r in log) == bound + 1  # the bound was hit
        else:
            assert max(leads) > 5   # fast workers ran far ahead of the straggler


def test_dynsgd_weights_each_push_by_its_staleness(tmp_path):
    """ASP with a straggler (rank 3, 40 ms more compute a step): the server applies each
    push with DynSGD's weight for the staleness it logs; the fast workers' pushes are as
    fresh as in lockstep (weight 1), the straggler's older and weighed less, as far below
    1 as its slowdown says."""
    out, port = tmp_path / "asp-dyn", free_port()
    procs = [worker(r, 4, port, out, sync="ps", ps_shards=1, iters=15, consistency="asp",
                    lr_staleness="dynsgd", compute_delay_ms=40 if r == 3 else 0)
             for r in range(4)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    log = rows(out / "rank0.jsonl")
    assert all(r["weight"] == staleness_weight(r["staleness"], 3) for r in log)
    assert min(r["weight"] for r in log if r["worker"] == 3) < 1.0
    assert statistics.median(r["weight"] for r in log if r["worker"] != 3) == 1.0
    plain = tmp_path / "asp"
    run_job(plain, 4, sync="ps", ps_shards=1, iters=15, consistency="asp")
    assert all(r["weight"] == 1.0 for r in rows(plain / "rank0.jsonl"))


def test_staleness_weight_is_dynsgds_rule_over_a_lockstep_push():
    assert staleness_weight(0, 4) == staleness_weight(3, 4) == 1.0   # lockstep: 3 updates
    assert staleness_weight(7, 4) == 0.5                              # 1/8 over 1/4
    assert expected_weight(4, 1.0) == 1.0                             # SSP: held to one pace
    assert expected_weight(4, 5.0) == 4 / 16                          # tau = 3 x 5 = 15
    # 40 iterations each: the others are done after the straggler's 8th push
    assert expected_weight(4, 5.0, 40) == pytest.approx((8 * 4 / 16 + 32) / 40)
