"""The parallel experiment's runner: for each fabric and link rate, each job's ranks start
in their placed hosts (one rank per host), every switch queue is sampled, and the bytes
each class (collective type) put through the core are read from the switches' counters."""
from __future__ import annotations

import dataclasses
import json
import time

from testbed.config.loader import dump_json
from testbed.config.qos import QosConfig
from testbed.core.errors import TestbedError
from testbed.results.verdict import late_rank
from testbed.workloads.launch import parallel_argv
from testbed.workloads.model.parallel.cost import KINDS, sent_bytes
from testbed.workloads.model.parallel.job import JobConfig, RoceTransport
from testbed.workloads.model.rdma import INT_LEN
from topologies.kinds import own_routing
from topologies.model import Topology, at_rate, ifname

from ..base import Context, Outcome, Phase, slug
from ..qos_common import pfc_summary, switch_slots
from ..rdma import RdmaFlow, host_engine, parse_scheme, rdma_qos, scheme_record, telemetry
from ..trainers.analysis import queue_stats, read_records
from ..trainers.model import host_link
from ..trainers.ranks import run_processes
from .analysis import ITER_FIELDS, KIND_FIELDS, summarise
from .expect import expected, transport_label
from .model import (
    CORE_ROLES,
    core_bytes,
    job_config,
    parallel_qos,
    probe_pairs,
    unanswered,
)
from .spec import Parallel, ParallelJob, job_hosts, parallel_topologies

MASTER_PORT = 29700


def class_kinds(dp) -> dict[int, str]:
    """Switch class index -> the collective type it carries (its name), others omitted."""
    return {i: c["name"].split("+")[0] for i, c in enumerate(dp.classes)
            if c["name"].split("+")[0] in KINDS}


def roce_class_kind(dp, cfg: JobConfig) -> dict[int, str]:
    """Over RoCE, every collective type's data shares the RoCE class: the class is the
    type's when the job runs one type alone (else none: no per-type switch counts)."""
    plan = cfg.plan()
    used = {k for r in range(cfg.layout.world) for k, v in sent_bytes(plan, r).items() if v}
    if len(used) != 1:
        return {}
    return {i: next(iter(used)) for i, c in enumerate(dp.classes) if c["name"] == "roce"}


def port_counters(dp) -> dict[tuple[int, int], int]:
    """Bytes enqueued so far on every class of every switch egress port."""
    return {(p["id"], c): dp.queue(p["id"], c).enq_bytes for p in dp.ports
            if not p["is_host"] for c in range(len(dp.classes))}


def class_bytes(dp, topo: Topology, before: dict, after: dict, kinds: dict[int, str]
                ) -> tuple[dict[str, int], dict[str, int], int]:
    """From two snapshots: bytes per collective type through core / spine egress ports, the
    busiest switch port's bytes per type, and the core bytes of other classes."""
    roles = {s.name: s.role for s in topo.switches}
    node = {p["id"]: p["node"] for p in dp.ports}
    core, busiest = dict.fromkeys(KINDS, 0), dict.fromkeys(KINDS, 0)
    other = 0
    for (port, cls), b in after.items():
        delta = b - before[(port, cls)]
        in_core = roles.get(node[port]) in CORE_ROLES
        if cls in kinds:
            k = kinds[cls]
            busiest[k] = max(busiest[k], delta)
            core[k] += delta if in_core else 0
        elif in_core:
            other += delta
    return core, busiest, other


