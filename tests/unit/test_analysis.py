"""Runs read back for analysis (testbed/results/analysis.py): tables with units and
provenance, headlines under stable keys, two runs compared."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import results
from testbed.experiments import incast
from testbed.experiments.permutation.analysis import headline as permutation_headline
from testbed.results.analysis import (
    NotARun,
    Row,
    compare,
    compare_values,
    format_comparison,
    headlines,
    load,
    load_many,
    unit_of,
)
from testbed.results.files import append_csv
from testbed.spec import Incast, Permutation

ROOT = Path(__file__).resolve().parents[2]

# permutation.csv's header, as testbed/experiments/permutation/run.py writes it (the runner
# puts the experiment's spec index first)
PERMUTATION_HEADER = ["experiment", "routing", "pattern", "repeat", "aggregate_mbps",
                      "normalised_to_ideal", "ovs_added_delay_p50_ms", "ovs_thread_p90_core",
                      "machine_idle_mean", "cpu_bound", "lost_in_switches_pkts", "fct_p50_s",
                      "fct_p99_s", "slowdown_p50", "slowdown_p99", "maxmin_model",
                      "routed_model", "routed_model_p10", "routed_model_p90", "routed_model_pf"]
CPU_HEADER = ["experiment", "t_s", "machine_busy_fraction", "ovs_thread_core_fraction",
              "ovs_rx_backlog_bytes"]


def perm_rows(ecmp_mbps: float) -> list[list]:
    """permutation.csv's rows of a stride:8 single vs ECMP run on an ideal of 320 Mb/s."""
    return [["single", "stride:8", 0, 80.0, 0.25, 0.1, 0.5, 0.4, False, 0, None, None, None,
             None, 0.99, 0.248, 0.248, 0.248, 0.25],
            ["ecmp", "stride:8", 0, ecmp_mbps, round(ecmp_mbps / 320, 4), 0.1, 0.5, 0.4,
             ecmp_mbps > 250, 3, None, None, None, None, 0.99, 0.62, 0.49, 0.75, 0.64]]


def make_run(out: Path, ecmp_mbps: float, with_training: bool = True) -> Path:
    """A results directory as a run leaves it: manifest, summary with the experiments' real
    headlines, and metrics tables."""
    rows = perm_rows(ecmp_mbps)
    perm = Permutation(patterns=["stride:8"], routings=["single", "ecmp"])
    experiments: dict = {
        "0:reachability": {"headline": {"pairs": 240, "pings_sent": 480, "pings_received": 480,
                                        "loss_pct": 0.0, "rtt_median_ms": 0.9,
                                        "rtt_max_ms": None, "cpu_bound": False},
                           "warnings": [], "degraded": []},
        "1:permutation": {"headline": permutation_headline(rows, perm, ["single", "ecmp"],
                                                           320.0, {"ecmp": 1.5}),
                          "warnings": [], "degraded": []},
    }
    inc = Incast(senders=[1, 4], variants=["lossy", "pfc"])
    inc_rows = [{"variant": v, "senders": n, "goodput_mbps": g, "switch_drops": d,
                 "tcp_timeouts": 0, "lossless_overflow": 0}
                for v, n, g, d in (("lossy", 1, 90.0, 0), ("lossy", 4, 45.0, 30),
                                   ("pfc", 1, 90.0, 0), ("pfc", 4, 92.0, 0))]
    experiments["2:incast"] = {"headline": incast.analyse(inc_rows, inc, {}, 95.6)[0],
                               "warnings": [], "degraded": []}
    if with_training:  # the shape training/run.py gives its headline
        experiments["3:training"] = {"headline": {"jobs": 2, "results": [
            {"fabric": "fattree@20Mbps", "job": job, "iter_s_median": it,
             "comm_s_median": it / 2, "model_comm_s": 0.2, "comm_over_model": it / 0.4,
             "test_acc": 0.9, "cpu_bound": False}
            for job, it in (("ring", 0.4), ("ps", 0.8))]}, "warnings": [], "degraded": []}
    experiments["plots"] = {"error": "no display"}  # the runner's own entries: no headline
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({
        "spec_name": "quickstart", "started": "2026-01-01T12:00:00",
        "provenance": {"commit": "4cea3da" + "0" * 33, "dirty": False, "diff_sha256": None,
                       "command": ["testbed", "run", "experiments/quickstart.yaml"],
                       "cwd": "/work/main"},
        "versions": {"testbed": "0.1.0", "python": "3.11.2"},
        "machine": {"cpus": 2, "kernel": "6.1.0"}, "mtu_bytes": 9000}))
    (out / "summary.json").write_text(json.dumps({
        "status": "ok", "error": "", "elapsed_s": 61.0, "experiments": experiments,
        "fidelity_warnings": [], "cpu_bound": False, "plots": []}))
    metrics = out / "metrics"
    append_csv(metrics / "permutation.csv", PERMUTATION_HEADER, [[1, *r] for r in rows])
    append_csv(metrics / "cpu.csv", CPU_HEADER, [[None, 0.0, 0.5, 0.3, 0],
                                                 [None, 1.0, 0.6, 0.4, 1514]])
    if with_training:  # a second writer brought a column: the first rows' cells are empty
        append_csv(metrics / "training.csv", ["experiment", "job", "iter_s_median"],
                   [[3, "ring", 0.4]])
        append_csv(metrics / "training.csv", ["experiment", "job", "iter_s_median", "crash"],
                   [[3, "ps", "None", True]])
    return out


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    return make_run(tmp_path / "a", 200.0), make_run(tmp_path / "b", 260.0,
                                                     with_training=False)


