"""Plots drawn only from a results directory's CSV files. matplotlib is imported when the
first plot is drawn (it is slow to import, and `testbed validate` needs none of it)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .files import read_rows

# a plot: rows of one CSV file -> the PNG it drew (None: nothing to draw)
CsvPlot = Callable[[list[dict], Path], "Path | None"]
# a plot that reads the whole results directory -> the PNGs it drew
DirPlot = Callable[[Path, Path], list[Path]]


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def mark_cpu_bound(ax: Any, rows: list[dict], heights: list[float]) -> None:
    """'CPU-bound' above every bar whose row says its numbers were the machine's."""
    for i, (r, h) in enumerate(zip(rows, heights)):
        if r.get("cpu_bound") == "True":
            ax.annotate("CPU-bound", (i, h), ha="center", va="bottom", color="tab:red",
                        fontsize=7)


def save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def draw_all(out_dir: Path, csv_plots: Mapping[str, CsvPlot],
             dir_plots: Sequence[DirPlot] = ()) -> list[Path]:
    """Every plot whose CSV file the run wrote (with rows), then the plots that read the
    whole directory; returns the PNGs drawn."""
    metrics = out_dir / "metrics"
    plots = out_dir / "plots"
    plots.mkdir(exist_ok=True)
    made: list[Path] = []
    for name, fn in {**csv_plots, "cpu.csv": cpu}.items():
        rows = read_rows(metrics / name) if (metrics / name).exists() else []
        if rows:
            drawn = fn(rows, plots)
            if drawn is not None:
                made.append(drawn)
    for dir_plot in dir_plots:
        made += dir_plot(out_dir, plots)
    return made


def cpu(rows: list[dict], plots: Path) -> Path:
    plt = pyplot()
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    t = [float(r["t_s"]) for r in rows]
    ax.plot(t, [float(r["machine_busy_fraction"]) for r in rows], label="machine (all cores)")
    ax.plot(t, [float(r["ovs_thread_core_fraction"]) for r in rows],
            label="OVS forwarding thread (one core)")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("CPU busy fraction")
    ax.legend(fontsize=8)
    ax2.plot(t, [int(r["ovs_rx_backlog_bytes"]) / 1e3 for r in rows], color="tab:red")
    ax2.set_ylabel("waiting in OVS (kB)")
    ax2.set_xlabel("time (s)")
    ax2.set_title("packets OVS has not forwarded yet (its receive sockets)", fontsize=9)
    return save(fig, plots / "cpu.png")
