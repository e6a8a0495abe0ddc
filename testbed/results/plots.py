"""Plots drawn only from a results directory's CSV files. matplotlib is imported when the
first plot is drawn (it is slow to import, and `testbed validate` needs none of it)."""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from .files import read_jsonl, read_rows
from .units import unit_of

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


CPU_BOUND = "CPU-bound (not faithful)"  # the legend entry of every CPU-bound marking


def cpu_bound_patch() -> Any:
    """The legend entry of hatched (CPU-bound) bars."""
    from matplotlib.patches import Patch
    return Patch(facecolor="none", edgecolor="black", hatch="//", label=CPU_BOUND)


def mark_cpu_bound(ax: Any, rows: list[dict], heights: Sequence[float],
                   xs: Sequence[float] | None = None) -> bool:
    """A red marker and 'CPU-bound' above every bar or point (at `xs`, else 0, 1, ...) whose
    row says its numbers were the machine's, in the legend as CPU_BOUND; whether any was."""
    marked = [(x, h) for x, r, h in zip(range(len(rows)) if xs is None else xs, rows, heights)
              if r.get("cpu_bound") == "True"]
    if not marked:
        return False
    ax.plot([x for x, _ in marked], [h for _, h in marked], "v", ls="", color="tab:red",
            ms=6, label=CPU_BOUND)
    for x, h in marked:
        ax.annotate("CPU-bound", (x, h), xytext=(0, 5), textcoords="offset points",
                    ha="center", va="bottom", color="tab:red", fontsize=7)
    return True


@overload
def cell(value: str | None, missing: float = 0.0) -> float: ...
@overload
def cell(value: str | None, missing: None) -> float | None: ...
def cell(value: str | None, missing: float | None = 0.0) -> float | None:
    """A table cell as a number, `missing` where the run wrote nothing (empty or None)."""
    return float(value) if value not in (None, "", "None") else missing


def plot_rows(path: Path) -> list[dict]:
    """A table's rows as the plots read them: in a sweep, each row's `experiment` names its
    point too ("p1-0": experiment 0 at point 1, as raw file names do), so that no plot
    merges two points' rows into one mark."""
    return [{**r, "experiment": f"p{r['point']}-{r.get('experiment') or '-'}"}
            if r.get("point") not in (None, "") else r for r in read_rows(path)]


def several_experiments(rows: list[dict]) -> bool:
    """Whether the rows come from more than one experiment of the run (their `experiment`
    column, the spec index of the experiment that wrote each row): plots then keep them
    apart and name them."""
    return len({r.get("experiment") for r in rows}) > 1


def tagged(label: str, row: dict, several: bool) -> str:
    """`label` after the row's experiment when a plot holds several ("[2] ecmp"; "[-]": a
    row no experiment wrote)."""
    return f"[{row.get('experiment') or '-'}] {label}" if several else label


