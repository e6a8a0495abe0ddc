"""The first experiments: reachability, link calibration, queue calibration, permutation
throughput. Each writes CSV files with units in their headers and returns headline metrics
and fidelity warnings; plots are drawn later from those files only."""
from __future__ import annotations

import json
import statistics
import subprocess
import time

from controllers.flowsched import estimate_demands
from topologies import dumbbell, nonblocking, patterns
from topologies.graph import host_rate_sum

from . import qos_experiments, training
from .monitor import QueueSampler, percentile
from .phases import Outcome, _check_cc, _traffic_phase, tcp_payload_fraction
from .spec import LinkCalibration, Permutation, QueueCalibration, Reachability, parse_pattern
from .system import in_netns
from .traffic import FlowRunner, assign_ports

# ---- reachability ------------------------------------------------------------------------

def reachability(ctx, exp: Reachability) -> Outcome:
    out = Outcome()
    topo = ctx.topo
    rows = []
    with ctx.fabric(topo, ctx.spec.controller.routing, "reachability") as fab:
        for src in topo.hosts:
            procs = []
            for dst in topo.hosts:
                if dst is src:
                    continue
                argv = ["ping", "-n", "-q", "-c", str(exp.count), "-i", f"{exp.interval_s:g}",
                        "-W", "2", dst.ip]
                procs.append((dst, subprocess.Popen(in_netns(fab.host_pid(src.name), argv),
                                                    stdout=subprocess.PIPE, text=True)))
            for dst, proc in procs:
                text = proc.communicate(timeout=60)[0]
                rows.append([src.name, dst.name, *_parse_ping(text, exp.count)])
    ctx.write_csv("reachability.csv", ["src", "dst", "sent_pkts", "received_pkts",
                                       "loss_pct", "rtt_avg_ms", "rtt_max_ms", "rtt_min_ms"], rows)
    sent = sum(r[2] for r in rows)
    received = sum(r[3] for r in rows)
    failed = [f"{r[0]}->{r[1]}" for r in rows if r[3] < r[2]]
    rtts = [r[5] for r in rows if r[5] is not None]
    # A pair's first ping also waits for ARP through the controller (all pairs start at
    # once); its minimum is the path's own round trip.
    rtt_mins = [r[7] for r in rows if r[7] is not None]
    out.headline = {"pairs": len(rows), "pings_sent": sent, "pings_received": received,
                    "loss_pct": round(100 * (sent - received) / max(1, sent), 3),
                    "pairs_with_loss": len(failed),
                    "rtt_median_ms": round(statistics.median(rtts), 3) if rtts else None,
                    "rtt_max_ms": round(max(rtts), 3) if rtts else None,
                    "rtt_min_median_ms": round(statistics.median(rtt_mins), 3) if rtt_mins else None}
    if failed:
        out.warnings.append(f"reachability: {len(failed)} pairs lost pings, e.g. {failed[:3]}")
    return out


def _parse_ping(text: str, count: int) -> list:
    """[sent, received, loss %, rtt avg, rtt max, rtt min] from ping's summary."""
    sent, received, avg, mx, mn = count, 0, None, None, None
    for line in text.splitlines():
        if "packets transmitted" in line:
            parts = line.split(",")
            sent = int(parts[0].split()[0])
            received = int(parts[1].split()[0])
        if line.startswith("rtt") or line.startswith("round-trip"):
            vals = line.split("=")[1].split()[0].split("/")
            mn, avg, mx = float(vals[0]), float(vals[1]), float(vals[2])
    loss = round(100 * (sent - received) / max(1, sent), 2)
    return [sent, received, loss, avg, mx, mn]


# ---- link calibration --------------------------------------------------------------------

