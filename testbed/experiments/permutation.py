"""Permutation throughput (Hedera's evaluation): every host sends to one other host in a
traffic pattern; the aggregate goodput of each routing (single path, ECMP, Hedera, a
non-blocking switch as the reference) as a fraction of the hosts' summed rate, and for
finite flows their completion times against one flow alone."""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from controllers import trace
from controllers.flowsched import estimate_demands
from controllers.routing import plan as routing_plan
from testbed.config.controller import check_routing
from testbed.config.faults import FabricFault, check_faults, describe_steps
from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import tcp_payload_fraction
from testbed.results.plots import (
    cpu_bound_patch,
    pyplot,
    save,
    several_experiments,
    tagged,
    title,
)
from testbed.results.stats import percentile, percentile_or_none, round_or_none
from testbed.workloads.model.flows import (
    assign_ports,
    crosses,
    outage,
    parse_probe,
    probe_argv,
    probe_outage,
)
from topologies import nonblocking, patterns
from topologies.fairshare import proportional, sampled_totals
from topologies.graph import host_rate_sum
from topologies.kinds import own_routing, routings
from topologies.model import Topology

from .base import Context, Experiment, Outcome, check_cc


@dataclass(frozen=True, kw_only=True)
class Permutation(ExperimentSpec):
    type: Literal["permutation"] = "permutation"
    on_cluster: ClassVar[bool] = True
    patterns: list[str] = field(default_factory=lambda: ["stride:8", "randbij"])
    seed: int = 1  # repeat r of a seeded pattern uses seed + r
    # finite flows of this many bytes instead of long ones: their completion times are
    # measured, against one flow of the same size alone on the idle fabric (slowdown);
    # duration_s is then the budget they must finish within
    flow_bytes: int | None = None
    # the fabric's routings (topologies.kinds.routings; own: its own) and two references:
    # nonblocking, the same hosts and flows on one non-blocking switch (the ideal);
    # hedera_sa, Hedera placing by Simulated Annealing whatever controller.hedera.placement
    # says (to compare both placements in one run)
    routings: list[str] = field(default_factory=lambda: ["single", "ecmp"])
    duration_s: float = 20.0
    omit_s: float = 3.0
    repeats: int = 1
    # links or switches that fail during every phase (not the nonblocking reference's: it
    # has other switches); each flow's goodput is then recorded every `interval_s`, and
    # how long it carried nothing (flow_outages.csv)
    faults: list[FabricFault] = field(default_factory=list)
    interval_s: float = 0.1
    # with faults: a ping every `probe_ms` beside each flow (same hosts): its missing
    # replies time each failure on the network itself, below iperf3's interval and TCP's
    # retransmission timeouts (flow_outages.csv: probe_outage_s)
    probe_ms: float | None = None

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_faults(self.faults, path, topo, self.omit_s + self.duration_s)
        if self.faults and self.flow_bytes is not None:
            raise SpecError(f"{path}.faults: not with flow_bytes (finite flows report no "
                            "intervals)")
        if self.probe_ms is not None and not self.faults:
            raise SpecError(f"{path}.probe_ms: probes time failures; give faults too")
        if self.probe_ms is not None and not 2 <= self.probe_ms <= 1000:
            raise SpecError(f"{path}.probe_ms: must be in 2..1000 (got {self.probe_ms:g})")
        if not 0.1 <= self.interval_s <= 10:
            raise SpecError(f"{path}.interval_s: must be in 0.1..10 (iperf3's range; got "
                            f"{self.interval_s:g})")
        if self.repeats < 1:
            raise SpecError(f"{path}.repeats: must be >= 1")
        if not self.routings:
            raise SpecError(f"{path}.routings: at least one routing mode")
        if self.flow_bytes is not None and self.flow_bytes < 1:
            raise SpecError(f"{path}.flow_bytes: must be >= 1 (got {self.flow_bytes})")
        if {"hedera", "hedera_sa"} & set(self.routings) and any(h.relay for h in topo.hosts):
            raise SpecError(f"{path}.routings: hedera needs a switched fabric; BCube's servers "
                            "route for themselves")
        for j, routing in enumerate(self.routings):
            check_routing(routing, topo, f"{path}.routings[{j}]",
                          ("nonblocking", "hedera_sa") if "hedera" in routings(topo.kind)
                          else ("nonblocking",))
        for j, pattern in enumerate(self.patterns):
            parse_pattern(pattern, len(topo.hosts), f"{path}.patterns[{j}]")


