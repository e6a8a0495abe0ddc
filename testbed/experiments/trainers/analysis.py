"""The trainer experiments' shared result analysis, pure: a rank's per-iteration records
as its worker wrote them, and the switch queues a job met."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.results.stats import percentile


def queue_stats(samples: list[Any], names: dict[int, str], sink_port: str,
                sample_rate_hz: float) -> dict:
    """Per switch port (all classes together): the deepest queue sampled and the 99th
    percentile of the samples (taken when a queue changed); the port toward the job's
    busiest receiver, and the port whose queue got deepest."""
    current: dict[tuple[int, int], int] = {}
    series: dict[int, list[int]] = {}
    first_drops: dict[tuple[int, int], int] = {}
    last_drops: dict[tuple[int, int], int] = {}
    for s in samples:
        current[(s.port, s.cls)] = s.pkts
        series.setdefault(s.port, []).append(sum(v for (p, _), v in current.items()
                                                 if p == s.port))
        first_drops.setdefault((s.port, s.cls), s.drops)
        last_drops[(s.port, s.cls)] = s.drops

    def stats(values: list[int]) -> tuple[int, int]:
        values = values or [0]
        return percentile(values, 99), max(values)
    sink_id = next((i for i, n in names.items() if n == sink_port), None)
    sink_p99, sink_max = stats(series.get(sink_id, []))
    hottest = max(series, key=lambda p: max(series[p]), default=None)
    hot_p99, hot_max = stats(series.get(hottest, []))
    return {"queue_port": sink_port, "queue_p99_pkts": sink_p99, "queue_max_pkts": sink_max,
            "deepest_port": names.get(hottest, ""), "deepest_p99_pkts": hot_p99,
            "deepest_max_pkts": hot_max,
            "switch_drops_pkts": sum(last_drops[k] - first_drops[k] for k in last_drops),
            "sample_rate_hz": round(sample_rate_hz, 1)}


def read_records(path: Path) -> list[dict]:
    """A rank's records, one JSON line per iteration (none when it wrote no file)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