def roce_transport(exp: Parallel, scheme: str, cfg: JobConfig, topo: Topology,
                   hosts: list[str], rtt: dict[str, float], job_dir) -> tuple[JobConfig, dict]:
    """The job's collectives over RoCE under `scheme`: every rank's engine config written
    into the job's folder (HPCC's T and the "+w" window from the longest measured round trip
    of the job's groups, plus a full packet's transmission); the config that says so, and
    what the scheme ran with."""
    from testbed.workloads import roce
    from testbed.workloads.parallel.rocecomm import rank_engines
    r = exp.roce
    tel = telemetry(r, scheme)
    rates = [topo.link_at(h, 0).rate_mbps for h in hosts]
    packet = r.roce_mtu + roce.WIRE_OVERHEAD + (INT_LEN if tel else 0)
    # 0 when no ping answered: the schemes that need it refuse to start
    base_rtt_us = round(max(rtt.values()) * 1e6 + packet * 8 / min(rates), 1) if rtt else 0.0
    links = [link.rate_mbps for link in topo.links]
    folder = job_dir / "roce"
    folder.mkdir(exist_ok=True)
    experts = any(w.expert_params for w in cfg.plan().layers())
    engines = rank_engines(cfg.layout, [(topo.host(h).ip, roce.ROCE_PORT) for h in hosts],
                           [host_engine(r, scheme, "", rate, links, base_rtt_us=base_rtt_us)
                            for rate in rates],
                           r.qps_per_flow, r.source_port == "per_qp", experts)
    for rank, eng in enumerate(engines):
        eng.save(folder / f"rank{rank}.conf")
    user = r.user_cc.source if parse_scheme(scheme).cc == "user" and r.user_cc else None
    transport = RoceTransport(binary=str(roce.build(user)), config_dir=str(folder),
                              channels=r.qps_per_flow, mtu=r.roce_mtu,
                              telemetry_bytes=INT_LEN if tel else 0)
    # what it ran with, at every host rate of the job
    record = scheme_record(r, [RdmaFlow(src=hosts[0], dst=h, size_bytes=1) for h in hosts],
                           topo, scheme, base_rtt_us)
    (folder / "scheme.json").write_text(json.dumps(record, indent=1))
    return dataclasses.replace(cfg, roce=transport), record


def roce_counters(job_dir, world: int) -> dict:
    """The ranks' engines' counters, summed over the job (the largest reordering and the
    most sending one rank lost to late wake-ups: the worst rank's)."""
    out: dict = {}
    for rank in range(world):
        path = job_dir / f"rank{rank}.summary.json"
        totals = json.loads(path.read_text()).get("roce") if path.exists() else None
        for k, v in (totals or {}).items():
            out[f"roce_{k}"] = (max(out.get(f"roce_{k}", 0), v)
                                if k in ("reorder_max", "pace_lost_us", "pace_lost_cpu_us")
                                else round(out.get(f"roce_{k}", 0) + v, 6))
    return out


def pause_counts(pfc: dict, iters: int) -> dict:
    """PFC pauses while a job ran (its warm-up included): their number, the time links
    were paused (summed over the paused links), both per iteration too."""
    paused_ms = sum(pfc.get("paused_ms", {}).values())
    return {"pfc_pauses": pfc["pauses"], "pfc_paused_ms": round(paused_ms, 3),
            "pfc_pauses_per_iter": round(pfc["pauses"] / iters, 2),
            "pfc_paused_ms_per_iter": round(paused_ms / iters, 3)}