def parse_pattern(text: str, n_hosts: int, path: str = "pattern") -> patterns.Pattern:
    """A traffic pattern name (topologies/patterns.py), checked against the fabric."""
    if n_hosts < 2:
        raise SpecError(f"{path}: a traffic pattern needs at least 2 hosts")
    try:
        return patterns.parse(text, n_hosts, path)
    except patterns.PatternError as exc:
        raise SpecError(str(exc)) from None


def _save_pattern(ctx: Context, routing: str, pattern: str, rep: int, seed: int, pairs) -> None:
    """The flows of one phase, so that it can be replayed exactly (patterns/*.json)."""
    d = ctx.out_dir / "patterns"
    d.mkdir(parents=True, exist_ok=True)
    name = ctx.raw_name(f"{routing}-{pattern.replace(':', '_')}-{rep}.json")
    (d / name).write_text(json.dumps({"pattern": pattern, "seed": seed, "repeat": rep,
                                      "flows": [list(p) for p in pairs]}))



def maxmin_model(pairs, hosts: int, mtu_bytes: int) -> float:
    """What a non-blocking switch gives these flows, as a fraction of the hosts' summed
    rate: their max-min fair shares limited only by the NICs (Hedera's natural demands:
    every flow's TCP fills what its sender and receiver leave it), counted as TCP payload.
    The reference the measured non-blocking column is checked against, pattern by
    pattern (all NICs at one rate)."""
    return sum(estimate_demands(pairs)) / hosts * tcp_payload_fraction(mtu_bytes)


MODEL_SAMPLES = 200  # hash draws per pattern for a hashed routing's max-min model
PF_SAMPLES = 50  # ... and for its proportionally fair model (a convex program per draw)
UNMODELLED = ("hedera", "hedera_sa", "cthrough")  # routings whose paths change as they run


def routed_model(topo: Topology, plan, pairs, mtu_bytes: int,
                 seed: int) -> tuple[float, float, float, float | None] | None:
    """What this fabric and its routing `plan` give these flows in theory, as fractions of
    the hosts' summed rate: the flows' max-min fair shares on the paths the plan gives them
    (controllers/trace.py), counted as TCP payload; for a hashed routing, over
    MODEL_SAMPLES draws of every flow's path (its shares of the hash), the mean and the
    10th and 90th percentiles (one run is one draw: its hash outcome lands in that range).
    Last, the mean of the proportionally fair shares on the same paths (PF_SAMPLES draws):
    where TCP settles when flows cross different numbers of busy links (None if the
    solver fails on a draw). None without a plan (a scheduler whose paths change while it runs: UNMODELLED)."""
    if plan is None:
        return None
    choices = [trace.paths(topo, plan, src, dst) for src, dst in pairs]
    fraction = tcp_payload_fraction(mtu_bytes)
    totals = sampled_totals(topo, choices, MODEL_SAMPLES, seed, rate_of=lambda r: r * fraction)
    try:
        fair = sampled_totals(topo, choices, PF_SAMPLES, seed, rate_of=lambda r: r * fraction,
                              share=proportional)
    except ValueError:  # the solver's failure: no proportional model, the rest stands
        fair = []
    ideal = host_rate_sum(topo)
    return (sum(totals) / len(totals) / ideal, percentile(totals, 10) / ideal,
            percentile(totals, 90) / ideal, sum(fair) / len(fair) / ideal if fair else None)


def model_cells(model: tuple[float | None, ...] | None) -> list[float | None]:
    """routed_model's four CSV cells (empty without a model)."""
    return [round_or_none(x, 4) for x in model] if model else [None] * 4


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


OUTAGE_HEADER = ["routing", "pattern", "repeat", "src", "dst", "faults", "crossed_fault",
                 "blackholed_s", "longest_outage_s", "resumed", "goodput_mbps", "interval_s",
                 "probe_outage_s", "probe_before_s"]
