"""Build each fabric, route every pair, calibrate links and queues; assert on measured
numbers in result files, with the tolerances stated in the issue."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topologies import bcube, fattree, leafspine

from .helpers import leftovers, rows, run

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind,params,topo", [
    ("fattree", {"k": 4}, fattree(4)),
    ("leafspine", {"spines": 2, "leaves": 4, "hosts_per_leaf": 4}, leafspine(2, 4, 4)),
    ("bcube", {"n": 4, "k": 1}, bcube(4, 1)),
])
def test_reachability_all_pairs_zero_loss(tmp_path, kind, params, topo):
    out, summary = run(tmp_path, {"name": f"it-{kind}", "topology": {"kind": kind, "params": params},
                                  "experiments": [{"type": "reachability", "count": 2}]})
    assert summary["status"] == "ok"
    table = rows(out, "reachability.csv")
    n = len(topo.hosts)
    assert len(table) == n * (n - 1)
    assert sum(int(r["received_pkts"]) for r in table) == 2 * n * (n - 1)  # 0% loss
    assert leftovers([s.name for s in topo.switches]) == []


def test_link_calibration_within_93_to_101_percent(tmp_path):
    out, summary = run(tmp_path, {"name": "it-link", "topology": {"kind": "nonblocking", "params": {"hosts": 2}},
                                  "experiments": [{"type": "link_calibration", "rates_mbps": [10, 50, 100],
                                                   "duration_s": 8, "omit_s": 2}]})
    for r in rows(out, "link_calibration.csv"):
        assert 0.93 <= float(r["goodput_over_rate"]) <= 1.01, r
        assert r["sender_cc"] == "cubic"
        assert int(r["lost_in_switches_pkts"]) == 0


def test_queue_fills_and_drops_at_the_bottleneck(tmp_path):
    out, summary = run(tmp_path, {"name": "it-queue", "topology": {"kind": "dumbbell", "params": {}},
                                  "experiments": [{"type": "queue_calibration", "rate_mbps": 20,
                                                   "buffer_pkts": 100, "duration_s": 10}]})
    head = summary["experiments"]["0:queue_calibration"]["headline"]
    assert head["queue_max_pkts"] >= 80  # fills to near the 100-packet buffer
    assert head["queue_max_pkts"] <= 100
    assert head["qdisc_drops_s1_pkts"] > 0  # and drops there, counted
    assert head["drops_at_bottleneck_pkts"] == head["qdisc_drops_s1_pkts"]
    assert head["sender_cc"] == ["cubic"]  # verified per connection, not assumed
    assert head["lost_in_switches_pkts"] == 0  # nothing vanished inside OVS
    samples = rows(out, "queue_depth.csv")
    assert len(samples) >= 100 * 10 * 0.8  # >= 100 Hz over the run
    assert (out / "plots" / "queue_depth.png").stat().st_size > 1000


def test_second_run_is_refused(tmp_path):
    from testbed.resources import RunLock
    from testbed.system import TestbedError
    lock = RunLock()
    lock.acquire()
    try:
        with pytest.raises(TestbedError, match="another testbed run is active"):
            run(tmp_path, {"name": "it-lock", "topology": {"kind": "dumbbell", "params": {}},
                           "experiments": [{"type": "reachability", "count": 1}]})
    finally:
        lock.release()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["SIGKILL+clean", "SIGTERM", "SIGINT"])
def test_interrupted_run_leaves_nothing_and_is_marked_incomplete(tmp_path, sig):
    """SIGTERM and Ctrl-C make the run tear itself down; after SIGKILL, `testbed clean`
    removes exactly what the run recorded. The results say 'incomplete', or 'killed' when
    the run could not say it itself."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: it-kill\ntopology: {kind: fattree, params: {k: 4}}\n"
                    "experiments: [{type: permutation, patterns: ['stride:8'], routings: [ecmp],"
                    " duration_s: 60, omit_s: 1}]\n")
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not list((out / "flows").glob("*client.json")):
        time.sleep(0.2)
    assert list((out / "flows").glob("*client.json")), "the run never started its flows"
    time.sleep(1)
    switches = [s.name for s in fattree(4).switches]
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=60) != 0
    if sig == signal.SIGKILL:  # no chance to tear down: everything recorded is still there
        assert "it-kill" in " ".join(leftovers(switches))
        done = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=REPO,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "removed bridge" in done.stdout and "iperf3" in done.stdout
    assert leftovers(switches) == []
    assert not any(Path(f"/sys/class/net/{s}-eth1").exists() for s in switches)
    import json
    summary = json.loads((out / "summary.json").read_text())
    # SIGINT/SIGTERM: the run wrote its own summary; SIGKILL: `testbed clean` found it dead
    assert summary["status"] == ("killed" if sig == signal.SIGKILL else "incomplete"), summary
