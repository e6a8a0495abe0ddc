"""The training experiment's result analysis, pure: one summary row per job from its
ranks' per-iteration records, beside the model, and what a failure did to it (the records
and the switch queues are read as every trainer experiment reads them:
testbed/experiments/trainers/analysis.py)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from testbed.config.units import tcp_payload_fraction
from testbed.results.stats import median_or_none
from testbed.workloads.commsched import scaled_bytes
from testbed.workloads.largebatch import train_samples
from testbed.workloads.staleness import expected_weight

from ..trainers.analysis import read_records
from ..trainers.model import cpu_bound_verdict
from .model import RankPlacement, job_with, predict
from .spec import Training, TrainingJob, job_batch, job_iters, job_schedule

ITER_FIELDS = ["iter_s", "compute_s", "comm_s", "comm_exposed_s", "cpu_wait_s", "cpu_s",
               "tx_bytes", "rx_bytes", "payload_bytes", "loss", "train_acc", "test_acc"]


def summarise(exp: Training, job: TrainingJob, n: int, placement: RankPlacement, job_dir: Path,
              fabric_label: str, rates: tuple[float, float], mtu: int, rtt: float | None,
              queue: dict, measured: dict, checks: dict,
              experiment: int) -> tuple[dict, list[list]]:
    """One row for the job (medians over workers and iterations after the warm-up, the
    model's prediction beside them) and the per-iteration rows of every rank."""
    first = len(placement.servers)
    per_rank = {r: read_records(job_dir / f"rank{r}.jsonl") for r, _, _ in placement.ranks}
    workers = [per_rank[r] for r in range(first, first + n)]
    steady = [row for rows in workers for row in rows[exp.warmup_iters:]]
    if job.sync == "local":  # communication happens on synchronising iterations only
        synced = [row for row in steady if row.get("synchronised")]
    else:
        synced = steady
    grad_bytes = workers[0][0]["grad_bytes"]
    payload = median_or_none([row.get("payload_bytes", grad_bytes) for row in steady]) or grad_bytes
    messages = median_or_none([row["messages"] for row in synced]) or 1
    rate_mbps, server_rate_mbps = rates
    # ring flows that share a link (ring_link_load > 1) share its rate
    load = measured.get("ring_link_load") or 1
    bandwidth = rate_mbps * 1e6 * tcp_payload_fraction(mtu) / load
    latency = (rtt or 0.0) / 2
    model_s, expected_payload = predict(job, n, grad_bytes, payload, messages, bandwidth,
                                        latency, server_rate_mbps * 1e6 * tcp_payload_fraction(mtu))
    comm = median_or_none([row["comm_s"] for row in synced])
    iter_s = median_or_none([row["iter_s"] for row in steady])
    per_worker = sorted(median_or_none([row["iter_s"] for row in rows[exp.warmup_iters:]]) or 0
                        for rows in workers)
    first_t = [rows[0]["t_end"] - rows[0]["iter_s"] for rows in workers if rows and "t_end" in rows[0]]
    last_t = [rows[-1]["t_end"] for rows in workers if rows and "t_end" in rows[-1]]
    # the mean: with colocated shards, a shard's host sends more than the other hosts
    tx = statistics.mean(row["tx_bytes"] for row in synced) if synced else None
    # how busy the busiest worker link was while the job communicated: near 1 when the
    # network is the bottleneck; well below 1 when something else (CPU, latency) is.
    # The PS's bottleneck is the server's link, which this does not see.
    link_busy = (tx * 8 * load / (comm * rate_mbps * 1e6)
                 if job.sync != "ps" and tx and comm else None)
    # CPU contention: how long a worker's threads waited for a core per iteration (the
    # worker with the most waiting; everyone waits for the slowest in a synchronous job)
    waits = [median_or_none([row["cpu_wait_s"] for row in rows[exp.warmup_iters:]
                      if "cpu_wait_s" in row]) for rows in workers]
    wait = max((w for w in waits if w is not None), default=None)
    wait_share = wait / iter_s if wait is not None and iter_s else None
    per_sync_iters = job.local_steps if job.sync == "local" else 1
    iters = job_iters(exp, job, n)
    lr, scale, warmup = job_schedule(exp, job, n)
    last = [rows[-1] for rows in workers if rows]
    accs = [row["test_acc"] for row in last if "test_acc" in row]
    servers = [per_rank[r] for r in range(first)]
    peaks = [json.loads((job_dir / f"rank{r}.summary.json").read_text())["peak_rss_mb"]
             for r, _, _ in placement.ranks if (job_dir / f"rank{r}.summary.json").exists()]
    cpu = checks["cpu"]
    summary = {
        "experiment": experiment, "fabric": fabric_label, "job": job_with(job, n).label(),
        "sync": job.sync, "workers": n,
        "ps_shards": job.ps_shards if job.sync == "ps" else 0,
        "ps_placement": job.ps_placement if job.sync == "ps" else "",
        "consistency": job.consistency if job.sync == "ps" else "",
        "compression": job.compression, "priority": job.priority,
        "background": "+".join(b.kind for b in exp.background),
        "straggler": (f"worker{exp.straggler.worker}@{exp.straggler.rate_mbps or ''}Mbps"
                      f"+{exp.straggler.compute_delay_ms:g}ms") if exp.straggler else "",
        "host_rate_mbps": rate_mbps, "server_rate_mbps": server_rate_mbps if
        placement.servers else None, "rtt_ms": round(rtt * 1000, 3) if rtt else None,
        "model": exp.model, "grad_bytes": grad_bytes, "payload_bytes": round(payload),
        "messages": messages, "iterations": iters,
        "optimizer": job.optimizer, "batch_per_worker": job_batch(exp, job),
        "global_batch": job_batch(exp, job) * n,
        "epochs": round(iters * job_batch(exp, job) * n / train_samples(exp.data), 3),
        "lr": lr, "lr_peak": round(lr * scale, 6), "warmup_iterations": warmup,
        "sync_rounds": -(-iters // per_sync_iters),
        **fusion_summary(job, steady),
        **schedule_summary(job, steady, rate_mbps),
        "iter_s_median": round(iter_s, 4) if iter_s else None,
        "iter_s_fastest_worker": round(per_worker[0], 4),
        "iter_s_slowest_worker": round(per_worker[-1], 4),
        "job_s": round(max(last_t) - min(first_t), 3) if first_t and last_t else None,
        "comm_s_median": round(comm, 4) if comm is not None else None,
        "model_comm_s": round(model_s, 4),
        "comm_over_model": round(comm / model_s, 3) if comm and model_s else None,
        "tx_bytes_per_sync": round(tx) if tx is not None else None,
        "expected_wire_bytes_per_sync": round(expected_payload / tcp_payload_fraction(mtu)),
        "tx_over_expected": round(tx / (expected_payload / tcp_payload_fraction(mtu)), 3)
        if tx and expected_payload else None,
        "link_busy_in_comm": round(link_busy, 3) if link_busy is not None else None,
        "iterations_per_sync": per_sync_iters,
        "final_loss": round(statistics.mean(row["loss"] for row in last), 4) if last else None,
        "test_acc": round(statistics.mean(accs), 4) if accs else None,
        "max_staleness": max((row["staleness"] for rows in servers for row in rows),
                             default=None),
        "max_reply_lead": max((lead for rows in servers for row in rows
                               for lead in row["replied"].values()), default=None),
        **staleness_summary(exp, job, n, first, servers, workers, per_worker),
        **queue,
        "peak_rss_mb_max": max(peaks, default=None),
        "peak_rss_mb_sum": round(sum(peaks), 1), **measured,
        "machine_idle_mean": cpu["machine_idle_mean"], "machine_idle_min": cpu["machine_idle_min"],
        "ovs_added_delay_p50_ms": cpu["ovs_added_delay_p50_ms"],
        "worker_cpu_wait_s": round(wait, 4) if wait is not None else None,
        "worker_cpu_wait_share": round(wait_share, 3) if wait_share is not None else None,
        "cpu_bound": cpu_bound_verdict(cpu["cpu_bound"], wait_share, link_busy),

        "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
    }
    iter_rows = []
    for r, host, role in placement.ranks:
        for row in per_rank[r]:
            if role == "server":
                continue
            iter_rows.append([experiment, fabric_label, summary["job"], r, host,
                              row["iteration"]]
                             + [row.get(f) for f in ITER_FIELDS])
    return summary, iter_rows


def fusion_summary(job: TrainingJob, steady: list[dict]) -> dict:
    """A job whose messages fusionsync.py made: its messages and their overlap with
    backward beside the model's (workloads/fusion.py), medians over the planned iterations
    after the warm-up."""
    if job.fusion == "ddp":
        return {"fusion": "ddp"}
    rows = [row for row in steady if row.get("planned", True)]

    def med(key: str) -> float | None:
        value = median_or_none([row[key] for row in rows if row.get(key) is not None])
        return round(value, 6) if value is not None else None
    synced, model = med("synced_s"), med("model_synced_s")
    sizes = rows[-1]["message_bytes"] if rows else []
    return {"fusion": job.fusion, "backward_s_median": med("backward_s"),
            "synced_s_median": synced, "model_synced_s_median": model,
            "synced_over_model": round(synced / model, 3) if synced and model else None,
            "model_messages": med("model_messages"), "negotiations": med("negotiations"),
            "message_bytes": " ".join(str(b) for b in sizes),
            "comm_a_ms": round(rows[-1]["comm_a_s"] * 1000, 4) if rows else None,
            "comm_b_us_per_kb": round(rows[-1]["comm_b_s_per_byte"] * 1e9, 4)
            if rows else None}


def staleness_summary(exp: Training, job: TrainingJob, n: int, first: int,
                      servers: list[list[dict]], workers: list[list[dict]],
                      per_worker: list[float]) -> dict:
    """A parameter server's push weights (workloads/staleness.py): their mean, and the
    straggler's beside what its slowdown predicts: its median iteration over the fastest
    worker's (`per_worker`, sorted)."""
    if job.sync != "ps" or job.consistency == "bsp":
        return {}
    pushes = [row for rows in servers for row in rows if "weight" in row]
    out: dict = {"lr_staleness": job.lr_staleness,
                 "push_weight_mean": round(statistics.mean(r["weight"] for r in pushes), 3)
                 if pushes else None}
    slow_s = median_or_none([row["iter_s"] for row in
                             workers[exp.straggler.worker][exp.warmup_iters:]]) \
        if exp.straggler and exp.straggler.worker < len(workers) else None
    if exp.straggler and pushes and slow_s and per_worker and per_worker[0] > 0:
        slow = first + exp.straggler.worker
        mine = [r["weight"] for r in pushes if r["worker"] == slow]
        out.update(straggler_weight_mean=round(statistics.mean(mine), 3) if mine else None,
                   expected_straggler_weight=round(expected_weight(
                       n, slow_s / per_worker[0], job_iters(exp, job, n)), 3)
                   if job.lr_staleness != "none" else 1.0)
    return out


def schedule_summary(job: TrainingJob, steady: list[dict], rate_mbps: float) -> dict:
    """A layer-wise job beside the model of its schedule (workloads/commsched.py): medians
    over the iterations after the warm-up; a scheduler's negotiation rounds and pieces."""
    if job.priority == "none":
        return {}
    out: dict = {"forward_ms": job.forward_ms}
    if job.priority == "bytescheduler":
        out.update(partition_params=job.partition_params, credit_params=job.credit_params,
                   partition_bytes=scaled_bytes(job.partition_params, rate_mbps),
                   credit_bytes=scaled_bytes(job.credit_params, rate_mbps))
    if job.priority in ("tictac", "bytescheduler"):
        rounds = median_or_none([row["negotiations"] for row in steady])
        took = median_or_none([row["negotiation_s"] for row in steady])
        out.update(pieces=steady[-1]["pieces"] if steady else None,
                   negotiations=rounds, negotiation_ms=round(took * 1000, 3)
                   if took is not None else None)
    iters = [row["iter_s"] for row in steady if row.get("model_iter_s") is not None]
    model = median_or_none([row["model_iter_s"] for row in steady
                            if row.get("model_iter_s") is not None])
    if model and iters:
        out.update(model_iter_s=round(model, 4),
                   iter_over_model_iter=round(statistics.median(iters) / model, 3),
                   comm_a_ms=round(steady[-1]["comm_a_s"] * 1000, 4),
                   comm_b_us_per_kb=round(steady[-1]["comm_b_s_per_byte"] * 1e9, 4))
    return out


def fault_spike(workers: list[list[dict]], down_times: list[float],
                warmup: int) -> dict | None:
    """What the first failure did to a synchronous job: the iteration it struck (the first
    to end after it; iterations end together, so the latest worker's end counts), the
    longest that iteration or the next took on any worker, and that over the median of
    the other iterations after the warm-up (the spike). None without a failure or rows."""
    n = min((len(rows) for rows in workers), default=0)
    if not down_times or n == 0:
        return None
    t = min(down_times)
    ends = [max(rows[i]["t_end"] for rows in workers) for i in range(n)]
    took = [max(rows[i]["iter_s"] for rows in workers) for i in range(n)]
    struck = next((i for i in range(n) if ends[i] > t), None)
    if struck is None:
        return None
    hit = [i for i in (struck, struck + 1) if i < n]
    rest = [took[i] for i in range(warmup, n) if i not in hit]
    steady = statistics.median(rest) if rest else None
    worst = max(took[i] for i in hit)
    return {"fault_iteration": struck, "fault_iter_s": round(worst, 4),
            "steady_iter_s": round(steady, 4) if steady else None,
            "fault_spike": round(worst / steady, 2) if steady else None}