def link_calibration(ctx, exp: LinkCalibration) -> Outcome:
    out = Outcome()
    rows = []
    for rate in exp.rates_mbps:
        topo = nonblocking(hosts=2, rate_mbps=rate)
        label = f"link {rate:g} Mb/s"
        with ctx.fabric(topo, "single", label) as fab:
            with _traffic_phase(ctx, fab, out, label) as checks:
                res = FlowRunner(fab, ctx.out_dir / "flows").run(
                    assign_ports([("h1", "h2")], exp.duration_s, exp.omit_s), f"link-{rate:g}")[0]
        ratio = res.goodput_mbps / rate
        rows.append([rate, round(res.goodput_mbps, 3), round(ratio, 4),
                     round(tcp_payload_fraction(ctx.spec.links.mtu_bytes), 4), res.retransmits, res.sender_cc,
                     checks["conservation"]["lost_in_switches"], checks["cpu"]["cpu_bound"]])
        _check_cc([res], ctx.spec.hosts.congestion_control, out, label)
        if res.error:
            out.warnings.append(f"{label}: iperf3 failed: {res.error}")
    ctx.write_csv("link_calibration.csv",
                  ["rate_mbps", "goodput_mbps", "goodput_over_rate", "tcp_payload_limit",
                   "retransmits_pkts", "sender_cc", "lost_in_switches_pkts", "cpu_bound"], rows)
    out.headline = {f"goodput_over_rate_{r[0]:g}mbps": r[2] for r in rows}
    return out


# ---- queue calibration -------------------------------------------------------------------

