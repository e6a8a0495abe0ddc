"""The statistics every result uses, defined once."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

V = TypeVar("V", int, float)


def percentile(values: Iterable[V], q: float, weights: Sequence[float] | None = None) -> V:
    """Nearest-rank percentile: the smallest value with at least q% of the values (or of
    the total weight, when `weights` are given) at or below it."""
    if weights is None:
        ordered = sorted(values)
        if not ordered:
            raise ValueError("percentile of no values")
        return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]
    pairs = sorted(zip(values, weights))
    if not pairs:
        raise ValueError("percentile of no values")
    total = sum(w for _, w in pairs)
    acc = 0.0
    for value, w in pairs:
        acc += w
        if acc >= q / 100 * total:
            return value
    return pairs[-1][0]


def percentile_or_none(values: Sequence[V], q: float, digits: int) -> float | None:
    """`percentile` rounded, None for no values (a CSV cell)."""
    return round(percentile(values, q), digits) if values else None


def round_or_none(x: float | None, digits: int = 4) -> float | None:
    """`x` rounded, None kept (a CSV cell)."""
    return round(x, digits) if x is not None else None


def median_or_none(values: Sequence[float]) -> float | None:
    """The median, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
