"""The run's timeline (testbed/results/timeline.py): workers, queues, loads, pauses and
decisions from a results directory's files, on one clock (seconds from the run's start)."""
import json

from testbed.config.replies import PFC_COLUMNS
from testbed.measure.queues import (
    TIMELINE_LOADS,
    TIMELINE_QUEUES,
    ClassSample,
    timeline_queue_rows,
)
from testbed.results import timeline
from testbed.results.files import append_csv

UNIX0, MONO0 = 1_800_000_000.0, 5_000.0  # the run's start on both clocks


def results_dir(tmp_path):
    out = tmp_path / "run"
    (out / "training" / "job-a").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps({
        "spec_name": "t", "clock": {"unix_s": UNIX0, "monotonic_s": MONO0,
                                    "cpu_t0_unix_s": UNIX0 + 0.5}}))
    for rank in (0, 1):  # rank 1 started 0.25 s after rank 0
        t0 = MONO0 + 2.0 + 0.25 * rank
        (out / "training" / "job-a" / f"rank{rank}.trace.json").write_text(json.dumps({
            "traceEvents": [{"name": "forward", "cat": "compute", "ph": "X", "pid": rank,
                             "tid": 0, "ts": 1000.0, "dur": 500.0, "args": {}},
                            {"name": "allreduce", "cat": "comm", "ph": "X", "pid": rank,
                             "tid": 1, "ts": 2000.0, "dur": 3000.0, "args": {}}],
            "otherData": {"rank": rank, "t0_monotonic_s": t0}}))
    append_csv(out / "timeline" / "sampled-1-queues.csv", TIMELINE_QUEUES, [
        [UNIX0 + 3.0, "e1-eth1", 0, 3000, 2, 0, 0],
        [UNIX0 + 3.01, "e1-eth1", 0, 9000, 6, 4, 1]])
    append_csv(out / "timeline" / "sampled-1-loads.csv", TIMELINE_LOADS, [
        [UNIX0 + 3.0, "e1-eth1", 0, 0], [UNIX0 + 3.0, "e1-eth1", 1, 0],
        [UNIX0 + 3.1, "e1-eth1", 0, 100_000], [UNIX0 + 3.1, "e1-eth1", 1, 25_000]])
    append_csv(out / "qos_apps" / "fab" / "pfc_events.csv", list(PFC_COLUMNS), [
                   [int((MONO0 + 4.0) * 1e9), "e1", "e1-eth3", 1, "pause", "a1-eth1", 0, 20, "", ""],
                   [int((MONO0 + 4.5) * 1e9), "e1", "e1-eth3", 1, "resume", "a1-eth1", 0, "", 5, 100]])
    (out / "events.jsonl").write_text(json.dumps(
        {"fault_step": {"fault": "link e1-a1", "action": "down", "time": UNIX0 + 6.0}}) + "\n")
    (out / "hedera" / "fab").mkdir(parents=True)
    (out / "hedera" / "fab" / "hedera_decisions.jsonl").write_text(
        json.dumps({"t": UNIX0 + 7.0, "flow": "h1/h9", "path": ["e1", "a1"]}) + "\n"
        + json.dumps({"t": UNIX0 + 7.5, "flow": "h2/h10", "dscp": 10, "why": "new"}) + "\n")
    append_csv(out / "metrics" / "cpu.csv", ["t_s", "machine_busy_fraction",
                                              "ovs_thread_core_fraction", "ovs_rx_backlog_bytes"],
               [[1.0, 0.5, 0.25, 0]])
    return out


def by(events, **kw):
    return [e for e in events if all(e.get(k) == v for k, v in kw.items())]


