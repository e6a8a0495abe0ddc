"""Large-model parallelism in the fabric: a real-compute 3D-parallel job (TP x PP
x DP) whose losses are the data-parallel job's and whose bytes per collective type are the
model's; an emulated expert-parallel and sharded job; a rank that dies or hangs fails the
job naming it. Short jobs; tolerances are stated per assertion."""
import json
import subprocess
import sys

import pytest

from testbed.core.system import TestbedError
from testbed.workloads.launch import REPO_ROOT
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.roce import connections

from .helpers import rows, run

LEAFSPINE = {"kind": "leafspine", "params": {"spines": 2, "leaves": 2, "hosts_per_leaf": 4,
                                             "host_rate": 20, "uplink_rate": 20}}


WIDTH = 256


def ddp_losses(tmp_path, iters: int) -> dict[int, list[float]]:
    """The training experiment's data-parallel job (DDP, 2 workers) on loopback."""
    out = tmp_path / "ddp"
    subprocess.run([sys.executable, "-m", "testbed.workloads.launch", "--world", "2", "--out",
                    str(out), "--", "--sync", "ring", "--model", "mlp", "--width", str(WIDTH),
                    "--depth", "3", "--iters", str(iters), "--batch", "32",
                    "--eval-every", "0"], cwd=REPO_ROOT, check=True, capture_output=True)
    return {r: [json.loads(line)["loss"] for line in
                (out / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}


def test_3d_parallel_job_in_the_fabric(tmp_path):
    iters = 5
    out, summary = run(tmp_path, {"name": "it-parallel", "topology": LEAFSPINE, "experiments": [
        {"type": "parallel", "compute": "real", "iters": iters, "sample_hz": 50,
         "real": {"width": WIDTH, "depth": 3, "batch": 32},
         "jobs": [{"dp": 2, "tp": 2, "pp": 2, "micro_batches": 2, "placement": "packed"}]},
        {"type": "parallel", "model": "moe-tiny", "scale": 0.5, "device_tflops": 1,
         "iters": 4, "sample_hz": 50, "jobs": [{"dp": 4, "ep": 4, "zero": 3}]}]})
    assert summary["status"] == "ok", summary["error"]
    kinds = {(r["experiment"], r["kind"]): r for r in rows(out, "parallel_kinds.csv")}
    assert {("0", "tp"), ("0", "pp"), ("0", "dp"), ("1", "ep"), ("1", "fsdp")} <= set(kinds)
    for row in kinds.values():
        # each collective type's bytes, counted on its own sockets, against the model's
        # volume (the benchmark bound is 10%; small messages carry Gloo's own headers)
        assert 0.9 <= float(row["bytes_over_model"]) <= 1.15, row
    table = rows(out, "parallel_iterations.csv")
    reference = ddp_losses(tmp_path, iters)
    # the last stage's ranks log their replica's loss: ranks 2, 3 (replica 0), 6, 7 (1)
    for rank, d in ((2, 0), (3, 0), (6, 1), (7, 1)):
        got = [float(r["loss"]) for r in sorted(
            (r for r in table if r["experiment"] == "0" and int(r["rank"]) == rank),
            key=lambda r: int(r["iteration"]))]
        assert got == pytest.approx(reference[d], rel=1e-4), (rank, got, reference[d])
    groups = rows(out, "parallel_groups.csv")
    tp = [g for g in groups if g["experiment"] == "0" and g["kind"] == "tp"]
    assert len(tp) == 4 and all(len(g["hosts"].split()) == 2 for g in tp)
    job_dir = next((out / "parallel").glob("0-00-*"))
    trace = json.loads((job_dir / "rank0.trace.json").read_text())
    names = {e["name"] for e in trace["traceEvents"]}
    assert {"tp allreduce", "dp allreduce", "pp recv (wait)"} <= names, names


@pytest.mark.parametrize("kind", ["crash", "hang"])
def test_a_dead_or_hung_rank_fails_the_job(tmp_path, kind):
    with pytest.raises(TestbedError) as err:
        run(tmp_path, {"name": f"it-parallel-{kind}", "topology": LEAFSPINE, "experiments": [{
            "type": "parallel", "model": "gpt-tiny", "scale": 0.1, "device_tflops": 1,
            "iters": 20, "timeout_s": 15, "job_timeout_s": 300,
            "fault": {"rank": 1, "at_iter": 2, "kind": kind},
            "jobs": [{"pp": 2, "tp": 2, "micro_batches": 2}]}]})
    text = str(err.value)
    if kind == "crash":
        assert "rank 1" in text and "injected fault at iteration 2" in text, text
    else:  # its neighbours time out; the rank that stopped is named
        assert "rank(s) 1 stopped answering" in text, text
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # the others were stopped: well before the job timeout (300 s)
    assert summary["status"] == "failed" and summary["elapsed_s"] < 120


def test_collectives_over_roce_in_the_fabric(tmp_path):
    """An emulated 3D job (TP=2, PP=2 with 1F1B, DP=2) whose collectives the RoCE engine
    carries under DCQCN, two queue pairs per connection, each from its own UDP port: each
    collective type's bytes are the model's (what the ranks posted: within 0.5%), the
    lossless class resent and lost nothing, and every table names the transport."""
    out, summary = run(tmp_path, {"name": "it-parallel-roce", "topology": LEAFSPINE,
                                  "experiments": [{
        "type": "parallel", "model": "gpt-tiny", "scale": 0.05, "device_tflops": 0.5,
        "iters": 3, "sample_hz": 50, "transport": "roce",
        "roce": {"schemes": ["dcqcn"], "qps_per_flow": 2, "source_port": "per_qp"},
        "jobs": [{"dp": 2, "tp": 2, "pp": 2, "micro_batches": 2}]}]})
    assert summary["status"] == "ok", summary["error"]
    kinds = {r["kind"]: r for r in rows(out, "parallel_kinds.csv")}
    assert set(kinds) == {"tp", "pp", "dp"}
    for row in kinds.values():
        assert 0.995 <= float(row["bytes_over_model"]) <= 1.005, row
        assert row["fabric"].endswith("roce:dcqcn"), row
    (job,) = rows(out, "parallel.csv")
    assert job["transport"] == "roce dcqcn"
    assert int(job["roce_tx_pkts"]) > 0
    assert job["roce_retx_pkts"] == job["roce_timeouts"] == "0", job
    assert job["lost_in_switches_pkts"] == "0"
    # the lossless class's pauses while the job ran, read from the PFC app's log
    assert int(job["pfc_pauses"]) >= 0 and float(job["pfc_paused_ms"]) >= 0
    job_dir = next((out / "parallel").glob("0-00-*"))
    conf = (job_dir / "roce" / "rank0.conf").read_text()
    # 2 QPs to each peer of each of its groups (no experts: no expert-data group)
    peers = list(connections(Layout(dp=2, tp=2, pp=2), 0, experts=False))
    assert len(peers) == 3 and conf.count("\nqp ") == 2 * len(peers)
    assert "control 1" in conf and "dcqcn " in conf
