"""Compression applied to what crosses the wire (loopback, no root): bytes on the wire drop
by the expected factor, index overhead included."""
import json
import math

import pytest

from testbed.workloads import models
from testbed.workloads.launch import free_port
from testbed.workloads.launch import start_local as worker

WORLD = 3


def tx_per_iteration(out, **extra):
    port = free_port()
    procs = [worker(r, WORLD, port, out, width=256, iters=6, bucket_mb=25, **extra)
             for r in range(WORLD)]
    for p in procs:
        assert p.wait(timeout=240) == 0, p.stderr.read()
    rows = [json.loads(l) for l in (out / "rank0.jsonl").read_text().splitlines()]
    # on loopback one interface carries every worker's traffic
    return sum(r["tx_bytes"] for r in rows[1:]) / (len(rows) - 1), rows


def test_bytes_on_the_wire(tmp_path):
    numel = models.param_bytes(models.build("mlp", 256, 2)) // 4
    base, rows = tx_per_iteration(tmp_path / "none")
    # ring allreduce: every worker sends 2(p-1)/p of the gradient
    assert base == pytest.approx(2 * (WORLD - 1) * numel * 4, rel=0.05)
    assert rows[-1]["payload_bytes"] == numel * 4
    fp16, rows = tx_per_iteration(tmp_path / "fp16", compression="fp16")
    assert rows[-1]["payload_bytes"] == numel * 2
    assert fp16 / base == pytest.approx(0.5, abs=0.05)
    topk, rows = tx_per_iteration(tmp_path / "topk", compression="topk", topk_ratio=0.01)
    k = math.ceil(0.01 * numel)
    assert rows[-1]["payload_bytes"] == 8 * k  # fp32 value + int32 index per entry
    # allgather: every worker receives every other worker's payload
    assert topk == pytest.approx(WORLD * (WORLD - 1) * 8 * k, rel=0.2)
    sign, rows = tx_per_iteration(tmp_path / "sign", compression="sign")
    assert rows[-1]["payload_bytes"] == math.ceil(numel / 8) + 4
    # TernGrad: two bits an entry; SBC: its fixed-size message, Golomb-coded positions
    tern, rows = tx_per_iteration(tmp_path / "terngrad", compression="terngrad")
    assert rows[-1]["payload_bytes"] == 2 * math.ceil(numel / 8) + 4
    assert tern == pytest.approx(WORLD * (WORLD - 1) * (2 * math.ceil(numel / 8) + 4), rel=0.2)
    sbc, rows = tx_per_iteration(tmp_path / "sbc", compression="sbc", topk_ratio=0.01)
    from testbed.workloads.compression import Sbc
    payload = Sbc(0.01).expected_nbytes(numel)  # about 900 bytes: headers weigh as much
    assert rows[-1]["payload_bytes"] == payload
    assert WORLD * (WORLD - 1) * payload < sbc < 0.02 * base