def number(value: Any) -> str:
    """A cell as a title prints it: 20.0 -> '20', 0.25 -> '0.25'; text as it is."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(int(x)) if x.is_integer() else f"{x:g}"


def param(column: str, value: Any) -> str:
    """One parameter as a title names it: rate_mbps 20.0 -> '20 Mb/s', buffer_pkts 50 ->
    'buffer 50 packets', senders 4 -> 'senders 4', pattern stride:8 -> 'stride:8'."""
    name, _, suffix = column.rpartition("_")
    text = number(value)
    unit = unit_of(suffix) if name else None  # the name's last part is its unit
    if name and unit:
        name = name.replace("_", " ")
        return f"{text} {unit}" if name.endswith("rate") else f"{name} {text} {unit}"
    try:
        float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{column.replace('_', ' ')} {text}"


def title(name: str, what: str, rows: list[dict], columns: Sequence[str] = ()) -> str:
    """A plot's title: the experiment's `name`, the parameters of `columns` that every row
    shares (a column that varies is on an axis or in the legend instead; one the table lacks
    is left out; the experiments when the rows come from several), then `what` the plot
    shows: 'Permutation stride:8, 20 Mb/s: aggregate goodput vs ideal'."""
    shared = []
    for column in columns:
        values = {r.get(column) for r in rows}
        if len(values) == 1 and (value := values.pop()) not in (None, "", "None"):
            shared.append(param(column, value))
    if several_experiments(rows):
        shared.append("experiments " + ", ".join(
            str(e or "-") for e in dict.fromkeys(r.get("experiment") for r in rows)))
    return f"{name} {', '.join(shared)}: {what}" if shared else f"{name}: {what}"


def save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # legends beside the axes included
    pyplot().close(fig)
    return path


def draw_all(out_dir: Path, csv_plots: Mapping[str, CsvPlot],
             dir_plots: Sequence[DirPlot] = ()) -> list[Path]:
    """Every plot whose CSV file the run wrote (with rows), then the plots that read the
    whole directory (the run's CPU among them); returns the PNGs drawn."""
    metrics = out_dir / "metrics"
    plots = out_dir / "plots"
    plots.mkdir(exist_ok=True)
    made: list[Path] = []
    for name, fn in csv_plots.items():
        rows = plot_rows(metrics / name) if (metrics / name).exists() else []
        if rows:
            drawn = fn(rows, plots)
            if drawn is not None:
                made.append(drawn)
    for dir_plot in (*dir_plots, cpu):
        made += dir_plot(out_dir, plots)
    return made


def phase_spans(events: list[dict], t0_unix_s: float) -> list[dict]:
    """The run's fabric phases on cpu.csv's clock (seconds since `t0_unix_s`), from the
    runner's phase_up and phase_down events: label, start_s, end_s (None: the run ended
    with the fabric up), how many traffic phases ran on it, the labels of those whose CPU
    verdict was CPU-bound and, where the verdict has its times (t_start, t_end), their spans
    (`bound_s`). checks.traffic_phase records a verdict after the traffic: it belongs to
    the fabric last brought up and not yet down."""
    spans: list[dict] = []
    up: dict[str, dict] = {}  # slug -> its span, while the fabric is up
    for ev in events:
        if "phase_up" in ev:
            up[ev["slug"]] = {"label": ev["phase_up"], "start_s": ev["time"] - t0_unix_s,
                              "end_s": None, "traffic": 0, "cpu_bound": [], "bound_s": []}
            spans.append(up[ev["slug"]])
        elif "phase_down" in ev and ev.get("slug") in up:
            up.pop(ev["slug"])["end_s"] = ev["time"] - t0_unix_s
        elif isinstance(ev.get("cpu"), dict) and "phase" in ev and up:
            span = list(up.values())[-1]
            span["traffic"] += 1
            if ev["cpu"].get("cpu_bound"):
                span["cpu_bound"].append(ev["phase"])
                if "t_start" in ev and "t_end" in ev:
                    span["bound_s"].append((ev["t_start"] - t0_unix_s, ev["t_end"] - t0_unix_s))
    return spans


def cpu(out_dir: Path, plots: Path) -> list[Path]:
    """cpu.png: the machine's CPU, OVS's forwarding thread and the packets waiting in OVS
    over the run (metrics/cpu.csv), each fabric phase shaded and named (events.jsonl, put on
    cpu.csv's clock by manifest.json's), hatched red where a traffic phase on that fabric
    was CPU-bound."""
    path = out_dir / "metrics" / "cpu.csv"
    rows = read_rows(path) if path.exists() else []
    if not rows:
        return []
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    t0 = (manifest.get("clock") or {}).get("cpu_t0_unix_s")
    spans = phase_spans(read_jsonl(out_dir / "events.jsonl"), t0) if t0 is not None else []
    plt = pyplot()
    from matplotlib.patches import Patch
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    t = [float(r["t_s"]) for r in rows]
    for i, span in enumerate(spans):
        start, end = span["start_s"], span["end_s"] if span["end_s"] is not None else t[-1]
        for a in (ax, ax2):
            a.axvspan(start, end, color=("tab:blue", "tab:green")[i % 2], alpha=0.1, lw=0)
            # the CPU-bound traffic phases themselves, or the whole fabric's span for a
            # verdict recorded without its times
            for b0, b1 in (span["bound_s"] or [(start, end)] if span["cpu_bound"] else []):
                a.axvspan(b0, b1, facecolor="none", edgecolor="tab:red", hatch="//",
                          lw=0, alpha=0.4)
        bound = (f"\nCPU-bound {len(span['cpu_bound'])}/{span['traffic']}"
                 if span["cpu_bound"] else "")
        ax.text(start, 0.98, f"{span['label']}{bound}", transform=ax.get_xaxis_transform(),
                rotation=90, va="top", ha="left", fontsize=6, clip_on=True,
                color="tab:red" if bound else "black",
                bbox={"facecolor": "white", "alpha": 0.6, "lw": 0, "pad": 1})
    ax.plot(t, [float(r["machine_busy_fraction"]) for r in rows], label="machine (all cores)")
    ax.plot(t, [float(r["ovs_thread_core_fraction"]) for r in rows],
            label="OVS forwarding thread (one core)")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("CPU busy (fraction)")
    handles, _ = ax.get_legend_handles_labels()
    if spans:
        handles.append(Patch(color="tab:blue", alpha=0.1, label="a fabric up (named)"))
    if any(s["cpu_bound"] for s in spans):
        handles.append(Patch(facecolor="none", edgecolor="tab:red", hatch="//", alpha=0.4,
                             label=f"{CPU_BOUND}: a traffic phase (k/n of the fabric's)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax2.plot(t, [int(r["ovs_rx_backlog_bytes"]) / 1e3 for r in rows], color="tab:purple")
    ax2.set_ylabel("waiting in OVS (kB)")
    ax2.set_xlabel("time since the run's CPU monitor started (s)")
    ax2.set_title("packets OVS has not forwarded yet (its receive sockets)", fontsize=9)
    run = manifest.get("spec_name")
    ax.set_title(f"CPU of run {run}, by fabric phase" if run else "CPU of the run, by fabric "
                 "phase", fontsize=10)
    return [save(fig, plots / "cpu.png")]
