"""A finished run read back for analysis: its tables as pandas DataFrames that carry their
units and provenance, its headlines flattened to comparable keys, and two runs' headlines
side by side (`testbed compare`).

Only files: a pure function of results directories, like the plots and the timeline.
pandas is imported with this module; `testbed.results` imports it only when `load` is
first called, so `testbed validate` never loads it.

Headline keys are dotted paths, "<n>:<type>.<field>[.<field>...]" (n: the experiment's
index in the spec; "p<point>-<n>:<type>" in a sweep). A list of dicts is
indexed by what identifies each item (its "fabric", "job", "routing", ... joined by "/":
"2:training.results.fattree@20Mbps/ring.iter_s_median") rather than by position, so the
same job of two runs meets under one key even when the runs list their jobs in another
order; a list whose items are not told apart that way is indexed by position. Numbers stay
numbers; booleans become the strings "True" and "False" (as the CSV files write them): a
flag that changed between two runs is shown and counted as a difference, but no ratio of
flags is taken. A None (nothing measured) is left out, so a value measured in one run
only shows as present in one only.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]

from .units import unit_of

Headline = float | str

# the fields that tell the items of a headline's list apart, in the order they are joined
ID_FIELDS = ("phase", "fabric", "placement", "policy", "routing", "pattern", "variant",
             "job", "label", "name")
# what of the manifest says where a run's numbers come from
PROVENANCE_KEYS = ("versions", "machine", "spec_name", "started")


class NotARun(ValueError):
    """A directory that is not a testbed results directory (or cannot be read as one)."""


@dataclass(eq=False, repr=False)
class Run:
    """One results directory: `tables` by name (metrics/<name>.csv), also as `run[name]`
    and, where the name is no attribute of its own, `run.<name>`."""

    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    headlines: dict[str, Headline] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    def __getitem__(self, table: str) -> pd.DataFrame:
        try:
            return self.tables[table]
        except KeyError:
            raise KeyError(f"{self.path} has no table {table!r} (it has: "
                           f"{', '.join(self.tables) or 'none'})") from None

    def __getattr__(self, table: str) -> pd.DataFrame:
        tables = self.__dict__.get("tables", {})  # absent while copy/pickle builds a Run
        if table.startswith("_") or table not in tables:
            raise AttributeError(f"{type(self).__name__} has no attribute or table {table!r}")
        return tables[table]

    def __repr__(self) -> str:
        return (f"Run({str(self.path)!r}, status={self.summary.get('status')!r}, "
                f"tables={list(self.tables)})")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NotARun(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise NotARun(f"{path}: is not a JSON object")
    return data


def read_table(path: Path, provenance: Mapping[str, Any]) -> pd.DataFrame:
    """One CSV table: numbers as numbers, a column of True/False (empty cells allowed) as
    booleans; only an empty cell or "None" is missing (pandas' own list would also take a
    host or policy called "NA" or "null"); `attrs["units"]` holds the unit of every column
    that has one."""
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=["", "None"],
                         low_memory=False)
    except pd.errors.EmptyDataError:  # not even a header
        df = pd.DataFrame()
    for col in df.columns:
        if df[col].dtype == object:
            cells = df[col].dropna()
            if len(cells) and all(isinstance(v, bool) for v in cells):
                df[col] = df[col].astype("boolean")
    df.attrs["units"] = {c: u for c in df.columns if (u := unit_of(str(c))) is not None}
    df.attrs["provenance"] = dict(provenance)
    return df


def load(run_dir: str | os.PathLike[str]) -> Run:
    """A results directory's tables, manifest, summary and flattened headlines. A run
    still going, or killed, loads too (its summary says so in "status"); a directory with
    neither summary.json nor manifest.json raises NotARun."""
    path = Path(run_dir)
    if not path.is_dir():
        raise NotARun(f"{path}: not a testbed results directory (not a directory)")
    if not (path / "summary.json").exists() and not (path / "manifest.json").exists():
        raise NotARun(f"{path}: not a testbed results directory (no summary.json or "
                      "manifest.json)")
    manifest = _read_json(path / "manifest.json")
    summary = _read_json(path / "summary.json")
    # the code (commit, dirty, diff_sha256, command, cwd) at the top, beside the rest
    provenance = {**(manifest.get("provenance") or {}),
                  **{k: manifest[k] for k in PROVENANCE_KEYS if k in manifest}}
    provenance["path"] = str(path.resolve())
    tables = {csv.stem: read_table(csv, provenance)
              for csv in sorted((path / "metrics").glob("*.csv"))}
    return Run(path=path, manifest=manifest, summary=summary, tables=tables,
               headlines=headlines(summary), provenance=provenance)


def load_many(dirs: Iterable[str | os.PathLike[str]]) -> dict[str, pd.DataFrame]:
    """Every table of several runs, each run's rows after the other's, under a first
    column `run`: the directory's name (its whole path when two names are the same).
    `attrs["units"]` as for one run; `attrs["provenance"]`: run -> its provenance."""
    runs = [load(d) for d in dirs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        names = [str(r.path) for r in runs]
    parts: dict[str, list[tuple[str, Run]]] = {}
    for name, run in zip(names, runs):
        for table in run.tables:
            parts.setdefault(table, []).append((name, run))
    out = {}
    for table, mine in parts.items():
        frames = []
        for name, run in mine:
            df = run.tables[table].copy()
            df.insert(0, "run", name, allow_duplicates=True)
            frames.append(df)
        merged = pd.concat(frames, ignore_index=True)
        units: dict[str, str] = {}
        for _, run in mine:
            units.update(run.tables[table].attrs["units"])
        merged.attrs = {"units": units,
                        "provenance": {name: run.provenance for name, run in mine}}
        out[table] = merged
    return out


def _id_fields(item: object) -> list[str]:
    """The fields that identify a headline list's item: its non-empty strings among
    ID_FIELDS."""
    if not isinstance(item, dict):
        return []
    return [f for f in ID_FIELDS if isinstance(item.get(f), str) and item[f]]


def _flatten(value: object, key: str, out: dict[str, Headline]) -> None:
    if isinstance(value, bool):
        out[key] = str(value)
    elif isinstance(value, (int, float, str)):
        out[key] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{key}.{k}", out)
    elif isinstance(value, list):
        fields = [_id_fields(item) for item in value]
        ids = ["/".join(item[f] for f in mine) for item, mine in zip(value, fields)]
        if all(ids) and len(set(ids)) == len(ids):
            for label, item, mine in zip(ids, value, fields):  # identified by the key
                _flatten({k: v for k, v in item.items() if k not in mine},
                         f"{key}.{label}", out)
        else:
            for i, item in enumerate(value):
                _flatten(item, f"{key}.{i}", out)
    # None: nothing was measured; left out


def headlines(summary: Mapping[str, Any]) -> dict[str, Headline]:
    """Every experiment's headline in a summary.json, flattened to dotted keys (see the
    module's docstring), in the order the experiments ran."""
    out: dict[str, Headline] = {}
    for exp, result in (summary.get("experiments") or {}).items():
        if isinstance(result, dict) and isinstance(result.get("headline"), dict):
            _flatten(result["headline"], exp, out)
    return out


