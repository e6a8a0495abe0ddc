"""The training experiment's runner: real Gloo workers, one process per emulated host,
whose gradient exchange crosses the fabric. One fabric per (topology, link rate); the jobs
run one after the other in it, each beside the background traffic the spec asks for."""
from __future__ import annotations

import time
from pathlib import Path

from controllers.recovery import degraded
from testbed.config.faults import FabricFault, describe_steps, fault_ports
from testbed.core.errors import TestbedError
from testbed.workloads.commsched import scaled_bytes
from testbed.workloads.launch import train_argv
from topologies.graph import distances_to
from topologies.model import Topology, at_rate, ifname

from ..base import Context, Outcome, Phase, slug
from ..qos_common import switch_slots
from ..trainers.analysis import queue_stats, read_records
from ..trainers.background import Background
from ..trainers.model import host_link
from ..trainers.ranks import run_processes
from .analysis import ITER_FIELDS, fault_spike, summarise
from .model import (
    ingress_spread,
    job_with,
    place,
    ring_link_load,
    training_qos,
)
from .spec import (
    Training,
    TrainingJob,
    job_batch,
    job_iters,
    job_schedule,
    training_topologies,
)

MASTER_PORT = 29500


def run_job(ctx: Context, fab: Phase, exp: Training, job: TrainingJob, n: int, index: int,
            fabric_label: str, outcome: Outcome, experiment: int = 0) -> tuple[dict, list[list]]:
    topo = fab.topo
    placement = place(topo, job, n)
    label = f"{fabric_label} {job_with(job, n).label()}"
    job_dir = ctx.out_dir / "training" / ctx.raw_name(f"{index:02d}-{slug(label)}")  # unique
    job_dir.mkdir(parents=True, exist_ok=True)
    master = f"{topo.host(placement.ranks[0][1]).ip}:{MASTER_PORT + index}"
    world = len(placement.ranks)
    straggler = exp.straggler
    slow_rank = len(placement.servers) + straggler.worker if straggler else None
    iters = job_iters(exp, job, n)
    lr, lr_scale, warmup_iters = job_schedule(exp, job, n)
    job_rate = min(host_link(topo, h).rate_mbps for h in placement.workers)
    opts = dict(sync=job.sync, model=exp.model, width=exp.width, depth=exp.depth,
                data=exp.data, iters=iters, batch=job_batch(exp, job), lr=lr,
                lr_scale=lr_scale, warmup_iters=warmup_iters, optimizer=job.optimizer,
                bucket_mb=job.bucket_mb, compression=job.compression,
                topk_ratio=job.topk_ratio, qsgd_levels=job.qsgd_levels,
                terngrad_clip=job.terngrad_clip, ps_shards=job.ps_shards,
                consistency=job.consistency, staleness=job.staleness,
                lr_staleness=job.lr_staleness,
                local_steps=job.local_steps, eval_every=exp.eval_every or iters,
                seed=exp.seed, timeout_s=exp.timeout_s)
    if job.weight_decay is not None:
        opts["weight_decay"] = job.weight_decay
    if job.fusion != "ddp":
        opts.update(fusion=job.fusion, fusion_threshold_mb=job.fusion_threshold_mb,
                    cycle_ms=job.cycle_ms)
    if job.priority != "none":
        # P3: its levels; FIFO: best effort; a scheduler: its negotiation in the highest
        # class (a few bytes a round, which at the papers' rates wait microseconds in a
        # queue), its gradients in best effort
        dscps = {"p3": exp.p3_dscp, "fifo": [0]}.get(job.priority, [exp.p3_dscp[0], 0])
        opts.update(priority=job.priority, dscp=",".join(str(d) for d in dscps),
                    forward_ms=job.forward_ms, cycle_ms=job.cycle_ms)
        if job.priority == "bytescheduler":
            opts.update(partition_bytes=scaled_bytes(job.partition_params, job_rate),
                        credit_bytes=scaled_bytes(job.credit_params, job_rate))

    def argv_of(rank: int, host: str) -> list[str]:
        extra = dict(opts)
        if straggler and rank == slow_rank and straggler.compute_delay_ms:
            extra["compute_delay_ms"] = straggler.compute_delay_ms
        if exp.fault and rank == len(placement.servers) + exp.fault.worker:
            extra["crash_at_iter"] = exp.fault.at_iter
        return train_argv(rank, world, master, job_dir, ifname(host, 0), **extra)

    rtt = fab.ping_rtt_s(placement.workers[0], placement.ranks[-1][1]
                         if world > 1 else placement.workers[0])
    sink = placement.servers[0] if placement.servers else placement.workers[0]
    _, sw, sw_port = topo.ports_of(sink)[0]
    toward_sink = ifname(sw, sw_port)
    dp = fab.dataplane()  # every switch queue, from the BPF counters in shared memory
    sampler = ctx.class_sampler(dp, switch_slots(dp), exp.sample_hz)
    background = Background(fab, exp.background, job_dir / "background", exp.job_timeout_s)
    ctx.log(f"  {label}: {world} processes ({len(placement.servers)} servers) on "
            f"{', '.join(h for _, h, _ in placement.ranks)}")
    # a BCube host relays other hosts' packets: its interface counters include them
    measured: dict = {"hosts_relay": topo.relays}  # + background rate
    first_worker = job_dir / f"rank{len(placement.servers)}.jsonl"
    with ctx.traffic_phase(fab, outcome, label) as checks, \
            ctx.faults(fab, exp.faults, label, lambda: _lines(first_worker)) as steps:
        checks["faults"] = steps
        background.start()
        sampler.start()
        try:
            with fab.writing_in(job_dir, [h for _, h, _ in placement.ranks]):
                measured.update(run_processes(fab, placement.ranks, job_dir, argv_of,
                                              exp.job_timeout_s, f"training {label}"))
        except TestbedError as exc:
            if not steps:
                raise
            hosts = [h for _, h, _ in placement.ranks]
            after = time.time() - steps[0]["time"]
            raise TestbedError(f"training {label}: {fault_context(topo, exp.faults, steps, hosts)}"
                               f"; the job failed {after:.1f} s after the first fault "
                               f"(timeout_s {exp.timeout_s:g}): {exc}") from None
        finally:
            sampler.stop()
            measured["background_sent_mbps"] = background.stop()
            if background.lost:
                ctx.log(f"  {label}: background rate unknown, no report from "
                        f"{', '.join(background.lost)} (see {job_dir / 'background'})")
    names = {p["id"]: p["ifname"] for p in dp.ports}
    dp.close()
    queue = queue_stats(sampler.samples, names, toward_sink, sampler.achieved_rate_hz())
    rate = min(host_link(topo, h).rate_mbps for h in placement.workers)
    # a server's ingress: its link, or several of them on a multi-port (BCube) server
    hosts = [h for _, h, _ in placement.ranks]
    server_rate = min((host_link(topo, h).rate_mbps * ingress_spread(topo, h, hosts)
                       for h in placement.servers), default=rate)
    # ring flows that share a link share its rate (None for a parameter server)
    measured["ring_link_load"] = (round(ring_link_load(topo, placement.workers, fab.routing), 3)
                                  if job.sync != "ps" else None)
    summary, iter_rows = summarise(exp, job, n, placement, job_dir, fabric_label,
                                   (rate, server_rate), fab.links.mtu_bytes, rtt,
                                   queue, measured, checks, experiment)
    if exp.faults:
        first = len(placement.servers)
        workers = [read_records(job_dir / f"rank{r}.jsonl") for r in range(first, first + n)]
        summary["faults"] = describe_steps(steps)
        # the job's own connections on the failed ports just before the failure
        ips = {topo.host(h).ip for _, h, _ in placement.ranks}
        summary["fault_on_job_path"] = any(c[0] in ips and c[1] in ips for s in steps
                                           for c in s.get("connections_seen", []))
        summary.update(fault_spike(workers, [s["time"] for s in steps if s["action"] == "down"],
                                   exp.warmup_iters) or {})
    share = summary["worker_cpu_wait_share"]
    if summary["cpu_bound"] and not checks["cpu"]["cpu_bound"]:
        outcome.warnings.append(
            f"{label}: CPU-bound (a worker waited {summary['worker_cpu_wait_s'] * 1000:.0f} ms "
            f"for a core per iteration, {share:.0%} of it); its iteration time is not the "
            "network's")
    return summary, iter_rows


