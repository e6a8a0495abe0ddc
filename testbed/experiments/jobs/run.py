"""The runner of jobs sharing a fabric: one fabric per placement; in it each job alone on
its hosts (its baseline and the policies' profile), then all jobs together once per policy.
A round is announced to the controller's jobs app (round.json in the fabric's jobs
directory), which applies the policy; the jobs' ranks start, their first iterations are
released together once every job is ready (each `offset_s` after the common start), and
any rank failing stops every job and fails the run with its error."""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from controllers.jobpolicy import JobInfo, Round, RoundFile
from testbed.config.loader import dump_json
from testbed.core.errors import TestbedError
from testbed.results.pfc import read_pfc_events
from testbed.results.verdict import late_rank
from testbed.workloads.launch import parallel_argv, train_argv
from testbed.workloads.model.jobsync import read_progress, write_start
from topologies.model import Topology, at_rate, ifname

from ..base import Context, Outcome, Phase, require_congestion_controls, slug
from ..parallel.expect import transport_label
from ..parallel.model import job_config, probe_pairs
from ..parallel.run import roce_counters, roce_transport
from ..trainers.analysis import read_records
from ..trainers.background import Background
from ..trainers.model import cpu_bound_verdict, host_link
from ..trainers.ranks import RankProcess, watch_ranks
from ..training.model import place_on
from .analysis import LINK_FIELDS, PHASE_FIELDS, job_rows, link_rows, phase_rows, policy_rows
from .model import (
    job_class,
    job_links,
    job_pauses,
    job_row,
    jobs_qos,
    link_time,
    port_flows,
    port_rate,
    profile,
    shared_class,
    shared_ports,
    sharing_groups,
)
from .spec import JOB_DSCPS, Jobs, SharedJob, per_job_classes, placements

MASTER_PORT = 29900
APP_TIMEOUT_S = 15.0


@dataclasses.dataclass
class Member:
    """One job of a round, as launched: its hosts, the host of each rank (a colocated
    parameter server shares a worker's host) and its first worker's rank (the rank whose
    iterations stand for the job's; a parameter server's come first)."""
    index: int
    name: str
    hosts: list[str]
    dir: Path
    offset_s: float
    rank_hosts: list[str]
    lead: int = 0

    @property
    def worker_ranks(self) -> range:
        return range(self.lead, len(self.rank_hosts))


def parallel_member(exp: Jobs, m: Member, job: SharedJob, shared: bool, fab: Phase,
                    master: str, scheme: str | None, rtts: dict) -> list[list[str]]:
    """A parallel job's config (its job.json) and each rank's command line; over RoCE
    (`scheme`) its engines' configs too, from its groups' round trips (measured once per
    fabric and set of hosts, kept in `rtts`)."""
    topo = fab.topo
    pexp, pjob = job.as_parallel(exp, JOB_DSCPS[m.index])
    if not shared:  # a job's fault strikes where the jobs run together
        pexp = dataclasses.replace(pexp, fault=None)
    rate = min(host_link(topo, h).rate_mbps for h in m.hosts)
    cfg = dataclasses.replace(job_config(pexp, pjob, rate), gate_file=str(m.dir / "gate.json"),
                              report_file=str(m.dir / "progress.json"),
                              start_file=str(m.dir / "start.json"))
    if scheme is not None:
        key = (tuple(m.hosts), pjob.layout)
        if key not in rtts:
            pings = {k: fab.ping_rtt_s(a, b)
                     for k, (a, b) in probe_pairs(pjob.layout, m.hosts).items()}
            rtts[key] = {k: v for k, v in pings.items() if v is not None}
        cfg, _ = roce_transport(pexp, scheme, cfg, topo, m.hosts, rtts[key], m.dir)
    dump_json(cfg, m.dir / "job.json")
    return [parallel_argv(r, len(m.hosts), master, m.dir, ifname(h, 0))
            for r, h in enumerate(m.hosts)]


