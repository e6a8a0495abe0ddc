"""Plots of the parallel experiment, drawn only from its CSV files."""
from __future__ import annotations

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


def kinds(rows: list[dict], plots: Path) -> Path:
    """Per job and collective type: bytes a rank sends per iteration and the time it spends,
    measured beside the model."""
    several = several_experiments(rows)
    labels = [tagged(f"{r['fabric']} {r['job']}\n{r['kind']}", r, several) for r in rows]
    x = list(range(len(rows)))
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 0.7 * len(rows) + 2), 7), sharex=True)
    for ax, (m, mod, unit) in zip(axes, (("wire_bytes_per_rank", "model_wire_bytes_per_rank",
                                          "on the wire per rank and iteration (B)"),
                                         ("comm_s", "model_comm_s",
                                          "communication per iteration (s)"))):
        ax.bar([i - 0.2 for i in x], [cell(r[m]) for r in rows], 0.4, label="measured")
        ax.bar([i + 0.2 for i in x], [cell(r[mod]) for r in rows], 0.4, label="model",
               color="tab:gray")
        ax.set_ylabel(unit, fontsize=8)
        ax.legend(fontsize=8)
    axes[1].set_xticks(x, labels, rotation=70, ha="right", fontsize=7)
    axes[0].set_title(title("Parallel jobs", "each collective type, measured vs model", rows,
                            ("fabric", "job")), fontsize=10)
    return save(fig, plots / "parallel_kinds.png")


def jobs(rows: list[dict], plots: Path) -> list[Path]:
    """Iteration time per job (measured, model), and the pipeline bubble beside
    (p-1)/(m+p-1)."""
    made = []
    several = several_experiments(rows)
    labels = [tagged(f"{r['fabric']}\n{r['job']}", r, several) for r in rows]
    x = list(range(len(rows)))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows) + 2), 4.5))
    ax.bar([i - 0.27 for i in x], [cell(r["iter_s_median"]) for r in rows], 0.27,
           label="measured")
    ax.bar([i for i in x], [cell(r["model_iter_s"]) for r in rows], 0.27, label="model",
           color="tab:gray")
    # the path-aware model, its hash draws' 10th to 90th percentile as a range
    paths = [cell(r.get("model_paths_iter_s")) for r in rows]
    lo = [cell(r.get("model_paths_p10_s")) for r in rows]
    hi = [cell(r.get("model_paths_p90_s")) for r in rows]
    ax.bar([i + 0.27 for i in x], paths, 0.27, label="model on its paths (draws p10-p90)",
           color="tab:olive", yerr=[[max(0.0, p - a) for p, a in zip(paths, lo)],
                                    [max(0.0, b - p) for p, b in zip(paths, hi)]], capsize=3)
    mark_cpu_bound(ax, rows, [cell(r["iter_s_median"]) for r in rows])
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("iteration time (s, median)")
    ax.set_title(title("Parallel jobs", "iteration time, measured vs model", rows,
                       ("fabric", "host_rate_mbps")), fontsize=10)
    ax.legend(fontsize=8)
    made.append(save(fig, plots / "parallel_iteration.png"))
    pipes = [r for r in rows if int(r["pp"]) > 1]
    if pipes:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for exp in dict.fromkeys(r.get("experiment") for r in pipes):
            for sched, marker in (("gpipe", "o"), ("1f1b", "s")):
                mine = [r for r in pipes if r["schedule"] == sched and r.get("experiment") == exp]
                pts = sorted((int(r["micro_batches"]), cell(r["bubble"])) for r in mine)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker + "-",
                            label=tagged(f"{sched} measured", mine[0], several))
        ideal = sorted({(int(r["micro_batches"]), cell(r["bubble_ideal"])) for r in pipes})
        ax.plot([p[0] for p in ideal], [p[1] for p in ideal], "k--",
                label="model: (p-1)/(m+p-1)")
        ax.set_xlabel("micro-batches per iteration (m)")
        ax.set_ylabel("pipeline bubble (fraction of the pipeline phase idle)")
        ax.set_title(title("Parallel jobs", "pipeline bubble vs micro-batches", pipes,
                           ("fabric", "pp")), fontsize=10)
        ax.legend(fontsize=8)
        made.append(save(fig, plots / "parallel_bubble.png"))
    return made


def by_rate(rows: list[dict], plots: Path) -> Path | None:
    """Iteration time against the link rate, per job (dashed: the model), and bytes each
    rank sends per iteration: FSDP against plain data parallelism, for instance."""
    several = several_experiments(rows)
    series: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    for r in rows:
        sent = sum(cell(r.get(f"{k}_bytes")) for k in ("tp", "pp", "dp", "ep", "fsdp"))
        series.setdefault((r["fabric"].split("@")[0], tagged(r["job"], r, several)), []).append(
            (cell(r["host_rate_mbps"]), cell(r["iter_s_median"]), cell(r["model_iter_s"]), sent))
    if not any(len({p[0] for p in pts}) > 1 for pts in series.values()):
        return None
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
    for (fabric, job), pts in series.items():
        pts.sort()
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{fabric} {job}")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=line.get_color(), lw=0.8)
        bx.bar(f"{job}", pts[0][3] / 1e6, color=line.get_color())
    ax.plot([], [], "--", color="gray", lw=0.8, label="model (dashed, per job)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("link rate (Mb/s)")
    ax.set_ylabel("iteration time (s)")
    ax.legend(fontsize=7)
    bx.set_ylabel("a rank sends per iteration, all types (MB)")
    bx.tick_params(axis="x", rotation=60, labelsize=7)
    fig.suptitle(title("Parallel jobs", "iteration time vs link rate", rows), fontsize=10)
    return save(fig, plots / "parallel_rate.png")


def draw_dir(out_dir: Path, plots: Path) -> list[Path]:
    made: list[Path] = []
    jobs_csv = out_dir / "metrics" / "parallel.csv"
    kinds_csv = out_dir / "metrics" / "parallel_kinds.csv"
    if jobs_csv.exists() and (rows := plot_rows(jobs_csv)):
        made += jobs(rows, plots)
        if (rate := by_rate(rows, plots)) is not None:
            made.append(rate)
    if kinds_csv.exists() and (rows := plot_rows(kinds_csv)):
        made.append(kinds(rows, plots))
    return made