def queue_calibration(ctx, exp: QueueCalibration) -> Outcome:
    out = Outcome()
    topo = dumbbell(senders=1, receivers=1, access_rate_mbps=exp.access_rate_mbps,
                    bottleneck_rate_mbps=exp.rate_mbps)
    bottleneck = "s1-eth2"  # s1's egress toward s2
    with ctx.fabric(topo, "single", "queue calibration",
                    buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
        sampler = QueueSampler([bottleneck], rate_hz=exp.sample_hz)
        with _traffic_phase(ctx, fab, out, "queue calibration") as checks:
            sampler.start()
            res = FlowRunner(fab, ctx.out_dir / "flows").run(
                assign_ports([("h1", "h2")], exp.duration_s, 0.0), "queue")[0]
            sampler.stop()
    samples = sampler.samples
    d0 = samples[0].drops if samples else 0
    ctx.write_csv("queue_depth.csv", ["t_s", "port", "qlen_pkts", "backlog_bytes", "drops_pkts"],
                  [[round(s.t, 4), s.ifname, s.qlen_pkts, s.backlog_bytes, s.drops - d0]
                   for s in samples])
    qlens = sorted(s.qlen_pkts for s in samples) or [0]
    port_drops = checks["conservation"]["per_switch"]["s1"]["qdisc_drops"]
    cc = _check_cc([res], ctx.spec.hosts.congestion_control, out, "queue calibration")
    out.headline = {
        "buffer_pkts": exp.buffer_pkts, "rate_mbps": exp.rate_mbps,
        "queue_max_pkts": qlens[-1], "queue_p50_pkts": percentile(qlens, 50),
        "queue_p90_pkts": percentile(qlens, 90),
        "drops_at_bottleneck_pkts": samples[-1].drops - d0 if samples else 0,
        "qdisc_drops_s1_pkts": port_drops,
        "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
        "sender_cc": cc, "goodput_mbps": round(res.goodput_mbps, 3),
        "retransmits_pkts": res.retransmits,
        "sample_rate_hz": round(sampler.achieved_rate_hz(), 1),
    }
    if qlens[-1] < 0.8 * exp.buffer_pkts:
        out.warnings.append(f"queue calibration: queue peaked at {qlens[-1]} of "
                            f"{exp.buffer_pkts} packets")
    return out


# ---- permutation throughput --------------------------------------------------------------

def _save_pattern(ctx, routing: str, pattern: str, rep: int, seed: int, pairs) -> None:
    """The flows of one phase, so that it can be replayed exactly (patterns/*.json)."""
    d = ctx.out_dir / "patterns"
    d.mkdir(parents=True, exist_ok=True)
    name = f"{routing}-{pattern.replace(':', '_')}-{rep}.json"
    (d / name).write_text(json.dumps({"pattern": pattern, "seed": seed, "repeat": rep,
                                      "flows": [list(p) for p in pairs]}))

def _pct(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 4) if values else None


def maxmin_model(pairs, hosts: int, mtu_bytes: int) -> float:
    """What a non-blocking switch gives these flows, as a fraction of the hosts' summed
    rate: their max-min fair shares limited only by the NICs (Hedera's natural demands:
    every flow's TCP fills what its sender and receiver leave it), counted as TCP payload.
    The reference the measured non-blocking column is checked against, pattern by
    pattern (all NICs at one rate)."""
    return sum(estimate_demands(pairs)) / hosts * tcp_payload_fraction(mtu_bytes)


def permutation(ctx, exp: Permutation) -> Outcome:
    out = Outcome()
    topo = ctx.topo
    hosts = [h.name for h in topo.hosts]
    rows, flow_rows = [], []
    ideal_fcts: dict[str, float | None] = {}
    for routing in exp.routings:
        fabric_topo, fabric_routing, hedera = topo, routing, None
        if routing == "nonblocking":  # the reference: the same hosts on one ideal switch
            rate = min(l.rate_mbps for l in topo.links if topo.is_host(l.a) or topo.is_host(l.b))
            fabric_topo, fabric_routing = nonblocking(len(hosts), rate), "single"
        if routing == "hedera_sa":  # Hedera placing by Simulated Annealing
            fabric_routing, hedera = "hedera", {"placement": "annealing"}
        with ctx.fabric(fabric_topo, fabric_routing, f"permutation {routing}",
                        hedera=hedera) as fab:
            ideal = host_rate_sum(fab.topo)  # links.rate_mbps, when set, is in fab.topo
            ideal_fct = None
            if exp.flow_bytes:  # one flow of that size alone, across the whole fabric
                alone = FlowRunner(fab, ctx.out_dir / "flows").run(
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
                    with _traffic_phase(ctx, fab, out, label) as checks:
                        res = FlowRunner(fab, ctx.out_dir / "flows").run(
                            assign_ports(pairs, exp.duration_s,
                                         0 if exp.flow_bytes else exp.omit_s, exp.flow_bytes),
                            f"perm-{routing}-{pattern.replace(':', '')}-{rep}")
                    if not exp.flow_bytes:  # iperf3 reports each flow's algorithm
                        _check_cc(res, ctx.spec.hosts.congestion_control, out, label)
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
                                 _pct(fcts, 50), _pct(fcts, 99), _pct(slow, 50), _pct(slow, 99),
                                 round(maxmin_model(pairs, len(hosts), ctx.spec.links.mtu_bytes),
                                       4)])
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
                                      "slowdown_p50", "slowdown_p99", "maxmin_model"],
                  rows)
    ctx.write_csv("permutation_flows.csv", ["routing", "pattern", "repeat", "src", "dst",
                                            "goodput_mbps", "retransmits_pkts", "sender_cc",
                                            "fct_s", "ideal_fct_s", "slowdown"],
                  flow_rows)
    out.headline = {"ideal_mbps": ideal}
    if ideal_fcts:
        out.headline["ideal_fct_s"] = {k: round(v, 4) for k, v in ideal_fcts.items() if v}
    for pattern in exp.patterns:
        means = {}
        for routing in exp.routings:
            vals = [r[4] for r in rows if r[0] == routing and r[1] == pattern]
            means[routing] = sum(vals) / len(vals)
            out.headline[f"{pattern}_{routing}_normalised"] = round(means[routing], 4)
        model = [r[-1] for r in rows if r[1] == pattern and r[0] == exp.routings[0]]
        out.headline[f"{pattern}_maxmin_model"] = round(sum(model) / len(model), 4)
        if "ecmp" in means and "single" in means and means["single"] > 0:
            out.headline[f"{pattern}_ecmp_over_single"] = round(means["ecmp"] / means["single"], 3)
    if len(exp.patterns) > 1:  # mean over patterns, CPU-bound phases left out (and counted)
        for routing in exp.routings:
            ok = [r[4] for r in rows if r[0] == routing and not r[8]]
            out.headline[f"mean_{routing}_normalised"] = (round(sum(ok) / len(ok), 4)
                                                          if ok else None)
            out.headline[f"cpu_bound_phases_{routing}"] = sum(
                1 for r in rows if r[0] == routing and r[8])
    return out


RUNNERS = {"reachability": reachability, "link_calibration": link_calibration,
           "queue_calibration": queue_calibration, "permutation": permutation,
           "ecn_queue": qos_experiments.ecn_queue, "priority": qos_experiments.priority,
           "incast": qos_experiments.incast, "pfc_victim": qos_experiments.pfc_victim,
           "training": training.training}
