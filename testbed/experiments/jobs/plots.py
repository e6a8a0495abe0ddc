"""Plots of jobs sharing a fabric, drawn only from its CSV files: iteration time per job and
policy beside the model and the job alone; the jobs' communication phases on one time axis
per round (interleaving, or not), with each iteration's overlap below."""
from __future__ import annotations

from pathlib import Path

from testbed.results.plots import (
    CsvPlot,
    cell,
    mark_cpu_bound,
    plot_rows,
    pyplot,
    save,
    several_experiments,
    tagged,
    title,
)

from .model import STAYS_BELOW


def iterations(rows: list[dict], plots: Path) -> Path | None:
    """Per placement, policy and job: median iteration (measured, model) and alone."""
    rows = [r for r in rows if r["policy"] != "alone"]
    if not rows:
        return None
    several = several_experiments(rows)
    labels = [tagged(f"{r['placement']} {r['policy']}\n{r['job']}", r, several) for r in rows]
    x = list(range(len(rows)))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(rows) + 2), 4.8))
    ax.bar([i - 0.27 for i in x], [cell(r["alone_iter_s"]) for r in rows], 0.27,
           label="alone", color="tab:green")
    ax.bar(x, [cell(r["iter_s_median"]) for r in rows], 0.27, label="shared, measured")
    ax.bar([i + 0.27 for i in x], [cell(r["model_policy_s"]) for r in rows], 0.27,
           label="model", color="tab:gray")
    mark_cpu_bound(ax, rows, [cell(r["iter_s_median"]) for r in rows])
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("iteration time (s, median)")
    ax.set_title(title("Jobs sharing a fabric", "each policy against the job alone", rows,
                       ("placement",)), fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, plots / "jobs_iteration.png")


def phases(rows: list[dict], plots: Path) -> Path | None:
    """One panel per shared round: each job's communication phases as bars on the round's
    time axis, and each iteration's overlap (the MLTCP paper's picture)."""
    rounds = list(dict.fromkeys((r["experiment"], r["placement"], r["policy"]) for r in rows
                                if r["policy"] != "alone"))
    if not rounds:
        return None
    several = len({key[0] for key in rounds}) > 1
    plt = pyplot()
    fig, axes = plt.subplots(len(rounds), 1, figsize=(10, 1.9 * len(rounds) + 0.6),
                             squeeze=False)
    for ax, key in zip(axes[:, 0], rounds):
        mine = [r for r in rows if (r["experiment"], r["placement"], r["policy"]) == key]
        jobs = list(dict.fromkeys(r["job"] for r in mine))
        colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown",
                   "tab:pink", "tab:olive"]
        for y, job in enumerate(jobs):
            its = [r for r in mine if r["job"] == job]
            c = colours[y % len(colours)]
            ax.broken_barh([(cell(r["sync_start_s"]), cell(r["end_s"]) - cell(r["sync_start_s"]))
                            for r in its], (y - 0.35, 0.7), color=c)
            ax.broken_barh([(cell(r["start_s"]), cell(r["sync_start_s"]) - cell(r["start_s"]))
                            for r in its], (y - 0.1, 0.2), color=c, alpha=0.3)
        ax.set_yticks(range(len(jobs)), jobs, fontsize=7)
        ax.set_title(tagged(f"{key[1]} {key[2]}: communication (thick), compute (thin)",
                            {"experiment": key[0]}, several), fontsize=8)
        ax.set_xlabel("time since the round's first start (s)", fontsize=7)
    fig.suptitle(title("Jobs sharing a fabric", "each job's phases per round", rows,
                       ("placement",)), fontsize=10)
    return save(fig, plots / "jobs_phases.png")


def overlap(rows: list[dict], plots: Path) -> Path | None:
    """Overlap per iteration, one line per shared round (mean over its jobs)."""
    several = several_experiments([r for r in rows if r["policy"] != "alone"])
    series: dict[tuple[str, str], dict[int, list[float]]] = {}
    for r in rows:
        if r["policy"] == "alone":
            continue
        series.setdefault((tagged(r["placement"], r, several), r["policy"]), {}).setdefault(
            int(r["iteration"]), []).append(cell(r["overlap"]))
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for (placement, policy), by_it in series.items():
        its = sorted(by_it)
        ax.plot(its, [sum(by_it[i]) / len(by_it[i]) for i in its], "o-", ms=3,
                label=f"{placement} {policy}")
    ax.axhline(STAYS_BELOW, color="k", ls="--", lw=0.8,
               label="a converged interleaving stays below this")
    ax.set_xlabel("iteration (count)")
    ax.set_ylabel("communication phase overlapped (fraction)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title("Jobs sharing a fabric", "overlap per iteration (mean over jobs)",
                       [r for r in rows if r["policy"] != "alone"], ("placement", "policy")),
                 fontsize=10)
    ax.legend(fontsize=7)
    return save(fig, plots / "jobs_overlap.png")


def draw_dir(out_dir: Path, plots: Path) -> list[Path]:
    """The phase and overlap plots, both from jobs_phases.csv."""
    path = out_dir / "metrics" / "jobs_phases.csv"
    rows = plot_rows(path) if path.exists() else []
    return [p for p in (phases(rows, plots), overlap(rows, plots)) if p is not None] \
        if rows else []


PLOTS: dict[str, CsvPlot] = {"jobs.csv": iterations}
