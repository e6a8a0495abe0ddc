"""The range every number in a spec must fall in, by what its field's name says it is.

The loader refuses NaN and infinities as it converts; `check_tree` then walks the whole
checked spec (every dataclass field, list element and mapping value), so no field can be
absurd whatever experiment it belongs to. It runs after the experiments' own checks, whose
messages are more specific (a positive rate, omit_s < duration_s). The bounds are generous: they reject what no run on
any machine could mean (a 10^12 Mb/s link, a day-long phase, a seed numpy cannot take),
not what this 2-core machine cannot carry (the CPU-bound verdict says that).
"""
from __future__ import annotations

import dataclasses
import math

from topologies.params import MAX_RATE_MBPS

from .loader import SpecError

DAY_S = 86_400
MAX_SEED = 2**32 - 1       # numpy's and torch's seeds
MAX_BYTES = 2**40          # a terabyte
MAX_COUNT = 1_000_000      # any other integer (iterations, workers, repeats, ...)
MAX_WIDTH = 131_072        # a layer's width: GPT-3 175B's FFN is 49,152

# (how the field's name ends, low, high, what it is); the first match wins
RULES: tuple[tuple[str, float, float, str], ...] = (
    ("seed", 0, MAX_SEED, "a seed"),
    ("_mbps", 0, MAX_RATE_MBPS, "a rate in Mb/s"),
    ("_gbps", 0, MAX_RATE_MBPS / 1000, "a rate in Gb/s"),
    ("_s", 0, DAY_S, "a time in seconds"),
    ("_ms", 0, DAY_S * 1e3, "a time in milliseconds"),
    ("_us", 0, 60e6, "a time in microseconds"),
    ("_hz", 0, 100_000, "a frequency in Hz"),
    ("_pct", 0, 100, "a percentage"),
    ("_bytes", 0, MAX_BYTES, "a size in bytes"),
    ("_mb", 0, MAX_BYTES / 1e6, "a size in MB"),
    ("_pkts", 0, 10_000_000, "a number of packets"),
    ("_params", 0, 1e13, "a number of parameters"),  # ten times the largest models
    ("dscp", 0, 63, "a DSCP"),
    ("width", 0, MAX_WIDTH, "a layer width"),   # 0: a default (ffn = 4 x hidden)
    ("hidden", 0, MAX_WIDTH, "a layer width"),
    ("ffn", 0, MAX_WIDTH, "a layer width"),
)


def rule(name: str) -> tuple[float, float, str]:
    """(low, high, what) for a field called `name`."""
    for suffix, low, high, what in RULES:
        if name.endswith(suffix):
            return low, high, what
    return -MAX_COUNT, MAX_COUNT, "a count"


def bounded(name: str, value: object, path: str) -> str | None:
    """Why `value` (a spec field called `name`, at `path`) is out of range, or None. A
    bool or a string is not a number here (the type check names those)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path}: must be a finite number (got {value})"
    low, high, what = rule(name)
    if not low <= value <= high:
        return f"{path}: out of range for {what}: {_num(low)}..{_num(high)} (got {_num(value)})"
    return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_tree(obj: object, path: str = "") -> None:
    """SpecError for the first number out of range anywhere in `obj` (a spec dataclass),
    judged by the name of the field it is in."""
    _walk(obj, path, "")


def _walk(obj: object, path: str, name: str) -> None:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            if f.name.startswith("_"):
                continue
            _walk(getattr(obj, f.name), f"{path}.{f.name}" if path else f.name, f.name)
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            _walk(item, f"{path}[{i}]", name)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _walk(value, f"{path}.{key}", str(key) if isinstance(key, str) else name)
    else:
        problem = bounded(name, obj, path)
        if problem:
            raise SpecError(problem)