# the same probe measure this long before each failure: the background of congestion losses
PROBE_BACKGROUND_S = 2.0


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


def outages(topo: Topology, routing: str, pattern: str, rep: int, flows: list, res: list,
            steps: list[dict], replies: list[list[tuple[int, float]]] | None = None,
            probe_ms: float | None = None) -> list[list]:
    """One row per flow of a phase with faults: whether its packets (or its ACKs) were on a
    failed port just before the failure (`crossed_fault`, from the headers read there), and
    how long it carried nothing after the failure (flows.outage, the failure's time placed
    on the flow's own clock); with probes, the longest break the failures made in its pair's
    pings (flows.probe_outage; None without probes), and the same measure taken
    `PROBE_BACKGROUND_S` before each failure (what congestion alone does to the probes)."""
    what = describe_steps(steps)
    downs = [s for s in steps if s["action"] == "down"]
    seen = [tuple(c) for s in downs for c in s.get("connections_seen", [])]
    rows = []
    for i, (f, r) in enumerate(zip(flows, res)):
        crossed = crosses(seen, (topo.host(f.src).ip, topo.host(f.dst).ip, r.local_port, f.port))
        o = outage(r.intervals_mbps, r.interval_s, [s["time"] - r.started for s in downs],
                   window_s=1.0)
        probe = before = None
        if replies and probe_ms:
            probe, before = (max((probe_outage(replies[i], probe_ms / 1000, s["time"] - shift)
                                  for s in downs), default=0.0)
                             for shift in (0.0, PROBE_BACKGROUND_S))
        rows.append([routing, pattern, rep, r.src, r.dst, what, crossed, o["blackholed_s"],
                     o["longest_s"], o["resumed"], round(r.goodput_mbps, 3), r.interval_s,
                     probe, before])
    return rows


def restart_record(label: str, step: dict, steps: list[dict]) -> dict:
    """A controller restart in the headline: how long until every switch was resynchronised,
    what it read and changed, how many switches' tables differ from before the kill, and
    how many other fault steps happened while it was dead (which the resync must repair:
    then the tables should differ)."""
    killed = max((s["time"] for s in steps if s["fault"] == "controller"
                  and s["action"] == "down" and s["time"] < step["time"]), default=0.0)
    return {"phase": label, "at_s": step["at_s"], "ready_s": step["ready_s"],
            "rules_read": step["resync"]["rules_read"], "changes": step["resync"]["changes"],
            "switches_changed": len(step["table_diff"]),
            "faults_meanwhile": sum(1 for s in steps if s["fault"] != "controller"
                                    and killed < s["time"] < step["time"])}