def test_a_columns_unit_is_what_its_name_ends_with():
    assert {c: unit_of(c) for c in [
        "goodput_mbps", "rtt_ms", "t_s", "burst_us", "time_ns", "sample_hz",
        "backlog_bytes", "bytes", "lost_mb", "mem_used_peak_gb", "drops_pkts",
        "machine_busy_fraction", "loss_pct", "ovs_thread_p90_core", "device_tflops",
        "iter_s_median", "peak_rss_mb_max", "fct_p99_s", "bytes_per_iter",
        "tx_bytes_per_sync", "busiest_port_bytes_per_iter",
        "routing", "normalised_to_ideal", "slowdown_p50", "marks_per_iter", "cpu_bound",
        "hosts", "goodput_over_rate"]} == {
        "goodput_mbps": "Mb/s", "rtt_ms": "ms", "t_s": "s", "burst_us": "µs",
        "time_ns": "ns", "sample_hz": "Hz", "backlog_bytes": "B", "bytes": "B",
        "lost_mb": "MB", "mem_used_peak_gb": "GB", "drops_pkts": "packets",
        "machine_busy_fraction": "fraction", "loss_pct": "%", "ovs_thread_p90_core": "cores",
        "device_tflops": "TFLOP/s", "iter_s_median": "s", "peak_rss_mb_max": "MB",
        "fct_p99_s": "s", "bytes_per_iter": "B/iteration", "tx_bytes_per_sync": "B/sync",
        "busiest_port_bytes_per_iter": "B/iteration",
        "routing": None, "normalised_to_ideal": None, "slowdown_p50": None,
        "marks_per_iter": None, "cpu_bound": None, "hosts": None, "goodput_over_rate": None}


def test_load_reads_tables_with_types_units_and_provenance(two_runs):
    run = load(two_runs[0])
    assert set(run.tables) == {"permutation", "cpu", "training"}
    perm = run["permutation"]
    assert perm is run.permutation and list(perm.columns) == PERMUTATION_HEADER
    assert perm["aggregate_mbps"].dtype == "float64" and perm["repeat"].dtype == "int64"
    assert perm["lost_in_switches_pkts"].tolist() == [0, 3]
    assert perm["cpu_bound"].dtype == bool and perm["cpu_bound"].tolist() == [False, False]
    assert perm["fct_p50_s"].isna().all()  # never measured: empty cells
    assert perm["routing"].tolist() == ["single", "ecmp"]
    assert perm["experiment"].tolist() == [1, 1]
    assert run["training"]["iter_s_median"].isna().tolist() == [False, True]  # "None"
    crash = run["training"]["crash"]  # True under a column the first writer lacked
    assert crash.dtype == "boolean" and crash.isna().tolist() == [True, False]
    assert perm.attrs["units"]["aggregate_mbps"] == "Mb/s"
    assert perm.attrs["units"]["ovs_thread_p90_core"] == "cores"
    assert "routing" not in perm.attrs["units"] and "cpu_bound" not in perm.attrs["units"]
    assert run.cpu["experiment"].isna().all()  # the runner's own rows
    assert run.cpu.attrs["units"] == {"t_s": "s", "machine_busy_fraction": "fraction",
                                      "ovs_thread_core_fraction": "fraction",
                                      "ovs_rx_backlog_bytes": "B"}
    prov = perm.attrs["provenance"]
    assert prov["versions"]["testbed"] == "0.1.0" and prov["machine"]["cpus"] == 2
    assert prov["spec_name"] == "quickstart" and prov["path"] == str(two_runs[0].resolve())
    assert prov["commit"].startswith("4cea3da") and prov["dirty"] is False  # as README shows
    assert prov["command"][:2] == ["testbed", "run"]
    assert "mtu_bytes" not in prov
    assert run.summary["status"] == "ok" and run.manifest["mtu_bytes"] == 9000
    assert run.name == "a" and "permutation" in repr(run)


