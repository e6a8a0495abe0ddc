"""The plots, drawn from small recorded rows: titles name the experiment and its shared
parameters, axes carry units, models are drawn beside the measurements, CPU-bound results
are in the legend, two experiments' rows stay apart, and cpu.png shades the fabric phases."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.results.plots import CPU_BOUND, draw_all, param, phase_spans, pyplot, title


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[Any]]]:
    """The figures drawn so far: `save` closes each figure, so closing is put off until the
    test ends."""
    plt = pyplot()
    close = plt.close
    plt.close("all")
    monkeypatch.setattr(plt, "close", lambda *args: None)
    yield lambda: [plt.figure(n) for n in plt.get_fignums()]
    close("all")


def legend(fig: Any) -> list[str]:
    return [t.get_text() for ax in fig.axes if ax.get_legend()
            for t in ax.get_legend().get_texts()]


def titles(fig: Any) -> list[str]:
    out = [ax.get_title() for ax in fig.axes]
    return out + ([fig._suptitle.get_text()] if fig._suptitle else [])


def perm_row(routing: str, pattern: str, value: float, model: float | None,
             experiment: str = "0", cpu_bound: bool = False) -> dict:
    cell = "" if model is None else str(model)
    return {"experiment": experiment, "routing": routing, "pattern": pattern, "repeat": "0",
            "aggregate_mbps": str(value * 320), "normalised_to_ideal": str(value),
            "cpu_bound": str(cpu_bound), "maxmin_model": "0.9", "routed_model": cell,
            "routed_model_p10": "" if model is None else str(model - 0.1),
            "routed_model_p90": "" if model is None else str(model + 0.1),
            "routed_model_pf": "" if model is None else str(model + 0.02)}


def test_a_title_names_the_parameters_every_row_shares():
    rows = [{"rate_mbps": "20.0", "pattern": "stride:8", "routing": r} for r in ("single", "ecmp")]
    assert title("Permutation", "goodput vs ideal", rows, ("pattern", "rate_mbps", "routing",
                                                            "topology")) \
        == "Permutation stride:8, 20 Mb/s: goodput vs ideal"
    assert param("buffer_pkts", "50") == "buffer 50 packets" and param("senders", "4") == "senders 4"
    two = [{"experiment": "0"}, {"experiment": "3"}]
    assert title("Incast", "goodput", two) == "Incast experiments 0, 3: goodput"


def test_the_hedera_permutation_plot_draws_the_models_and_marks_cpu_bound(tmp_path, figures):
    from testbed.experiments.permutation.plots import plot
    rows = [perm_row("nonblocking", "stride:8", 0.88, 0.9),
            perm_row("single", "stride:8", 0.24, 0.25),
            perm_row("ecmp", "stride:8", 0.45, 0.5),
            perm_row("hedera", "stride:8", 0.7, None, cpu_bound=True)]
    assert plot(rows, tmp_path).exists()
    fig, = figures()
    labels = legend(fig)
    for entry in ("model (max-min)", "model (proportionally fair)",
                  "model (max-min, non-blocking switch)", CPU_BOUND,
                  "hedera: Hedera paper's testbed mean"):
        assert entry in labels
    ax = fig.axes[0]
    ticks = next(c for c in ax.collections if c.get_label() == "model (max-min)")
    assert sorted(round(seg[0][1], 3) for seg in ticks.get_segments()) == [0.25, 0.5, 0.9]
    assert "Hedera" in ax.get_title() and "stride:8" in ax.get_title()
    assert ax.get_ylabel() == "aggregate goodput (fraction of ideal)"


def test_two_experiments_with_the_same_parameters_stay_apart(tmp_path, figures):
    from testbed.experiments.permutation.plots import plot
    rows = [perm_row("ecmp", "stride:8", 0.4, 0.5, experiment="0"),
            perm_row("ecmp", "stride:8", 0.6, 0.5, experiment="2")]
    plot(rows, tmp_path)
    fig, = figures()
    ax = fig.axes[0]
    bars = sorted(round(b.get_height(), 3) for c in ax.containers for b in c)
    assert bars == [0.4, 0.6]  # not one bar at their mean
    assert {"[0] ecmp", "[2] ecmp"} <= set(legend(fig))
    assert "experiments 0, 2" in ax.get_title()


def write_run(out: Path, t0: float = 1000.0) -> None:
    (out / "metrics").mkdir(parents=True)
    (out / "manifest.json").write_text(json.dumps(
        {"spec_name": "demo", "clock": {"unix_s": t0, "monotonic_s": 1.0, "cpu_t0_unix_s": t0}}))
    events = [{"phase_up": "permutation single", "slug": "a", "time": t0 + 2},
              {"phase": "single stride:8 #0", "seconds": 3, "cpu": {"cpu_bound": False}},
              {"phase_down": "permutation single", "slug": "a", "time": t0 + 6},
              {"fault_step": {"time": t0 + 7}},
              {"phase_up": "permutation ecmp", "slug": "b", "time": t0 + 8},
              {"phase": "ecmp stride:8 #0", "seconds": 3, "cpu": {"cpu_bound": True}},
              {"phase": "ecmp stride:8 #0", "controller": "died"},
              {"phase": "ecmp stride:4 #0", "seconds": 3, "cpu": {"cpu_bound": False}},
              {"phase_down": "permutation ecmp", "slug": "b", "time": t0 + 14}]
    (out / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (out / "metrics" / "cpu.csv").write_text(
        "experiment,t_s,machine_busy_fraction,ovs_thread_core_fraction,ovs_rx_backlog_bytes\n"
        + "".join(f"0,{i * 0.5},0.5,0.2,1000\n" for i in range(32)))


def test_phase_spans_put_each_fabric_and_its_cpu_verdicts_on_the_cpu_clock():
    t0 = 1000.0
    events = [{"phase_up": "a", "slug": "a", "time": t0 + 2},
              {"phase": "x", "seconds": 1, "cpu": {"cpu_bound": True}},
              {"phase": "y", "seconds": 1, "cpu": {"cpu_bound": True}, "t_start": t0 + 3,
               "t_end": t0 + 4},
              {"phase_down": "a", "slug": "a", "time": t0 + 6},
              {"phase": "outside any fabric", "seconds": 1, "cpu": {"cpu_bound": True}},
              {"phase_up": "b", "slug": "b", "time": t0 + 8}]  # the run ended with it up
    assert phase_spans(events, t0) == [
        {"label": "a", "start_s": 2.0, "end_s": 6.0, "traffic": 2, "cpu_bound": ["x", "y"],
         "bound_s": [(3.0, 4.0)]},
        {"label": "b", "start_s": 8.0, "end_s": None, "traffic": 0, "cpu_bound": [],
         "bound_s": []}]


def test_the_cpu_plot_shades_each_phase_and_hatches_the_cpu_bound_one(tmp_path, figures):
    write_run(tmp_path)
    made = draw_all(tmp_path, {})  # a directory plot of every run, with no CSV plot
    assert made == [tmp_path / "plots" / "cpu.png"] and made[0].exists()
    fig, = figures()
    ax, ax2 = fig.axes
    names = [t.get_text() for t in ax.texts]
    assert names == ["permutation single", "permutation ecmp\nCPU-bound 1/2"]
    shaded = [p for p in ax.patches if not p.get_hatch()]
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(shaded) == 2 and len(hatched) == 1
    assert hatched[0].get_x() == pytest.approx(8.0) and hatched[0].get_width() == pytest.approx(6)
    assert any(label.startswith(CPU_BOUND) for label in legend(fig))
    assert "(fraction)" in ax.get_ylabel() and "(s)" in ax2.get_xlabel()


def test_the_cpu_plot_without_events_or_clock_still_draws_the_samples(tmp_path, figures):
    write_run(tmp_path)
    (tmp_path / "manifest.json").unlink()
    assert draw_all(tmp_path, {}) == [tmp_path / "plots" / "cpu.png"]
    fig, = figures()
    assert len(fig.axes[0].patches) == 0 and len(fig.axes[0].lines) == 2


def units_everywhere(fig: Any) -> None:
    """Every labelled y axis says its unit (or that it is a fraction or a count)."""
    for ax in fig.axes:
        if ax.get_ylabel():
            assert "(" in ax.get_ylabel() or "fraction" in ax.get_ylabel(), ax.get_ylabel()
    assert any(t for t in titles(fig)), "untitled"


def test_the_other_experiments_plots_draw_titled_with_units(tmp_path, figures):
    from testbed.experiments import calibration, ecn_queue, incast, pfc_victim, priority
    from testbed.experiments.qos_common import class_queues
    two = [{"experiment": e, "cpu_bound": str(e == "1")} for e in ("0", "1")]
    drawn = [
        calibration.plot_links([{**x, "rate_mbps": r, "goodput_mbps": str(float(r) * 0.9),
                                 "tcp_payload_limit": "0.94"} for x in two for r in ("10", "20")],
                               tmp_path),
        calibration.plot_queue([{"experiment": "0", "t_s": str(i / 10), "port": "s1-eth2",
                                 "qlen_pkts": str(i), "drops_pkts": "0"} for i in range(5)],
                               tmp_path),
        ecn_queue.plot([{"experiment": "0", "phase": p, "t_s": str(i / 10), "qlen_pkts": str(i)}
                        for p in ("drop-tail", "ecn-dctcp") for i in range(100)], tmp_path),
        incast.plot([{**x, "variant": "lossy", "senders": n, "goodput_mbps": "50",
                      "tcp_timeouts": "1"} for x in two for n in ("1", "4")], tmp_path),
        pfc_victim.plot([{**x, "phase": "pfc", "victim_mbps": "30", "incast_mbps": "60",
                          "pauses": "12"} for x in two], tmp_path),
        priority.plot([{**x, "scheduler": "strict", "high_offered_mbps": "40",
                        "high_received_mbps": "39", "low_offered_mbps": "80",
                        "low_received_mbps": "50"} for x in two], tmp_path),
        class_queues([{"experiment": "0", "phase": "incast lossy", "port": "s1-eth2",
                       "class": "0", "t_s": str(i / 10), "qlen_pkts": str(i)}
                      for i in range(5)], tmp_path),
    ]
    assert all(p.exists() for p in drawn)
    figs = figures()
    assert len(figs) == len(drawn)
    for fig in figs:
        units_everywhere(fig)
    links, _, _, inc, victim, prio, _ = figs
    assert "model (TCP payload limit)" in legend(links)
    assert {"[0] measured goodput", "[1] measured goodput", CPU_BOUND} <= set(legend(links))
    assert {"[0] lossy", "[1] lossy", CPU_BOUND} <= set(legend(inc))
    assert CPU_BOUND in legend(victim)
    assert [t.get_text() for t in victim.axes[0].get_xticklabels()] == ["[0] pfc", "[1] pfc"]
    assert "high class offered" in legend(prio)


def test_the_training_parallel_and_jobs_plots_draw_their_models(tmp_path, figures):
    from testbed.experiments.jobs import plots as jobs_plots
    from testbed.experiments.parallel import plots as parallel_plots
    from testbed.experiments.training import plots as training_plots
    training = [{"experiment": e, "fabric": f"fattree@{rate}Mbps", "job": "cnn x4",
                 "host_rate_mbps": rate, "comm_s_median": "0.5", "model_comm_s": "0.4",
                 "iter_s_median": "0.9", "cpu_bound": str(rate == "10"), "sync": "ring",
                 "priority": "none", "compression": c, "tx_bytes_per_sync": "1000",
                 "test_acc": "0.8"}
                for e, c in (("0", "none"), ("1", "topk")) for rate in ("10", "20")]
    parallel = [{"experiment": "0", "fabric": f"fattree@{rate}Mbps", "job": "tp2 pp2",
                 "host_rate_mbps": rate, "iter_s_median": "1.0", "model_iter_s": "0.9",
                 "cpu_bound": "False", "pp": "2", "micro_batches": m, "schedule": "gpipe",
                 "bubble": "0.3", "bubble_ideal": "0.25", "tp_bytes": "1000"}
                for rate, m in (("10", "4"), ("20", "8"))]
    kinds = [{"experiment": "0", "fabric": "fattree", "job": "tp2", "kind": "tp",
              "wire_bytes_per_rank": "100", "model_wire_bytes_per_rank": "90",
              "comm_s": "0.2", "model_comm_s": "0.18"}]
    jobs = [{"experiment": "0", "placement": "packed", "policy": p, "job": j,
             "alone_iter_s": "1.0", "iter_s_median": "1.3", "model_policy_s": "1.2",
             "cpu_bound": "False"} for p in ("none", "mltcp") for j in ("a", "b")]
    phases = [{"experiment": "0", "placement": "packed", "policy": "mltcp", "job": j,
               "iteration": str(i), "start_s": str(i), "sync_start_s": str(i + 0.5),
               "end_s": str(i + 0.9), "overlap": "0.5"} for j in ("a", "b") for i in range(3)]
    training_plots.draw(training, tmp_path)
    training_plots.loss_curves([{"experiment": "0", "fabric": "fattree", "job": "cnn",
                                 "iteration": str(i), "loss": "2.0"} for i in range(3)],
                               tmp_path)
    parallel_plots.jobs(parallel, tmp_path)
    parallel_plots.by_rate(parallel, tmp_path)
    parallel_plots.kinds(kinds, tmp_path)
    jobs_plots.iterations(jobs, tmp_path)
    jobs_plots.phases(phases, tmp_path)
    jobs_plots.overlap(phases, tmp_path)
    figs = figures()
    assert len(figs) == 11
    for fig in figs:
        units_everywhere(fig)
    comm, rate, compression = figs[:3]
    assert {"analytical model", CPU_BOUND} <= set(legend(comm))
    assert any(t.startswith("[0] ") for t in
               [x.get_text() for x in comm.axes[0].get_xticklabels()])
    assert "model communication (dashed, per job)" in legend(rate)
    assert {"model: (p-1)/(m+p-1)"} <= set(legend(figs[5]))
    assert "model (dashed, per job)" in legend(figs[6])