def outage_headline(rows: list[list]) -> dict:
    """Per routing: the faults, how many flows crossed a failed port, their median and
    largest blackholed time, how many flows never came back, and how many others stalled
    within a second of a failure anyway (rerouted traffic joining their links, or TCP's
    own loss recovery: the background against which the cut flows stand out)."""
    out: dict = {}
    for routing in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == routing]
        cut = sorted(r[7] or 0.0 for r in mine if r[6])
        others = [r for r in mine if not r[6]]
        out[f"faults_{routing}"] = mine[0][5]
        out[f"flows_cut_{routing}"] = len(cut)
        out[f"blackholed_median_s_{routing}"] = cut[len(cut) // 2] if cut else None
        out[f"blackholed_max_s_{routing}"] = cut[-1] if cut else None
        out[f"flows_not_resumed_{routing}"] = sum(1 for r in mine if r[9] is False)
        out[f"other_flows_stalled_{routing}"] = f"{sum(1 for r in others if r[7])}/{len(others)}"
        probed = sorted(r[12] for r in mine if r[12])
        if any(r[12] is not None for r in mine):  # pairs whose pings a failure interrupted
            out[f"probes_cut_{routing}"] = f"{len(probed)}/{len(mine)}"
            # the same measure 2 s before each failure: congestion's share of the above
            out[f"probes_cut_before_{routing}"] = f"{sum(1 for r in mine if r[13])}/{len(mine)}"
            out[f"probe_outage_median_ms_{routing}"] = (round(probed[len(probed) // 2] * 1000, 1)
                                                        if probed else None)
            out[f"probe_outage_max_ms_{routing}"] = round(probed[-1] * 1000, 1) if probed else None
    return out


def headline(rows: list[list], exp: Permutation, modes: list[str], ideal: float,
             ideal_fcts: dict[str, float | None]) -> dict:
    """The headline of permutation.csv's rows (`modes`: the routings, "own" resolved): per
    pattern and routing the mean fraction of the ideal and the routing's own max-min and
    proportionally fair models,
    the non-blocking max-min model, ECMP over single path, and with several patterns the
    mean over patterns of the phases that were not CPU-bound (and how many were)."""
    out: dict = {"ideal_mbps": ideal}
    if ideal_fcts:
        out["ideal_fct_s"] = {k: round(v, 4) for k, v in ideal_fcts.items() if v}
    for pattern in exp.patterns:
        means = {}
        for routing in modes:
            mine = [r for r in rows if r[0] == routing and r[1] == pattern]
            means[routing] = sum(r[4] for r in mine) / len(mine)
            out[f"{pattern}_{routing}_normalised"] = round(means[routing], 4)
            if mine[0][15] is not None:
                out[f"{pattern}_{routing}_model"] = round(
                    sum(r[15] for r in mine) / len(mine), 4)
                fair = [r[18] for r in mine if r[18] is not None]
                if fair:
                    out[f"{pattern}_{routing}_model_pf"] = round(sum(fair) / len(fair), 4)
        model = [r[14] for r in rows if r[1] == pattern and r[0] == modes[0]]
        out[f"{pattern}_maxmin_model"] = round(sum(model) / len(model), 4)
        if "ecmp" in means and "single" in means and means["single"] > 0:
            out[f"{pattern}_ecmp_over_single"] = round(means["ecmp"] / means["single"], 3)
    if len(exp.patterns) > 1:  # mean over patterns, CPU-bound phases left out (and counted)
        for routing in modes:
            ok = [r[4] for r in rows if r[0] == routing and not r[8]]
            out[f"mean_{routing}_normalised"] = round(sum(ok) / len(ok), 4) if ok else None
            out[f"cpu_bound_phases_{routing}"] = sum(1 for r in rows if r[0] == routing and r[8])
    return out


# Hedera (Al-Fares et al., NSDI 2010), k=4 Fat-Tree testbed, means over its patterns, as
# fractions of the full bisection: drawn beside a run that has the same routings. Their
# "ECMP" behaved like one spanning tree (about 0.21-0.22 on stride-4/8), closer to `single`.
HEDERA_PUBLISHED_MEANS = {"nonblocking": 0.71, "ecmp": 0.44, "hedera": 0.67}


def _mean(rows: list[dict], column: str) -> float | None:
    """The mean of a column's filled cells (None: none filled, a routing without a model)."""
    values = [float(r[column]) for r in rows if r.get(column) not in (None, "", "None")]
    return sum(values) / len(values) if values else None


def plot(rows: list[dict], plots: Path) -> Path:
    """Per pattern, each routing's aggregate goodput as a fraction of the ideal (the mean
    over repeats; hatched when a phase was CPU-bound), and the models beside it: the max-min
    fair shares on the routing's own paths (a tick across its bar; for a hashed routing a
    line through it from the 10th to the 90th percentile of hash draws), the proportionally
    fair shares (a diamond), and the max-min shares on a non-blocking switch (dotted across
    the pattern's group: what any routing could reach). With Hedera's routings, the Hedera
    paper's testbed means (the Hedera plot). Two experiments' rows stay apart."""
    plt = pyplot()
    several = several_experiments(rows)
    patterns = list(dict.fromkeys(r["pattern"] for r in rows))  # in the order they ran
    series = list(dict.fromkeys((r.get("experiment") if several else None, r["routing"])
                                for r in rows))
    routings = {routing for _, routing in series}
    fig, ax = plt.subplots(figsize=(min(18, max(8, 0.55 * len(patterns) * len(series) / 2 + 3)),
                                    4.5))
    width = 0.8 / len(series)
    ticks: list[tuple[float, float]] = []  # (x, max-min model of the routing's paths)
    ranges: list[tuple[float, float, float]] = []  # (x, its 10th, its 90th percentile)
    fair: list[tuple[float, float]] = []  # (x, proportionally fair model)
    any_hatched, published = False, set()
    for i, (exp, routing) in enumerate(series):
        vals, hatches = [], []
        for j, p in enumerate(patterns):
            sel = [r for r in rows if r["pattern"] == p and r["routing"] == routing
                   and (not several or r.get("experiment") == exp)]
            vals.append(_mean(sel, "normalised_to_ideal") or 0.0)
            hatches.append("//" if any(r["cpu_bound"] == "True" for r in sel) else "")
            x = j + i * width
            if (m := _mean(sel, "routed_model")) is not None:
                ticks.append((x, m))
                lo, hi = _mean(sel, "routed_model_p10"), _mean(sel, "routed_model_p90")
                if lo is not None and hi is not None and hi - lo > 1e-4:
                    ranges.append((x, lo, hi))
            if (pf := _mean(sel, "routed_model_pf")) is not None:
                fair.append((x, pf))
        bars = ax.bar([j + i * width for j in range(len(patterns))], vals, width,
                      label=tagged(routing, {"experiment": exp}, several))
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)  # hatched: CPU-bound, not faithful
        any_hatched = any_hatched or any(hatches)
        if "hedera" in routings and routing in HEDERA_PUBLISHED_MEANS \
                and routing not in published:
            published.add(routing)
            ax.axhline(HEDERA_PUBLISHED_MEANS[routing], ls="--", lw=0.8,
                       color=bars[0].get_facecolor(),
                       label=f"{routing}: Hedera paper's testbed mean")
    if ticks:
        ax.hlines([y for _, y in ticks], [x - width / 2 for x, _ in ticks],
                  [x + width / 2 for x, _ in ticks], colors="black", lw=1.5,
                  label="model (max-min)")
    if ranges:
        ax.vlines([x for x, _, _ in ranges], [lo for _, lo, _ in ranges],
                  [hi for _, _, hi in ranges], colors="black", lw=0.8,
                  label="model (max-min), 10th-90th percentile of hash draws")
    if fair:
        ax.plot([x for x, _ in fair], [y for _, y in fair], "D", ls="", color="black", ms=3,
                mfc="white", label="model (proportionally fair)")
    # the non-blocking switch's max-min model: one per pattern and experiment (its flows)
    spans = []
    for j, p in enumerate(patterns):
        for exp in dict.fromkeys(e for e, _ in series):
            sel = [r for r in rows if r["pattern"] == p
                   and (not several or r.get("experiment") == exp)]
            xs = [j + i * width for i, (e, _) in enumerate(series) if e == exp]
            if (m := _mean(sel, "maxmin_model")) is not None:
                spans.append((m, min(xs) - width / 2, max(xs) + width / 2))
    if spans:
        ax.hlines([y for y, _, _ in spans], [a for _, a, _ in spans], [b for _, _, b in spans],
                  colors="tab:gray", linestyles=":", lw=1.2,
                  label="model (max-min, non-blocking switch)")
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(patterns))], patterns,
                  rotation=45 if len(patterns) > 4 else 0, ha="right" if len(patterns) > 4
                  else "center", fontsize=8)
    ax.set_xlabel("traffic pattern")
    ax.set_ylabel("aggregate goodput (fraction of ideal)")
    ax.set_ylim(0, 1.05)
    handles, _ = ax.get_legend_handles_labels()
    if any_hatched:
        handles.append(cpu_bound_patch())
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    name = "Permutation (Hedera's evaluation)" if "hedera" in routings else "Permutation"
    ax.set_title(title(name, "aggregate goodput vs ideal and the models (mean over repeats)",
                       rows, ("topology", "rate_mbps", "pattern", "routing")), fontsize=10)
    return save(fig, plots / "permutation.png")


EXPERIMENT = Experiment(spec=Permutation, run=run, plots={"permutation.csv": plot})
