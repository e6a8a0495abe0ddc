"""The live view's pure parts (testbed/view/layout.py, frames.py): a fabric drawn in tiers
that keep neighbours together, link loads from switch port counters in both directions, and
a finished run's frames from its files."""
import json

import pytest

from testbed.config.replies import PFC_COLUMNS
from testbed.measure.queues import TIMELINE_LOADS, TIMELINE_QUEUES
from testbed.results.files import append_csv
from testbed.view.frames import link_loads, phases_of, replay
from testbed.view.layout import layout
from topologies import bcube, fattree, leafspine


def nodes(topo):
    return {n["name"]: n for n in layout(topo)["nodes"]}


def test_a_fattree_reads_as_one_with_its_pods_together():
    n = nodes(fattree(4))
    assert {n[h]["y"] for h in ("h1", "h16")} == {1.0}
    assert n["e1"]["y"] > n["a1"]["y"] > n["c1"]["y"] == 0.0
    # pod 0's edges and aggregations sit left of pod 1's, each above its hosts
    assert n["e1"]["x"] < n["e3"]["x"] and n["a1"]["x"] < n["a3"]["x"]
    assert n["h1"]["x"] < n["e1"]["x"] < n["h3"]["x"] + 1e-9


@pytest.mark.parametrize("topo,top", [(leafspine(2, 4, 4), "sp1"), (bcube(4, 1), "b1_0")])
def test_other_fabrics_have_their_tiers(topo, top):
    n = nodes(topo)
    assert n[top]["y"] == 0.0 and all(0 <= v["x"] <= 1 for v in n.values())
    assert max(v["y"] for v in n.values()) == 1.0  # the servers at the bottom


def test_link_loads_read_both_directions_from_the_switch_ports():
    topo = leafspine(1, 2, 1, host_rate=10, uplink_rate=10)
    lay = layout(topo)
    switches = {s.name for s in topo.switches}
    host_link = next(lk for lk in lay["links"] if lk["a"] == "h1" or lk["b"] == "h1")
    sw_if = host_link["b_if"] if host_link["b"] in switches else host_link["a_if"]
    host_if = host_link["a_if"] if sw_if == host_link["b_if"] else host_link["b_if"]
    before = {sw_if: (0, 0)}
    after = {sw_if: (625_000, 312_500)}  # in 1 s: 5 Mb/s to the host, 2.5 Mb/s from it
    loads = link_loads(lay["links"], switches, before, after, 1.0)
    assert loads[sw_if] == 0.5 and loads[host_if] == 0.25


def test_a_finished_runs_frames_from_its_files(tmp_path):
    topo = leafspine(1, 2, 1, host_rate=10, uplink_rate=10)
    out = tmp_path / "run"
    (out / "topologies").mkdir(parents=True)
    (out / "topologies" / "p1.json").write_text(topo.to_json())
    t0, mono0 = 1_800_000_000.0, 100.0
    (out / "manifest.json").write_text(json.dumps({"clock": {"unix_s": t0,
                                                              "monotonic_s": mono0}}))
    (out / "events.jsonl").write_text(
        json.dumps({"phase_up": "phase one", "slug": "p1", "time": t0 + 1.0}) + "\n"
        + json.dumps({"phase_down": "phase one", "slug": "p1", "time": t0 + 3.0}) + "\n")
    port = "l1-eth1"  # the leaf's port toward h1
    append_csv(out / "timeline" / "s-loads.csv", TIMELINE_LOADS,
               [[t0 + 1.0 + 0.02 * i, port, 0, 25_000 * i] for i in range(100)])  # 10 Mb/s
    append_csv(out / "timeline" / "s-queues.csv", TIMELINE_QUEUES,
               [[t0 + 1.5, port, 0, 30_000, 20, 3, 0], [t0 + 2.5, port, 0, 0, 0, 3, 0]])
    append_csv(out / "qos_apps" / "p1" / "pfc_events.csv", list(PFC_COLUMNS),
               [[int((mono0 + 2.0) * 1e9), "h1", "h1-eth0", 0, "pause", port, 9000, 40.0, "", ""],
                [int((mono0 + 2.2) * 1e9), "h1", "h1-eth0", 0, "resume", port, 0, "", 3.5, 0]])
    (out / "training" / "job-a").mkdir(parents=True)  # two iterations, ended at 1.6 and 2.6 s
    (out / "training" / "job-a" / "rank0.jsonl").write_text(
        "".join(json.dumps({"iter": i, "t_sync_end": mono0 + t}) + "\n"
                for i, t in enumerate((1.6, 2.6))))
    (out / "hedera" / "p1").mkdir(parents=True)
    (out / "hedera" / "p1" / "hedera_decisions.jsonl").write_text(json.dumps(
        {"t": t0 + 2.1, "flow": "h1/h2", "path": ["h1", "l1", "sp1", "l2", "h2"]}) + "\n")
    assert phases_of([json.loads(line) for line in
                      (out / "events.jsonl").read_text().splitlines()])[0]["t_end"] == t0 + 3
    run = replay(out)
    assert run["phases"][0]["slug"] == "p1" and run["phases"][0]["t_start"] == 1.0
    frames = {f["t"]: f for f in run["frames"]}
    assert len(frames) == 9  # 1.0 .. 3.0 s every 0.25 s
    assert frames[1.5]["load"][port] == pytest.approx(1.0, abs=0.02)
    assert frames[1.5]["ports"][port] == {"q": 30_000, "marks": 3, "drops": 0, "paused": 0}
    assert frames[2.0]["ports"][port]["paused"] == 1
    assert frames[2.5]["ports"][port] == {"q": 0, "marks": 3, "drops": 0, "paused": 0}
    assert [frames[t]["jobs"]["training/job-a"] for t in (1.5, 2.0, 3.0)] == [0, 1, 2]
    assert frames[2.0]["moves"] == [] and frames[2.25]["moves"] == [
        {"t": pytest.approx(2.1), "name": "hedera moved h1/h2 via l1-sp1-l2"}]
    # the last sample is at 2.98 s: of the step 2.75-3.0 s, 0.23 s carried traffic
    assert frames[3.0]["load"][port] == pytest.approx(0.92, abs=0.01)