def test_the_timeline_puts_every_source_on_the_runs_clock(tmp_path):
    out = results_dir(tmp_path)
    path = timeline.write(out)
    assert path == out / "timeline.json"
    events = json.loads(path.read_text())["traceEvents"]
    # ranks: each its own process, shifted by its own start on the monotonic clock
    fwd = by(events, name="forward")
    assert sorted(e["ts"] for e in fwd) == [2_001_000.0, 2_251_000.0]
    assert len({e["pid"] for e in fwd}) == 2
    names = {e["args"]["name"] for e in by(events, ph="M", name="process_name")}
    assert {"training/job-a rank 0", "training/job-a rank 1"} <= names
    # queue depth and marks per port and class
    depth = by(events, ph="C", pid=timeline.PID["queues"])
    assert [(e["ts"], e["args"]["bytes"]) for e in depth] == [(3_000_000.0, 3000),
                                                               (3_010_000.0, 9000)]
    marks = by(events, ph="C", pid=timeline.PID["marks"])
    assert marks[-1]["args"] == {"marks": 4, "drops": 1}
    # link load: both classes' bytes over 0.1 s = 10 Mb/s
    load = by(events, ph="C", pid=timeline.PID["load"])
    assert load[0]["ts"] == 3_000_000.0 and abs(load[0]["args"]["mbps"] - 10.0) < 1e-6
    # a PFC pause: a slice on the paused transmitter, 0.5 s, from the monotonic clock
    (pause,) = by(events, ph="X", pid=timeline.PID["pfc"])
    assert (pause["ts"], pause["dur"]) == (4_000_000.0, 500_000.0)
    assert {"a1-eth1 c1"} == {e["args"]["name"] for e in by(events, ph="M", name="thread_name",
                                                            pid=timeline.PID["pfc"])}
    # decisions: the fault, Hedera's move, a priority set
    instants = {(e["ts"], e["name"]) for e in by(events, ph="i")}
    assert instants == {(6_000_000.0, "link e1-a1 down"), (7_000_000.0, "hedera: move h1/h9"),
                        (7_500_000.0, "priority: h2/h10 DSCP 10 (new)")}
    (cpu,) = by(events, ph="C", pid=timeline.PID["cpu"])
    assert cpu["ts"] == 1_500_000.0 and cpu["args"]["machine"] == 0.5


def test_no_timeline_without_workers_queues_or_pauses(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"clock": {"unix_s": UNIX0,
                                                              "monotonic_s": MONO0}}))
    assert timeline.write(out) is None and not (out / "timeline.json").exists()


def test_queue_rows_keep_each_bins_deepest_sample():
    samples = [ClassSample(0.001, 3, 0, 1000, 1, 0, 0), ClassSample(0.004, 3, 0, 5000, 4, 1, 0),
               ClassSample(0.008, 3, 0, 2000, 2, 2, 0), ClassSample(0.012, 3, 0, 0, 0, 2, 0)]
    rows = timeline_queue_rows(100.0, samples, {3: "e1-eth1"})
    # bin 0: deepest 5000, the last sample's packets and counters; bin 1: the drain
    assert rows == [[100.001, "e1-eth1", 0, 5000, 2, 2, 0], [100.012, "e1-eth1", 0, 0, 0, 2, 0]]


def test_a_run_with_classes_but_no_samples_gets_its_cpu_and_decisions(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({
        "clock": {"unix_s": UNIX0, "monotonic_s": MONO0, "cpu_t0_unix_s": UNIX0},
        "phases": {"priority strict": {"qos": {"classes": []}}}}))
    append_csv(out / "metrics" / "cpu.csv", ["t_s", "machine_busy_fraction",
                                              "ovs_thread_core_fraction", "ovs_rx_backlog_bytes"],
               [[0.5, 0.4, 0.2, 0]])
    events = json.loads(timeline.write(out).read_text())["traceEvents"]
    assert [e["ts"] for e in events if e["ph"] == "C"] == [500_000.0]


def test_congestion_control_state_is_one_point_per_flow_per_bin():
    """A BPF congestion control's trace: per flow, the last point of each 10 ms bin, with
    its window and the algorithm's own value under its name."""
    rows = [{"t_unix_s": str(100.0 + i * 0.002), "algorithm": "dctcp",
             "flow": f"10.0.0.{1 + i % 2}:5000>10.0.0.3:5201", "cwnd_segs": str(10 + i),
             "state": "alpha", "value": str(i)} for i in range(20)]
    events = timeline.cc_events(rows, timeline.Clock(100.0, 0.0))
    flows = {e["name"] for e in events}
    assert flows == {"dctcp 10.0.0.1:5000>10.0.0.3:5201", "dctcp 10.0.0.2:5000>10.0.0.3:5201"}
    # 20 points over 38 ms in 4 bins of 10 ms each, per flow the last of each bin
    assert len(events) == 8
    first = next(e for e in events if e["name"].startswith("dctcp 10.0.0.1"))
    assert first["pid"] == timeline.PID["cc"] and first["args"] == {"cwnd_segs": 14, "alpha": 4}
