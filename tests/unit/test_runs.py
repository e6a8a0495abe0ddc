"""What ties a run to its code and keeps its files apart: provenance, the experiment (and
sweep point) on every row and raw file, sweeps and `--set`, the verdict `--strict` reads,
and scripts' commands given as strings."""
from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from testbed import cli
from testbed.api import command_argv
from testbed.config.loader import SpecError, read_yaml
from testbed.config.spec import spec_data, sweep_points
from testbed.config.sweep import parse_set, with_sets
from testbed.core import provenance
from testbed.core.errors import TestbedError
from testbed.outputs import experiment_at
from testbed.results import sweep
from testbed.results.files import read_rows
from testbed.results.plots import plot_rows
from testbed.results.verdict import unfaithful
from testbed.runner import RunContext
from testbed.spec import load, loads
from testbed.workloads.model.flows import FlowResult, carried_nothing

REPO = Path(__file__).resolve().parents[2]


def test_provenance_names_the_commit_and_whether_the_checkout_differs():
    state = provenance.code_state()
    head = subprocess.run(["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), "rev-parse",
                           "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert state["commit"] == head.stdout.strip()
    assert isinstance(state["dirty"], bool)
    assert (state["diff_sha256"] is None) == (not state["dirty"])
    assert provenance.code_state() == state  # the same tree hashes the same
    machine = provenance.machine()
    assert machine["cpus"] >= 1 and machine["memory_bytes"] > 0
    assert set(provenance.versions()) >= {"python", "torch", "openvswitch", "ryu", "mininet",
                                          "iperf3", "kernel", "testbed"}


def test_provenance_outside_a_checkout_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setattr(provenance, "REPO", tmp_path)
    assert provenance.code_state() == {"commit": "unknown", "dirty": "unknown",
                                       "diff_sha256": "unknown"}
    assert "commit unknown" in provenance.version_line()


def test_two_identical_experiments_keep_their_rows_and_raw_files_apart(tmp_path):
    """experiments/fault_controller.yaml runs two permutation experiments with the same
    routing, pattern and repeat: rows recorded from such a run keep both, told apart by
    `experiment`, and their raw files get different names."""
    spec, topo = load(REPO / "experiments/fault_controller.yaml")
    ctx = RunContext(spec=spec, topo=topo, out_dir=tmp_path, record=None, log=print, cpu=None)
    header = ["routing", "pattern", "repeat", "aggregate_mbps"]
    names = []
    for index in (0, 1):
        ctx.experiment = index
        ctx.write_csv("permutation.csv", header, [["ecmp", "stride:8", 0, 188.3],
                                                  ["ecmp", "stride:8", 1, 190.1]])
        names.append(ctx.raw_name("perm-ecmp-stride8-0"))
    rows = read_rows(tmp_path / "metrics" / "permutation.csv")
    assert [(r["experiment"], r["repeat"]) for r in rows] == [("0", "0"), ("0", "1"),
                                                              ("1", "0"), ("1", "1")]
    assert names == ["0-perm-ecmp-stride8-0", "1-perm-ecmp-stride8-0"]
    # a table whose rows carry their own experiment is not given a second one
    ctx.write_csv("training.csv", ["experiment", "job"], [[1, "ring"]])
    assert list(read_rows(tmp_path / "metrics" / "training.csv")[0]) == ["experiment", "job"]


def test_a_sweep_point_is_on_every_row_and_raw_file(tmp_path):
    spec, topo = load(REPO / "experiments/quickstart.yaml")
    ctx = RunContext(spec=spec, topo=topo, out_dir=tmp_path, record=None, log=print, cpu=None)
    ctx.experiment, ctx.point, ctx.point_values = 1, 2, {"links.rate_mbps": 50}
    ctx.write_csv("permutation.csv", ["routing"], [["ecmp"]])
    assert read_rows(tmp_path / "metrics" / "permutation.csv") == [
        {"experiment": "1", "point": "2", "links.rate_mbps": "50", "routing": "ecmp"}]
    # a table whose rows carry their own experiment: the point's columns follow it
    ctx.write_csv("training.csv", ["fabric", "experiment", "job"], [["fattree", 1, "ring"]])
    assert list(read_rows(tmp_path / "metrics" / "training.csv")[0]) == [
        "fabric", "experiment", "point", "links.rate_mbps", "job"]
    assert ctx.raw_name("x") == "p2-1-x"
    # plots keep the points apart
    assert [r["experiment"] for r in plot_rows(tmp_path / "metrics" / "permutation.csv")] == [
        "p2-1"]
    spans = [(0, 0, 1.0, 2.0), (1, 0, 2.5, 4.0)]
    assert experiment_at(spans, 3.0, True) == [1, 0]
    assert experiment_at(spans, 2.2, False) == [None]


def test_set_changes_fields_through_the_strict_loader():
    data = read_yaml(REPO / "experiments/quickstart.yaml")
    changed = with_sets(data, ["experiments.1.duration_s=20", "links.rate_mbps=50",
                               "experiments.1.patterns=[randbij]"])
    spec, _ = loads(changed)
    assert spec.links.rate_mbps == 50 and spec.experiments[1].duration_s == 20
    assert spec.experiments[1].patterns == ["randbij"]
    assert data["links"] == {"buffer_pkts": 100, "mtu_bytes": 9000}  # the original untouched
    assert parse_set("controller.routing=single") == ("controller.routing", "single")
    assert parse_set("qos.pfc=") == ("qos.pfc", None)
    with pytest.raises(SpecError, match="unknown key"):
        loads(with_sets(data, ["links.rate_mpbs=5"]))


def test_a_sweep_expands_to_checked_points(tmp_path):
    data = read_yaml(REPO / "experiments/quickstart.yaml")
    data["sweep"] = {"grid": {"links.rate_mbps": [10, 20], "experiments.1.duration_s": [5, 8]}}
    points = sweep_points(data)
    assert [p.values for p in points] == [
        {"links.rate_mbps": 10, "experiments.1.duration_s": 5},
        {"links.rate_mbps": 10, "experiments.1.duration_s": 8},
        {"links.rate_mbps": 20, "experiments.1.duration_s": 5},
        {"links.rate_mbps": 20, "experiments.1.duration_s": 8}]
    assert points[3].spec.links.rate_mbps == 20 and points[3].spec.sweep is None
    assert sweep_points(read_yaml(REPO / "experiments/quickstart.yaml")) == []
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    assert len(sweep_points(spec_data(spec_file, sets=["sweep.grid={links.rate_mbps: [5]}"]))) == 1


def test_the_sweep_table_has_the_swept_values_and_its_plot_the_chosen_headline(tmp_path):
    ran = [(i, {"links.rate_mbps": rate}, "permutation", 1,
            {"ideal_mbps": 16 * rate, "stride:8_ecmp_normalised": 0.6 + i / 100,
             "stride:8_single_normalised": 0.25, "results": [{"routing": "x", "ok": True}]})
           for i, rate in enumerate([10, 20, 50])]
    header, rows = sweep.table(["links.rate_mbps"], ran)
    assert header[:4] == ["point", "links.rate_mbps", "experiment", "type"]
    assert "permutation.stride:8_ecmp_normalised" in header
    assert [r[1] for r in rows] == [10, 20, 50]
    path = tmp_path / "sweep.csv"
    path.write_text(",".join(header) + "\n" + "\n".join(",".join("" if c is None else str(c)
                                                                  for c in r) for r in rows))
    png = sweep.plot(read_rows(path), ["links.rate_mbps"], "normalised", tmp_path)
    assert png is not None and png.exists()
    assert sweep.plot(read_rows(path), ["links.rate_mbps"], "no_such_headline", tmp_path) is None


def test_the_verdict_lists_cpu_bound_phases_losses_and_degraded_reasons():
    warnings = ["ecmp stride:8 #0: CPU-bound (OVS's forwarding added 1.2 ms of queueing "
                "(median), machine idle 8% on average); its numbers are not faithful",
                "training fattree: ring-8w: CPU-bound: workers waited for a core 40% of an "
                "iteration", "ecmp randbij #0: 5 packets lost inside switches"]
    events = [{"phase": "ecmp stride:8 #0", "cpu": {"cpu_bound": True,
                                                   "ovs_added_delay_p50_ms": 1.2},
               "conservation": {"lost_in_switches": 0, "socket_drops": 0}},
              {"phase": "ecmp randbij #0", "cpu": {"cpu_bound": False},
               "conservation": {"lost_in_switches": 5, "socket_drops": 0}, "faults": True},
              {"phase": "single stride:8 #0", "cpu": {"cpu_bound": False},
               "conservation": {"lost_in_switches": 3, "socket_drops": 2}},
              {"phase_up": "x"}]
    reasons = unfaithful(events, ["reachability: 3 of 240 pairs lost pings"], warnings)
    assert reasons == [*warnings[:2],  # the OVS verdict's and a training job's own
                       "single stride:8 #0: 3 packets lost inside switches without being "
                       "counted",
                       "single stride:8 #0: 2 packets dropped at OVS's sockets",
                       "degraded: reachability: 3 of 240 pairs lost pings"]
    assert unfaithful([], [], ["reachability: 2 pairs lost pings"]) == []


def _recorded_run(tmp_path: Path, summary: dict) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    return out


@pytest.mark.parametrize("summary,code", [
    ({"status": "ok", "experiments": {"0:permutation": {"headline": {}}},
      "fidelity_warnings": ["ecmp stride:8 #0: CPU-bound (...)"], "cpu_bound": True,
      "unfaithful": ["ecmp stride:8 #0: CPU-bound (OVS added 1.2 ms of queueing, median)"]}, 1),
    ({"status": "ok", "experiments": {}, "fidelity_warnings": [], "cpu_bound": False,
      "unfaithful": ["ecmp stride:8 #0: CPU-bound (OVS added 1.2 ms of queueing, median)",
                     "degraded: reachability: 3 of 240 pairs lost pings"]}, 1),
    ({"status": "ok", "experiments": {}, "fidelity_warnings": [], "unfaithful": []}, 0),
])
def test_strict_fails_a_run_whose_phase_was_flagged(monkeypatch, tmp_path, summary, code):
    """`testbed run --strict` on a recorded summary (the runner itself replaced)."""
    out = _recorded_run(tmp_path, summary)
    monkeypatch.setattr("testbed.runner.run_spec", lambda *a, **k: out)
    spec = REPO / "experiments/quickstart.yaml"
    strict = CliRunner().invoke(cli.main, ["run", str(spec), "--strict"])
    assert strict.exit_code == code, strict.output
    if code:
        (line,) = strict.stderr.strip().splitlines()
        assert line.startswith(f"error: --strict: {len(summary['unfaithful'])} reason(s) the "
                               "numbers are not faithful: ecmp stride:8 #0: CPU-bound (OVS "
                               "added 1.2 ms of queueing, median)"), line
    assert CliRunner().invoke(cli.main, ["run", str(spec)]).exit_code == 0


def test_flows_that_carried_nothing_are_named():
    def flow(mbps: float, error: str = "") -> FlowResult:
        return FlowResult(src="h1", dst="h9", goodput_mbps=mbps, sent_mbps=mbps, retransmits=0,
                          max_cwnd_bytes=0, sender_cc="cubic", receiver_cc="cubic", error=error)
    assert carried_nothing([flow(5.0), flow(3.0)]) is None
    assert carried_nothing([flow(5.0), flow(0.0, "No route to host")]) == (
        "1 of 2 flows carried nothing (h1->h9: No route to host)")


def test_each_experiment_runs_under_its_own_index(tmp_path, monkeypatch):
    """The index is given, not looked up: the same spec object run twice (a script's
    `tb.experiment(exp)` twice) is two experiments, with two summary keys and two
    prefixes."""
    from testbed import experiments
    from testbed.experiments.base import Outcome
    spec, topo = load(REPO / "experiments/quickstart.yaml")
    seen = []

    def fake(ctx, exp):
        seen.append((ctx.experiment, ctx.raw_name("f")))
        return Outcome(headline={"n": len(seen)})
    monkeypatch.setitem(experiments.EXPERIMENTS, "reachability", dataclasses.replace(
        experiments.EXPERIMENTS["reachability"], run=fake))
    clock = type("Clock", (), {"t0": 0.0})()
    ctx = RunContext(spec=spec, topo=topo, out_dir=tmp_path, record=None, log=print, cpu=clock)
    exp = spec.experiments[0]
    ctx.run_experiment(exp, 0)
    ctx.run_experiment(exp, 2)
    assert seen == [(0, "0-f"), (2, "2-f")] and ctx.experiment is None
    assert set(ctx.results) == {"0:reachability", "2:reachability"}
    assert [(i, p) for i, p, _, _ in ctx.experiment_spans] == [(0, None), (2, None)]


def test_a_script_command_may_be_a_string():
    assert command_argv("ping -c1 h2") == ["ping", "-c1", "h2"]
    assert command_argv(["ping", "-c1"]) == ["ping", "-c1"]
    assert command_argv("sh -c 'echo a b'") == ["sh", "-c", "echo a b"]
    for bad in ("", "ping 'unclosed", [], ["ping", 3]):
        with pytest.raises(TestbedError, match="command"):
            command_argv(bad)  # type: ignore[arg-type]
