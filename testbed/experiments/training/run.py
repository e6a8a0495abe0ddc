"""The training experiment's runner: real Gloo workers, one process per emulated host,
whose gradient exchange crosses the fabric. One fabric per (topology, link rate); the jobs
run one after the other in it, each beside the background traffic the spec asks for."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from controllers.recovery import degraded
from testbed.config.faults import FabricFault, describe_steps, fault_ports
from testbed.core.errors import TestbedError
from testbed.workloads.launch import train_argv
from testbed.workloads.model.flows import assign_ports, sent_mbps
from topologies.graph import distances_to
from topologies.model import Topology, at_rate, ifname

from ..base import Context, Outcome, Phase, slug
from ..qos_common import switch_slots
from .analysis import ITER_FIELDS, fault_spike, queue_stats, read_records, summarise
from .model import (
    Placement,
    host_link,
    ingress_spread,
    job_with,
    place,
    ring_link_load,
    training_qos,
)
from .spec import BackgroundTraffic, Training, TrainingJob, training_topologies

MASTER_PORT = 29500
CLIENT_GRACE_S = 5.0  # for a background iperf3 client to end after its server


class Background:
    """The experiment's background traffic, running until stopped."""

    def __init__(self, fab: Phase, specs: list[BackgroundTraffic], log_dir: Path,
                 seconds: float):
        self.fab, self.specs, self.log_dir, self.seconds = fab, specs, log_dir, seconds
        self.procs: list[subprocess.Popen] = []
        self.servers: list[subprocess.Popen] = []  # iperf3 servers, stopped first
        self.clients: list[tuple[Path, str, subprocess.Popen]] = []
        self.lost: list[str] = []  # flows whose client left no report

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        topo = self.fab.topo
        port = 5301
        for b, bg in enumerate(self.specs):
            if bg.kind == "incast":
                reader, servers = bg.hosts[0], bg.hosts[1:]
                for s in servers:
                    self.procs.append(self.fab.start_process(
                        s, [sys.executable, "-m", "testbed.workloads.incast", "serve",
                                      "--port", str(port), "--dscp", str(bg.dscp)],
                        f"background incast server {s}", self.log_dir / f"bg{b}-{s}.log"))
                self.fab.wait_listening([(s, port) for s in servers])
                addrs = ",".join(f"{topo.host(s).ip}:{port}" for s in servers)
                self.procs.append(self.fab.start_process(
                    reader, [sys.executable, "-m", "testbed.workloads.incast", "read",
                                       "--servers", addrs, "--block-bytes", str(bg.block_bytes),
                                       "--rounds", "1000000", "--dscp", str(bg.dscp)],
                    f"background incast reader {reader}", self.log_dir / f"bg{b}-reader.log"))
                port += 1
                continue
            pairs = [tuple(bg.hosts)] if bg.kind == "iperf" else \
                [(a, c) for a in bg.hosts for c in bg.hosts if a != c]
            flows = [dataclasses.replace(f, port=f.port + port - 5201, dscp=bg.dscp,
                                         udp_mbps=bg.udp_mbps, omit_s=0)
                     for f in assign_ports(pairs, self.seconds, 0)]
            port = max(f.port for f in flows) + 1
            for i, f in enumerate(flows):
                self.servers.append(self.fab.start_process(
                    f.dst, ["iperf3", "-s", "-1", "-p", str(f.port)],
                    f"background iperf3 server {f.dst}", self.log_dir / f"bg{b}-{i}-server.log"))
                self.procs.append(self.servers[-1])
            self.fab.wait_listening([(f.dst, f.port) for f in flows])
            for i, f in enumerate(flows):
                log = self.log_dir / f"bg{b}-{i}-client.json"
                self.procs.append(self.fab.start_process(
                    f.src, ["iperf3", "-c", topo.host(f.dst).ip, "-p", str(f.port),
                                      "-J", *f.client_args()],
                    f"background iperf3 {f.src}->{f.dst}", log))
                self.clients.append((log, f"{f.src}->{f.dst}", self.procs[-1]))

    def stop(self) -> float | None:
        """Stops everything; returns the background flows' total sending rate (Mb/s, over
        their whole life), None without flows or when a client left no report (`lost`).

        The iperf3 servers go first: a server stopped by SIGTERM tells its client over the
        control connection, and the client ends by itself with its report. The client is
        not signalled unless it outlives CLIENT_GRACE_S: iperf3 (3.12) leaves its SIGTERM
        handler by longjmp and then builds its JSON with malloc, so a signal that lands
        inside malloc corrupts the heap and glibc aborts before the report is written (1 in
        150 signalled clients on loopback; a CI run lost its background rate to it)."""
        self.fab.stop_processes(self.servers)
        deadline = time.time() + CLIENT_GRACE_S
        for _, _, proc in self.clients:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass  # signalled below
        self.fab.stop_processes(self.procs)
        if not self.clients:
            return None
        rates = {}
        for log, flow, _ in self.clients:
            try:
                rates[flow] = sent_mbps(log.read_text(errors="replace"))
            except OSError:
                rates[flow] = None
        self.lost = [flow for flow, rate in rates.items() if rate is None]
        if self.lost:
            return None
        return round(sum(r for r in rates.values() if r is not None), 3)