def training_member(exp: Jobs, m: Member, job: SharedJob, shared: bool,
                    master: str) -> list[list[str]]:
    """Each rank's command line of a training-worker job, its connections marked with the
    job's DSCP."""
    t = job.training
    assert t is not None
    opts = dict(sync=t.sync, model=t.model, width=t.width, depth=t.depth, data=t.data,
                iters=exp.iters, batch=t.batch, lr=t.lr, bucket_mb=t.bucket_mb,
                compression=t.compression, topk_ratio=t.topk_ratio, qsgd_levels=t.qsgd_levels,
                terngrad_clip=t.terngrad_clip,
                ps_shards=t.ps_shards, consistency=t.consistency, staleness=t.staleness,
                lr_staleness=t.lr_staleness, local_steps=t.local_steps, eval_every=exp.iters,
                seed=exp.seed,
                timeout_s=exp.timeout_s, compute_delay_ms=t.compute_ms,
                job_dscp=JOB_DSCPS[m.index], gate_file=m.dir / "gate.json",
                report_file=m.dir / "progress.json", start_file=m.dir / "start.json")
    fault = job.fault if shared else None
    return [train_argv(r, len(m.rank_hosts), master, m.dir, ifname(h, 0), **opts,
                       **({"crash_at_iter": fault.at_iter} if fault and fault.rank == r else {}))
            for r, h in enumerate(m.rank_hosts)]


def policy_args(exp: Jobs, policy: str) -> dict:
    if policy == "priority":
        return dataclasses.asdict(exp.priority)
    if policy == "time_shift":
        return dataclasses.asdict(exp.time_shift)
    if policy == "mltcp":
        return dataclasses.asdict(exp.mltcp)
    if ":" in policy:
        return dict(exp.plugin_args)
    return {}


def announce(fab: Phase, rnd: Round, members: list[Member], ports: list[str],
             period_s: float) -> None:
    """Writes the round for the jobs app and waits until it has applied the policy's start
    (or fails with the policy's error)."""
    rf = RoundFile(round=rnd, progress={m.name: str(m.dir / "progress.json") for m in members},
                   gates={m.name: str(m.dir / "gate.json") for m in members},
                   ports=ports, period_s=period_s)
    fab.jobs_dir.mkdir(parents=True, exist_ok=True)
    dump_json(rf, fab.jobs_dir / "round.json")
    deadline = time.time() + APP_TIMEOUT_S
    while time.time() < deadline:
        error = policy_error(fab, rnd.id)
        if error is not None:
            raise TestbedError(f"jobs: the policy {rnd.policy} failed: {error}")
        if any(d.get("when") == "start" for d in decisions(fab.jobs_dir, rnd.id)):
            return
        time.sleep(0.05)
    raise TestbedError(f"jobs: the controller's jobs app did not start round {rnd.id} within "
                       f"{APP_TIMEOUT_S:.0f} s; see controller.log")


def end_round(fab: Phase) -> None:
    (fab.jobs_dir / "round.json").unlink(missing_ok=True)