def run_job(ctx: Context, fab: Phase, exp: Parallel, job: ParallelJob, index: int,
            fabric_label: str, rate: float, outcome: Outcome, experiment: int,
            scheme: str | None = None, routing: str = "ecmp", qos: QosConfig | None = None
            ) -> tuple[dict, list[list], list[list], list[list]]:
    topo = fab.topo
    hosts = job_hosts(job, topo)
    label = job.label()
    job_dir = ctx.out_dir / "parallel" / ctx.raw_name(
        f"{index:02d}-{slug(fabric_label)}-{slug(label)}")
    job_dir.mkdir(parents=True, exist_ok=True)
    cfg = job_config(exp, job, rate)
    master = f"{topo.host(hosts[0]).ip}:{MASTER_PORT + index}"
    world = len(hosts)

    def argv_of(rank: int, host: str) -> list[str]:
        return parallel_argv(rank, world, master, job_dir, ifname(host, 0))

    pairs = probe_pairs(job.layout, hosts)
    rtts = {k: fab.ping_rtt_s(a, b) for k, (a, b) in pairs.items()}
    rtt = {k: v for k, v in rtts.items() if v is not None}
    record: dict = {}
    if scheme is not None:
        cfg, record = roce_transport(exp, scheme, cfg, topo, hosts, rtt, job_dir)
    dump_json(cfg, job_dir / "job.json")
    dp = fab.dataplane()
    sampler = ctx.class_sampler(dp, switch_slots(dp), exp.sample_hz)
    kinds = class_kinds(dp)
    if scheme is not None:
        kinds = roce_class_kind(dp, cfg)
    groups = [[experiment, fabric_label, label, kind, g, " ".join(str(r) for r in ranks),
               " ".join(hosts[r] for r in ranks)]
              for kind in ("tp", "pp", "dp", "ep") for g, ranks in
              enumerate(job.layout.groups(kind)) if len(ranks) > 1]
    ctx.write_csv("parallel_groups.csv", ["experiment", "fabric", "job", "kind", "group",
                                          "ranks", "hosts"], groups)
    ctx.log(f"  {fabric_label} {label}: {world} ranks on {', '.join(hosts)}")
    measured: dict = {}
    with ctx.traffic_phase(fab, outcome, f"{fabric_label} {label}") as checks:
        before = port_counters(dp)
        t0_ns = time.monotonic_ns()
        sampler.start()
        try:
            measured.update(run_processes(fab, [(r, h, "worker") for r, h in enumerate(hosts)],
                                          job_dir, argv_of, exp.job_timeout_s,
                                          f"parallel {fabric_label} {label}"))
        except TestbedError as exc:  # a hung rank fails no one but its neighbours
            errors = {r: (job_dir / f"rank{r}.error").read_text() for r in range(world)
                      if (job_dir / f"rank{r}.error").exists()}
            silent = unanswered(errors)
            if silent:
                raise TestbedError(f"{exc}; rank(s) {', '.join(map(str, silent))} stopped "
                                   "answering") from None
            raise
        finally:
            sampler.stop()
        after = port_counters(dp)
        if scheme is not None:   # the lossless class's pauses while the job ran
            measured.update(pause_counts(pfc_summary(fab.qos_status_dir, t0_ns), exp.iters))
    core, busiest, other = class_bytes(dp, topo, before, after, kinds)
    measured["core_other_bytes"] = other
    names = {p["id"]: p["ifname"] for p in dp.ports}
    _, sw, sw_port = topo.ports_of(hosts[0])[0]
    dp.close()
    queue = queue_stats(sampler.samples, names, ifname(sw, sw_port), sampler.achieved_rate_hz())
    rows = {r: read_records(job_dir / f"rank{r}.jsonl") for r in range(world)}
    host_rate = min(host_link(topo, h).rate_mbps for h in hosts)
    mtu = fab.links.mtu_bytes
    e = expected(exp, job, topo, hosts, rate, mtu, rtt, routing, qos, fab.links.burst_us,
                 scheme)
    plan, net, loads, pred, paths, wire = e.plan, e.net, e.loads, e.pred, e.paths, e.wire
    model_sent = {r: sent_bytes(plan, r) for r in range(world)}
    summary, kind_rows, iter_rows = summarise(
        experiment=experiment, fabric=fabric_label, label=label, plan=plan,
        compute=exp.compute, model_name=exp.model if exp.compute == "emulated" else "mlp",
        hosts=hosts, rows=rows, warmup=exp.warmup_iters, pred=pred, model_sent=model_sent,
        net=net, loads=loads, model_core=core_bytes(plan, topo, hosts),
        core_measured=core if kinds else None,
        busiest_measured=busiest if kinds else None, rate_mbps=host_rate, mtu=mtu, rtt=rtt,
        queue=queue, measured=measured, checks=checks, wire=wire,
        transport=transport_label(ctx.spec.hosts, scheme), paths=paths)
    if scheme is not None:
        summary.update(roce_counters(job_dir, world))
        summary["roce_base_rtt_us"] = record.get("base_rtt_us")
    if summary["cpu_bound"] and not checks["cpu"]["cpu_bound"]:
        outcome.warnings.append(
            f"{fabric_label} {label}: CPU-bound (a rank waited "
            f"{(summary['worker_cpu_wait_share'] or 0):.0%} of an iteration for a core); its "
            "times are not the network's")
    if why := late_rank(summary, exp.iters):
        summary["cpu_bound"] = True
        outcome.warnings.append(f"{fabric_label} {label}: {why}; its times are not the "
                                "network's")
    return summary, kind_rows, iter_rows, groups


