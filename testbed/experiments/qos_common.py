"""What the traffic-class experiments share: the per-class queue trace of every switch
port, the fabric's drop counters, and the analysis of the PFC app's event log (pauses,
paused time, reaction times) with its plots. Pure functions of the dataplane's counters and
the results' files."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.results.pfc import pause_intervals, read_pfc_events
from testbed.results.plots import pyplot, save, several_experiments, tagged, title
from testbed.results.stats import percentile_or_none

if TYPE_CHECKING:
    from testbed.dataplane.dpapi import Dataplane

CLASS_QUEUES = "class_queues.csv"
CLASS_QUEUES_HEADER = ["phase", "t_s", "port", "class", "qlen_pkts", "qlen_bytes",
                       "marks_cum_pkts", "drops_cum_pkts"]


def switch_slots(dp: Dataplane) -> list[tuple[int, int]]:
    """(port id, class) of every class of every switch egress port."""
    return [(p["id"], c) for p in dp.ports if not p["is_host"] for c in range(len(dp.classes))]


def class_queue_rows(dp: Dataplane, samples: list[Any], phase: str) -> list[list]:
    """Rows of class_queues.csv from a class queue sampler's samples."""
    return [[phase, round(s.t, 4), dp.ports[s.port]["ifname"], s.cls, s.pkts, s.bytes,
             s.marks, s.drops] for s in samples]


def pfc_summary(status_dir: Path, t_from_ns: int = 0, t_to_ns: int | None = None) -> dict:
    """Pause counts per port and the pause mechanism's reaction time, from the PFC app's
    event log (controllers/apps/pfc_app.py)."""
    path = status_dir / "pfc_events.csv"
    if not path.exists():
        return {"pauses": 0}
    rows = [r for r in read_pfc_events(path)
            if r.time_ns >= t_from_ns and (t_to_ns is None or r.time_ns <= t_to_ns)]
    pauses = [r for r in rows if r.event == "pause"]
    resumes = [r for r in rows if r.event == "resume"]
    applied = sorted(r.xoff_to_applied_us for r in pauses if r.xoff_to_applied_us is not None)
    stopped = sorted(r.xoff_to_last_arrival_us for r in resumes
                     if r.xoff_to_last_arrival_us is not None)
    after = sorted(r.bytes_after_xoff for r in resumes if r.bytes_after_xoff is not None)
    per_port: dict[str, int] = {}
    for r in pauses:
        key = f"{r.upstream_port}->{r.port}"
        per_port[key] = per_port.get(key, 0) + 1
    paused_ns: dict[str, int] = {}
    for (upstream, port, _), spans in pause_intervals(rows)[0].items():
        key = f"{upstream}->{port}"
        paused_ns[key] = paused_ns.get(key, 0) + sum(end - start for start, end, _ in spans)
    paused_ms = {key: round(ns / 1e6, 3) for key, ns in paused_ns.items()}

    def pct(values: list, q: float) -> float | None:
        return percentile_or_none(values, q, 1)
    return {"pauses": len(pauses), "resumes": len(resumes),
            "overflows": sum(r.event == "overflow" for r in rows),
            "paused_links": per_port, "paused_ms": paused_ms,
            "reaction_applied_us": {"p50": pct(applied, 50), "p90": pct(applied, 90),
                                    "max": applied[-1] if applied else None},
            "reaction_last_arrival_us": {"p50": pct(stopped, 50), "p90": pct(stopped, 90),
                                         "max": stopped[-1] if stopped else None},
            "bytes_after_xoff": {"p50": pct(after, 50), "max": after[-1] if after else None}}


def ingress_residual(dp: Dataplane) -> dict:
    """Bytes that switch ingress ports still count as held once the fabric is idle (should
    be 0: anything left is a packet whose departure was never seen), and arrivals that
    could not be tracked."""
    ncls = len(dp.classes)
    states = {(p["ifname"], c): dp.ingress(p["id"], c)
              for p in dp.ports if not p["is_host"] for c in range(ncls)}
    return {"ingress_residual_bytes": sum(st.bytes for st in states.values()),
            "ingress_residual_at": " ".join(f"{name}/{c}:{st.bytes}" for (name, c), st
                                            in states.items() if st.bytes),
            "ingress_untracked_pkts": sum(st.untracked for st in states.values())}


