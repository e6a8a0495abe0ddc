"""Frames of the live view: what the page draws at one moment. Pure functions of counters
(live) or of a results directory's files (replay).

A frame is
    {"t": seconds from the run's start, "phase": the fabric's phase (its file name),
     "load": {ifname: fraction of the link's rate sent out of that interface},
     "ports": {ifname: {"q": queued bytes, "marks": ECN marks so far, "drops": drops so far,
                        "paused": 1 if PFC holds one of its classes}},
     "moves": [{"t", "name"}...: the controller's recent decisions],
     "jobs": {job: iterations its first worker has finished}}
Only ports with something to show are in "ports"; "load" has every interface the frame saw.
"""
from __future__ import annotations

import bisect
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from testbed.results.files import read_jsonl, read_rows
from testbed.results.pfc import pause_intervals, read_pfc_events
from testbed.results.timeline import port_bytes
from topologies.model import Topology, ifname

STEP_S = 0.25  # the page updates 4 times a second, live or replayed
MOVES_SHOWN_S = 5.0  # a decision stays on the page this long


def link_loads(links: list[dict], switches: set[str], before: dict[str, tuple[int, int]],
               after: dict[str, tuple[int, int]], dt: float) -> dict[str, float]:
    """Per sending interface, the fraction of its link's rate it sent in `dt`, from the
    (tx, rx) byte counters of switch ports: a switch sends what its port transmitted, a host
    what its switch port received (a host's own interface is in its namespace)."""
    out: dict[str, float] = {}
    if dt <= 0:
        return out
    for link in links:
        cap = link["rate_mbps"] * 1e6 / 8 * dt
        for src, src_if, dst, dst_if in ((link["a"], link["a_if"], link["b"], link["b_if"]),
                                         (link["b"], link["b_if"], link["a"], link["a_if"])):
            if src in switches and src_if in after and src_if in before:
                sent = after[src_if][0] - before[src_if][0]
            elif dst in switches and dst_if in after and dst_if in before:
                sent = after[dst_if][1] - before[dst_if][1]
            else:
                continue
            out[src_if] = round(max(0, sent) / cap, 4)
    return out


def port_state(queue_bytes: int, marks: int, drops: int, paused: bool) -> dict | None:
    """One port's entry in a frame (None when there is nothing to show)."""
    if not (queue_bytes or marks or drops or paused):
        return None
    return {"q": queue_bytes, "marks": marks, "drops": drops, "paused": int(paused)}


def recent(decisions: list[dict], t: float) -> list[dict]:
    """The decisions of the last MOVES_SHOWN_S seconds before `t`, newest first."""
    return sorted((d for d in decisions if t - MOVES_SHOWN_S <= d["t"] <= t),
                  key=lambda d: -d["t"])[:8]


def decision_name(rec: dict) -> str:
    """How the page names one of Hedera's records (a move, a priority, a flow sent back)."""
    if "dscp" in rec:
        return f"priority {rec['flow']} -> DSCP {rec['dscp']}"
    if rec.get("unplaced"):
        return f"unplaced {rec['flow']}"
    return f"hedera moved {rec.get('flow')} via {'-'.join(rec.get('path', [])[1:-1])}"


# ---- replay: a finished run's frames from its files --------------------------------------

def phases_of(events: list[dict]) -> list[dict]:
    """The run's fabrics in order: slug, label, start and end (seconds from the run's start
    on the Unix clock: `t0`), from the runner's phase_up and phase_down events."""
    out: list[dict] = []
    for ev in events:
        if "phase_up" in ev:
            out.append({"slug": ev["slug"], "label": ev["phase_up"], "t_start": ev["time"],
                        "t_end": None})
        elif "phase_down" in ev:
            for p in reversed(out):
                if p["slug"] == ev["slug"] and p["t_end"] is None:
                    p["t_end"] = ev["time"]
                    break
    return out


class Series:
    """A change series: the value held from each time on (times ascending)."""

    def __init__(self, points: list[tuple[float, Any]]):
        points = sorted(points, key=lambda p: p[0])
        self.times = [p[0] for p in points]
        self.values = [p[1] for p in points]

    def at(self, t: float, default: Any = None) -> Any:
        i = bisect.bisect_right(self.times, t)
        return self.values[i - 1] if i else default

    def interpolated(self, t: float) -> float | None:
        """A cumulative counter at `t`, linear between its samples (None before the first;
        the last value after the last): a rate from two of these has no sampling jitter."""
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return None
        if i == len(self.times):
            return float(self.values[-1])
        (ta, tb), (va, vb) = self.times[i - 1:i + 1], self.values[i - 1:i + 1]
        return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else float(vb)


