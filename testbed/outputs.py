"""What a run leaves in its results directory when it ends, however it ended: the startup
and CPU tables, events.jsonl, manifest.json (what ran, on what, with which settings), the
plots, timeline.json and, last, summary.json (its status, headlines and warnings) written
whole and then moved into place (runner.py's session calls it).
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING

from testbed.config.datapath import TRAITS
from testbed.core import provenance
from testbed.dataplane.hostcc import TRACE_FIELDS

from .experiments import csv_plots, dir_plots
from .results import sweep, timeline
from .results.files import read_rows
from .results.plots import draw_all
from .results.verdict import cpu_bound, unfaithful

if TYPE_CHECKING:
    from .runner import RunContext


def experiment_at(spans: list[tuple[int, int | None, float, float]], t: float,
                  with_point: bool) -> list[int | None]:
    """The experiment running at `t` (spans: index, point, start, end), and its sweep
    point when `with_point`; None between experiments."""
    found = next(((i, p) for i, p, t0, t1 in spans if t0 <= t <= t1), (None, None))
    return list(found) if with_point else [found[0]]


def write_outputs(ctx: RunContext, status: str, error: str, results: dict,
                  elapsed: float) -> None:
    out = ctx.out_dir
    ctx.point = None  # the rows below say their own experiment and point
    point = ["point"] if ctx.sweep else []
    ctx.write_csv("startup.csv", ["experiment", *point, "phase", "topology", "hosts",
                                  "switches", "net_up_s",
                                  "controller_connected_s", "paths_installed_s", "startup_total_s",
                                  "teardown_s", "startup_machine_idle_min",
                                  "startup_machine_idle_mean", "startup_ovs_thread_p90_core"],
                  ctx.startups)
    ctx.write_csv("cpu.csv", ["experiment", *point, "t_s", "machine_busy_fraction",
                              "ovs_thread_core_fraction", "ovs_rx_backlog_bytes"],
                  [[*experiment_at(ctx.experiment_spans, s.t, bool(ctx.sweep)), round(s.t, 3),
                    round(s.machine_busy, 4), round(s.ovs_thread, 4), s.ovs_rx_backlog_bytes]
                   for s in ctx.cpu.samples])
    trace = ctx.cc.rows() if ctx.cc is not None else []
    if trace:  # the BPF congestion controls' own trace
        ctx.write_csv("cc_trace.csv", ["experiment", *point, *TRACE_FIELDS],
                      [[*experiment_at(ctx.experiment_spans, r[0] - ctx.cpu.t0,
                                       bool(ctx.sweep)), *r] for r in trace])
    with (out / "events.jsonl").open("w") as fh:
        for ev in ctx.events:
            fh.write(json.dumps(ev) + "\n")
    manifest = {
        "spec_name": ctx.spec.name, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "elapsed_s": round(elapsed, 1),
        # what produced the run: the code (commit, uncommitted changes), the command line
        "provenance": ctx.code,
        "versions": provenance.versions(), "machine": {**provenance.machine(),
                                                       "wakeup_latency_held": ctx.wakeup_held},
        "datapath": ctx.datapath or "not started",
        "datapath_setting": ctx.spec.datapath,
        "datapath_traits": (dataclasses.asdict(TRAITS[ctx.datapath]) if ctx.datapath in TRAITS
                            else None),
        "mechanisms": {"shaping": "htb", "queue": f"{ctx.spec.links.drop}-drop fifo, "
                       f"{'bytes' if ctx.spec.links.buffer_bytes else 'packets'}",
                       "ecn_marking": "none", "pfc": "none",
                       "delay_loss": "netem" if (ctx.spec.links.delay_us or ctx.spec.links.loss_pct)
                       else "none", **ctx.mechanisms},
        "ovs_send_buffer_bytes": ctx.send_buffer_bytes,
        "mtu_bytes": ctx.spec.links.mtu_bytes,
        "congestion_control": {"configured": ctx.spec.hosts.congestion_control,
                               "per_host": ctx.host_cc,
                               # the algorithms the run registered as BPF programs
                               "bpf": ctx.cc.describe() if ctx.cc is not None else {}},
        "ecn": ctx.spec.hosts.ecn,
        "phases": ctx.phases,  # what each fabric really ran with (experiments override the spec)
        "clock": {**ctx.clock, "cpu_t0_unix_s": ctx.cpu.t0},  # for timeline.json
        "spec": dataclasses.asdict(ctx.spec),
        "sweep_points": ctx.sweep,  # each point's swept values, by point index
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))
    try:
        made = draw_all(out, csv_plots(), dir_plots())
        if ctx.sweep and ctx.spec.sweep and (out / "metrics" / "sweep.csv").exists():
            drawn = sweep.plot(read_rows(out / "metrics" / "sweep.csv"), list(ctx.sweep[0]),
                               ctx.spec.sweep.plot, out / "plots")
            made += [drawn] if drawn else []
    except Exception as exc:  # plots never hide results
        made = []
        results.setdefault("plots", {})["error"] = str(exc)
    try:
        timeline.write(out)
    except Exception as exc:  # the timeline never hides results
        results.setdefault("timeline", {})["error"] = f"{type(exc).__name__}: {exc}"
    warnings = [w for r in results.values() for w in r.get("warnings", [])] + ctx.warnings
    degraded = [d for r in results.values() for d in r.get("degraded", [])] + ctx.degraded
    if status == "ok" and degraded:  # it ran to its end, but the fabric did not carry
        status = "degraded"
    summary = {"status": status, "error": error, "elapsed_s": round(elapsed, 1),
               "experiments": results, "fidelity_warnings": warnings,
               "cpu_bound": bool(cpu_bound(warnings)),
               "degraded": degraded, "unfaithful": unfaithful(ctx.events, degraded, warnings),
               "plots": [str(p.relative_to(out)) for p in made]}
    tmp = out / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(out / "summary.json")