def fabric_drops(dp: Dataplane) -> dict:
    """switch_drops counts every packet a switch dropped, headroom overflows of lossless
    classes included (they are dropped at the egress); lossless_overflow counts those.
    overflow_escaped counts packets that overflowed a headroom after OVS had already
    forwarded them (its egress hook ran before the ingress hook): a real switch would have
    dropped them; here they got through, so they are reported, not counted as drops."""
    ncls = len(dp.classes)
    switch = [p for p in dp.ports if not p["is_host"]]
    return {"switch_drops": sum(dp.queue(p["id"], c).drops for p in switch for c in range(ncls)),
            "lossless_overflow": sum(dp.ingress(p["id"], c).overflow_drops
                                     for p in switch for c in range(ncls)),
            "overflow_escaped": sum(dp.ingress(p["id"], c).overflow_escaped
                                    for p in switch for c in range(ncls)),
            "host_nic_drops": sum(dp.queue(p["id"], c).drops for p in dp.ports if p["is_host"]
                                  for c in range(ncls))}


def time_weights(pts: list[tuple[float, int]]) -> dict[int, float]:
    """Fraction of time spent at each value of a step series (a row is written on change)."""
    weights: dict[int, float] = defaultdict(float)
    for (t, q), (t2, _) in zip(pts, pts[1:]):
        weights[q] += t2 - t
    total = sum(weights.values()) or 1.0
    return {q: w / total for q, w in sorted(weights.items())}


def pfc_timelines(out_dir: Path, plots: Path) -> list[Path]:
    """Paused intervals per link over time, one plot per fabric that logged PFC events."""
    plt = pyplot()
    made = []
    for log in sorted((out_dir / "qos_apps").glob("*/pfc_events.csv")):
        rows = read_pfc_events(log)
        if not any(r.event == "pause" for r in rows):
            continue
        t0 = min(r.time_ns for r in rows)
        spans = {f"{up}→{port}/c{cls}": [((a - t0) / 1e9, max((b - a) / 1e9, 1e-4))
                                         for a, b, _ in intervals]
                 for (up, port, cls), intervals in pause_intervals(rows)[0].items()}
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.4 * len(spans)))
        for i, (_, sp) in enumerate(sorted(spans.items())):
            ax.broken_barh(sp, (i - 0.4, 0.8), color="tab:red")
        ax.set_yticks(range(len(spans)), sorted(spans))
        ax.set_xlabel("time since the fabric's first PFC event (s)")
        ax.set_ylabel("paused transmitter→port/class", fontsize=8)
        ax.set_title(f"PFC pauses of fabric {log.parent.name}: paused intervals per link",
                     fontsize=10)
        made.append(save(fig, plots / f"pfc_{log.parent.name}.png"))
    return made


def class_queues(rows: list[dict], plots: Path) -> Path:
    """Per port and class: the queue over time (the busiest port of each phase) and the
    time-weighted histogram of every port that held packets."""
    plt = pyplot()
    several = several_experiments(rows)
    series = defaultdict(list)  # (phase of one experiment, port, class) -> samples
    for r in rows:
        series[(tagged(r["phase"], r, several), r["port"], r["class"])].append(
            (float(r["t_s"]), int(r["qlen_pkts"])))
    busy = sorted(series, key=lambda k: -max(q for _, q in series[k]))[:8]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for key in busy[:3]:
        pts = series[key]
        t0 = pts[0][0]
        ax.step([t - t0 for t, _ in pts], [q for _, q in pts], where="post", lw=0.7,
                label=" ".join(key))
    ax.set_xlabel("time since the queue's first sample (s)")
    ax.set_ylabel("queue (packets)")
    ax.set_title("busiest queues over time (phase, port, class)", fontsize=9)
    ax.legend(fontsize=7)
    for key in busy:
        weights = time_weights(series[key])
        ax2.plot(list(weights), list(weights.values()), ".-", ms=2, lw=0.6, label=" ".join(key))
    ax2.set_xlabel("queue (packets)")
    ax2.set_ylabel("fraction of time")
    ax2.set_yscale("log")
    ax2.set_title("queue depth histogram per port/class (time-weighted)", fontsize=9)
    ax2.legend(fontsize=6)
    fig.suptitle(title("Class queues", "the busiest switch queues per traffic class", rows),
                 fontsize=10)
    return save(fig, plots / "class_queues.png")


# the plots of what these experiments share: the class queues, and each fabric's pauses
PLOTS = {CLASS_QUEUES: class_queues}
DIR_PLOTS = (pfc_timelines,)
