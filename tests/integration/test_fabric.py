"""Build each fabric, route every pair, calibrate links and queues; assert on measured
numbers in result files, with stated tolerances."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topologies import build

from .helpers import leftovers, machine_state, rows, run

REPO = Path(__file__).resolve().parents[2]


OFFLOADS_BOTH_WAYS = """
import subprocess
from testbed.dataplane.queues import offload_command, offloads_off
for a, b in (("tbA0", "tbB0"), ("tbA1", "tbB1")):
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
subprocess.run(offload_command("tbA0"), check=True, capture_output=True)
offloads_off(["tbA1"])
for name in ("tbA0", "tbA1"):
    print(subprocess.run(["ethtool", "-k", name], check=True, capture_output=True,
                         text=True).stdout.split("\\n", 1)[1], end="@@")
"""


def test_offloads_off_by_ioctl_is_ethtools_own():
    """queues.offloads_off leaves a switch port as `ethtool -K` with the offloads the
    testbed turns off does, every feature (run in a namespace of its own, which goes with
    the process)."""
    out = subprocess.run(["unshare", "-n", sys.executable, "-c", OFFLOADS_BOTH_WAYS],
                         cwd=REPO, check=True, capture_output=True, text=True).stdout
    by_ethtool, by_ioctl, _ = out.split("@@")
    assert by_ioctl == by_ethtool
    for line in ("rx-checksumming: off", "tx-checksumming: off",
                 "tcp-segmentation-offload: off", "generic-segmentation-offload: off",
                 "generic-receive-offload: off"):
        assert line in by_ioctl.splitlines()


@pytest.mark.parametrize("kind,params,routing", [
    ("fattree", {"k": 4}, "ecmp"),
    ("leafspine", {"spines": 2, "leaves": 4, "hosts_per_leaf": 4}, "ecmp"),
    ("bcube", {"n": 4, "k": 1}, "ecmp"),
    # the survey's other fabrics, each with its own routing: servers relaying
    # over server-to-server links (DCell, FiConn) and across joined switches (MDCube),
    # VLB's in_port bounce, dimension order, rail-aligned; the hybrid's packet part
    ("dcell", {"n": 4, "k": 1}, "own"),
    ("ficonn", {"n": 4, "k": 1}, "own"),
    ("mdcube", {"n": 2, "k": 1, "m0": 2, "m1": 2}, "own"),
    ("vl2", {"da": 4, "di": 4, "hosts_per_tor": 4}, "own"),
    ("torus", {"sides": "4x4"}, "own"),
    ("rail", {"servers": 4, "rails": 4, "spines": 2}, "own"),
    ("hybrid", {"racks": 4, "hosts_per_rack": 4}, "ecmp"),
])
def test_reachability_all_pairs_zero_loss(tmp_path, kind, params, routing):
    topo = build(kind, **params)
    out, summary = run(tmp_path, {"name": f"it-{kind}", "topology": {"kind": kind, "params": params},
                                  "controller": {"routing": routing},
                                  "experiments": [{"type": "reachability", "count": 2}]})
    assert summary["status"] == "ok"
    table = rows(out, "reachability.csv")
    n = len(topo.hosts)
    assert len(table) == n * (n - 1)
    assert sum(int(r["received_pkts"]) for r in table) == 2 * n * (n - 1)  # 0% loss
    assert leftovers([s.name for s in topo.switches]) == []


def test_a_fair_host_queue_gives_a_relays_own_flow_its_share(tmp_path):
    """The relay effect (docs/FIDELITY.md): on FiConn(4, 1) under ECMP, h1 sends to h5 over
    their direct link and relays two flows onto it. With one FIFO per NIC h1's own flow got
    2.0 of 20 Mb/s; with `links.host_queue: fair` each of the three gets its max-min share,
    a third of the link (measured 6.61, 6.62, 6.65 Mb/s). Tolerance: 15% of the share."""
    from testbed.api import Testbed
    spec = {"name": "it-relay-fair", "topology": {"kind": "ficonn", "params": {"n": 4, "k": 1}},
            "links": {"rate_mbps": 20, "mtu_bytes": 9000, "host_queue": "fair"},
            "controller": {"routing": "ecmp"}}
    with Testbed(spec, out=tmp_path / "out", log=lambda m: None) as tb:
        fab = tb.fabric()
        res = fab.flows([("h1", "h5"), ("h2", "h6"), ("h4", "h8")], duration_s=6)
        # every flow on h1-eth1, its own bucket of the NIC's HTB
        classes = fab.host("h1").run(["tc", "-s", "class", "show", "dev", "h1-eth1"]).stdout
    share = 20 * (9000 - 52) / (9000 + 14) / 3  # TCP payload of a third of the link
    rates = {(r.src, r.dst): r.goodput_mbps for r in res}
    assert all(abs(rate - share) <= 0.15 * share for rate in rates.values()), (rates, share)
    busy = [line for line in classes.split("class htb")[1:]
            if "leaf" in line and int(line.split("Sent ")[1].split()[0]) > 1_000_000]
    assert len(busy) == 3, classes
    assert leftovers(["s1", "s2", "s3"]) == []


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
    from testbed.core.resources import RunLock
    from testbed.core.system import TestbedError
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
    # Ctrl-C's signal as a terminal delivers it: the suite may itself run as a shell's
    # background job, whose children inherit SIGINT ignored (POSIX, without job control)
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while time.time() < deadline and not list((out / "flows").glob("*client.json")):
        time.sleep(0.2)
    assert list((out / "flows").glob("*client.json")), "the run never started its flows"
    time.sleep(1)
    switches = [s.name for s in build("fattree", k=4).switches]
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


SPECS = {
    "build": "experiments: [{type: permutation, patterns: ['stride:8'], routings: [ecmp], "
             "duration_s: 60, omit_s: 1}]\n",
    # with a capture: its tcpdumps (on a switch port and in a host) are stopped by clean;
    # with two forwarding processes: the second's daemons and directory too
    "traffic": "capture: {ports: [e1-eth1], hosts: [h16]}\nforwarding: {processes: 2}\n"
               "experiments: [{type: permutation, patterns: ['stride:8'], routings: [ecmp], "
               "duration_s: 60, omit_s: 1}]\n",
    "training": "experiments: [{type: training, iters: 400, jobs: [{sync: ring, workers: 4}]}]\n",
}


def _reached(phase: str, out: Path, before: dict) -> bool:
    if phase == "build":  # inside the window where OVS's socket buffers are raised
        return Path("/proc/sys/net/core/wmem_default").read_text().strip() != \
            before["sysctls"]["/proc/sys/net/core/wmem_default"]
    if phase == "traffic":
        return bool(list((out / "flows").glob("*client.json")))
    return any(p.stat().st_size > 0 for p in (out / "training").glob("*/rank*.jsonl"))


BUFFERS = ("net.core.wmem_max", "net.core.wmem_default", "net.core.rmem_max",
           "net.core.rmem_default")


@pytest.fixture
def kernel_default_buffers():
    """The socket buffer sysctls at Linux's defaults for the test (a run raises them while
    it builds its fabric only when they are below what its queues need), then as they were."""
    from testbed.core.system import sysctl_get, sysctl_set
    saved = {name: sysctl_get(name) for name in BUFFERS}
    for name in BUFFERS:
        sysctl_set(name, 212992)
    yield
    for name, value in saved.items():
        sysctl_set(name, value)


@pytest.mark.parametrize("phase", ["build", "traffic", "training"])
def test_sigkill_at_any_phase_then_clean_restores_the_machine(tmp_path, phase,
                                                              kernel_default_buffers):
    """SIGKILL, the one signal a run cannot answer, while it builds its fabric (OVS's socket
    buffers raised), while its flows run, and while a training job runs: `testbed clean`
    then leaves the machine exactly as it was before the run."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: it-sigkill\ntopology: {kind: fattree, params: {k: 4}}\n"
                    + SPECS[phase])
    out = tmp_path / "killed"
    before = machine_state()
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                             str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not _reached(phase, out, before):
        time.sleep(0.01 if phase == "build" else 0.2)
    assert proc.poll() is None and _reached(phase, out, before), f"never reached {phase}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    during = machine_state()
    if phase == "build":  # killed with OVS's socket buffers raised: the sysctl leak seen before
        assert during["sysctls"] != before["sysctls"]
    else:
        assert during["bridges"] - before["bridges"], "the kill left nothing to clean?"
    if phase == "traffic":  # the second forwarding process, left running by the kill
        assert during["forwarders"] != before["forwarders"]
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    time.sleep(1)
    after = machine_state()
    assert after["bridges"] == before["bridges"]
    assert after["interfaces"] == before["interfaces"]
    assert after["sysctls"] == before["sysctls"], {
        k: (before["sysctls"].get(k), v) for k, v in after["sysctls"].items()
        if before["sysctls"].get(k) != v}
    assert after["bpf"] == before["bpf"]
    assert after["forwarders"] == before["forwarders"]
    new = {p for p in after["processes"] - before["processes"] if p[0] != proc.pid}
    assert not new, new