def run(ctx: Context, exp: Parallel) -> Outcome:
    out = Outcome()
    experiment = ctx.experiment or 0  # the spec index, which its rows carry
    rows, kind_rows, iter_rows = [], [], []
    schemes: list[str | None] = list(exp.roce.schemes) if exp.transport == "roce" else [None]
    index = 0
    fabrics = [(topo, rate, own_routing(topo.kind, routing), scheme)
               for topo in parallel_topologies(exp, ctx.topo)
               for rate in exp.rates_mbps or [ctx.spec.links.rate_mbps]
               for routing in exp.routings or [ctx.spec.controller.routing]
               for scheme in schemes]
    for topo, rate, routing, scheme in fabrics:
        fabric = at_rate(topo, rate)
        # over RoCE: the scheme's classes (its data lossless, ECN-marked if it reacts)
        qos = (parallel_qos(exp, ctx.spec.qos, ctx.spec.links.buffer_pkts) if scheme is None
               else rdma_qos(exp.roce, scheme))
        fabric_label = (f"{topo.kind}" + (f"@{rate:g}Mbps" if rate else "")
                        + (f"/{routing}" if len(exp.routings) > 1 else "")
                        + (f" roce:{scheme}" if scheme is not None else ""))
        with ctx.fabric(fabric, routing, f"parallel {fabric_label}", qos=qos, rate_mbps=None,
                        udp_hash=scheme is not None and exp.roce.source_port == "per_qp"
                        ) as fab:
            link_rate = rate or min(link.rate_mbps for link in fabric.links)
            for job in exp.jobs:
                summary, kr, ir, _ = run_job(ctx, fab, exp, job, index, fabric_label,
                                             link_rate, out, experiment, scheme, routing, qos)
                index += 1
                rows.append(summary)
                kind_rows += kr
                iter_rows += ir
                ctx.log(f"    iteration {summary['iter_s_median']} s (model "
                        f"{summary['model_iter_s']} s, x{summary['iter_over_model']}; on its "
                        f"paths {summary['model_paths_iter_s']} s, "
                        f"x{summary['iter_over_paths_model']}), "
                        f"bubble {summary['bubble']} (ideal {summary['bubble_ideal']}), "
                        f"core {summary['core_bytes_per_iter']} B/iter (model "
                        f"{summary['model_core_bytes_per_iter']}), machine idle "
                        f"{summary['machine_idle_mean']:.0%}")
                for k in kr:
                    ctx.log(f"      {k[3]}: {k[4]} B/rank (model {k[5]}, x{k[6]}), "
                            f"{k[10]} s (model {k[11]}, x{k[12]}; busiest link load {k[16]}, "
                            f"model {k[15]})")
    header = list(dict.fromkeys(k for r in rows for k in r))
    ctx.write_csv("parallel.csv", header, [[r.get(k) for k in header] for r in rows])
    ctx.write_csv("parallel_kinds.csv", KIND_FIELDS, kind_rows)
    ctx.write_csv("parallel_iterations.csv",
                  ["experiment", "fabric", "job", "rank", "host", "iteration"] + ITER_FIELDS,
                  iter_rows)
    out.headline = {"jobs": len(rows), "results": [
        {k: r[k] for k in ("fabric", "job", "transport", "iter_s_median", "model_iter_s",
                           "iter_over_model", "model_paths_iter_s", "iter_over_paths_model",
                           "bubble", "bubble_ideal", "cpu_bound")}
        for r in rows]}
    return out
