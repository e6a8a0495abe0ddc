"""Changing a spec from outside: `testbed run SPEC --set PATH=VALUE`, and a spec's `sweep:`
section (one parameter and its values, or a grid of several), which runs the spec once per
point in one session.

A PATH names a field as the spec's YAML nests it, with dots, list entries by their index:
`links.rate_mbps`, `experiments.0.duration_s`, `qos.ecn.k_pkts`. A VALUE is read as YAML
(`50`, `2.5`, `true`, `[1, 2]`, `stride:8`). The changed data then goes through the same
strict loader and checks as the spec itself, so a misspelt field or a wrong type is
refused with its path before anything is created.
"""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .loader import SpecError

PATH_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """`sweep:` in a spec. One parameter (`parameter` and `values`) or a grid (`grid`: each
    parameter's values; every combination is a point). `plot` names a headline (its last
    part, e.g. `normalised_to_ideal` or `fraction_of_ideal`) drawn against the first
    parameter in plots/sweep.png."""
    parameter: str | None = None
    values: list[Any] = field(default_factory=list)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    plot: str | None = None

    def parameters(self) -> dict[str, list[Any]]:
        """Every swept path and its values, in order."""
        return {self.parameter: self.values} if self.parameter else dict(self.grid)

    def check(self) -> None:
        if self.parameter and self.grid:
            raise SpecError("sweep: give either parameter and values, or grid, not both")
        if not self.parameter and not self.grid:
            raise SpecError("sweep: give a parameter and its values, or a grid")
        if self.values and not self.parameter:
            raise SpecError("sweep.values: needs sweep.parameter")
        for path, values in self.parameters().items():
            where = "sweep.values" if self.parameter else f"sweep.grid.{path}"
            split_path(path, where)
            if path.split(".")[0] in ("sweep", "name"):
                raise SpecError(f"{where}: {path} cannot be swept")
            if not values:
                raise SpecError(f"{where}: no values to sweep")
            if len({repr(v) for v in values}) < len(values):
                raise SpecError(f"{where}: a value is listed twice")
        if self.plot is not None and not self.plot.strip():
            raise SpecError("sweep.plot: empty")

    def points(self) -> list[dict[str, Any]]:
        """Every point of the sweep: {path: value}, the first parameter varying slowest."""
        params = self.parameters()
        return [dict(zip(params, combo)) for combo in itertools.product(*params.values())]


def split_path(path: str, what: str) -> list[str | int]:
    """A dotted PATH as keys and list indices, or SpecError naming `what`."""
    parts = path.split(".")
    if not path or not all(PATH_RE.fullmatch(p) for p in parts):
        raise SpecError(f"{what}: {path!r} is not a field path (e.g. links.rate_mbps, "
                        "experiments.0.duration_s)")
    return [int(p) if p.isdigit() else p for p in parts]


def parse_set(text: str) -> tuple[str, Any]:
    """`PATH=VALUE` as (PATH, the value read as YAML), or SpecError."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise SpecError(f"--set {text}: expected PATH=VALUE (e.g. links.rate_mbps=50)")
    split_path(path.strip(), f"--set {text}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise SpecError(f"--set {text}: the value is not YAML ({str(exc).splitlines()[0]})"
                        ) from None
    return path.strip(), value


def with_value(data: Any, path: str, value: Any, what: str) -> Any:
    """A copy of spec data with the field at `path` set to `value`. Missing mappings on the
    way are made (the strict loader then says whether such a field exists); a list index
    must exist. SpecError names `what` (the option or the sweep entry) for a path that
    cannot be followed."""
    if not isinstance(data, dict):
        raise SpecError(f"{what}: the spec is not a mapping")
    out = copy.deepcopy(data)
    node: Any = out
    parts = split_path(path, what)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        here = ".".join(str(p) for p in parts[:i + 1])
        if isinstance(node, list):
            if not isinstance(part, int):
                raise SpecError(f"{what}: {here}: a list, give an index (0..{len(node) - 1})")
            if not 0 <= part < len(node):
                raise SpecError(f"{what}: {here}: no such entry ({len(node)} in the spec)")
        elif isinstance(node, dict):
            if isinstance(part, int):
                raise SpecError(f"{what}: {here}: not a list")
            if not last and node.get(part) is None:
                node[part] = {}
        else:
            raise SpecError(f"{what}: {here}: "
                            f"{'.'.join(str(p) for p in parts[:i])} is a value, not a mapping")
        if last:
            node[part] = value
        else:
            node = node[part]
    return out


def with_sets(data: Any, sets: list[str] | tuple[str, ...]) -> Any:
    """Spec data with every `--set PATH=VALUE` applied, in order."""
    for text in sets:
        path, value = parse_set(text)
        data = with_value(data, path, value, f"--set {text}")
    return data