def run_processes(fab: Phase, placement: Placement, job_dir: Path,
                  argv_of: Callable[[int, str], list[str]], timeout_s: float,
                  label: str) -> dict:
    """Start every rank in its host; fail fast when one dies (its error in the message,
    which `label` starts, the others stopped). Returns the machine's peak memory in use
    while the job ran."""
    procs: list[tuple[int, str, subprocess.Popen]] = []
    mem_low = _mem_available()
    try:
        for rank, host, role in placement.ranks:
            procs.append((rank, host, fab.start_process(host, argv_of(rank, host),
                                                    f"training {role} rank {rank} in {host}",
                                                    job_dir / f"rank{rank}.log")))
        deadline = time.time() + timeout_s
        failed_at: float | None = None
        while True:
            mem_low = min(mem_low, _mem_available())
            codes = [(rank, host, p.poll()) for rank, host, p in procs]
            failed = [(rank, host, c) for rank, host, c in codes if c not in (None, 0)]
            if failed:
                failed_at = failed_at or time.time()
                if not settled([failure_key(job_dir, r)[0] for r, _, _ in failed],
                               any(c is None for _, _, c in codes), time.time() - failed_at):
                    time.sleep(0.1)
                    continue
                first = first_failed(job_dir, [r for r, _, _ in failed])
                rank, host, code = next(f for f in failed if f[0] == first)
                why = rank_failure(job_dir, rank)
                raise TestbedError(f"{label}: rank {rank} in {host} failed "
                                   f"(exit {code}): {why}")
            if all(c == 0 for _, _, c in codes):
                break
            if time.time() > deadline:
                raise TestbedError(f"{label}: not finished after {timeout_s:.0f} s "
                                   "(job_timeout_s)")
            time.sleep(0.3)
    finally:
        fab.stop_processes([p for _, _, p in procs])
    return {"mem_used_peak_gb": round((_mem_total() - mem_low) / 2**30, 2)}


# what a rank says when a peer's exit broke its connections: the peer's failure, not its own
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def failure_key(job_dir: Path, rank: int) -> tuple[bool, float, int]:
    """Orders failed ranks by how likely each is the cause: a failure of its own (a crash,
    a timeout) before one that only says a peer went away, then by when its error file was
    written (a rank killed without writing one, after those that did, before those that
    only say a peer went away). When a partition makes one rank time out, Gloo closes its
    connections at once and the ranks beside it fail with "connection closed by peer"
    within milliseconds, their error files sometimes written first."""
    err = job_dir / f"rank{rank}.error"
    text = err.read_text(errors="replace") if err.exists() else ""
    return (any(p in text for p in PEER_GONE), error_time(job_dir, rank), rank)


FAILURE_GRACE_S = 2.0  # how long ranks that only say a peer went away wait for the peer's exit


def settled(peer_gone: list[bool], running: bool, waited_s: float) -> bool:
    """Whether the failed ranks (`peer_gone`: each only says a peer went away) can be told
    apart now: one failed by its own fault, or none is still running, or FAILURE_GRACE_S
    has passed since the first failure. Under a partition a rank's "closed by peer" can end
    its process before the rank that timed out has ended its own (seen in CI: the job was
    named after the neighbour)."""
    return not all(peer_gone) or not running or waited_s >= FAILURE_GRACE_S


def first_failed(job_dir: Path, ranks: list[int]) -> int:
    """Of ranks that have exited with an error, the one that failed first by its own fault
    (`failure_key`). A crashed rank's peers fail after it ("connection closed by peer");
    when one look at the processes finds them all dead, the rank number must not decide
    which is named."""
    return min(ranks, key=lambda rank: failure_key(job_dir, rank))


def error_time(job_dir: Path, rank: int) -> float:
    """When a rank wrote its error file (infinity: it wrote none)."""
    err = job_dir / f"rank{rank}.error"
    return err.stat().st_mtime if err.exists() else float("inf")


def rank_failure(job_dir: Path, rank: int) -> str:
    """Why a rank failed: its error file (the worker's own account), else its log's end."""
    err = job_dir / f"rank{rank}.error"
    if err.exists():
        return err.read_text().strip()
    return (job_dir / f"rank{rank}.log").read_text(errors="replace").strip()[-600:]


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
    opts = dict(sync=job.sync, model=exp.model, width=exp.width, depth=exp.depth,
                data=exp.data, iters=exp.iters, batch=exp.batch, lr=exp.lr,
                bucket_mb=job.bucket_mb, compression=job.compression,
                topk_ratio=job.topk_ratio, qsgd_levels=job.qsgd_levels, ps_shards=job.ps_shards,
                consistency=job.consistency, staleness=job.staleness,
                local_steps=job.local_steps, eval_every=exp.eval_every or exp.iters,
                seed=exp.seed, timeout_s=exp.timeout_s)
    if job.priority != "none":
        opts.update(priority=job.priority,
                    dscp=",".join(str(d) for d in (exp.p3_dscp if job.priority == "p3"
                                                   else [0])))

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
    measured: dict = {"hosts_relay": any(h.relay for h in topo.hosts)}  # + background rate
    first_worker = job_dir / f"rank{len(placement.servers)}.jsonl"
    with ctx.traffic_phase(fab, outcome, label) as checks, \
            ctx.faults(fab, exp.faults, label, lambda: _lines(first_worker)) as steps:
        checks["faults"] = steps
        background.start()
        sampler.start()
        try:
            with fab.writing_in(job_dir, [h for _, h, _ in placement.ranks]):
                measured.update(run_processes(fab, placement, job_dir, argv_of,
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


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    return _meminfo("MemAvailable")


def _mem_total() -> int:
    return _meminfo("MemTotal")
