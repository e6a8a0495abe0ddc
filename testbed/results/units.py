"""A column's unit, read from how its name ends: the project's names carry their units
(`goodput_mbps`, `iter_s_median`, `bytes_per_iter`). Used by the plots' titles and axes
and by runs read back as tables (analysis.py); imports nothing."""
from __future__ import annotations

import re

# a column's unit from how its name ends (the project's names carry units); the same suffixes
# as the spec's fields (testbed/config/limits.py), and `_mb`/`_gb` are MB/GB there too
UNITS: tuple[tuple[str, str], ...] = (
    ("_mbps", "Mb/s"), ("_gbps", "Gb/s"), ("_kbps", "kb/s"), ("_tflops", "TFLOP/s"),
    ("_s", "s"), ("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_hz", "Hz"),
    ("_bytes", "B"), ("_kb", "kB"), ("_mb", "MB"), ("_gb", "GB"),
    ("_pkts", "packets"), ("_fraction", "fraction"), ("_pct", "%"), ("_core", "cores"),
)
# a statistic after the unit ("iter_s_median", "peak_rss_mb_max") keeps the unit
STATISTIC = re.compile(r"median|mean|avg|min|max|sum|total|std|p\d{1,3}")
# "bytes_per_iter": a unit per something
PER = {"iter": "iteration"}


def unit_of(column: str) -> str | None:
    """The unit a column's name ends with ("goodput_mbps" -> "Mb/s", "iter_s_median" ->
    "s", "bytes_per_iter" -> "B/iteration"), None for a count, a ratio or a label."""
    name = "_" + column.lower()
    head, per, tail = name.rpartition("_per_")
    if per and tail and "_" not in tail:
        unit = unit_of(head[1:])
        return f"{unit}/{PER.get(tail, tail)}" if unit else None
    for suffix, unit in UNITS:
        if name.endswith(suffix):
            return unit
    stem, _, last = name.rpartition("_")
    if stem and STATISTIC.fullmatch(last):
        return unit_of(stem[1:])
    return None
