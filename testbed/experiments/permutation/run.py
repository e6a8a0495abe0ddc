"""The permutation experiment's runner: one fabric per routing (the non-blocking reference
on a switch of its own), each pattern's flows in it, repeat by repeat, the models beside
each phase; with faults, the fabric failing under every phase but the reference's, each
flow's outage timed (by its goodput, and by pings beside it when asked)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from controllers.routing import plan as routing_plan
from testbed.results.stats import percentile_or_none
from testbed.workloads.model.flows import assign_ports, parse_probe, probe_argv
from topologies import nonblocking, patterns
from topologies.graph import host_rate_sum
from topologies.kinds import own_routing

from ..base import Context, Outcome, check_cc
from .analysis import OUTAGE_HEADER, headline, outage_headline, outages, restart_record
from .model import UNMODELLED, maxmin_model, model_cells, routed_model
from .spec import Permutation, parse_pattern


def _save_pattern(ctx: Context, routing: str, pattern: str, rep: int, seed: int, pairs) -> None:
    """The flows of one phase, so that it can be replayed exactly (patterns/*.json)."""
    d = ctx.out_dir / "patterns"
    d.mkdir(parents=True, exist_ok=True)
    name = ctx.raw_name(f"{routing}-{pattern.replace(':', '_')}-{rep}.json")
    (d / name).write_text(json.dumps({"pattern": pattern, "seed": seed, "repeat": rep,
                                      "flows": [list(p) for p in pairs]}))


def run(ctx: Context, exp: Permutation) -> Outcome:
    out = Outcome()
    topo = ctx.topo
    hosts = [h.name for h in topo.hosts]
    modes = [own_routing(topo.kind, r) for r in exp.routings]
    rows, flow_rows, outage_rows = [], [], []
    restarts: list[dict] = []
    ideal_fcts: dict[str, float | None] = {}
    for routing in modes:
        fabric_topo, fabric_routing, hedera = topo, routing, None
        if routing == "nonblocking":  # the reference: the same hosts on one ideal switch
            rate = min(l.rate_mbps for l in topo.links if topo.is_host(l.a) or topo.is_host(l.b))
            fabric_topo, fabric_routing = nonblocking(len(hosts), rate), "single"
        if routing == "hedera_sa":  # Hedera placing by Simulated Annealing
            fabric_routing, hedera = "hedera", {"placement": "annealing"}
        with ctx.fabric(fabric_topo, fabric_routing, f"permutation {routing}",
                        hedera=hedera) as fab:
            ideal = host_rate_sum(fab.topo)  # links.rate_mbps, when set, is in fab.topo
            model_plan = (None if fabric_routing in UNMODELLED
                          else routing_plan(fab.topo, fabric_routing))
            ideal_fct = None
            if exp.flow_bytes:  # one flow of that size alone, across the whole fabric
                alone = fab.run_flows(
                    assign_ports([(hosts[0], hosts[-1])], exp.duration_s, 0, exp.flow_bytes),
                    f"perm-{routing}-alone")[0]
                ideal_fct = alone.seconds or None
                ideal_fcts[routing] = ideal_fct
                ctx.log(f"  {routing}: one {exp.flow_bytes}-byte flow alone "
                        f"{hosts[0]}->{hosts[-1]} took {alone.seconds:.3f} s")
            for pattern in exp.patterns:
                parsed = parse_pattern(pattern, len(hosts))
                for rep in range(exp.repeats):
                    pairs = patterns.generate(parsed, topo, exp.seed + rep)
                    _save_pattern(ctx, routing, pattern, rep, exp.seed + rep, pairs)
                    label = f"{routing} {pattern} #{rep}"
                    ctx.log(f"  {label}: {len(pairs)} flows for {exp.duration_s:g} s")
                    faults = exp.faults if routing != "nonblocking" else []
                    flows = assign_ports(pairs, exp.duration_s,
                                         0 if exp.flow_bytes else exp.omit_s, exp.flow_bytes,
                                         interval_s=exp.interval_s if faults else None)
                    with ctx.traffic_phase(fab, out, label) as checks, \
                            ctx.faults(fab, faults, label) as steps:
                        tag = f"perm-{routing}-{pattern.replace(':', '')}-{rep}"
                        probes = start_probes(fab, pairs, exp.probe_ms,
                                              exp.omit_s + exp.duration_s + 1,
                                              ctx.out_dir / "flows" / ctx.raw_name(tag)) \
                            if faults and exp.probe_ms else []
                        try:
                            res = fab.run_flows(flows, tag)
                        finally:
                            replies = collect_probes(fab, probes)
                        checks["faults"] = steps
                    if faults:
                        outage_rows += outages(fab.topo, routing, pattern, rep, flows, res,
                                               steps, replies, exp.probe_ms)
                        restarts += [restart_record(label, s, steps) for s in steps
                                     if "resync" in s]
                    if not exp.flow_bytes:  # iperf3 reports each flow's algorithm
                        check_cc(res, ctx.spec.hosts.congestion_control, out, label)
                    for r in res:
                        if r.error:
                            out.warnings.append(f"{label}: {r.src}->{r.dst}: {r.error}")
                    agg = sum(r.goodput_mbps for r in res)
                    fcts = sorted(r.seconds for r in res) if exp.flow_bytes else []
                    slow = [f / ideal_fct for f in fcts] if ideal_fct else []
                    rows.append([routing, pattern, rep, round(agg, 3), round(agg / ideal, 4),
                                 checks["cpu"]["ovs_added_delay_p50_ms"],
                                 checks["cpu"]["ovs_thread_p90"], checks["cpu"]["machine_idle_mean"],
                                 checks["cpu"]["cpu_bound"],
                                 checks["conservation"]["lost_in_switches"],
                                 percentile_or_none(fcts, 50, 4), percentile_or_none(fcts, 99, 4),
                                 percentile_or_none(slow, 50, 4), percentile_or_none(slow, 99, 4),
                                 round(maxmin_model(pairs, len(hosts), ctx.spec.links.mtu_bytes),
                                       4),
                                 *model_cells(routed_model(fab.topo, model_plan, pairs,
                                                           ctx.spec.links.mtu_bytes,
                                                           exp.seed + rep))])
                    flow_rows += [[routing, pattern, rep, r.src, r.dst, round(r.goodput_mbps, 3),
                                   r.retransmits, r.sender_cc,
                                   round(r.seconds, 4) if exp.flow_bytes else None,
                                   round(ideal_fct, 4) if ideal_fct else None,
                                   round(r.seconds / ideal_fct, 3) if ideal_fct else None]
                                  for r in res]
    ctx.write_csv("permutation.csv", ["routing", "pattern", "repeat", "aggregate_mbps",
                                      "normalised_to_ideal", "ovs_added_delay_p50_ms",
                                      "ovs_thread_p90_core", "machine_idle_mean", "cpu_bound",
                                      "lost_in_switches_pkts", "fct_p50_s", "fct_p99_s",
                                      "slowdown_p50", "slowdown_p99", "maxmin_model",
                                      "routed_model", "routed_model_p10", "routed_model_p90",
                                      "routed_model_pf"],
                  rows)
    ctx.write_csv("permutation_flows.csv", ["routing", "pattern", "repeat", "src", "dst",
                                            "goodput_mbps", "retransmits_pkts", "sender_cc",
                                            "fct_s", "ideal_fct_s", "slowdown"],
                  flow_rows)
    out.headline = headline(rows, exp, modes, ideal, ideal_fcts)
    if outage_rows:
        ctx.write_csv("flow_outages.csv", OUTAGE_HEADER, outage_rows)
        out.headline.update(outage_headline(outage_rows))
    if restarts:
        out.headline["controller_restarts"] = restarts
        changed = [r for r in restarts if r["switches_changed"] and not r["faults_meanwhile"]]
        if changed:  # nothing else failed: the tables should be exactly as they were
            out.warnings.append(f"{changed[0]['phase']}: the restarted controller left "
                                f"{changed[0]['switches_changed']} switches' tables different "
                                "from before its death (events.jsonl: table_diff)")
        lost = [f"{r[3]}->{r[4]} ({r[0]})" for r in outage_rows if r[9] is False]
        if lost:
            out.warnings.append(f"permutation: {len(lost)} flows never resumed after the "
                                f"faults, e.g. {lost[:3]}")
    return out


def start_probes(fab, pairs: list[tuple[str, str]], probe_ms: float, seconds: float,
                 logs: Path) -> list[tuple[subprocess.Popen, Path]]:
    """A ping every `probe_ms` from each flow's source to its destination for `seconds`,
    each writing to a file in `logs` (an unread pipe would stop ping after about 800
    replies, 64 KB: 4 s at 5 ms, before a failure 5 s into the phase)."""
    probes = []
    for i, (src, dst) in enumerate(pairs):
        log = logs / f"probe-{i}-{src}-{dst}.log"
        probes.append((fab.start_process(src, probe_argv(fab.topo.host(dst).ip,
                                                          probe_ms / 1000, seconds),
                                         f"probe {src}->{dst}", log), log))
    return probes


def collect_probes(fab, probes: list[tuple[subprocess.Popen, Path]],
                   timeout_s: float = 10.0) -> list[list[tuple[int, float]]]:
    """Each probe's replies (icmp_seq, arrival time), once it has reached its deadline
    (stopped if it outlives `timeout_s` more)."""
    deadline = time.time() + timeout_s
    for proc, _ in probes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    fab.stop_processes([proc for proc, _ in probes])
    return [parse_probe(log.read_text(errors="replace") if log.exists() else "")
            for _, log in probes]