def replay(out_dir: Path, step_s: float = STEP_S) -> dict:
    """The frames of a finished run, every `step_s` while a fabric was up, from its files:
    loads, queues, marks and drops of the sampled phases (timeline/), PFC pauses
    (qos_apps/*/pfc_events.csv), Hedera's records and training progress (rank files). A
    phase whose queues were not sampled (reachability, a permutation) shows its fabric
    without counters."""
    manifest = json.loads((out_dir / "manifest.json").read_text())
    clock = manifest.get("clock") or {}
    t0, mono0 = clock.get("unix_s", 0.0), clock.get("monotonic_s", 0.0)
    phases = phases_of(read_jsonl(out_dir / "events.jsonl"))
    # per switch port: change series of (queue, marks, drops) and of bytes sent
    queues: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for path in sorted((out_dir / "timeline").glob("*-queues.csv")):
        for r in read_rows(path):
            queues[r["port"]][int(r["class"])].append(
                (float(r["t_unix_s"]) - t0, (int(r["qlen_bytes_max"]), int(r["marks_cum_pkts"]),
                                             int(r["drops_cum_pkts"]))))
    sent: dict[str, dict[float, int]] = defaultdict(dict)
    for path in sorted((out_dir / "timeline").glob("*-loads.csv")):  # one sampled phase each
        for port, series in port_bytes(read_rows(path)).items():
            sent[port].update((t - t0, b) for t, b in series.items())
    pauses: dict[str, list[tuple[float, float]]] = defaultdict(list)  # per upstream port
    pfc_events = [r for p in sorted((out_dir / "qos_apps").glob("*/pfc_events.csv"))
                  for r in read_pfc_events(p)]
    closed, still_open = pause_intervals(pfc_events)
    for (upstream, _, _), spans in closed.items():
        pauses[upstream] += [(a / 1e9 - mono0, b / 1e9 - mono0) for a, b, _ in spans]
    for (upstream, _, _), start_ns in still_open.items():
        pauses[upstream].append((start_ns / 1e9 - mono0, float("inf")))
    decisions = [{"t": rec["t"] - t0, "name": decision_name(rec)}
                 for path in sorted(out_dir.glob("hedera/*/hedera_decisions.jsonl"))
                 for rec in read_jsonl(path) if "t" in rec and "flow" in rec]
    jobs: dict[str, list[float]] = {}
    for path in sorted(out_dir.glob("**/rank*.jsonl")):
        job = str(path.parent.relative_to(out_dir))
        ends = sorted(rec["t_sync_end"] - mono0 for rec in read_jsonl(path) if "t_sync_end" in rec)
        if ends and job not in jobs:  # the job's first rank file that has iterations
            jobs[job] = ends
    queue_series = {port: [Series(points) for points in by_cls.values()]
                    for port, by_cls in queues.items()}
    sent_series = {port: Series(list(points.items())) for port, points in sent.items()}
    layouts = {}
    frames = []
    for phase in phases:
        topo_json = out_dir / "topologies" / f"{phase['slug']}.json"
        if not topo_json.exists():
            continue
        layouts[phase["slug"]] = topo_json
        topo = Topology.from_json(topo_json.read_text())
        rates = {ifname(node, port): link.rate_mbps for link in topo.links
                 for node, port in link.ends()}
        start = phase["t_start"] - t0
        end = (phase["t_end"] or phase["t_start"]) - t0
        t = start
        while t <= end:
            frames.append(replay_frame(t, phase["slug"], step_s, rates, queue_series,
                                       sent_series, pauses, decisions, jobs))
            t = round(t + step_s, 6)
    return {"phases": [{**p, "t_start": p["t_start"] - t0,
                        "t_end": (p["t_end"] - t0) if p["t_end"] else None} for p in phases
                       if p["slug"] in layouts],
            "frames": frames, "layouts": {k: str(v) for k, v in layouts.items()}}


def replay_frame(t: float, phase: str, step_s: float, rates: dict[str, float],
                 queues: dict[str, list[Series]], sent: dict[str, Series],
                 pauses: dict[str, list[tuple[float, float]]], decisions: list[dict],
                 jobs: dict[str, list[float]]) -> dict:
    """One replayed frame at `t`: loads over the step before it, as a fraction of each
    port's link rate (`rates`, the phase's ports only)."""
    load = {}
    for port, series in sent.items():
        before, after = series.interpolated(t - step_s), series.interpolated(t)
        if port in rates and before is not None and after is not None:
            load[port] = round((after - before) * 8 / step_s / (rates[port] * 1e6), 4)
    ports = {}
    for port in (set(queues) | set(pauses)) & set(rates):
        q = marks = drops = 0
        for series in queues.get(port, []):
            qb, m, d = series.at(t, (0, 0, 0))
            q, marks, drops = q + qb, marks + m, drops + d
        paused = any(a <= t < b for a, b in pauses.get(port, []))
        state = port_state(q, marks, drops, paused)
        if state:
            ports[port] = state
    return {"t": round(t, 3), "phase": phase, "load": load, "ports": ports,
            "moves": recent(decisions, t),
            "jobs": {job: sum(1 for e in ends if e <= t) for job, ends in jobs.items()}}
