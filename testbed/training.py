"""The training experiment (issue 4): real Gloo workers, one process per emulated host, whose
gradient exchange crosses the fabric. One fabric per (topology, link rate); the jobs run one
after the other in it. Every job's communication time is put next to the analytical model's
(testbed/workloads/commmodel.py) and its CPU headroom is measured, because a CPU-bound
emulation does not give faithful numbers.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import subprocess
import time
from pathlib import Path

from topologies.graph import distances_to, shortest_paths
from topologies.model import Topology, at_rate, ifname

from .phases import Outcome, _traffic_phase, tcp_payload_fraction
from .qos import QosConfig, TrafficClass
from .spec import Training, TrainingJob, training_topologies
from .system import TestbedError, in_netns
from .traffic import assign_ports, start_in_host, stop_and_reap, wait_listening
from .workloads import commmodel
from .workloads.launch import train_argv

MASTER_PORT = 29500
ITER_FIELDS = ["iter_s", "compute_s", "comm_s", "comm_exposed_s", "cpu_wait_s", "tx_bytes",
               "rx_bytes", "payload_bytes", "loss", "train_acc", "test_acc"]


# A job is CPU-bound (its iteration time measures the 2-core machine, not the network) when
# a worker waited for a core more than this share of an iteration AND the network was not
# the bottleneck: its busiest link was busy less than LINK_BUSY_BOTTLENECK of the
# communication time (unknown for a parameter server: the wait decides alone). The wait is
# summed over the worker's threads (the trainer's and Gloo's), so it can exceed 100%.
# Measured: ring jobs with <= 8% wait matched the model within 4%; 16 workers waiting 13%
# took 1.8x the model with their links idle most of the time; P3 jobs waited 10-18% (more
# threads) with their links 95-99% busy, within 1.1x of the model.
CPU_WAIT_SHARE_LIMIT = 0.1
LINK_BUSY_BOTTLENECK = 0.8


def cpu_bound_verdict(monitor_says: bool, wait_share: float | None,
                      link_busy: float | None) -> bool:
    """The machine's verdict (OVS fell behind, under 10% idle) or the workers' (above)."""
    waited = (wait_share or 0) > CPU_WAIT_SHARE_LIMIT
    network_bound = link_busy is not None and link_busy >= LINK_BUSY_BOTTLENECK
    return bool(monitor_says or (waited and not network_bound))


# ---- placement and fabric ------------------------------------------------------------------

def spread(hosts: list[str], k: int) -> list[str]:
    """k hosts spread evenly over the list (so that jobs cross the fabric, not one edge)."""
    n = len(hosts)
    return [hosts[i * n // k] for i in range(k)]


@dataclasses.dataclass(frozen=True)
class Placement:
    servers: list[str]   # host of each server rank (PS), ranks 0..S-1
    workers: list[str]   # host of each worker, ranks after the servers

    @property
    def ranks(self) -> list[tuple[int, str, str]]:
        """(rank, host, role) in rank order."""
        return ([(r, h, "server") for r, h in enumerate(self.servers)]
                + [(len(self.servers) + i, h, "worker") for i, h in enumerate(self.workers)])


def place(topo: Topology, job: TrainingJob, n: int) -> Placement:
    hosts = [h.name for h in topo.hosts]
    if job.sync != "ps":
        return Placement([], spread(hosts, n))
    if job.ps_placement == "colocated":
        workers = spread(hosts, n)
        return Placement(workers[:job.ps_shards], workers)
    chosen = spread(hosts, n + job.ps_shards)
    # servers every (n + S) / S slots, so that shards sit in different parts of the fabric
    step = len(chosen) // job.ps_shards
    servers = [chosen[j * step] for j in range(job.ps_shards)]
    return Placement(servers, [h for h in chosen if h not in servers])


def host_link(topo: Topology, host: str):
    port, _, _ = topo.ports_of(host)[0]
    return topo.link_at(host, port)


def ingress_spread(topo: Topology, host: str, senders: list[str]) -> float:
    """How many of `host`'s links the traffic from `senders` arrives on, as a capacity factor
    (1.0 for a single-port host). A BCube server has one port per level: a sender reaches it
    on each port whose switch lies on a shortest path, split evenly (a fluid view of the
    hash-based multipath), and the busiest port sets the pace: factor = senders / the
    busiest port's share."""
    ports = topo.ports_of(host)
    others = [s for s in senders if s != host]
    if len(ports) < 2 or not others:
        return 1.0
    load = {port: 0.0 for port, _, _ in ports}
    for sender in others:
        dist = distances_to(topo, sender)
        hops = dist[host]
        eligible = [port for port, switch, _ in ports if dist.get(switch) == hops - 1]
        for port in eligible:
            load[port] += 1 / len(eligible)
    return len(others) / max(load.values())