@dataclass(frozen=True)
class Row:
    """One headline of two runs: its values (None: absent from that run), b/a (None when
    a is 0, absent or not a number) and whether it differs beyond the tolerance."""

    key: str
    a: Headline | None
    b: Headline | None
    ratio: float | None
    differs: bool


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def compare_values(key: str, a: Headline | None, b: Headline | None,
                   rel_tol: float = 0.05) -> Row:
    """One headline of two runs. Numbers differ when b/a is off 1 by more than `rel_tol`
    (a 0 against anything but 0 differs); strings and flags when they are not equal; a
    value present in one run only always differs."""
    if a is None or b is None:
        return Row(key, a, b, None, True)
    if not (_is_number(a) and _is_number(b)):
        return Row(key, a, b, None, a != b)
    fa, fb = float(a), float(b)
    if math.isnan(fa) or math.isnan(fb):
        return Row(key, a, b, None, not (math.isnan(fa) and math.isnan(fb)))
    if fa == 0:
        return Row(key, a, b, None, fb != 0)
    ratio = fb / fa
    # the tolerance itself is within it (1.05 / 1.0 is 1.0500000000000000444)
    return Row(key, a, b, ratio, abs(ratio - 1) > rel_tol + 1e-9)


def compare(a: Run, b: Run, rel_tol: float = 0.05) -> list[Row]:
    """Every headline of two runs side by side: a's in its order, then those only b has."""
    keys = list(dict.fromkeys([*a.headlines, *b.headlines]))
    return [compare_values(k, a.headlines.get(k), b.headlines.get(k), rel_tol) for k in keys]


def _cell(x: Headline | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def format_comparison(rows: Sequence[Row], names: Sequence[str],
                      rel_tol: float = 0.05) -> str:
    """`compare`'s rows as an aligned text table (headline, A, B, B/A, "≠" where they
    differ) and a last line counting the differences; `names`: the two runs' names."""
    header = ["headline", names[0], names[1], "B/A", ""]
    body = [[r.key, _cell(r.a), _cell(r.b), f"{r.ratio:.3f}" if r.ratio is not None else "-",
             "≠" if r.differs else ""] for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = []
    for line in [header, *body]:
        cells = [line[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(line[1:4], widths[1:4])),
                 line[4]]
        lines.append("  ".join(cells).rstrip())
    differ = sum(1 for r in rows if r.differs)
    lines.append(f"{differ} of {len(rows)} headlines differ beyond ±{rel_tol * 100:g}%")
    return "\n".join(lines)
