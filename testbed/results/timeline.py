"""One timeline per run: `timeline.json`, a trace in the Chrome JSON format that
Perfetto (ui.perfetto.dev, "Open trace file") and chrome://tracing open. It merges, on one
clock (seconds from the run's start):

- every worker's compute and communication spans, a process per rank and job, from the
  `rank<R>.trace.json` each worker writes (its `t0` is on the monotonic clock);
- the fabric's counters from the phases whose queues were sampled (`timeline/*-queues.csv`,
  `*-loads.csv`): queue depth per port and class, link load per port (Mb/s), ECN marks and
  drops per port and class;
- PFC pauses as slices on the paused transmitter (`qos_apps/*/pfc_events.csv`);
- the controller's and the runner's decisions as instants: Hedera's moves, the jobs app's
  decisions, reroutes, fault steps;
- the machine's CPU and OVS's forwarding thread (`metrics/cpu.csv`);
- the hosts' BPF congestion controls' state per flow (`metrics/cc_trace.csv`: cwnd and the
  algorithm's own value, e.g. DCTCP's alpha), at most every CC_BIN_S per flow.

Only files: a pure function of the results directory, so a finished run's timeline can be
drawn again (`build`). The clock pair in `manifest.json` (one moment on the Unix and the
monotonic clock) converts the monotonic times.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from .files import read_jsonl, read_rows
from .pfc import pause_intervals, read_pfc_events

if TYPE_CHECKING:
    from testbed.config.replies import PfcRecord

LOAD_BIN_S = 0.1  # link load: bytes enqueued per 100 ms
CC_BIN_S = 0.01  # a congestion control's state: one point per flow per 10 ms at most

# pids of the fabric's and the machine's tracks; ranks follow from RANK_PID0
PID = {"queues": 1, "load": 2, "marks": 3, "pfc": 4, "controller": 5, "cpu": 6, "cc": 7}
NAMES = {"queues": "fabric: queue depth (bytes) per port and class",
         "load": "fabric: link load (Mb/s) per port",
         "marks": "fabric: ECN marks and drops (cumulative) per port and class",
         "pfc": "fabric: PFC pauses per transmitter and class",
         "controller": "controller and runner: decisions",
         "cpu": "machine: CPU",
         "cc": "hosts: congestion control state per flow"}
RANK_PID0 = 100


class Clock:
    """Seconds from the run's start, from the Unix or the monotonic clock."""

    def __init__(self, unix_s: float, monotonic_s: float):
        self.unix_s, self.monotonic_s = unix_s, monotonic_s

    def unix_us(self, t: float) -> float:
        return round((t - self.unix_s) * 1e6, 1)

    def monotonic_us(self, t: float) -> float:
        return round((t - self.monotonic_s) * 1e6, 1)


