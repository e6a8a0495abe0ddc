"""The parallel experiment's analysis, pure: one summary row per job, one row per
(job, collective type) with measured and modelled bytes and time, and the per-iteration
rows of every rank."""
from __future__ import annotations

import statistics

from testbed.results.stats import median_or_none
from testbed.results.stats import round_or_none as _r
from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.pipemare import mean_staleness
from testbed.workloads.model.parallel.schedule import ASYNC, simulate

from ..trainers.model import cpu_bound_verdict
from .model import wire_factor

ITER_FIELDS = (["iter_s", "pipeline_s", "sync_s", "pp_wait_s", "bubble", "staleness",
                "compute_s", "comm_s", "cpu_wait_s", "cpu_s", "tx_bytes", "rx_bytes", "loss"]
               + [f"{k}_{f}" for k in KINDS for f in ("s", "bytes", "wire_bytes")])
KIND_FIELDS = ["experiment", "fabric", "job", "kind", "bytes_per_rank", "model_bytes_per_rank",
               "bytes_over_model", "wire_bytes_per_rank", "model_wire_bytes_per_rank",
               "wire_over_model", "comm_s", "model_comm_s", "comm_over_model",
               "core_bytes", "model_core_bytes", "link_load", "measured_link_load",
               "model_hashed_comm_s", "comm_over_hashed_model"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def exposed_pipeline(plan: JobShape, rows: dict[int, list[dict]], warmup: int) -> float | None:
    """Measured pipeline time beyond what the measured compute would take with instant
    transfers (the schedule replayed with each stage's measured layer time): the pipeline
    communication the iteration waited for."""
    lay = plan.layout
    if lay.pp < 2:
        return None
    per_stage = []
    for s in range(lay.pp):
        loops = [row["compute_loop_s"] for r, rs in rows.items() if lay.coords(r)[1] == s
                 for row in rs[warmup:]]
        per_stage.append(statistics.median(loops) / plan.micro_batches if loops else 0.0)
    ideal = simulate(plan.schedule, lay.pp, plan.micro_batches, [t / 3 for t in per_stage],
                     [2 * t / 3 for t in per_stage])["iteration_s"]
    pipe = median_or_none([row["pipeline_s"] for rs in rows.values() for row in rs[warmup:]])
    return max(0.0, pipe - ideal) if pipe is not None else None


def sync_comm(lay: Layout, rows: dict[int, list[dict]], warmup: int, kind: str) -> list[float]:
    """Each rank's time in one type's collectives per iteration, less what it waited at the
    start of the synchronisation for the last member of its data-parallel group to arrive
    (whose pipeline ended later): the collective's own time. Ranks' clocks are the
    machine's one monotonic clock."""
    out = []
    for r, rs in rows.items():
        group = lay.group_of("dp", r)
        for row in rs[warmup:]:
            it = row["iteration"]
            starts = [rows[g][it]["t_sync_start"] for g in group if it < len(rows[g])]
            skew = max(starts) - row["t_sync_start"] if starts else 0.0
            out.append(max(0.0, row[f"{kind}_s"] - skew))
    return out


def summarise(*, experiment: int, fabric: str, label: str, plan: JobShape, compute: str,
              model_name: str, hosts: list[str], rows: dict[int, list[dict]], warmup: int,
              pred: dict, model_sent: dict[int, dict[str, float]], net: Network,
              loads: dict[str, float], model_core: dict[str, float],
              core_measured: dict[str, int] | None,
              busiest_measured: dict[str, int] | None, rate_mbps: float, mtu: int,
              rtt: dict[str, float], queue: dict, measured: dict, checks: dict,
              wire: float | None = None, transport: str = "gloo", paths: dict | None = None,
              ) -> tuple[dict, list[list], list[list]]:
    """(the job's summary row, its rows per collective type, every rank's iteration rows).
    `paths`: the path-aware model's (model.path_model), None without one."""
    lay = plan.layout
    steady = [row for rs in rows.values() for row in rs[warmup:]]
    # without a flush an iteration's row also holds the next one's first forwards (the
    # first row the fill's): the bytes per iteration are the whole run's over its length
    counted = [row for rs in rows.values() for row in rs] if plan.schedule in ASYNC \
        else steady
    iters = {it: [rs[it] for rs in rows.values() if it < len(rs)]
             for it in range(warmup, max((len(rs) for rs in rows.values()), default=0))}
    # an iteration of the job lasts as long as its slowest rank's
    iter_s = median_or_none([max(r["iter_s"] for r in its) for its in iters.values() if its])
    bubble = median_or_none([statistics.mean(r["bubble"] for r in its)
                             for its in iters.values() if its])
    wf = wire_factor(mtu) if wire is None else wire
    n_iters = max((len(rs) for rs in rows.values()), default=0) or 1
    kind_rows = []
    by_kind = {}
    for k in KINDS:
        measured_b = statistics.mean(r[f"{k}_bytes"] for r in counted) if counted else None
        wire_b = statistics.mean(r[f"{k}_wire_bytes"] for r in counted) if counted else None
        model_b = statistics.mean(s[k] for s in model_sent.values())
        if k == "pp":
            comm = exposed_pipeline(plan, rows, warmup)
            model_comm = (pred["pipeline_s"] - simulate(plan.schedule, lay.pp,
                                                       plan.micro_batches, pred["fwd_s"],
                                                       pred["bwd_s"])["iteration_s"]
                          if lay.pp > 1 else 0.0)
        elif k in ("dp", "fsdp"):
            comm = median_or_none(sync_comm(lay, rows, warmup, k))
            model_comm = pred["comm_s"][k]
        else:
            comm = median_or_none([r[f"{k}_s"] for r in steady])
            model_comm = pred["comm_s"][k]
        if not model_b and not measured_b:
            continue
        core = core_measured.get(k) if core_measured else None
        # the switch counters span the whole job: every iteration, warm-up included
        per_iter_core = core / n_iters if core is not None else None
        by_kind[k] = (measured_b, model_b, comm, model_comm)
        # the busiest switch port's bytes of this type over what one rank sends: the load
        # ECMP's hashing actually put on one link, in the model's unit (a host link's worth),
        # where the model spreads every flow evenly over its shortest paths
        unit = (wire_b or 0) * n_iters
        hashed = (max(1.0, busiest_measured[k] / unit)
                  if busiest_measured is not None and unit else None)
        hashed_comm = (model_comm * hashed / loads[k]
                       if hashed is not None and model_comm is not None and k != "pp" else None)
        kind_rows.append([experiment, fabric, label, k, _r(measured_b, 0), _r(model_b, 0),
                          _ratio(measured_b, model_b), _r(wire_b, 0), _r(model_b * wf, 0),
                          _ratio(wire_b, model_b * wf), _r(comm), _r(model_comm),
                          _ratio(comm, model_comm), _r(per_iter_core, 0),
                          _r(model_core[k] * wf, 0), round(loads[k], 3), _r(hashed, 3),
                          _r(hashed_comm), _ratio(comm, hashed_comm)])
    waits = [median_or_none([r["cpu_wait_s"] for r in rs[warmup:]]) for rs in rows.values()]
    wait = max((w for w in waits if w is not None), default=None)
    wait_share = wait / iter_s if wait is not None and iter_s else None
    cpu = checks["cpu"]
    losses = [r["loss"] for rs in rows.values() for r in rs[-1:] if r.get("loss") is not None]
    # one mini-batch's loss is noisy: the mean over the last tenth of the run beside it
    tail = [r["loss"] for rs in rows.values() for r in rs[-max(1, len(rs) // 10):]
            if r.get("loss") is not None]
    core_total = sum(core_measured.values()) / n_iters if core_measured is not None else None
    summary = {
        "experiment": experiment, "fabric": fabric, "job": label, "layout": lay.label(),
        "world": lay.world, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep,
        "schedule": plan.schedule if lay.pp > 1 else "", "micro_batches": plan.micro_batches,
        "zero": plan.zero, "compute": compute, "transport": transport, "model": model_name,
        "scale": plan.scale,
        "hosts": " ".join(hosts), "host_rate_mbps": rate_mbps,
        **{f"{k}_rtt_ms": round(v * 1000, 3) for k, v in rtt.items()},
        "iter_s_median": _r(iter_s), "model_iter_s": _r(pred["iteration_s"]),
        "iter_over_model": _ratio(iter_s, pred["iteration_s"]),
        "model_paths_iter_s": _r(paths["iteration_s"]) if paths else None,
        "model_paths_p10_s": _r(paths["p10_s"]) if paths else None,
        "model_paths_p90_s": _r(paths["p90_s"]) if paths else None,
        "iter_over_paths_model": _ratio(iter_s, paths["iteration_s"]) if paths else None,
        "model_paths_pipeline_s": _r(paths["pipeline_s"]) if paths else None,
        "model_paths_sync_s": _r(paths["sync_s"]) if paths else None,
        "pipeline_s_median": _r(median_or_none([r["pipeline_s"] for r in steady])),
        "model_pipeline_s": _r(pred["pipeline_s"]),
        "sync_s_median": _r(median_or_none([r["sync_s"] for r in steady])),
        "model_sync_s": _r(pred["sync_s"]),
        "bubble": _r(bubble, 3), "model_bubble": _r(pred["bubble"], 3),
        "bubble_ideal": _r(pred["bubble_ideal"], 3),
        "bubble_over_ideal": _ratio(bubble, pred["bubble_ideal"]),
        "compute_s_median": _r(median_or_none([r["compute_s"] for r in steady
                                               if r.get("compute_s") is not None])),
        "model_compute_s": _r(pred["compute_s"]),
        **{f"{k}_bytes": _r(v[0], 0) for k, v in by_kind.items()},
        **{f"model_{k}_bytes": _r(v[1], 0) for k, v in by_kind.items()},
        **{f"{k}_s": _r(v[2]) for k, v in by_kind.items()},
        **{f"model_{k}_s": _r(v[3]) for k, v in by_kind.items()},
        "core_bytes_per_iter": _r(core_total, 0),
        "model_core_bytes_per_iter": _r(sum(model_core.values()) * wf, 0),
        "final_loss": round(statistics.mean(losses), 5) if losses else None,
        "tail_loss": round(statistics.mean(tail), 5) if tail else None,
        # weight updates between a micro-batch's forward and backward (PipeMare's delay)
        "staleness": _r(statistics.mean(r.get("staleness", 0.0) for r in steady), 3)
        if steady else None,
        "model_staleness": round(mean_staleness(lay.pp, plan.micro_batches), 3)
        if plan.schedule in ASYNC else 0.0,
        **queue, **measured,
        "machine_idle_mean": cpu["machine_idle_mean"], "machine_idle_min": cpu["machine_idle_min"],
        "machine_steal_mean": cpu.get("machine_steal_mean"),
        "worker_cpu_wait_s": _r(wait), "worker_cpu_wait_share": _r(wait_share, 3),
        "cpu_bound": cpu_bound_verdict(cpu["cpu_bound"], wait_share, None),
        "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
    }
    iter_rows = [[experiment, fabric, label, r, hosts[r], row["iteration"]]
                 + [row.get(f) for f in ITER_FIELDS] for r, rs in rows.items() for row in rs]
    return summary, kind_rows, iter_rows