def ring_link_load(topo: Topology, hosts: list[str]) -> float:
    """The busiest link's load when every host of the ring sends one unit to the next
    (rank order), each flow split evenly over its shortest paths, in units of the slowest
    host link's rate: 1.0 when every ring flow has its links to itself. More than 1 when
    ring flows share links, as BCube's relayed flows share their relay servers' links."""
    if len(hosts) < 2:
        return 1.0
    base = min(host_link(topo, h).rate_mbps for h in hosts)
    load: dict[tuple[str, str], float] = {}
    for a, b in zip(hosts, hosts[1:] + hosts[:1]):
        paths = shortest_paths(topo, a, b)
        for path in paths:
            for u, v in zip(path, path[1:]):
                rate = next(topo.link_at(u, port).rate_mbps
                            for port, peer, _ in topo.ports_of(u) if peer == v)
                load[(u, v)] = load.get((u, v), 0.0) + base / rate / len(paths)
    return max(1.0, max(load.values()))


def training_qos(ctx, exp: Training) -> QosConfig:
    """The classes a training fabric runs with: the spec's when it has some; strict priority
    for P3 jobs; otherwise one best-effort class. The class dataplane is always there, so
    that every switch queue can be sampled (its counters are in shared memory)."""
    if ctx.spec.qos is not None:
        return ctx.spec.qos
    if any(job.priority != "none" for job in exp.jobs):
        return priority_qos(exp, ctx.spec.links.buffer_pkts)
    return QosConfig(classes=[TrafficClass(name="best-effort", dscp=[0],
                                           buffer_pkts=ctx.spec.links.buffer_pkts)],
                     ecn_enabled=False)


def priority_qos(exp: Training, buffer_pkts: int | None) -> QosConfig:
    """Strict priority: the P3 levels above best effort (background traffic and FIFO jobs)."""
    classes = [TrafficClass(name="best-effort", dscp=[0], priority=0, buffer_pkts=buffer_pkts)]
    for i, dscp in enumerate(exp.p3_dscp):
        classes.append(TrafficClass(name=f"p3-level{i}", dscp=[dscp],
                                    priority=len(exp.p3_dscp) - i, buffer_pkts=buffer_pkts))
    return QosConfig(classes=classes, scheduler="strict", ecn_enabled=False)


# ---- background traffic --------------------------------------------------------------------