def _meta(pid: int, name: str, sort: int, tid: int | None = None,
          thread: str | None = None) -> list[dict]:
    if tid is not None:
        return [{"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                 "args": {"name": thread}}]
    return [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
            {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": sort}}]


def worker_events(trace: dict, job: str, pid: int, clock: Clock) -> list[dict]:
    """A worker's spans as one process of the timeline (None-safe for a trace written before
    workers recorded their clock: its events are left out)."""
    t0 = trace.get("otherData", {}).get("t0_monotonic_s")
    if t0 is None:
        return []
    shift = clock.monotonic_us(t0)
    rank = trace["otherData"].get("rank", pid - RANK_PID0)
    out = _meta(pid, f"{job} rank {rank}", RANK_PID0 + pid)
    tids = set()
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        tids.add(ev.get("tid", 0))
        out.append({**ev, "pid": pid, "ts": round(ev["ts"] + shift, 1)})
    for tid in sorted(tids):
        out += _meta(pid, "", 0, tid, "compute" if tid == 0 else f"communication {tid}")
    return out


def queue_events(rows: list[dict], clock: Clock) -> list[dict]:
    """Counters from `*-queues.csv` rows: depth per port and class, and cumulative marks
    and drops where there were any."""
    out = []
    marked: set[str] = set()
    for r in rows:
        name = f"{r['port']} c{r['class']}"
        ts = clock.unix_us(float(r["t_unix_s"]))
        out.append({"ph": "C", "pid": PID["queues"], "name": name, "ts": ts,
                    "args": {"bytes": int(r["qlen_bytes_max"])}})
        marks, drops = int(r["marks_cum_pkts"]), int(r["drops_cum_pkts"])
        if marks or drops or name in marked:
            marked.add(name)
            out.append({"ph": "C", "pid": PID["marks"], "name": name, "ts": ts,
                        "args": {"marks": marks, "drops": drops}})
    return out


def port_bytes(rows: list[dict]) -> dict[str, dict[float, int]]:
    """Per port, the bytes its classes had enqueued so far at each sampling tick (Unix
    time), from `*-loads.csv` rows (a class's row holds until its next)."""
    per_port: dict[str, dict[int, int]] = defaultdict(dict)  # port -> class -> bytes so far
    series: dict[str, dict[float, int]] = defaultdict(dict)  # port -> time -> bytes so far
    for r in sorted(rows, key=lambda r: float(r["t_unix_s"])):
        port = r["port"]
        per_port[port][int(r["class"])] = int(r["enq_cum_bytes"])
        series[port][float(r["t_unix_s"])] = sum(per_port[port].values())  # a tick's last
    return series


def load_events(rows: list[dict], clock: Clock, bin_s: float = LOAD_BIN_S) -> list[dict]:
    """Counters from `*-loads.csv` rows: each port's rate over `bin_s` bins, from the bytes
    its classes enqueued (what the port was offered to send)."""
    out = []
    for port, by_time in port_bytes(rows).items():
        points = list(by_time.items())
        t_bin, b_bin = points[0]
        for t, b in points[1:]:
            if t - t_bin >= bin_s * 0.999:  # the sampler's ticks, give or take rounding
                mbps = (b - b_bin) * 8 / (t - t_bin) / 1e6
                out.append({"ph": "C", "pid": PID["load"], "name": port,
                            "ts": clock.unix_us(t_bin), "args": {"mbps": round(mbps, 3)}})
                t_bin, b_bin = t, b
        out.append({"ph": "C", "pid": PID["load"], "name": port, "ts": clock.unix_us(t_bin),
                    "args": {"mbps": 0}})
    return out


def pause_events(records: list[PfcRecord], clock: Clock) -> list[dict]:
    """Slices from `pfc_events.csv`'s records: each transmitter and class from its pause to
    its resume (a pause still in effect at the last event ends there)."""
    closed, still_open = pause_intervals(records)
    last = clock.monotonic_us(max((r.time_ns for r in records), default=0) / 1e9)
    out = []
    tids: dict[str, int] = {}
    for (upstream, port, cls), spans in closed.items():
        tid = tids.setdefault(f"{upstream} c{cls}", len(tids) + 1)
        for start_ns, end_ns, event in spans:
            start, end = clock.monotonic_us(start_ns / 1e9), clock.monotonic_us(end_ns / 1e9)
            out.append({"ph": "X", "pid": PID["pfc"], "tid": tid, "name": "paused",
                        "cat": "pfc", "ts": start, "dur": round(end - start, 1),
                        "args": {"by": port, "event": event}})
    for (upstream, _, cls), start_ns in still_open.items():
        tid = tids.setdefault(f"{upstream} c{cls}", len(tids) + 1)
        start = clock.monotonic_us(start_ns / 1e9)
        out.append({"ph": "X", "pid": PID["pfc"], "tid": tid, "name": "paused (no resume)",
                    "cat": "pfc", "ts": start, "dur": round(last - start, 1), "args": {}})
    for key, tid in tids.items():
        out += _meta(PID["pfc"], "", 0, tid, key)
    return out


DECISION_TIDS = {"fault": 1, "reroute": 2, "hedera": 3, "jobs": 4}  # hedera: moves, priorities


def decision_events(events: list[dict], hedera: list[dict], jobs: list[dict],
                    clock: Clock) -> list[dict]:
    """Instants: fault steps and reroutes (`events.jsonl`), Hedera's records, the jobs
    app's decisions, each on its own track of the controller's process."""
    out = []

    def instant(kind: str, t: float, name: str, args: dict) -> None:
        out.append({"ph": "i", "s": "t", "pid": PID["controller"], "tid": DECISION_TIDS[kind],
                    "name": name, "ts": clock.unix_us(t), "args": args})

    for ev in events:
        if "fault_step" in ev:
            step = ev["fault_step"]
            instant("fault", step["time"], f"{step.get('fault', 'fault')} "
                    f"{step.get('action', '')}".strip(), step)
        for key in ("reroute", "relay_reroute"):
            if key in ev and "time" in ev[key]:
                instant("reroute", ev[key]["time"], key.replace("_", " "), ev[key])
    for rec in hedera:  # Hedera's moves, flow priorities set, flows sent back
        if "t" in rec:
            if "dscp" in rec:
                name = f"priority: {rec['flow']} DSCP {rec['dscp']} ({rec.get('why', '')})"
            elif rec.get("unplaced"):
                name = f"unplaced: {rec['flow']}"
            else:
                name = f"hedera: move {rec.get('flow')}"
            instant("hedera", rec["t"], name, rec)
    for rec in jobs:
        if "t" in rec:
            instant("jobs", rec["t"], f"jobs: round {rec.get('round')} {rec.get('when', '')}",
                    rec)
    for kind, tid in DECISION_TIDS.items():
        out += _meta(PID["controller"], "", 0, tid, kind)
    return out


def cpu_events(rows: list[dict], t0_unix: float, clock: Clock) -> list[dict]:
    return [{"ph": "C", "pid": PID["cpu"], "name": "busy (fraction)",
             "ts": clock.unix_us(t0_unix + float(r["t_s"])),
             "args": {"machine": float(r["machine_busy_fraction"]),
                      "ovs_thread": float(r["ovs_thread_core_fraction"])}} for r in rows]


def cc_events(rows: list[dict], clock: Clock, bin_s: float = CC_BIN_S) -> list[dict]:
    """Counters from `cc_trace.csv` rows: per flow, its window and the algorithm's own
    state, one point per `bin_s` at most (the last of each bin)."""
    last: dict[str, tuple[int, dict]] = {}
    out = []
    for r in rows:
        name = f"{r['algorithm']} {r['flow']}"
        t = float(r["t_unix_s"])
        point = {"ph": "C", "pid": PID["cc"], "name": name, "ts": clock.unix_us(t),
                 "args": {"cwnd_segs": int(r["cwnd_segs"]), r["state"]: int(r["value"])}}
        b = int(t / bin_s)
        if name in last and last[name][0] != b:
            out.append(last[name][1])
        last[name] = (b, point)
    return out + [p for _, p in last.values()]


def build(out_dir: Path) -> dict | None:
    """The run's timeline from its files, or None for a run with neither training, nor
    traffic classes, nor sampled queues, nor PFC events (a reachability or permutation run).
    A phase with classes whose experiment did not sample its queues (`priority`) gets its
    decisions and CPU."""
    manifest = json.loads((out_dir / "manifest.json").read_text())
    c = manifest.get("clock")
    if not c:
        return None
    clock = Clock(c["unix_s"], c["monotonic_s"])
    traces = sorted(out_dir.glob("**/rank*.trace.json"))
    queues = sorted((out_dir / "timeline").glob("*-queues.csv"))
    loads = sorted((out_dir / "timeline").glob("*-loads.csv"))
    pfc = sorted((out_dir / "qos_apps").glob("*/pfc_events.csv"))
    qos = any(phase.get("qos") for phase in manifest.get("phases", {}).values())
    cc_csv = out_dir / "metrics" / "cc_trace.csv"
    if not (traces or queues or pfc or qos or cc_csv.exists()):
        return None
    events: list[dict] = []
    for i, path in enumerate(traces):
        job = str(path.parent.relative_to(out_dir))
        events += worker_events(json.loads(path.read_text()), job, RANK_PID0 + i, clock)
    for path in queues:
        events += queue_events(read_rows(path), clock)
    for path in loads:
        events += load_events(read_rows(path), clock)
    events += pause_events([r for p in pfc for r in read_pfc_events(p)], clock)
    events += decision_events(
        read_jsonl(out_dir / "events.jsonl"),
        [r for p in sorted(out_dir.glob("hedera/*/hedera_decisions.jsonl")) for r in read_jsonl(p)],
        [r for p in sorted(out_dir.glob("jobs/*/decisions.jsonl")) for r in read_jsonl(p)], clock)
    cpu_csv = out_dir / "metrics" / "cpu.csv"
    if cpu_csv.exists() and "cpu_t0_unix_s" in c:
        events += cpu_events(read_rows(cpu_csv), c["cpu_t0_unix_s"], clock)
    if cc_csv.exists():
        events += cc_events(read_rows(cc_csv), clock)
    used = {e["pid"] for e in events if e["ph"] != "M"}
    for key, pid in PID.items():
        if pid in used:
            events += _meta(pid, NAMES[key], pid)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": manifest.get("spec_name"), "clock": "seconds from the run's "
                          "start", "run_start_unix_s": clock.unix_s}}


def write(out_dir: Path) -> Path | None:
    """timeline.json in `out_dir` (nothing for a run without timeline data)."""
    trace = build(out_dir)
    if trace is None:
        return None
    path = out_dir / "timeline.json"
    path.write_text(json.dumps(trace, separators=(",", ":")))
    return path