def _lines(path: Path) -> int:
    """How many iterations a rank has logged (one line each; 0 before its file exists)."""
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def fault_context(topo: Topology, faults: list[FabricFault], steps: list[dict],
                  hosts: list[str]) -> str:
    """What the faults had done when a job failed: each executed step, and which faults
    leave a job host with no path to the first (a partition no routing can repair)."""
    what = describe_steps(steps, ", ")
    cut = []
    for fault in faults:
        reach = distances_to(degraded(topo, fault_ports(fault, topo)), hosts[0])
        lost = [h for h in hosts[1:] if h not in reach]
        if lost:
            cut.append(f"{fault.target()} down leaves {', '.join(lost)} with no path to "
                       f"{hosts[0]}")
    if cut:
        return f"a fault partitioned the job ({'; '.join(cut)}; faults: {what})"
    return f"the job failed under faults it could have survived (faults: {what})"


def run(ctx: Context, exp: Training) -> Outcome:
    out = Outcome()
    experiment = ctx.experiment or 0  # the spec index, which its rows carry
    rows, iter_rows = [], []
    qos = training_qos(exp, ctx.spec.qos, ctx.spec.links.buffer_pkts)
    routing = ctx.spec.controller.routing
    index = 0
    for topo in training_topologies(exp, ctx.topo):
        for rate in exp.rates_mbps or [None]:
            jobs = [(job, n) for job in exp.jobs for n in (exp.workers or [job.workers])]
            # a straggler's link is slowed on the host of that worker of the first job
            slow_host = None
            if exp.straggler and exp.straggler.rate_mbps:
                job0, n0 = jobs[0]
                slow_host = place(topo, job0, n0).workers[exp.straggler.worker]
                for job, n in jobs:
                    if place(topo, job, n).workers[exp.straggler.worker] != slow_host:
                        raise TestbedError("training: the straggler's host must be the same "
                                           "in every job; list jobs with equal placements")
            fabric = at_rate(topo, rate, slow_host, exp.straggler.rate_mbps
                             if exp.straggler else None)
            fabric_label = f"{topo.kind}" + (f"@{rate:g}Mbps" if rate else "")
            with ctx.fabric(fabric, routing, f"training {fabric_label}", qos=qos,
                            rate_mbps=None) as fab:
                for job, n in jobs:
                    summary, its = run_job(ctx, fab, exp, job, n, index, fabric_label, out,
                                           experiment)
                    index += 1
                    rows.append(summary)
                    iter_rows += its
                    ctx.log(f"    iteration {summary['iter_s_median']} s, communication "
                            f"{summary['comm_s_median']} s (model {summary['model_comm_s']} s,"
                            f" x{summary['comm_over_model']}), test accuracy "
                            f"{summary['test_acc']}, machine idle "
                            f"{summary['machine_idle_mean']:.0%}, workers waited for a core "
                            f"{summary['worker_cpu_wait_share'] or 0:.0%} of an iteration")
    # a spec may hold several training experiments: their rows follow each other (the
    # results writer appends)
    header = list(dict.fromkeys(k for r in rows for k in r))  # every job's fields, in order
    ctx.write_csv("training.csv", header, [[r.get(k) for k in header] for r in rows])
    ctx.write_csv("training_iterations.csv",
                  ["experiment", "fabric", "job", "rank", "host", "iteration"] + ITER_FIELDS,
                  iter_rows)
    out.headline = {"jobs": len(rows), "results": [
        {k: r[k] for k in ("fabric", "job", "iter_s_median", "comm_s_median", "model_comm_s",
                           "comm_over_model", "test_acc", "cpu_bound")} for r in rows]}
    return out