def test_a_missing_table_names_the_run_and_what_it_has(two_runs):
    run = load(two_runs[1])
    with pytest.raises(KeyError, match="no table 'training'.*cpu, permutation"):
        run["training"]
    with pytest.raises(AttributeError):
        run.training  # noqa: B018


def test_the_package_loads_runs_without_validate_loading_pandas(two_runs):
    assert results.load(two_runs[0]).headlines == load(two_runs[0]).headlines
    assert set(results.load_many(two_runs)) == {"permutation", "cpu", "training"}
    code = ("import sys\n"
            "from click.testing import CliRunner\n"
            "from testbed import cli\n"
            "r = CliRunner().invoke(cli.main, ['validate', 'experiments/quickstart.yaml'])\n"
            "assert r.exit_code == 0, r.output\n"
            "assert 'testbed.results' in sys.modules\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_load_many_stacks_the_runs_under_a_run_column(two_runs):
    tables = load_many(two_runs)
    perm = tables["permutation"]
    assert list(perm.columns) == ["run", *PERMUTATION_HEADER]
    assert perm["run"].tolist() == ["a", "a", "b", "b"]
    assert perm["aggregate_mbps"].tolist() == [80.0, 200.0, 80.0, 260.0]
    assert perm.groupby("run")["aggregate_mbps"].max().to_dict() == {"a": 200.0, "b": 260.0}
    assert perm.attrs["units"]["aggregate_mbps"] == "Mb/s"
    assert set(perm.attrs["provenance"]) == {"a", "b"}
    assert perm.attrs["provenance"]["b"]["path"] == str(two_runs[1].resolve())
    assert tables["training"]["run"].unique().tolist() == ["a"]  # b ran no training
    assert set(tables["training"].attrs["provenance"]) == {"a"}


def test_runs_of_one_name_are_told_apart_by_path(tmp_path):
    first = make_run(tmp_path / "x", 200.0)
    (tmp_path / "y").mkdir()
    second = make_run(tmp_path / "y" / "x", 210.0)
    runs = load_many([first, second])["cpu"]["run"].unique().tolist()
    assert runs == [str(first), str(second)]


def test_headlines_are_flat_under_stable_keys(two_runs):
    h = load(two_runs[0]).headlines
    assert h["0:reachability.pairs"] == 240 and h["0:reachability.loss_pct"] == 0.0
    assert "0:reachability.rtt_max_ms" not in h  # None: not measured
    assert h["0:reachability.cpu_bound"] == "False"  # a flag, not a number
    assert h["1:permutation.ideal_mbps"] == 320.0
    assert h["1:permutation.stride:8_ecmp_normalised"] == 0.625
    assert h["1:permutation.ideal_fct_s.ecmp"] == 1.5
    assert h["2:incast.pfc.goodput_at_max_n_mbps"] == 92.0  # nested dicts
    assert h["2:incast.lossy.collapse_from_best"] == 0.5
    # a list of jobs: keyed by what identifies each, not by its position
    assert h["3:training.results.fattree@20Mbps/ps.iter_s_median"] == 0.8
    assert h["3:training.results.fattree@20Mbps/ring.comm_s_median"] == 0.2
    assert "3:training.results.fattree@20Mbps/ring.job" not in h
    assert not any(k.startswith("plots") for k in h)
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in h.values())


def test_a_list_not_told_apart_by_its_fields_is_indexed():
    summary = {"experiments": {
        "0:jobs": {"headline": {"results": [
            {"placement": "packed", "policy": "fair", "job": "a", "slowdown": 1.2},
            {"placement": "packed", "policy": "fair", "job": "b", "slowdown": 1.5},
            {"placement": "spread", "policy": "fair", "job": "a", "slowdown": 1.1}]}},
        "1:x": {"headline": {"same": [{"job": "a", "v": 1}, {"job": "a", "v": 2}],
                             "plain": [3, None, 5], "none": {"at": None}}}}}
    assert headlines(summary) == {
        "0:jobs.results.packed/fair/a.slowdown": 1.2,
        "0:jobs.results.packed/fair/b.slowdown": 1.5,
        "0:jobs.results.spread/fair/a.slowdown": 1.1,
        "1:x.same.0.job": "a", "1:x.same.0.v": 1, "1:x.same.1.job": "a", "1:x.same.1.v": 2,
        "1:x.plain.0": 3, "1:x.plain.2": 5}
    assert headlines({"status": "incomplete", "reason": "running"}) == {}


