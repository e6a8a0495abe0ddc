"""Plots of the training experiments, drawn only from the results' CSV files."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from testbed.results.plots import (
    cell,
    mark_cpu_bound,
    plot_rows,
    pyplot,
    save,
    several_experiments,
    tagged,
    title,
)


def _key(r: dict) -> str:
    extra = f" +{r['background']}" if r.get("background") else ""
    return f"{r['job']}{extra}"


def comm_vs_model(rows: list[dict], plots: Path) -> Path:
    """Measured communication time per synchronisation next to the analytical model, per
    job and fabric; iteration time as a marker."""
    several = several_experiments(rows)
    labels = [tagged(f"{r['fabric']}\n{_key(r)}", r, several) for r in rows]
    x = range(len(rows))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 4.5))
    ax.bar([i - 0.2 for i in x], [cell(r["comm_s_median"], None) or 0 for r in rows], 0.4,
           label="measured communication")
    ax.bar([i + 0.2 for i in x], [cell(r["model_comm_s"], None) or 0 for r in rows], 0.4,
           label="analytical model", color="tab:gray")
    ax.plot(list(x), [cell(r["iter_s_median"], None) or 0 for r in rows], "k_", ms=18, mew=2,
            label="iteration (median)")
    mark_cpu_bound(ax, rows, [cell(r["iter_s_median"], None) or 0 for r in rows])
    ax.set_xticks(list(x), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("time per synchronisation (s)")
    values = [v for r in rows
              for v in (cell(r["comm_s_median"], None), cell(r["model_comm_s"], None)) if v]
    if values and max(values) > 20 * min(values):
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title(title("Training", "communication time, measured vs model (medians)", rows,
                       ("fabric", "host_rate_mbps")), fontsize=10)
    return save(fig, plots / "training_comm.png")


def by_rate(rows: list[dict], plots: Path) -> Path | None:
    """Iteration time vs link rate, per job, with the model's communication time."""
    several = several_experiments(rows)
    series = defaultdict(list)
    for r in rows:
        series[(r["fabric"].split("@")[0], tagged(_key(r), r, several))].append(
            (float(r["host_rate_mbps"]), cell(r["iter_s_median"], None), cell(r["model_comm_s"], None)))
    if not any(len({p[0] for p in pts}) > 1 for pts in series.values()):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (fabric, job), pts in series.items():
        pts.sort()
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{fabric} {job}")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=line.get_color(), lw=0.8)
    ax.plot([], [], "--", color="gray", lw=0.8, label="model communication (dashed, per job)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link rate (Mb/s)")
    ax.set_ylabel("time per iteration (s)")
    ax.legend(fontsize=8)
    ax.set_title(title("Training", "iteration time vs link rate", rows), fontsize=10)
    return save(fig, plots / "training_rate.png")


def compression(rows: list[dict], plots: Path) -> Path | None:
    """Bytes on the wire, iteration time and test accuracy per compression method."""
    rows = [r for r in rows if r["sync"] in ("ring", "local") and r["priority"] == "none"]
    if len({(r["compression"], r["sync"]) for r in rows}) < 2:
        return None
    several = several_experiments(rows)
    labels = [tagged(_key(r), r, several) for r in rows]
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.3))
    for ax, field, what, ylabel in zip(
            axes, ("tx_bytes_per_sync", "iter_s_median", "test_acc"),
            ("bytes sent per worker and synchronisation", "iteration time (median)",
             "test accuracy after the budget"),
            ("bytes (B)", "time (s)", "accuracy (fraction)")):
        ax.bar(range(len(rows)), [cell(r[field], None) or 0 for r in rows])
        ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_title(what, fontsize=9)
        ax.set_ylabel(ylabel)
    axes[0].set_yscale("log")
    fig.suptitle(title("Training", "each compression method's cost and accuracy", rows,
                       ("fabric", "host_rate_mbps")), fontsize=10)
    return save(fig, plots / "training_compression.png")


def loss_curves(rows: list[dict], plots: Path) -> Path:
    """Training loss per iteration (mean over workers), per job."""
    curves = defaultdict(lambda: defaultdict(list))
    for r in rows:
        curves[(r["experiment"], r["fabric"], r["job"])][int(r["iteration"])].append(
            float(r["loss"]))
    plt = pyplot()
    several = several_experiments(rows)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (exp, fabric, job), its in curves.items():
        xs = sorted(its)
        ax.plot(xs, [sum(its[i]) / len(its[i]) for i in xs], lw=1,
                label=tagged(f"{fabric} {job}", {"experiment": exp}, several))
    ax.set_xlabel("iteration (count)")
    ax.set_ylabel("training loss (mean over workers, dimensionless)")
    ax.set_title(title("Training", "loss per iteration", rows, ("fabric", "job")), fontsize=10)
    ax.legend(fontsize=7)
    return save(fig, plots / "training_loss.png")


def draw(rows: list[dict], plots: Path) -> list[Path]:
    made = [comm_vs_model(rows, plots)]
    for fn in (by_rate, compression):
        path = fn(rows, plots)
        if path:
            made.append(path)
    return made


def draw_dir(out_dir: Path, plots: Path) -> list[Path]:
    """The training plots of a results directory (training.csv: one row per job)."""
    path = out_dir / "metrics" / "training.csv"
    rows = plot_rows(path) if path.exists() else []
    return draw(rows, plots) if rows else []
