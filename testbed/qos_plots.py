"""Plots of the traffic-class experiments, drawn only from the results' CSV files."""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import matplotlib.pyplot as plt

from .plots import _rows, _save
from .qos_experiments import pause_intervals


def _time_weights(pts: list[tuple[float, int]]) -> dict[int, float]:
    """Fraction of time spent at each value of a step series (a row is written on change)."""
    weights: dict[int, float] = defaultdict(float)
    for (t, q), (t2, _) in zip(pts, pts[1:]):
        weights[q] += t2 - t
    total = sum(weights.values()) or 1.0
    return {q: w / total for q, w in sorted(weights.items())}


def ecn_queue(rows: list[dict], plots: Path) -> Path:
    """Queue depth over a 2 s window of each phase, and its histogram (time-weighted)."""
    by = defaultdict(list)
    for r in rows:
        by[r["phase"]].append((float(r["t_s"]), int(r["qlen_pkts"])))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for phase, pts in by.items():
        t0 = pts[0][0] + 5.0
        window = [(t - t0, q) for t, q in pts if t0 <= t <= t0 + 2.0]
        ax.step([t for t, _ in window], [q for _, q in window], where="post", lw=0.8,
                label=phase)
        weights = _time_weights(pts)
        qs = list(weights)
        acc, cdf = 0.0, []
        for q in qs:
            acc += weights[q]
            cdf.append(acc)
        ax2.plot(qs, cdf, label=phase)
    ax.set_xlabel("time (s, 2 s of the steady state)")
    ax.set_ylabel("bottleneck queue (packets)")
    ax.set_title("ECN queue occupancy")
    ax.legend()
    ax2.set_xscale("symlog", linthresh=10)
    ax2.set_xlabel("queue (packets)")
    ax2.set_ylabel("fraction of time")
    ax2.set_title("queue depth CDF (1 kHz, time-weighted)")
    ax2.legend()
    return _save(fig, plots / "ecn_queue.png")


def incast(rows: list[dict], plots: Path) -> Path:
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    by = defaultdict(list)
    for r in rows:
        by[r["variant"]].append(r)
    for variant, rs in by.items():
        n = [int(r["senders"]) for r in rs]
        ax.plot(n, [float(r["goodput_mbps"]) for r in rs], "o-", label=variant)
        ax2.plot(n, [int(r["tcp_timeouts"]) for r in rs], "o-", label=variant)
    ax.set_xlabel("synchronized senders N")
    ax.set_ylabel("goodput (Mb/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("TCP incast: fixed block split N ways")
    ax.legend()
    ax2.set_xlabel("synchronized senders N")
    ax2.set_ylabel("TCP timeouts (all senders)")
    ax2.legend()
    return _save(fig, plots / "incast.png")


def pfc_victim(rows: list[dict], plots: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    phases = [r["phase"] for r in rows]
    ax.bar(phases, [float(r["victim_mbps"]) for r in rows], color="tab:blue", label="victim")
    ax.plot(phases, [float(r["incast_mbps"]) for r in rows], "ks", label="incast (aggregate)")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['pauses']} pauses", (i, float(r["victim_mbps"])), ha="center",
                    va="bottom", fontsize=8)
    ax.set_ylabel("goodput (Mb/s)")
    ax.set_title("PFC congestion spreading: the victim flow")
    ax.legend()
    return _save(fig, plots / "pfc_victim.png")


def priority(rows: list[dict], plots: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [float(r["high_received_mbps"]) for r in rows], 0.4,
           label="high class")
    ax.bar([i + 0.2 for i in x], [float(r["low_received_mbps"]) for r in rows], 0.4,
           label="low class")
    ax.set_xticks(list(x), [r["scheduler"] for r in rows])
    ax.set_ylabel("received (Mb/s)")
    ax.set_title("Two classes on one saturated port")
    ax.legend()
    return _save(fig, plots / "priority.png")


def pfc_timelines(out_dir: Path, plots: Path) -> list[Path]:
    """Paused intervals per link over time, one plot per fabric that logged PFC events."""
    made = []
    for log in sorted((out_dir / "qos_apps").glob("*/pfc_events.csv")):
        with log.open() as fh:
            rows = list(csv.DictReader(fh))
        if not any(r["event"] == "pause" for r in rows):
            continue
        t0 = min(int(r["time_ns"]) for r in rows)
        spans = {f"{up}→{port}/c{cls}": [((a - t0) / 1e9, max((b - a) / 1e9, 1e-4))
                                         for a, b in intervals]
                 for (up, port, cls), intervals in pause_intervals(rows).items()}
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.4 * len(spans)))
        for i, (link, sp) in enumerate(sorted(spans.items())):
            ax.broken_barh(sp, (i - 0.4, 0.8), color="tab:red")
        ax.set_yticks(range(len(spans)), sorted(spans))
        ax.set_xlabel("time (s)")
        ax.set_title(f"PFC pauses ({log.parent.name})")
        made.append(_save(fig, plots / f"pfc_{log.parent.name}.png"))
    return made


def class_queues(rows: list[dict], plots: Path) -> Path:
    """Per port and class: the queue over time (the busiest port of each phase) and the
    time-weighted histogram of every port that held packets."""
    series = defaultdict(list)
    for r in rows:
        series[(r["phase"], r["port"], r["class"])].append((float(r["t_s"]), int(r["qlen_pkts"])))
    busy = sorted(series, key=lambda k: -max(q for _, q in series[k]))[:8]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key in busy[:3]:
        pts = series[key]
        t0 = pts[0][0]
        ax.step([t - t0 for t, _ in pts], [q for _, q in pts], where="post", lw=0.7,
                label=" ".join(key))
    ax.set_xlabel("time (s)")
    ax.set_ylabel("queue (packets)")
    ax.set_title("busiest queues over time")
    ax.legend(fontsize=7)
    for key in busy:
        weights = _time_weights(series[key])
        ax2.plot(list(weights), list(weights.values()), ".-", ms=2, lw=0.6, label=" ".join(key))
    ax2.set_xlabel("queue (packets)")
    ax2.set_ylabel("fraction of time")
    ax2.set_yscale("log")
    ax2.set_title("queue depth histogram per port/class (1 kHz)")
    ax2.legend(fontsize=6)
    return _save(fig, plots / "class_queues.png")


CSV_PLOTS = {"class_queues.csv": class_queues, "ecn_queue_depth.csv": ecn_queue, "incast.csv": incast,
             "pfc_victim.csv": pfc_victim, "priority.csv": priority}