def test_compare_puts_every_headline_side_by_side(two_runs):
    rows = {r.key: r for r in compare(load(two_runs[0]), load(two_runs[1]))}
    ecmp = rows["1:permutation.stride:8_ecmp_normalised"]
    assert (ecmp.a, ecmp.b) == (0.625, 0.8125) and ecmp.ratio == pytest.approx(1.3)
    assert ecmp.differs
    same = rows["1:permutation.stride:8_single_normalised"]
    assert same.ratio == 1.0 and not same.differs
    zero = rows["0:reachability.loss_pct"]  # 0 against 0: no ratio, no difference
    assert zero.ratio is None and not zero.differs
    only_a = rows["3:training.results.fattree@20Mbps/ring.iter_s_median"]
    assert only_a.b is None and only_a.ratio is None and only_a.differs
    assert list(rows)[0] == "0:reachability.pairs"  # a's order
    loose = {r.key: r for r in compare(load(two_runs[0]), load(two_runs[1]), rel_tol=0.5)}
    assert not loose["1:permutation.stride:8_ecmp_normalised"].differs


def test_compare_values_at_the_edges():
    assert not compare_values("k", 1.0, 1.05).differs  # the tolerance is within it
    assert compare_values("k", 1.0, 1.0501).differs
    assert compare_values("k", 2.0, 1.9).ratio == pytest.approx(0.95)
    assert compare_values("k", 0, 0.1) == Row("k", 0, 0.1, None, True)
    assert compare_values("k", -1.0, 1.0).differs
    assert compare_values("k", "False", "True") == Row("k", "False", "True", None, True)
    assert not compare_values("k", "h1->h9", "h1->h9").differs
    assert compare_values("k", None, 3).differs
    assert compare_values("k", float("nan"), 1.0).differs
    assert not compare_values("k", float("nan"), float("nan")).differs


def test_the_comparison_reads_as_a_table():
    rows = [Row("1:permutation.ideal_mbps", 320.0, 320.0, 1.0, False),
            Row("1:permutation.stride:8_ecmp_normalised", 0.625, 0.8125, 1.3, True),
            Row("0:reachability.cpu_bound", "False", "True", None, True),
            Row("3:training.jobs", 2, None, None, True)]
    text = format_comparison(rows, ["a", "run-b"])
    lines = text.splitlines()
    assert lines[0].split() == ["headline", "a", "run-b", "B/A"]
    assert lines[1].split() == ["1:permutation.ideal_mbps", "320", "320", "1.000"]
    assert lines[2].split() == ["1:permutation.stride:8_ecmp_normalised", "0.625", "0.8125",
                                "1.300", "≠"]
    assert lines[3].split() == ["0:reachability.cpu_bound", "False", "True", "-", "≠"]
    assert lines[4].split() == ["3:training.jobs", "2", "-", "-", "≠"]
    ratio_ends = {len(line.rstrip(" ≠")) for line in lines[:5]}
    assert len(ratio_ends) == 1  # the B/A column is right-aligned
    assert lines[-1] == "3 of 4 headlines differ beyond ±5%"
    assert format_comparison([], ["a", "b"], rel_tol=0.1).splitlines()[-1] == \
        "0 of 0 headlines differ beyond ±10%"


def test_a_directory_that_is_no_run_says_so(tmp_path):
    with pytest.raises(NotARun, match=f"{tmp_path}: not a testbed results directory"):
        load(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NotARun, match="notes.txt: not a testbed results directory"):
        load(tmp_path / "notes.txt")
    with pytest.raises(NotARun, match="not a testbed results directory"):
        load(tmp_path / "absent")
    assert issubclass(NotARun, ValueError)


def test_a_run_still_going_loads_and_a_broken_summary_is_named(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "incomplete",
                                                       "reason": "running"}))
    run = load(tmp_path)
    assert run.summary["status"] == "incomplete" and run.tables == {} and run.manifest == {}
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "startup.csv").write_text("")  # created, nothing written yet
    assert load(tmp_path)["startup"].empty
    (tmp_path / "summary.json").write_text('{"status": "inc')
    with pytest.raises(NotARun, match="summary.json: cannot be read as JSON"):
        load(tmp_path)
