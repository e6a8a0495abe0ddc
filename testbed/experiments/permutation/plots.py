"""The permutation experiment's plot, from permutation.csv."""
from __future__ import annotations

from pathlib import Path

from testbed.results.plots import (
    cpu_bound_patch,
    pyplot,
    save,
    several_experiments,
    tagged,
    title,
)

# Hedera (Al-Fares et al., NSDI 2010), k=4 Fat-Tree testbed, means over its patterns, as
# fractions of the full bisection: drawn beside a run that has the same routings. Their
# "ECMP" behaved like one spanning tree (about 0.21-0.22 on stride-4/8), closer to `single`.
HEDERA_PUBLISHED_MEANS = {"nonblocking": 0.71, "ecmp": 0.44, "hedera": 0.67}


def _mean(rows: list[dict], column: str) -> float | None:
    """The mean of a column's filled cells (None: none filled, a routing without a model)."""
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "", "None")]
    return sum(values) / len(values) if values else None


def plot(rows: list[dict], plots: Path) -> Path:
    """Per pattern, each routing's aggregate goodput as a fraction of the ideal (the mean
    over repeats; hatched when a phase was CPU-bound), and the models beside it: the max-min
    fair shares on the routing's own paths (a tick across its bar; for a hashed routing a
    line through it from the 10th to the 90th percentile of hash draws), the proportionally
    fair shares (a diamond), and the max-min shares on a non-blocking switch (dotted across
    the pattern's group: what any routing could reach). With Hedera's routings, the Hedera
    paper's testbed means (the Hedera plot). Two experiments' rows stay apart."""
    plt = pyplot()
    several = several_experiments(rows)
    patterns = list(dict.fromkeys(r["pattern"] for r in rows))  # in the order they ran
    series = list(dict.fromkeys((r.get("experiment") if several else None, r["routing"])
                                for r in rows))
    routings = {routing for _, routing in series}
    fig, ax = plt.subplots(figsize=(min(18, max(8, 0.55 * len(patterns) * len(series) / 2 + 3)),
                                    4.5))
    width = 0.8 / len(series)
    ticks: list[tuple[float, float]] = []  # (x, max-min model of the routing's paths)
    ranges: list[tuple[float, float, float]] = []  # (x, its 10th, its 90th percentile)
    fair: list[tuple[float, float]] = []  # (x, proportionally fair model)
    any_hatched, published = False, set()
    for i, (exp, routing) in enumerate(series):
        vals, hatches = [], []
        for j, p in enumerate(patterns):
            sel = [r for r in rows if r["pattern"] == p and r["routing"] == routing
                   and (not several or r.get("experiment") == exp)]
            vals.append(_mean(sel, "normalised_to_ideal") or 0.0)
            hatches.append("//" if any(r["cpu_bound"] == "True" for r in sel) else "")
            x = j + i * width
            if (m := _mean(sel, "routed_model")) is not None:
                ticks.append((x, m))
                lo, hi = _mean(sel, "routed_model_p10"), _mean(sel, "routed_model_p90")
                if lo is not None and hi is not None and hi - lo > 1e-4:
                    ranges.append((x, lo, hi))
            if (pf := _mean(sel, "routed_model_pf")) is not None:
                fair.append((x, pf))
        bars = ax.bar([j + i * width for j in range(len(patterns))], vals, width,
                      label=tagged(routing, {"experiment": exp}, several))
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)  # hatched: CPU-bound, not faithful
        any_hatched = any_hatched or any(hatches)
        if "hedera" in routings and routing in HEDERA_PUBLISHED_MEANS \
                and routing not in published:
            published.add(routing)
            ax.axhline(HEDERA_PUBLISHED_MEANS[routing], ls="--", lw=0.8,
                       color=bars[0].get_facecolor(),
                       label=f"{routing}: Hedera paper's testbed mean")
    if ticks:
        ax.hlines([y for _, y in ticks], [x - width / 2 for x, _ in ticks],
                  [x + width / 2 for x, _ in ticks], colors="black", lw=1.5,
                  label="model (max-min)")
    if ranges:
        ax.vlines([x for x, _, _ in ranges], [lo for _, lo, _ in ranges],
                  [hi for _, _, hi in ranges], colors="black", lw=0.8,
                  label="model (max-min), 10th-90th percentile of hash draws")
    if fair:
        ax.plot([x for x, _ in fair], [y for _, y in fair], "D", ls="", color="black", ms=3,
                mfc="white", label="model (proportionally fair)")
    # the non-blocking switch's max-min model: one per pattern and experiment (its flows)
    spans = []
    for j, p in enumerate(patterns):
        for exp in dict.fromkeys(e for e, _ in series):
            sel = [r for r in rows if r["pattern"] == p
                   and (not several or r.get("experiment") == exp)]
            xs = [j + i * width for i, (e, _) in enumerate(series) if e == exp]
            if (m := _mean(sel, "maxmin_model")) is not None:
                spans.append((m, min(xs) - width / 2, max(xs) + width / 2))
    if spans:
        ax.hlines([y for y, _, _ in spans], [a for _, a, _ in spans], [b for _, _, b in spans],
                  colors="tab:gray", linestyles=":", lw=1.2,
                  label="model (max-min, non-blocking switch)")
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(patterns))], patterns,
                  rotation=45 if len(patterns) > 4 else 0, ha="right" if len(patterns) > 4
                  else "center", fontsize=8)
    ax.set_xlabel("traffic pattern")
    ax.set_ylabel("aggregate goodput (fraction of ideal)")
    ax.set_ylim(0, 1.05)
    handles, _ = ax.get_legend_handles_labels()
    if any_hatched:
        handles.append(cpu_bound_patch())
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    name = "Permutation (Hedera's evaluation)" if "hedera" in routings else "Permutation"
    ax.set_title(title(name, "aggregate goodput vs ideal and the models (mean over repeats)",
                       rows, ("topology", "rate_mbps", "pattern", "routing")), fontsize=10)
    return save(fig, plots / "permutation.png")
