"""A fabric split across two servers. The second server is built on this machine
the way the cluster edition sees one: network, mount and PID namespaces of its own, its own
Open vSwitch and sshd, reached over a bridge (testbed/cluster/nsserver.py). Numbers are
compared with the same spec on one server; tolerances are stated per assertion."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.cluster.nsserver import BRIDGE, NamespaceServer, remove_bridge
from testbed.core.resources import records
from testbed.core.system import TestbedError
from testbed.dataplane import ovs

from .helpers import not_cpu_bound, rows, run

REPO = Path(__file__).resolve().parents[2]
FATTREE = {"kind": "fattree", "params": {"k": 4, "rate_mbps": 20}}
LINKS = {"mtu_bytes": 9000}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = NamespaceServer(1, tmp_path_factory.mktemp("server1"))
    srv.start()
    yield srv
    srv.stop()
    remove_bridge()


def on(srv: NamespaceServer, command: str) -> str:
    return subprocess.run(["ssh", "-F", str(srv.ssh_config), f"root@{srv.address}", command],
                          capture_output=True, text=True, timeout=30, check=True).stdout


def cluster(srv: NamespaceServer, **extra) -> dict:
    return {"servers": [{"name": "a", "address": "localhost"},
                        {"name": "b", "address": srv.address, "user": "root"}],
            "ssh_config": str(srv.ssh_config), **extra}


CUT = "==cut=="  # (no character the shell reads)


def server_state(srv: NamespaceServer) -> dict:
    """What a run may leave on the other server: bridges, interfaces, processes, BPF pins,
    and this machine's and that server's devices toward each other with their qdiscs (one
    ssh session, so that its processes are the same every time)."""
    bridges, pins, qdiscs, links, processes = on(srv, f" && echo {CUT} && ".join([
        "set -e; ovs-vsctl list-br", "(ls /sys/fs/bpf/testbed 2>/dev/null || true)",
        "tc qdisc show", "ip -br link", "ps -e -o comm="])).split(f"{CUT}\n")
    return {"bridges": bridges.split(), "pins": pins.split(),
            "qdiscs": qdiscs.split() + subprocess.run(
                ["tc", "qdisc", "show", "dev", BRIDGE], capture_output=True,
                text=True).stdout.split(),
            "links": sorted(line.split("@")[0].split()[0] for line in links.splitlines()),
            "processes": sorted(processes.split())}


def test_a_fattree_split_over_two_servers_matches_one_server(tmp_path, server):
    before = server_state(server)
    permutation = {"type": "permutation", "patterns": ["stride:8"], "routings": ["single"],
                   "duration_s": 8, "omit_s": 2}
    data = {"topology": FATTREE, "links": LINKS, "controller": {"routing": "single"}}
    one, one_sum = run(tmp_path / "one", {"name": "it-one-server", **data,
                                          "experiments": [permutation]})
    two, two_sum = run(tmp_path / "two", {
        "name": "it-two-servers", **data, "cluster": cluster(server),
        "experiments": [permutation, {"type": "reachability", "count": 2}]})
    assert one_sum["status"] == two_sum["status"] == "ok", two_sum.get("error")
    reach = two_sum["experiments"]["1:reachability"]["headline"]
    assert reach["pairs"] == 240 and reach["loss_pct"] == 0.0, reach
    perm = {s: x["experiments"]["0:permutation"]["headline"] for s, x in
            (("one", one_sum), ("two", two_sum))}
    key = "stride:8_single_normalised"
    # single-path routing puts every flow on the same path in both runs: the same number
    # within 5% (the bound the cluster edition is held to), when neither run was CPU-bound
    flows = {s: rows(o, "permutation.csv") for s, o in (("one", one), ("two", two))}
    assert not any(r.get("cpu_bound") == "True" for r in flows["two"])
    assert perm["two"][key] == pytest.approx(perm["one"][key], rel=0.05), perm
    manifest = json.loads((two / "manifest.json").read_text())
    phases = list(manifest["phases"].values())
    placed = phases[0]["cluster"]
    assert len(placed["crossing_links"]) == 8 and placed["placement"] == "pods"
    assert placed["servers"]["b"]["nodes"][:3] == ["a5", "a6", "a7"]
    assert all(c["extra_delay_ms"] is not None and c["extra_delay_ms"] < 1
               for c in placed["crossing_links"])
    assert placed["underlay"]["a->b"]["goodput_mbps"] > 160  # carries all 8 at 20 Mb/s
    events = [json.loads(line) for line in (two / "events.jsonl").read_text().splitlines()]
    conservation = [e["conservation"] for e in events if "conservation" in e]
    # every switch's packets accounted for, on both servers
    assert conservation and all(c["lost_in_switches"] == 0 for c in conservation)
    assert {"a1", "a5"} <= set(conservation[0]["per_switch"])
    assert server_state(server) == before  # nothing of the run left on the other server
    assert records() == []


def test_a_ring_job_split_over_two_servers_matches_one_server(tmp_path, server):
    """The issue's 4-worker ring: h1 and h5 on this server, h9 and h13 on the other; every
    server runs the class dataplane (BPF maps of its own), whose queues the run samples."""
    before = server_state(server)
    # 3.9 MB per allreduce, 1.6 s at 20 Mb/s: the links' rate decides it. (A 0.5 MB one
    # took within 1% on two servers after a warm-up fabric, but 7-11% longer right after
    # the other server's OVS (re)started, as it does here for a larger send buffer: the
    # slow first run of docs/FIDELITY.md; docs/CLUSTER.md, "The ring job on two servers".)
    training = {"type": "training", "model": "mlp", "width": 768, "iters": 6,
                "jobs": [{"sync": "ring", "workers": 4}]}
    data = {"topology": FATTREE, "links": LINKS, "controller": {"routing": "single"}}
    one, one_sum = run(tmp_path / "one", {"name": "it-ring-one", **data,
                                          "experiments": [training]})
    # the other server does not see this machine's results directory, as on real servers:
    # its workers write on its own filesystem, and the runner copies their files back
    away = tmp_path / "two"
    away.mkdir()
    on(server, f"mount -t tmpfs tmpfs {away}")
    try:
        two, two_sum = run(away, {"name": "it-ring-two", **data, "cluster": cluster(server),
                                  "experiments": [training]})
        assert on(server, f"ls -A {away}").split() == []  # its copies removed there
    finally:
        on(server, f"umount {away}")
    assert one_sum["status"] == two_sum["status"] == "ok", two_sum.get("error")
    job = {s: rows(o, "training.csv")[0] for s, o in (("one", one), ("two", two))}
    not_cpu_bound(job["two"], two_sum)
    # the allreduce time within 5% of the one-server run (the bound the cluster edition is held to)
    assert float(job["two"]["comm_s_median"]) == pytest.approx(
        float(job["one"]["comm_s_median"]), rel=0.05), job
    assert int(job["two"]["lost_in_switches_pkts"]) == 0
    # the queues of both servers' switches were sampled (the far server's by its agent)
    timeline = list((two / "timeline").glob("sampled-*-loads.csv"))
    sampled = {line.split(",")[1] for t in timeline for line in t.read_text().splitlines()[1:]}
    assert {"e1-eth1", "e5-eth1"} <= sampled, sorted(sampled)  # e5 is on the other
    # every rank's records are in the one results directory (h9 and h13 ran on the other)
    job_dir = next((two / "training").glob("*ring-4w"))
    assert all(len((job_dir / f"rank{r}.jsonl").read_text().splitlines()) == 6
               for r in range(4))
    desc = json.loads(next((two / "qos_apps").glob("*/dataplane.json")).read_text())
    assert set(desc["servers"]) == {"a", "b"} and desc["here"] == "a"
    assert server_state(server) == before  # its BPF pins removed with the rest
    assert records() == []


def test_a_cross_server_link_carries_its_rate(tmp_path, server):
    """h1 - l1 - sp1 on this server, l2 - h2 on the other: sp1-l2 is a VXLAN tunnel."""
    out, summary = run(tmp_path, {
        "name": "it-cross-link",
        "topology": {"kind": "leafspine", "params": {"spines": 1, "leaves": 2,
                                                     "hosts_per_leaf": 1, "host_rate": 10,
                                                     "uplink_rate": 10}},
        "links": LINKS,
        "experiments": [{"type": "permutation", "patterns": ["stride:1"],
                         "routings": ["single"], "duration_s": 8, "omit_s": 2}],
        "cluster": cluster(server, placement="explicit", nodes={"b": ["l2", "h2"]})})
    assert summary["status"] == "ok", summary.get("error")
    placed = list(json.loads((out / "manifest.json").read_text())["phases"].values())[0]
    assert [c["link"] for c in placed["cluster"]["crossing_links"]] == ["l2-eth2-sp1-eth2"]
    # both directions across the tunnel at the link's rate: the benchmark's 93-101%
    got = summary["experiments"]["0:permutation"]["headline"]["stride:1_single_normalised"]
    assert 0.93 <= got <= 1.01, summary["experiments"]


@pytest.mark.parametrize("case", ["unreachable", "refused", "gre", "no-ovs"])
def test_a_server_that_cannot_take_part_is_refused_before_anything_is_built(
        tmp_path, server, case):
    before = server_state(server)
    data = {"name": f"it-bad-{case}", "topology": FATTREE, "links": LINKS,
            "experiments": [{"type": "reachability", "count": 1}],
            "cluster": cluster(server)}
    other = None
    if case == "unreachable":  # nothing answers at this address on the servers' bridge
        data["cluster"]["servers"][1]["address"] = "10.251.0.200"
        says = "server b (root@10.251.0.200): unreachable"
    elif case == "refused":  # this machine's own address there: no sshd listens
        data["cluster"]["servers"][1]["address"] = "10.251.0.1"
        says = "server b (root@10.251.0.1): SSH refused: no sshd listens there"
    elif case == "gre":
        data["cluster"]["tunnel"] = "gre"
        says = "server a: its kernel cannot make a gre tunnel"
    else:
        other = NamespaceServer(2, tmp_path / "server2", ovs=False)
        other.start()
        data["cluster"]["servers"][1].update(address=other.address)
        data["cluster"]["ssh_config"] = str(other.ssh_config)
        says = "server b: Open vSwitch is not running; run scripts/bootstrap.sh there"
    t0 = time.time()
    try:
        with pytest.raises(TestbedError) as refused:
            run(tmp_path, data)
    finally:
        if other is not None:
            other.stop()
    assert says in str(refused.value), str(refused.value)
    if case == "gre":
        assert "use tunnel: vxlan" in str(refused.value)
    assert time.time() - t0 < 30  # refused at the checks, not after a build
    assert not set(ovs.bridges()) & {"c1", "e1", "a1"}
    assert server_state(server) == before
    assert records() == []


def test_an_interrupted_two_server_run_is_cleaned_on_both(tmp_path, server):
    before = server_state(server)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "it-cluster-kill", "topology": FATTREE, "links": LINKS,
        "experiments": [{"type": "permutation", "patterns": ["stride:8"],
                         "routings": ["ecmp"], "duration_s": 60, "omit_s": 1}],
        # the class dataplane too: its pins and its program on each server's own device
        "qos": {"classes": [{"name": "be", "dscp": [0]}]},
        "cluster": cluster(server)}))
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                             str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 90
    while time.time() < deadline and not list((out / "flows").glob("*client.json")):
        time.sleep(0.2)
    assert list((out / "flows").glob("*client.json")), "the run never started its flows"
    time.sleep(1)
    assert "c2" in on(server, "ovs-vsctl list-br").split()
    proc.kill()
    proc.wait(timeout=30)
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed bridge c2 on server b" in done.stdout, done.stdout
    time.sleep(1)  # the remote node shells end with their ssh
    assert server_state(server) == before
    assert not set(ovs.bridges()) & {"c1", "c2", "e1"}
    assert records() == []
    assert json.loads((out / "summary.json").read_text())["status"] == "killed"
