"""Real Gloo workers inside the fabric: ring allreduce and a parameter server on
a small leaf-spine, measured against the analytical model; compression's bytes on the wire;
a worker that dies fails the run fast with its error. Shorter jobs than the benchmarks; the
tolerances are wider than the benchmarks' (stated per assertion) because CI's CPU is shared."""
import json

import pytest

from testbed.core.system import TestbedError

from .helpers import rows, run

LEAFSPINE = {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2,
                                             "host_rate": 20, "uplink_rate": 20}}


def test_ring_and_parameter_server_in_the_fabric(tmp_path):
    out, summary = run(tmp_path, {"name": "it-train", "topology": LEAFSPINE, "experiments": [{
        "type": "training", "model": "mlp", "width": 256, "iters": 8, "jobs": [
            {"sync": "ring", "workers": 4},
            {"sync": "ps", "workers": 3, "ps_shards": 1},
            {"sync": "ring", "workers": 4, "compression": "fp16"}]}]})
    assert summary["status"] == "ok", summary["error"]
    table = {r["job"]: r for r in rows(out, "training.csv")}
    ring, ps, fp16 = table["ring-4w"], table["ps-1xded-bsp-3w"], table["ring-fp16-4w"]
    for job in (ring, ps, fp16):
        # at 20 Mb/s the network dominates: measured communication near the model (the
        # benchmark's bound is 0.8-1.3; 0.6-1.6 here for CI's shared CPU)
        assert 0.6 <= float(job["comm_over_model"]) <= 1.6, job
        # bytes each worker put on the wire, against the model's bytes plus framing
        assert 0.9 <= float(job["tx_over_expected"]) <= 1.2, job
        assert int(job["lost_in_switches_pkts"]) == 0
        assert job["test_acc"] != ""
    assert int(ps["max_staleness"]) == 0          # BSP: never stale
    assert float(fp16["tx_bytes_per_sync"]) / float(ring["tx_bytes_per_sync"]) == \
        pytest.approx(0.5, abs=0.05)
    its = rows(out, "training_iterations.csv")
    assert len([r for r in its if r["job"] == "ring-4w"]) == 4 * 8
    job_dir = out / "training" / "0-00-leafspine-ring-4w"
    trace = json.loads((job_dir / "rank0.trace.json").read_text())
    assert {"allreduce", "forward+backward"} <= {e["name"] for e in trace["traceEvents"]}
    # the run's timeline: every rank's trace and the fabric's counters on one clock
    events = json.loads((out / "timeline.json").read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    traces = sorted(out.glob("training/*/rank*.trace.json"))
    assert len(traces) >= 11 and all(
        f"{t.parent.relative_to(out)} rank {t.stem.split('.')[0][4:]}" in procs.values()
        for t in traces)
    ring0 = next(pid for pid, name in procs.items()
                 if name == "training/0-00-leafspine-ring-4w rank 0")
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("pid") == ring0 and e.get("name") == "allreduce"]
    loads = [(e["ts"], e["args"]["mbps"]) for e in events
             if e.get("ph") == "C" and e["pid"] == 2]  # link load
    # while ring-4w's rank 0 was in its allreduces, some link carried its traffic (>5 Mb/s
    # of a 20 Mb/s fabric): the spans and the counters are on the same clock
    busy = [m for t, m in loads if any(a <= t <= b for a, b in spans)]
    assert spans and busy and max(busy) > 5, (spans[:3], busy[:10])
    # summary.json rounds the run's time to 0.1 s: the CPU monitor's last sample can fall
    # in the half step above it (measured: 29 ms past a rounded 59.9 s)
    elapsed_us = (summary["elapsed_s"] + 0.05) * 1e6
    assert all(0 <= e["ts"] <= elapsed_us for e in events if e.get("ph") in ("X", "C"))


def test_a_dead_worker_fails_the_run_fast(tmp_path):
    with pytest.raises(TestbedError) as err:
        run(tmp_path, {"name": "it-fault", "topology": LEAFSPINE, "experiments": [{
            "type": "training", "iters": 50, "timeout_s": 300, "job_timeout_s": 600,
            "jobs": [{"sync": "ring", "workers": 4}], "fault": {"worker": 2, "at_iter": 3}}]})
    assert "rank 2" in str(err.value) and "injected fault at iteration 3" in str(err.value)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and "injected fault" in summary["error"]
    # the others were stopped, not left waiting for the collective timeout (300 s)
    assert summary["elapsed_s"] < 120


def test_priority_scheduling_beats_fifo_under_a_background_flow(tmp_path):
    """P3-style layer-wise allreduce with DSCP-marked Gloo sockets and strict-priority
    classes, against the same engine in the background flow's class (benchmark: 58% lower
    iteration time; at least 20% here)."""
    topo = {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 3,
                                            "host_rate": 20, "uplink_rate": 20}}
    out, summary = run(tmp_path, {"name": "it-p3", "topology": topo, "experiments": [{
        "type": "training", "model": "mlp", "width": 256, "depth": 4, "iters": 12,
        "background": [{"kind": "iperf", "hosts": ["h3", "h6"]}],
        "jobs": [{"sync": "ring", "workers": 4, "priority": "fifo"},
                 {"sync": "ring", "workers": 4, "priority": "p3"}]}]})
    assert summary["status"] == "ok", summary["error"]
    table = {r["job"]: r for r in rows(out, "training.csv")}
    fifo, p3 = table["ring-fifo-4w"], table["ring-p3-4w"]
    assert float(p3["iter_s_median"]) < 0.8 * float(fifo["iter_s_median"])
    assert float(fifo["background_sent_mbps"]) > 1
    log = (out / "training" / "0-01-leafspine-ring-p3-4w" / "rank0.jsonl").read_text()
    first = json.loads(log.splitlines()[0])
    assert first["levels"] == 3 and all(m >= 3 for m in first["sockets_marked"])
