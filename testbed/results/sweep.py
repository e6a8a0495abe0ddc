"""A sweep's own table and plot: one row per point and experiment, the swept fields'
values as columns beside every number of the experiment's headline (metrics/sweep.csv),
and the headline a spec's `sweep.plot` names drawn against the first swept field
(plots/sweep.png)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .analysis import headlines
from .plots import pyplot, save
from .units import unit_of


def table(params: Sequence[str], points: Sequence[tuple[int, Mapping[str, Any], str, int, dict]]
          ) -> tuple[list[str], list[list]]:
    """sweep.csv's header and rows. `points`: (point, its values, experiment type, the
    experiment's index in the spec, its headline) per experiment run. A headline number's
    column is `<type>.<key>` (headlines flattened as results.analysis does it); text cells
    are left out."""
    flat = [headlines({"experiments": {kind: {"headline": headline}}})
            for _, _, kind, _, headline in points]
    numbers = list(dict.fromkeys(k for f in flat for k, v in f.items()
                                 if isinstance(v, (int, float)) and not isinstance(v, bool)))
    header = ["point", *params, "experiment", "type", *numbers]
    rows = [[point, *(values.get(p) for p in params), index, kind,
             *(f.get(k) if isinstance(f.get(k), (int, float)) else None for k in numbers)]
            for (point, values, kind, index, _), f in zip(points, flat)]
    return header, rows


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None


def plot(rows: list[dict], params: Sequence[str], headline: str | None,
         plots: Path) -> Path | None:
    """plots/sweep.png: every headline column ending with `headline` against the first
    swept field (one line per column, and per value of the other fields of a grid), each
    with its model dashed where the headline has one (`<key>_model` beside
    `<key>_<headline>`, as a permutation's). None when nothing matches or the first field's
    values are not numbers."""
    if not rows or not params or not headline:
        return None
    x_name, others = params[0], list(params[1:])
    columns = [c for c in rows[0] if c.endswith(headline) and c not in ("point", *params)]
    if not columns or any(_number(r[x_name]) is None for r in rows):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    groups = list(dict.fromkeys(tuple(r[o] for o in others) for r in rows))
    for column in columns:
        for group in groups:
            mine = [r for r in rows if tuple(r[o] for o in others) == group
                    and _number(r[column]) is not None]
            if not mine:
                continue
            mine.sort(key=lambda r: _number(r[x_name]) or 0.0)
            label = column + "".join(f", {o}={v}" for o, v in zip(others, group))
            xs = [_number(r[x_name]) for r in mine]
            line, = ax.plot(xs, [_number(r[column]) for r in mine], marker="o", label=label)
            model = column[:-len(headline)] + "model"
            if model != column and model in mine[0] and all(_number(r[model]) is not None
                                                            for r in mine):
                ax.plot(xs, [_number(r[model]) for r in mine], linestyle="--",
                        color=line.get_color(), label=f"{label}: model")
    ax.set_xlabel(x_name + _unit_suffix(x_name))
    ax.set_ylabel(headline + _unit_suffix(headline))
    ax.set_title(f"sweep of {x_name}: {headline}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, plots / "sweep.png")


def _unit_suffix(column: str) -> str:
    unit = unit_of(column.rsplit(".", 1)[-1])
    return f" ({unit})" if unit else ""
