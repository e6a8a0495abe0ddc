"""A run's results can be told apart and tied to their code: two identical experiments in
one spec keep every row and raw file of both, a sweep runs each point in one session into
one table and one plot, and the manifest names the commit."""
import json

import pandas as pd

from testbed import results

from .helpers import rows, run

SMALL = {"kind": "leafspine", "params": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}}
PERMUTATION = {"type": "permutation", "patterns": ["stride:2"], "routings": ["ecmp"],
               "duration_s": 6, "omit_s": 1, "probe_ms": 10,
               "faults": [{"link": ["l1", "sp1"], "at_s": 3}]}


def test_two_identical_experiments_keep_all_their_rows_and_files(tmp_path):
    out, summary = run(tmp_path, {"name": "it-twice", "topology": SMALL,
                                  "links": {"rate_mbps": 10},
                                  "experiments": [PERMUTATION, PERMUTATION]})
    assert summary["status"] == "ok", summary
    assert set(summary["experiments"]) == {"0:permutation", "1:permutation"}
    for table, per_experiment in (("permutation.csv", 1), ("permutation_flows.csv", 4),
                                  ("flow_outages.csv", 4)):
        got = rows(out, table)
        assert [r["experiment"] for r in got] == ["0"] * per_experiment + ["1"] * per_experiment
    assert sorted(p.name for p in (out / "patterns").iterdir()) == [
        "0-ecmp-stride_2-0.json", "1-ecmp-stride_2-0.json"]
    flows = {p.name for p in (out / "flows").iterdir()}
    for i in (0, 1):  # each experiment's iperf3 reports and probes under its own names
        assert {f"{i}-perm-ecmp-stride2-0-{n}-client.json" for n in range(4)} <= flows
        assert len(list((out / "flows" / f"{i}-perm-ecmp-stride2-0").glob("probe-*.log"))) == 4
    # every table starts with the experiment; the manifest names the code
    for table in (out / "metrics").glob("*.csv"):
        assert table.read_text().split(",", 1)[0] == "experiment", table.name
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["provenance"]["commit"]) == 40
    assert isinstance(manifest["provenance"]["dirty"], bool)
    run_ = results.load(out)
    assert list(run_["flow_outages"]["experiment"]) == [0] * 4 + [1] * 4
    assert run_["permutation"].attrs["units"]["aggregate_mbps"] == "Mb/s"


def test_a_sweep_of_the_link_rate_runs_in_one_session(tmp_path):
    out, summary = run(tmp_path, {
        "name": "it-sweep", "topology": SMALL, "links": {"rate_mbps": 10},
        "sweep": {"parameter": "links.rate_mbps", "values": [5, 10, 20],
                  "plot": "normalised"},
        "experiments": [{"type": "permutation", "patterns": ["stride:2"],
                         "routings": ["single"], "duration_s": 5, "omit_s": 1}]})
    assert summary["status"] == "ok", summary
    table = pd.read_csv(out / "metrics" / "sweep.csv")
    assert list(table["links.rate_mbps"]) == [5, 10, 20] and list(table["point"]) == [0, 1, 2]
    # single-path routing is deterministic: at every rate the measured fraction of the ideal
    # is its max-min model's (TCP payload counted), within 10%
    measured = table["permutation.stride:2_single_normalised"]
    model = table["permutation.stride:2_single_model"]
    assert all(abs(m / x - 1) <= 0.10 for m, x in zip(measured, model)), (list(measured),
                                                                          list(model))
    ideal = table["permutation.ideal_mbps"]
    assert list(ideal) == [4 * 5, 4 * 10, 4 * 20]
    perm = pd.read_csv(out / "metrics" / "permutation.csv")
    assert list(perm["links.rate_mbps"]) == [5, 10, 20]
    goodput = perm["aggregate_mbps"] / perm["links.rate_mbps"]
    assert goodput.max() / goodput.min() < 1.15, list(goodput)  # scales with the rate
    assert (out / "plots" / "sweep.png").exists()
    for table in (out / "metrics").glob("*.csv"):  # every row says its experiment and point
        if table.name != "sweep.csv":
            assert table.read_text().split(",", 2)[:2] == ["experiment", "point"], table.name
    assert sorted(p.name for p in (out / "patterns").iterdir()) == [
        f"p{i}-0-single-stride_2-0.json" for i in range(3)]
    assert json.loads((out / "manifest.json").read_text())["sweep_points"] == [
        {"links.rate_mbps": v} for v in (5, 10, 20)]