class Background:
    """The experiment's background traffic, running until stopped."""

    def __init__(self, fab, specs, log_dir: Path, seconds: float):
        self.fab, self.specs, self.log_dir, self.seconds = fab, specs, log_dir, seconds
        self.procs: list[subprocess.Popen] = []
        self.clients: list[tuple[Path, str]] = []

    def start(self) -> None:
        import sys
        self.log_dir.mkdir(parents=True, exist_ok=True)
        topo = self.fab.topo
        port = 5301
        for b, bg in enumerate(self.specs):
            if bg.kind == "incast":
                reader, servers = bg.hosts[0], bg.hosts[1:]
                for s in servers:
                    self.procs.append(start_in_host(
                        self.fab, s, [sys.executable, "-m", "testbed.workloads.incast", "serve",
                                      "--port", str(port), "--dscp", str(bg.dscp)],
                        f"background incast server {s}", self.log_dir / f"bg{b}-{s}.log"))
                wait_listening(self.fab, [(s, port) for s in servers])
                addrs = ",".join(f"{topo.node(s).ip}:{port}" for s in servers)
                self.procs.append(start_in_host(
                    self.fab, reader, [sys.executable, "-m", "testbed.workloads.incast", "read",
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
                self.procs.append(start_in_host(
                    self.fab, f.dst, ["iperf3", "-s", "-1", "-p", str(f.port)],
                    f"background iperf3 server {f.dst}", self.log_dir / f"bg{b}-{i}-server.log"))
            wait_listening(self.fab, [(f.dst, f.port) for f in flows])
            for i, f in enumerate(flows):
                log = self.log_dir / f"bg{b}-{i}-client.json"
                self.procs.append(start_in_host(
                    self.fab, f.src, ["iperf3", "-c", topo.node(f.dst).ip, "-p", str(f.port),
                                      "-J", *f.client_args()],
                    f"background iperf3 {f.src}->{f.dst}", log))
                self.clients.append((log, f"{f.src}->{f.dst}"))

    def stop(self) -> float | None:
        """Stops everything; returns the background flows' total sending rate (Mb/s, over
        their whole life: iperf3 reports it when interrupted), None without flows."""
        stop_and_reap(self.procs)
        if not self.clients:
            return None
        total = 0.0
        for log, _ in self.clients:
            try:
                total += json.loads(log.read_text())["end"]["sum_sent"]["bits_per_second"]
            except (OSError, ValueError, KeyError):
                pass
        return round(total / 1e6, 3)


# ---- one job -------------------------------------------------------------------------------

def _ping_rtt_s(fab, src: str, dst: str) -> float | None:
    """Median RTT of a few pings (after the first, which may wait for ARP)."""
    argv = ["ping", "-n", "-c", "6", "-i", "0.05", "-W", "2", fab.topo.node(dst).ip]
    out = subprocess.run(in_netns(fab.host_pid(src), argv), capture_output=True, text=True,
                         timeout=30).stdout
    rtts = [float(line.split("time=")[1].split()[0]) for line in out.splitlines()
            if "time=" in line]
    return statistics.median(rtts[1:]) / 1000 if len(rtts) > 1 else None


def _queue_sampler(fab, rate_hz: float):
    """Samples every switch egress queue of the fabric (BPF counters in shared memory)."""
    from .dpapi import Dataplane
    from .qos_experiments import switch_queue_sampler
    dp = Dataplane(fab.qos_plane.description)
    return switch_queue_sampler(dp, rate_hz), dp


def _queue_stats(sampler, dp, sink_port: str) -> dict:
    """Per switch port (all classes together): the deepest queue sampled and the 99th
    percentile of the samples (taken when a queue changed); the port toward the job's
    busiest receiver, and the port whose queue got deepest."""
    current: dict[tuple[int, int], int] = {}
    series: dict[int, list[int]] = {}
    first_drops: dict[tuple[int, int], int] = {}
    last_drops: dict[tuple[int, int], int] = {}
    for s in sampler.samples:
        current[(s.port, s.cls)] = s.pkts
        series.setdefault(s.port, []).append(sum(v for (p, _), v in current.items()
                                                 if p == s.port))
        first_drops.setdefault((s.port, s.cls), s.drops)
        last_drops[(s.port, s.cls)] = s.drops
    names = {p["id"]: p["ifname"] for p in dp.ports}
    dp.close()

    def stats(values: list[int]) -> tuple[int, int]:
        values = sorted(values) or [0]
        return values[int(len(values) * 0.99)], values[-1]
    sink_id = next((i for i, n in names.items() if n == sink_port), None)
    sink_p99, sink_max = stats(series.get(sink_id, []))
    hottest = max(series, key=lambda p: max(series[p]), default=None)
    hot_p99, hot_max = stats(series.get(hottest, []))
    return {"queue_port": sink_port, "queue_p99_pkts": sink_p99, "queue_max_pkts": sink_max,
            "deepest_port": names.get(hottest, ""), "deepest_p99_pkts": hot_p99,
            "deepest_max_pkts": hot_max,
            "switch_drops_pkts": sum(last_drops[k] - first_drops[k] for k in last_drops),
            "sample_rate_hz": round(sampler.achieved_rate_hz(), 1)}


def _read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_processes(fab, placement: Placement, job_dir: Path, argv_of, timeout_s: float,
                  label: str) -> dict:
    """Start every rank in its host; fail fast when one dies (its error in the message, the
    others stopped). Returns the machine's peak memory in use while the job ran."""
    procs: list[tuple[int, str, subprocess.Popen]] = []
    mem_low = _mem_available()
    try:
        for rank, host, role in placement.ranks:
            procs.append((rank, host, start_in_host(fab, host, argv_of(rank, host),
                                                    f"training {role} rank {rank} in {host}",
                                                    job_dir / f"rank{rank}.log")))
        deadline = time.time() + timeout_s
        while True:
            mem_low = min(mem_low, _mem_available())
            codes = [(rank, host, p.poll()) for rank, host, p in procs]
            failed = [(rank, host, c) for rank, host, c in codes if c not in (None, 0)]
            if failed:
                rank, host, code = failed[0]
                err = job_dir / f"rank{rank}.error"
                why = err.read_text().strip() if err.exists() else \
                    (job_dir / f"rank{rank}.log").read_text(errors="replace").strip()[-600:]
                raise TestbedError(f"training {label}: rank {rank} in {host} failed "
                                   f"(exit {code}): {why}")
            if all(c == 0 for _, _, c in codes):
                break
            if time.time() > deadline:
                raise TestbedError(f"training {label}: not finished after {timeout_s:.0f} s "
                                   "(job_timeout_s)")
            time.sleep(0.3)
    finally:
        stop_and_reap([p for _, _, p in procs])
    return {"mem_used_peak_gb": round((_mem_total() - mem_low) / 2**30, 2)}


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    return _meminfo("MemAvailable")


def _mem_total() -> int:
    return _meminfo("MemTotal")


def predict(job: TrainingJob, n: int, grad_bytes: int, payload_bytes: float, messages: float,
            bandwidth_bps: float, latency_s: float,
            server_bandwidth_bps: float | None = None) -> tuple[float, float]:
    """(model communication seconds per synchronisation, expected payload bytes a worker's
    host sends per synchronisation, mean over the worker hosts). `bandwidth_bps`: the slowest worker's link;
    `server_bandwidth_bps`: the slowest server's."""
    if job.sync == "ps":
        pull = grad_bytes + 4 * job.ps_shards  # dense fp32 shards and their versions
        # A colocated shard's host link carries the n-1 other workers' slices and its own
        # worker's slices to and from the k-1 other shards: (n + k - 2) slices each way.
        k = job.ps_shards
        remote = n + k - 2 if job.ps_placement == "colocated" else n
        sent = payload_bytes
        if job.ps_placement == "colocated":
            # a shard's host also sends the replies to the n-1 other workers, and its worker
            # pushes only the k-1 remote slices: the mean over the n worker hosts
            sent = ((n - k) * payload_bytes
                    + k * ((k - 1) / k * payload_bytes + (n - 1) * pull / k)) / n
        return (commmodel.parameter_server_s(payload_bytes, remote, k,
                                             server_bandwidth_bps or bandwidth_bps, latency_s,
                                             pull_bytes=pull,
                                             worker_bandwidth_bps=bandwidth_bps),
                sent)
    if job.compression in ("topk", "qsgd", "sign"):
        return (commmodel.allgather_s(payload_bytes, n, bandwidth_bps, latency_s),
                (n - 1) * payload_bytes)
    size = payload_bytes if job.compression == "fp16" else grad_bytes
    buckets = max(1, round(messages))
    return (commmodel.ring_allreduce_s(size, n, bandwidth_bps, latency_s, buckets),
            2 * (n - 1) / n * size if n > 1 else 0.0)


def run_job(ctx, fab, exp: Training, job: TrainingJob, n: int, index: int, fabric_label: str,
            outcome: Outcome, experiment: int = 0) -> tuple[dict, list[list]]:
    topo = fab.topo
    placement = place(topo, job, n)
    label = f"{fabric_label} {job_with(job, n).label()}"
    slug = "".join(c if c.isalnum() else "-" for c in label).strip("-")
    job_dir = ctx.out_dir / "training" / f"{experiment}-{index:02d}-{slug}"  # unique per run
    job_dir.mkdir(parents=True, exist_ok=True)
    master = f"{topo.node(placement.ranks[0][1]).ip}:{MASTER_PORT + index}"
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

    rtt = _ping_rtt_s(fab, placement.workers[0], placement.ranks[-1][1]
                      if world > 1 else placement.workers[0])
    sink = placement.servers[0] if placement.servers else placement.workers[0]
    _, sw, sw_port = topo.ports_of(sink)[0]
    toward_sink = ifname(sw, sw_port)
    sampler, dp = _queue_sampler(fab, exp.sample_hz)
    background = Background(fab, exp.background, job_dir / "background", exp.job_timeout_s)
    ctx.log(f"  {label}: {world} processes ({len(placement.servers)} servers) on "
            f"{', '.join(h for _, h, _ in placement.ranks)}")
    # a BCube host relays other hosts' packets: its interface counters include them
    measured: dict = {"hosts_relay": any(h.relay for h in topo.hosts)}  # + background rate
    with _traffic_phase(ctx, fab, outcome, label) as checks:
        background.start()
        sampler.start()
        try:
            measured.update(run_processes(fab, placement, job_dir, argv_of, exp.job_timeout_s,
                                          label))
        finally:
            sampler.stop()
            measured["background_sent_mbps"] = background.stop()
    queue = _queue_stats(sampler, dp, toward_sink)
    rate = min(host_link(topo, h).rate_mbps for h in placement.workers)
    # a server's ingress: its link, or several of them on a multi-port (BCube) server
    hosts = [h for _, h, _ in placement.ranks]
    server_rate = min((host_link(topo, h).rate_mbps * ingress_spread(topo, h, hosts)
                       for h in placement.servers), default=rate)
    # ring flows that share a link share its rate (None for a parameter server)
    measured["ring_link_load"] = (round(ring_link_load(topo, placement.workers), 3)
                                  if job.sync != "ps" else None)
    summary, iter_rows = summarise(exp, job, n, placement, job_dir, label, fabric_label,
                                   (rate, server_rate), fab.links.mtu_bytes, rtt, toward_sink,
                                   queue, measured, checks, experiment)
    share = summary["worker_cpu_wait_share"]
    if summary["cpu_bound"] and not checks["cpu"]["cpu_bound"]:
        outcome.warnings.append(
            f"{label}: CPU-bound (a worker waited {summary['worker_cpu_wait_s'] * 1000:.0f} ms "
            f"for a core per iteration, {share:.0%} of it); its iteration time is not the "
            "network's")
    return summary, iter_rows


def job_with(job: TrainingJob, n: int) -> TrainingJob:
    return dataclasses.replace(job, workers=n)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(exp, job, n, placement, job_dir, label, fabric_label, rates, mtu, rtt,
              toward_sink, queue, measured, checks, experiment) -> tuple[dict, list[list]]:
    """One row for the job (medians over workers and iterations after the warm-up, the
    model's prediction beside them) and the per-iteration rows of every rank."""
    first = len(placement.servers)
    per_rank = {r: _read_rows(job_dir / f"rank{r}.jsonl") for r, _, _ in placement.ranks}
    workers = [per_rank[r] for r in range(first, first + n)]
    steady = [row for rows in workers for row in rows[exp.warmup_iters:]]
    if job.sync == "local":  # communication happens on synchronising iterations only
        synced = [row for row in steady if row.get("synchronised")]
    else:
        synced = steady
    grad_bytes = workers[0][0]["grad_bytes"]
    payload = _median([row.get("payload_bytes", grad_bytes) for row in steady]) or grad_bytes
    messages = _median([row["messages"] for row in synced]) or 1
    rate_mbps, server_rate_mbps = rates
    # ring flows that share a link (ring_link_load > 1) share its rate
    load = measured.get("ring_link_load") or 1
    bandwidth = rate_mbps * 1e6 * tcp_payload_fraction(mtu) / load
    latency = (rtt or 0.0) / 2
    model_s, expected_payload = predict(job, n, grad_bytes, payload, messages, bandwidth,
                                        latency, server_rate_mbps * 1e6 * tcp_payload_fraction(mtu))
    comm = _median([row["comm_s"] for row in synced])
    iter_s = _median([row["iter_s"] for row in steady])
    per_worker = sorted(_median([row["iter_s"] for row in rows[exp.warmup_iters:]]) or 0
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
    waits = [_median([row["cpu_wait_s"] for row in rows[exp.warmup_iters:]
                      if "cpu_wait_s" in row]) for rows in workers]
    wait = max((w for w in waits if w is not None), default=None)
    wait_share = wait / iter_s if wait is not None and iter_s else None
    per_sync_iters = job.local_steps if job.sync == "local" else 1
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
        "messages": messages, "iterations": exp.iters,
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


# ---- the experiment ------------------------------------------------------------------------

def _earlier(ctx, name: str) -> list[list]:
    """Rows an earlier training experiment of this run wrote to `name`."""
    path = ctx.out_dir / "metrics" / name
    if not path.exists():
        return []
    with path.open() as fh:
        return list(csv.reader(fh))[1:]


def training(ctx, exp: Training) -> Outcome:
    out = Outcome()
    position = next(i for i, e in enumerate(ctx.spec.experiments) if e is exp)
    experiment = sum(1 for e in ctx.spec.experiments[:position] if isinstance(e, Training))
    rows, iter_rows = [], []
    qos = training_qos(ctx, exp)
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
    # a spec may hold several training experiments: their rows follow each other
    header = list(dict.fromkeys(k for r in rows for k in r))  # every job's fields, in order
    ctx.write_csv("training.csv", header,
                  _earlier(ctx, "training.csv") + [[r.get(k) for k in header] for r in rows])
    ctx.write_csv("training_iterations.csv",
                  ["experiment", "fabric", "job", "rank", "host", "iteration"] + ITER_FIELDS,
                  _earlier(ctx, "training_iterations.csv") + iter_rows)
    out.headline = {"jobs": len(rows), "results": [
        {k: r[k] for k in ("fabric", "job", "iter_s_median", "comm_s_median", "model_comm_s",
                           "comm_over_model", "test_acc", "cpu_bound")} for r in rows]}
    return out
