"""Pure decisions of the jobs-sharing-a-fabric experiment: the classes, the links and ports
jobs share, each job's profile and iterations from its rank rows, the overlap of the jobs'
communication phases, and the fluid model's expectation (workloads/model/interference.py)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from controllers.jobpolicy import JobInfo
from testbed.config.qos import QosConfig, TrafficClass
from testbed.results.pfc import pause_intervals
from testbed.workloads.model.interference import (
    Iteration,
    best_offsets,
    overlap_fraction,
    replay,
    simulate,
    steady_iteration_s,
)
from testbed.workloads.model.parallel.cost import KINDS
from topologies.graph import link_shares
from topologies.model import Topology, ifname, port_of

from ..parallel.model import kind_flows
from ..rdma import rdma_qos
from ..training.model import place_on
from .spec import JOB_DSCPS, Jobs, SharedJob

STAYS_BELOW = 0.2  # the overlap a converged interleaving stays under


def jobs_qos(exp: Jobs, buffer_pkts: int | None, scheme: str | None = None) -> QosConfig:
    """Best effort (background traffic, and every job under `none` and `time_shift`) and a
    class per job for the policies that give jobs classes of their own (which DSCP goes to
    which class is the policy's decision, applied by the jobs app); weighted round robin
    with equal weights until a policy changes them on the ports jobs share.

    Over RoCE (`scheme`), the jobs' classes are the scheme's RoCE class (lossless with PFC,
    ECN-marked if it reacts to marks): the first holds every job (`none`, `time_shift`;
    the background stays in best effort, lossy), and a last class for the engines' ACKs,
    NAKs and CNPs (the built-in policies' schedules leave it alone: one WRR share, or
    first under strict priority, its HTB priority level being the top one)."""
    n = min(len(exp.jobs), exp.job_classes())
    bg = sorted({b.dscp for b in exp.background} | {0})
    classes = [TrafficClass(name="best-effort", dscp=bg, buffer_pkts=buffer_pkts,
                            ecn=None if scheme else exp.ecn)]
    if scheme is None:
        classes += [TrafficClass(name=f"job-class-{i + 1}", buffer_pkts=buffer_pkts,
                                 ecn=exp.ecn) for i in range(n)]
        return QosConfig(classes=classes, scheduler="wrr", ecn_enabled=exp.ecn is not None)
    rq = rdma_qos(exp.roce, scheme)
    roce, control = (c for c in rq.classes if c.name in ("roce", "control"))
    classes += [replace(roce, name=f"job-class-{i + 1}", priority=0,
                        dscp=list(JOB_DSCPS[:len(exp.jobs)]) if i == 0 else [])
                for i in range(n)]
    classes.append(replace(control, name="roce-control"))
    return QosConfig(classes=classes, scheduler="wrr", pfc=rq.pfc,
                     ecn_enabled=rq.ecn_enabled)


def shared_class(scheme: str | None) -> int:
    """The class every job shares unless a policy gives it its own: best effort, or over
    RoCE the first jobs' class (lossless)."""
    return 0 if scheme is None else 1


def job_class(decisions: list[dict], name: str, scheme: str | None) -> int:
    """The class a job ran in during a round: its policy's start decision's, else the
    shared one."""
    for d in decisions:
        if d.get("when") == "start" and name in (d.get("classes") or {}):
            return int(d["classes"][name])
    return shared_class(scheme)


def job_pauses(events: list, t_from_ns: int, t_to_ns: int, cls: int, ports: set[str]
               ) -> dict:
    """The PFC pauses a job met during a round: of its class, on the links whose upstream
    end sent its bytes (`ports`: switch egress ports and its hosts' NICs). Their number and
    the time those links were paused, summed."""
    mine = [e for e in events if t_from_ns <= e.time_ns <= t_to_ns and e.cls == cls
            and e.upstream_port in ports]
    spans, _ = pause_intervals(mine)
    paused_ns = sum(end - start for runs in spans.values() for start, end, _ in runs)
    return {"pfc_pauses": sum(e.event == "pause" for e in mine),
            "pfc_paused_ms": round(paused_ns / 1e6, 3)}


def job_flows(job: SharedJob, hosts: list[str]) -> list[tuple[str, str, float]]:
    """What a job's ranks send to each other at once: a parallel job's collectives of every
    type; a training job's ring (data parallel, local SGD) to the next worker, or each
    worker's push to every parameter server and the pull back."""
    if job.training is None:
        return [f for k in KINDS for f in kind_flows(job.layout, hosts, k)]
    pl = place_on(job.training, hosts)
    if job.training.sync != "ps":
        n = len(pl.workers)
        return [(pl.workers[i], pl.workers[(i + 1) % n], 1.0) for i in range(n)] if n > 1 \
            else []
    share = 1 / len(pl.servers)
    return [f for w in pl.workers for s in pl.servers if w != s
            for f in ((w, s, share), (s, w, share))]


def job_links(topo: Topology, job: SharedJob, hosts: list[str]) -> set[tuple[str, str]]:
    """The directed links a job's traffic may cross (every shortest path: ECMP may hash a
    flow onto any of them)."""
    return set(link_shares(topo, job_flows(job, hosts)))


def egress(topo: Topology, u: str, v: str) -> str:
    """The interface of `u` on its link to `v`."""
    link = topo.link_between(u, v)
    assert link is not None
    return ifname(u, link.a_port if link.a == u else link.b_port)


def shared_ports(topo: Topology, links: list[set[tuple[str, str]]]) -> list[str]:
    """Switch egress interfaces on links that two or more jobs may cross: where a
    cross-job policy's class weights matter."""
    return [egress(topo, u, v) for u, v in sorted(
        {link for i, a in enumerate(links) for b in links[i + 1:] for link in a & b})
        if not topo.is_host(u)]


def port_flows(topo: Topology, job: SharedJob, hosts: list[str]) -> dict[str, float]:
    """Per switch egress port, how many of the job's connections cross it at once (ECMP's
    share of a flow where it has several paths): TCP shares a link per connection, so a
    parameter server's two workers pushing through one port take two shares of it."""
    out = {}
    for (u, v), load in link_shares(topo, job_flows(job, hosts)).items():
        if not topo.is_host(u):
            link = topo.link_between(u, v)
            assert link is not None
            out[egress(topo, u, v)] = load * link.rate_mbps
    return out


def sharing_groups(links: list[set[tuple[str, str]]]) -> list[list[int]]:
    """Jobs joined when their links meet (transitively): the model treats each group as
    sharing one bottleneck."""
    groups: list[set[int]] = []
    for i, mine in enumerate(links):
        joined = [g for g in groups if any(mine & links[j] for j in g)]
        merged = {i}.union(*joined) if joined else {i}
        groups = [g for g in groups if g not in joined] + [merged]
    return sorted(sorted(g) for g in groups)


# ---- measured rows -------------------------------------------------------------------

def job_row(r: dict) -> dict:
    """A rank's iteration in the fields this experiment reads, whichever worker wrote it:
    `pipeline_s` before the synchronisation the jobs compete with and `sync_s` from its
    start to the iteration's end, `bytes` the payload it wrote to its connections. The
    parallel worker's pipeline (compute and pipeline communication) and data-parallel
    synchronisation and its bytes per collective type; the training worker's compute up to
    its first communication (a DDP bucket, a push, an average) and the rest."""
    if "pipeline_s" in r:
        return {**r, "bytes": sum(r[f"{k}_bytes"] for k in KINDS)}
    return {**r, "pipeline_s": r["t_sync_start"] - r["t_start"],
            "sync_s": r["t_sync_end"] - r["t_sync_start"], "bytes": r["sent_bytes"]}


def iterations(rows: list[dict]) -> list[Iteration]:
    """A rank's iterations on the machine's monotonic clock: start, start of its
    synchronisation (the communication phase the jobs compete with), end."""
    return [Iteration(r["t_start"], r["t_sync_start"], r["t_sync_end"]) for r in rows]


def periods(rows: list[dict]) -> list[float]:
    """Iteration times end to end (a gate's wait included); the first from its start (its
    wait is for the round's start)."""
    out = []
    for k, r in enumerate(rows):
        start = rows[k - 1]["t_sync_end"] if k else r["t_start"]
        out.append(r["t_sync_end"] - start)
    return out


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def profile(name: str, dscp: int, rows: list[dict], warmup: int, workers: int,
            weight: float, link_s: float) -> JobInfo:
    """A job's profile from its rank 0's rows alone (and its link time: `link_time`): the
    policies' input."""
    steady = rows[warmup:] or rows
    return JobInfo(name=name, dscp=dscp,
                   compute_s=_median([r["pipeline_s"] for r in steady]),
                   comm_s=_median([r["sync_s"] for r in steady]),
                   period_s=_median(periods(rows)[warmup:] or periods(rows)),
                   comm_bytes=int(_median([r["bytes"] for r in steady])),
                   link_s=link_s, workers=workers, weight=weight)


def port_rate(topo: Topology, name: str) -> float:
    """The rate (Mb/s) of the link an interface is on."""
    end = port_of(name)
    for link in topo.links:
        if end in link.ends():
            return link.rate_mbps
    raise KeyError(name)


def link_time(topo: Topology, counters: dict[str, tuple[int, int, int]], iters: int) -> float:
    """Seconds per iteration a job's bytes occupy its busiest switch port (wire bytes, as
    the switch counted them, at that port's rate)."""
    if not counters:
        return 0.0
    name = max(counters, key=lambda p: counters[p][0])
    return counters[name][0] / max(1, iters) * 8 / (port_rate(topo, name) * 1e6)


def overlaps(runs: list[list[Iteration]]) -> list[list[float]]:
    """Per job and iteration, the share of its communication phase another job's
    communication overlapped."""
    return [[overlap_fraction(runs, i, k) for k in range(len(run))]
            for i, run in enumerate(runs)]


def group_overlaps(rank0: dict[str, list[dict]], groups: list[list[str]]
                   ) -> dict[str, list[float]]:
    """Per job and iteration, the overlap of its communication phase with those of the jobs
    whose paths meet its own (its group); a job that meets none overlaps nothing."""
    out: dict[str, list[float]] = {}
    for group in groups:
        members = [n for n in group if n in rank0]
        per = overlaps([iterations(rank0[n]) for n in members]) if len(members) > 1 \
            else [[0.0] * len(rank0[n]) for n in members]
        out.update(zip(members, per))
    return out


def shared_iterations(rank0: dict[str, list[dict]], groups: list[list[str]]
                      ) -> dict[str, int]:
    """Per job, how many of its first iterations ended while every job of its group was
    still running: jobs of different periods run the same number of iterations, so a fast
    job finishes first and the others' last iterations run alone. Their iteration times,
    overlaps and the model's are taken over these (at least one iteration)."""
    out: dict[str, int] = {}
    for group in groups:
        members = [n for n in group if n in rank0 and rank0[n]]
        if not members:
            continue
        end = min(rank0[n][-1]["t_sync_end"] for n in members)
        for n in members:
            out[n] = max(1, sum(1 for r in rank0[n] if r["t_sync_end"] <= end + 1e-6))
    return out


def settled_after(per_iter: list[float], below: float = STAYS_BELOW) -> int | None:
    """The first iteration from which the overlap stays under `below` (None: never)."""
    for k in range(len(per_iter)):
        if all(x < below for x in per_iter[k:]):
            return k
    return None


@dataclass(frozen=True)
class Expected:
    shared_s: float        # fair sharing, the jobs' spec offsets
    interleaved_s: float   # fair sharing at the model's best offsets
    overlapped_s: float    # the closed form: compute + every job's communication at once


def expected(jobs: list[JobInfo], offsets: list[float], weights: list[float] | None = None,
             iters: int = 16, warmup: int = 4) -> list[Expected]:
    """The fluid model's steady iteration for each job of one sharing group, from the
    alone profiles (compute and communication; `weights`: a policy's shares)."""
    ws = weights or [1.0] * len(jobs)
    model = [j.fluid(o, w) for j, o, w in zip(jobs, offsets, ws)]
    shared = steady_iteration_s(simulate(model, iters), warmup)
    best, _ = best_offsets(model, iterations=iters, warmup=warmup)
    inter = steady_iteration_s(simulate([j.fluid(o, w) for j, o, w in zip(jobs, best, ws)],
                                        iters), warmup)
    total_link = sum(m.comm_s for m in model)
    return [Expected(s, i, m.compute_s + total_link)
            for s, i, m in zip(shared, inter, model)]


USED = 0.05  # a port carries a job when it saw this share of the job's busiest port's bytes


def aligned(jobs: list[JobInfo], rank0: dict[str, list[dict]],
            link_s: dict[str, dict[str, float]] | None = None,
            flows: dict[str, dict[str, float]] | None = None) -> dict[str, list[float]]:
    """Each job's iteration times as the model predicts them at the alignment the jobs
    actually had: every communication phase (rank 0's) replayed from its measured start
    through each link it used, phases under way on a link at once sharing it fairly, a
    phase ending when its slowest link is done; the rest of each iteration (compute, a
    gate's wait, the part of the communication that is not link time) as measured.
    `link_s`: per job, the seconds per iteration its bytes took on each switch port (from
    the round's own counters: ECMP puts each round's connections on its own paths);
    without it, every job on one link for its alone link time. `flows`: per job and port,
    its connections there (`port_flows`; at least one on a port its bytes crossed, as ECMP
    put each connection on one path), each a share of the link; without it, one per job
    (the jobs share fairly)."""
    links = link_s or {j.name: {"link": j.link_s or j.comm_s} for j in jobs}
    used = {j.name: {p: s for p, s in links.get(j.name, {}).items()
                     if s >= USED * max(links[j.name].values())} for j in jobs}
    ends: dict[tuple[str, int], float] = {}
    for port in sorted({p for ps in used.values() for p in ps}):
        phases = [(r["t_sync_start"], used[j.name][port],
                   max(1.0, (flows or {}).get(j.name, {}).get(port, 1.0)), j.name, k)
                  for j in jobs if port in used[j.name] for k, r in enumerate(rank0[j.name])]
        for (start, _, _, name, k), end in zip(phases, replay([p[:3] for p in phases])):
            ends[(name, k)] = max(ends.get((name, k), start), end)
    out: dict[str, list[float]] = {j.name: [] for j in jobs}
    for j in jobs:
        fixed = max(0.0, j.comm_s - j.link_s) if j.link_s else 0.0
        for k, (r, period) in enumerate(zip(rank0[j.name], periods(rank0[j.name]))):
            link = ends.get((j.name, k), r["t_sync_start"]) - r["t_sync_start"]
            out[j.name].append(period - r["sync_s"] + link + fixed)
    return out


def round_link_s(counters: dict[str, dict[str, tuple[int, int, int]]],
                 rates: dict[str, float], iters: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per job and switch port, seconds per iteration its bytes took there (port rates in
    Mb/s)."""
    return {name: {p: c[0] / max(1, iters[name]) * 8 / (rates[p] * 1e6)
                   for p, c in ports.items() if c[0] and p in rates}
            for name, ports in counters.items()}


MIN_LOSS = 0.05  # below this slowdown there is no loss worth a share of


def recovered(alone_s: float, shared_s: float, policy_s: float) -> float | None:
    """The share of the shared-vs-alone loss a policy won back (1: all of it); None when
    sharing cost the job less than 5% of its alone time (noise would decide the share)."""
    loss = shared_s - alone_s
    return (shared_s - policy_s) / loss if loss > MIN_LOSS * alone_s else None


def dscp_of(index: int) -> int:
    return JOB_DSCPS[index]