def decisions(jobs_dir: Path, round_id: int) -> list[dict]:
    try:
        lines = (jobs_dir / "decisions.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if d.get("round") == round_id:
            out.append(d)
    return out


def _delta(after: tuple[int, int, int], before: tuple[int, int, int]) -> tuple[int, int, int]:
    """Counters (bytes, marks, drops) gained between two snapshots."""
    return (after[0] - before[0], after[1] - before[1], after[2] - before[2])


def dscp_snapshot(dp: Any, dscps: list[int]) -> dict[tuple[int, int], tuple[int, int, int]]:
    """(switch egress port, DSCP) -> (bytes, marks, drops) so far."""
    out = {}
    for p in dp.ports:
        if p["is_host"]:
            continue
        for d in dscps:
            c = dp.dscp_counters(p["id"], d)
            out[(p["id"], d)] = (c.enq_bytes, c.marks, c.drops)
    return out


START_LEAD_S = 0.2  # from the last job being ready to the first iteration


def policy_error(fab: Phase, round_id: int) -> str | None:
    """What the jobs app reported when the round's policy (or applying it) failed."""
    return next((d["error"] for d in decisions(fab.jobs_dir, round_id) if "error" in d), None)


def run_ranks(fab: Phase, exp: Jobs, members: list[Member], argvs: dict[str, list[list[str]]],
              label: str, round_id: int) -> None:
    """Starts every job's ranks; once every job is ready (its rank 0 reports, waiting for
    its first iteration) releases each job's first iteration `offset_s` after a common
    start; waits for all. The first rank to fail, or the policy failing, stops every job
    and fails the round with its error."""
    procs: list[RankProcess] = []
    deadline = time.time() + exp.job_timeout_s
    started = [False]
    try:
        for m in members:
            for rank, (host, argv) in enumerate(zip(m.rank_hosts, argvs[m.name])):
                procs.append(RankProcess(m.dir, rank, f"job {m.name} rank {rank} in {host}",
                                         fab.start_process(
                                             host, argv, f"job {m.name} rank {rank} in {host}",
                                             m.dir / f"rank{rank}.log")))

        def release() -> None:
            if not started[0] and all(read_progress(m.dir / "progress.json") is not None
                                      for m in members):
                at = time.monotonic() + START_LEAD_S
                for m in members:
                    write_start(m.dir / "start.json", at + m.offset_s)
                started[0] = True

        def policy_ok() -> None:
            error = policy_error(fab, round_id)
            if error is not None:
                raise TestbedError(f"{label}: the policy failed while the jobs ran; every job "
                                   f"was stopped: {error}")
        watch_ranks(procs, deadline=deadline, timeout_s=exp.job_timeout_s, label=label,
                    poll_s=0.2, stopped="; every job was stopped", before=release,
                    after=policy_ok)
    finally:
        fab.stop_processes([r.proc for r in procs])


def run_round(ctx: Context, fab: Phase, exp: Jobs, outcome: Outcome, *, round_id: int,
              experiment: int, label: str, policy: str, members_of: list[int],
              hosts: list[list[str]], profiles: dict[str, JobInfo], ports: list[str],
              groups: list[list[int]], scheme: str | None = None,
              rtts: dict | None = None) -> dict:
    """One round; returns each member's rank rows, its counters per port, the checks and
    the policy's decisions; over RoCE (`scheme`) each member's engine counters and the PFC
    pauses it met ("roce")."""
    topo = fab.topo
    names = exp.names()
    round_dir = ctx.out_dir / "jobs" / ctx.raw_name(f"{round_id:02d}-{slug(label)}")
    members, argvs = [], {}
    shared = len(members_of) > 1
    for i in members_of:
        job, name = exp.jobs[i], names[i]
        if job.training is not None:
            pl = place_on(job.training, hosts[i])
            rank_hosts, lead = [h for _, h, _ in pl.ranks], len(pl.servers)
        else:
            rank_hosts, lead = list(hosts[i]), 0
        m = Member(i, name, hosts[i], round_dir / slug(name),
                   job.offset_s if shared else 0.0, rank_hosts, lead)
        m.dir.mkdir(parents=True, exist_ok=True)
        master = f"{topo.host(rank_hosts[0]).ip}:{MASTER_PORT + (round_id % 40) * 16 + i}"
        argvs[name] = training_member(exp, m, job, shared, master) if job.training \
            else parallel_member(exp, m, job, shared, fab, master, scheme,
                                 rtts if rtts is not None else {})
        members.append(m)
    n_classes = min(len(exp.jobs), exp.job_classes())
    rnd = Round(id=round_id, policy=policy,
                jobs=[profiles.get(m.name) or JobInfo(m.name, JOB_DSCPS[m.index], 0, 0, 0, 0)
                      for m in members],
                job_classes=list(range(1, n_classes + 1)), args=policy_args(exp, policy),
                groups=[[names[i] for i in g if i in members_of] for g in groups],
                shared_class=shared_class(scheme))
    announce(fab, rnd, members, ports, exp.period_ms / 1000)
    dp = fab.dataplane()
    dscps = [JOB_DSCPS[m.index] for m in members]
    background = Background(fab, exp.background, round_dir / "background", exp.job_timeout_s)
    ctx.log(f"  {label}: " + "; ".join(f"{m.name} on {', '.join(m.hosts)}" for m in members))
    t0_ns = time.monotonic_ns()
    try:
        with ctx.traffic_phase(fab, outcome, label) as checks:
            before = dscp_snapshot(dp, dscps)
            background.start()
            try:
                run_ranks(fab, exp, members, argvs, label, round_id)
            finally:
                bg_mbps = background.stop()
            after = dscp_snapshot(dp, dscps)
            t1_ns = time.monotonic_ns()
    finally:
        end_round(fab)
        names_of = {p["id"]: p["ifname"] for p in dp.ports}
        dp.close()
    counters: dict[str, dict[str, tuple[int, int, int]]] = {}
    for m in members:
        d = JOB_DSCPS[m.index]
        counters[m.name] = {names_of[port]: _delta(after[(port, dd)], before[(port, dd)])
                            for (port, dd) in after if dd == d}
    ranks = {m.name: [[job_row(x) for x in read_records(m.dir / f"rank{r}.jsonl")]
                      for r in m.worker_ranks] for m in members}
    made = decisions(fab.jobs_dir, round_id)
    roce: dict[str, dict] = {}
    if scheme is not None:
        path = fab.qos_status_dir / "pfc_events.csv"
        events = read_pfc_events(path) if path.exists() else []
        for m in members:
            # the links its bytes left by: switch ports that carried its DSCP, its NICs
            sent = {p for p, c in counters[m.name].items() if c[0] > 0}
            sent |= {ifname(h, 0) for h in m.hosts}
            roce[m.name] = {**roce_counters(m.dir, len(m.hosts)),
                            **job_pauses(events, t0_ns, t1_ns,
                                         job_class(made, m.name, scheme), sent)}
    return {"members": members, "ranks": ranks, "counters": counters, "checks": checks,
            "decisions": made, "background_mbps": bg_mbps, "roce": roce}


def carriers_of(exp: Jobs) -> list[tuple[str | None, str | None]]:
    """What carries the jobs' collectives, one fabric each: (RoCE scheme, None) per scheme,
    or (None, TCP congestion control) per congestion control over Gloo (None: the
    spec's hosts')."""
    if exp.transport == "roce":
        return [(s, None) for s in exp.roce.schemes]
    return [(None, cc) for cc in exp.congestion_controls] or [(None, None)]


def run(ctx: Context, exp: Jobs) -> Outcome:
    out = Outcome()
    experiment = ctx.experiment or 0  # the spec index, which its rows carry
    topo = exp.fabric_topology(ctx.topo)
    fabric: Topology = at_rate(topo, ctx.spec.links.rate_mbps) if ctx.spec.links.rate_mbps \
        else topo
    names = exp.names()
    summary_rows: list[dict] = []
    phase_out: list[list] = []
    link_out: list[list] = []
    policy_out: list[dict] = []
    round_id = 0
    # a fabric per placement and carrier: over RoCE each scheme (its classes), over Gloo
    # each TCP congestion control of the hosts
    carriers = carriers_of(exp)
    require_congestion_controls(ctx, [cc for _, cc in carriers if cc is not None], "jobs")
    for placement, (scheme, cc) in [(p, c) for p in exp.placements for c in carriers]:
        qos = jobs_qos(exp, ctx.spec.links.buffer_pkts, scheme)
        hosts_cfg = None  # the spec's
        if cc is not None or exp.ecn:
            hosts_cfg = dataclasses.replace(
                ctx.spec.hosts, ecn=ctx.spec.hosts.ecn or exp.ecn is not None,
                congestion_control=ctx.spec.hosts.congestion_control if cc is None else cc)
        where = placement + (f" roce:{scheme}" if scheme is not None
                             else f" tcp:{cc}" if cc is not None else "")
        hosts = placements(exp, fabric, placement)
        links = [job_links(fabric, j, h) for j, h in zip(exp.jobs, hosts)]
        ports = shared_ports(fabric, links)
        groups = sharing_groups(links)
        rtts: dict = {}
        with ctx.fabric(fabric, ctx.spec.controller.routing, f"jobs {where}", qos=qos,
                        hosts=hosts_cfg, jobs=True, rate_mbps=None,
                        udp_hash=scheme is not None and exp.roce.source_port == "per_qp"
                        ) as fab:
            rounds: dict[str, dict] = {}
            profiles: dict[str, JobInfo] = {}
            for i, name in enumerate(names):
                r = run_round(ctx, fab, exp, out, round_id=round_id, experiment=experiment,
                              label=f"{where} {name} alone", policy="none",
                              members_of=[i], hosts=hosts, profiles={}, ports=ports,
                              groups=groups, scheme=scheme, rtts=rtts)
                round_id += 1
                rounds[f"alone:{name}"] = r
                p = profiles[name] = profile(
                    name, JOB_DSCPS[i], r["ranks"][name][0], exp.warmup_iters,
                    exp.jobs[i].worker_count, exp.jobs[i].weight, link_time(fabric, r["counters"][name], exp.iters))
                ctx.log(f"    {name} alone: iteration {p.period_s:.3f} s, compute "
                        f"{p.compute_s:.3f} s, communication {p.comm_s:.3f} s "
                        f"({p.comm_s / p.period_s:.0%}; {p.link_s:.3f} s of it on its busiest "
                        f"link), {p.comm_bytes} B per iteration")
            if len(names) > 1:
                for policy in exp.policies:
                    if per_job_classes(policy) and not ports:
                        ctx.log(f"    {policy}: the jobs share no switch port here")
                    r = run_round(ctx, fab, exp, out, round_id=round_id,
                                  experiment=experiment, label=f"{where} {policy}",
                                  policy=policy, members_of=list(range(len(names))),
                                  hosts=hosts, profiles=profiles, ports=ports,
                                  groups=groups, scheme=scheme, rtts=rtts)
                    round_id += 1
                    rounds[policy] = r
        rates = {ifname(n, port): port_rate(fabric, ifname(n, port))
                 for n, port, _ in fabric.interfaces() if not fabric.is_host(n)}
        flows = {n: port_flows(fabric, j, h) for n, j, h in zip(names, exp.jobs, hosts)}
        rows = job_rows(exp, experiment, where, names, hosts, groups, profiles, rounds,
                        rates, flows)
        for row in rows:
            key = "alone:" + row["job"] if row["policy"] == "alone" else row["policy"]
            row["transport"] = transport_label(hosts_cfg or ctx.spec.hosts, scheme)
            row.update(rounds[key]["roce"].get(row["job"], {}))
            if "pfc_pauses" in row:
                row["pfc_pauses_per_iter"] = round(row["pfc_pauses"] / max(1, row["iters"]), 2)
            row["cpu_bound"] = cpu_bound_verdict(row.pop("_monitor_cpu_bound"),
                                                 row["worker_cpu_wait_share"], None)
            if row["cpu_bound"]:
                out.warnings.append(f"jobs {where} {row['policy']} {row['job']}: "
                                    "CPU-bound; its times are not the network's")
            if why := late_rank(row, row["iters"]):
                row["cpu_bound"] = True
                out.warnings.append(f"jobs {where} {row['policy']} {row['job']}: {why}; its "
                                    "times are not the network's")
            ctx.log(f"    {row['policy']:>10} {row['job']}: iteration {row['iter_s_median']} s "
                    f"(alone {row['alone_iter_s']}, x{row['slowdown']}; model "
                    f"{row['model_policy_s']}), overlap {row['overlap_mean']}, "
                    f"marks/iter {row['marks_per_iter']}, drops/iter {row['drops_per_iter']}"
                    + (f", {row['pfc_pauses']} pauses ({row['pfc_paused_ms']} ms)"
                       if scheme is not None else ""))
        summary_rows += rows
        phase_out += phase_rows(experiment, where, names, groups, rounds)
        link_out += link_rows(experiment, where, rounds, exp.iters)
        policy_out += policy_rows(experiment, where, rounds)
    header = list(dict.fromkeys(k for r in summary_rows for k in r))
    ctx.write_csv("jobs.csv", header, [[r.get(k) for k in header] for r in summary_rows])
    ctx.write_csv("jobs_phases.csv", PHASE_FIELDS, phase_out)
    ctx.write_csv("jobs_links.csv", LINK_FIELDS, link_out)
    ctx.write_csv("jobs_decisions.csv", ["experiment", "placement", "policy", "round", "when",
                                         "t_s", "decision"],
                  [[d["experiment"], d["placement"], d["policy"], d["round"], d["when"],
                    d["t_s"], d["decision"]] for d in policy_out])
    out.headline = {"rounds": round_id, "results": [
        {k: r[k] for k in ("placement", "transport", "policy", "job", "iter_s_median",
                           "alone_iter_s", "slowdown", "model_policy_s", "overlap_mean",
                           "recovered", "cpu_bound")} for r in summary_rows]}
    return out
