"""Experiments of the traffic-class dataplane: ECN queue occupancy (DCTCP), priority
scheduling; each writes CSV files with units and returns headline metrics and warnings."""
from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from topologies import dumbbell, leafspine

from .dpapi import Dataplane
from .phases import Outcome, _check_cc, _traffic_phase, tcp_payload_fraction
from .monitor import ClassQueueSampler
from .qos import EcnProfile, QosConfig, TrafficClass
from .spec import EcnQueue, Incast, PfcVictim, PriorityQueues, _incast_qos, _victim_qos
from .system import congestion_controls, in_netns, run
from .traffic import (Flow, FlowRunner, run_in_host, start_in_host, stop_and_reap,
                      wait_listening)


def _port_id(dp: Dataplane, ifname: str) -> int:
    return dp.by_name[ifname]["id"]


CLASS_QUEUES_HEADER = ["phase", "t_s", "port", "class", "qlen_pkts", "qlen_bytes",
                       "marks_cum_pkts", "drops_cum_pkts"]


def switch_queue_sampler(dp: Dataplane, rate_hz: float = 1000.0) -> ClassQueueSampler:
    """Every class of every switch egress port, at `rate_hz` (rows only on change)."""
    slots = [(p["id"], c) for p in dp.ports if not p["is_host"] for c in range(len(dp.classes))]
    return ClassQueueSampler(dp, slots, rate_hz=rate_hz)


def class_queue_rows(dp: Dataplane, sampler: ClassQueueSampler, phase: str) -> list[list]:
    return [[phase, round(s.t, 4), dp.ports[s.port]["ifname"], s.cls, s.pkts, s.bytes,
             s.marks, s.drops] for s in sampler.samples]


# ---- ECN queue occupancy --------------------------------------------------------------------

def ecn_queue(ctx, exp: EcnQueue) -> Outcome:
    """Drop-tail TCP vs ECN marking at K on one bottleneck (DCTCP paper, Fig. 1 / 13;
    Mininet-HiFi's reproduction: TCP mean queue ~331-345 packets, DCTCP ~19-20 at K = 20)."""
    out = Outcome()
    topo = dumbbell(senders=exp.senders, receivers=1, access_rate_mbps=exp.access_rate_mbps,
                    bottleneck_rate_mbps=exp.rate_mbps)
    bottleneck = f"s1-eth{exp.senders + 1}"
    receiver = f"h{exp.senders + 1}"
    ecn_cc = "dctcp" if "dctcp" in congestion_controls() else "cubic"
    frame = ctx.spec.links.mtu_bytes + 14
    k_bytes = int(exp.k_pkts * frame)
    phases = [
        ("drop-tail", None, dataclasses.replace(ctx.spec.hosts, ecn=False)),
        (f"ecn-{ecn_cc}", EcnProfile(k=exp.k_pkts, unit="pkts"),
         dataclasses.replace(ctx.spec.hosts, ecn=True, congestion_control=ecn_cc)),
    ]
    rows, summary = [], []
    for label, profile, hosts in phases:
        cfg = QosConfig(classes=[TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts,
                                              ecn=profile)],
                        ecn_enabled=profile is not None)
        with ctx.fabric(topo, "single", f"ecn queue {label}", qos=cfg, hosts=hosts,
                        buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
            dp = Dataplane(fab.qos_plane.description)
            port = _port_id(dp, bottleneck)
            sampler = ClassQueueSampler(dp, [(port, 0)], rate_hz=exp.sample_hz,
                                        paired=(port, 0))
            before = dp.queue(port, 0)
            flows = [Flow(src=f"h{i + 1}", dst=receiver, duration_s=exp.duration_s,
                          omit_s=exp.omit_s, port=5201 + i) for i in range(exp.senders)]
            with _traffic_phase(ctx, fab, out, f"ecn queue {label}") as checks:
                sampler.start()
                res = FlowRunner(fab, ctx.out_dir / "flows").run(flows, f"ecn-{label}")
                sampler.stop()
            after = dp.queue(port, 0)
            dp.close()
        cc = _check_cc(res, hosts.congestion_control, out, f"ecn queue {label}")
        t0 = sampler.samples[0].t if sampler.samples else 0.0
        # the steady state: after the omitted start, before the flows end
        lo = t0 + exp.omit_s + 1.0
        hi = t0 + exp.omit_s + exp.duration_s - 1.0
        segs = sampler.time_weighted(port, 0, lo, hi)
        total = sum(d for d, _, _ in segs) or 1.0
        mean_pkts = sum(d * p for d, p, _ in segs) / total
        weights = sorted((p, d) for d, p, _ in segs)
        rows += [[label, round(s.t, 4), s.pkts, s.bytes, s.marks - before.marks,
                  s.drops - before.drops] for s in sampler.samples]
        below = _marks_below_k(sampler.pairs, k_bytes, frame, lo, hi)
        summary.append({
            "phase": label, "sender_cc": cc, "ecn": hosts.ecn,
            "queue_mean_pkts": round(mean_pkts, 1),
            "queue_p50_pkts": _weighted_percentile(weights, 50),
            "queue_p90_pkts": _weighted_percentile(weights, 90),
            "queue_max_pkts": max((p for _, p, _ in segs), default=0),
            "marks_pkts": after.marks - before.marks,
            "drops_pkts": after.drops - before.drops,
            "goodput_mbps": round(sum(r.goodput_mbps for r in res), 3),
            "retransmits_pkts": sum(r.retransmits for r in res),
            "marks_with_real_queue_below_k": below,
            "sample_rate_hz": round(sampler.achieved_rate_hz(), 1),
            "cpu_bound": checks["cpu"]["cpu_bound"],
            "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"],
        })
    ctx.write_csv("ecn_queue_depth.csv", ["phase", "t_s", "qlen_pkts", "qlen_bytes",
                                          "marks_cum_pkts", "drops_cum_pkts"], rows)
    ctx.write_csv("ecn_queue_summary.csv", list(summary[0]), [list(s.values()) for s in summary])
    tail, ecn = summary
    out.headline = {"buffer_pkts": exp.buffer_pkts, "k_pkts": exp.k_pkts,
                    "rate_mbps": exp.rate_mbps, "ecn_sender_cc": ecn_cc,
                    "droptail": tail, "ecn": ecn,
                    "droptail_mean_over_buffer": round(tail["queue_mean_pkts"] / exp.buffer_pkts, 3),
                    "ecn_mean_over_k": round(ecn["queue_mean_pkts"] / exp.k_pkts, 3)}
    if tail["queue_mean_pkts"] < 0.6 * exp.buffer_pkts:
        out.warnings.append(f"ecn queue: drop-tail mean queue {tail['queue_mean_pkts']} is below "
                            f"60% of the {exp.buffer_pkts}-packet buffer")
    limit = 1.5 if ecn_cc == "dctcp" else 2.0
    if ecn["queue_mean_pkts"] > limit * exp.k_pkts:
        out.warnings.append(f"ecn queue: mean queue with marking {ecn['queue_mean_pkts']} is "
                            f"above {limit:g} K")
    return out


def _weighted_percentile(pairs: list[tuple[int, float]], q: float) -> int:
    """pairs of (value, weight) sorted by value."""
    total = sum(w for _, w in pairs)
    if not total:
        return 0
    acc = 0.0
    for value, w in pairs:
        acc += w
        if acc >= q / 100 * total:
            return value
    return pairs[-1][0]


def _marks_below_k(pairs: list[tuple], k_bytes: int, frame: int, lo: float, hi: float) -> dict:
    """Marks are decided on the BPF's count of the class queue (bytes from enqueue until the
    far end of the link receives them). At every tick the sampler read the qdisc's own
    backlog between two BPF readings: their difference says how far the two views of the
    queue agree, and the marks taken between two ticks whose qdisc readings were both below
    K are counted as marks below K (an upper bound: the queue may have crossed K and come
    back within the millisecond)."""
    pairs = [p for p in pairs if lo <= p[0] <= hi]
    if len(pairs) < 2:
        return {"fraction": None, "marks": 0}
    diffs = sorted(abs((b0 + b1) / 2 - real) / frame for _, b0, real, b1, _, _ in pairs)
    below = total = 0
    for a, b in zip(pairs, pairs[1:]):
        delta = b[5] - a[5]
        total += delta
        if a[2] < k_bytes and b[2] < k_bytes:
            below += delta
    return {"fraction": round(below / total, 4) if total else None, "marks": total,
            "marks_below_k": below, "ticks": len(pairs),
            "bpf_minus_qdisc_p50_pkts": round(diffs[len(diffs) // 2], 2),
            "bpf_minus_qdisc_p99_pkts": round(diffs[int(len(diffs) * 0.99)], 2)}


# ---- priority scheduling ------------------------------------------------------------------

def priority(ctx, exp: PriorityQueues) -> Outcome:
    """Two UDP classes over one bottleneck: strict priority (the high class offers part of
    the port, the low class saturates it), then weighted round robin (both saturate)."""
    out = Outcome()
    topo = dumbbell(senders=2, receivers=1, access_rate_mbps=max(100.0, 4 * exp.rate_mbps),
                    bottleneck_rate_mbps=exp.rate_mbps)
    classes = [TrafficClass(name="low", dscp=[0], priority=0, weight=exp.weights[1]),
               TrafficClass(name="high", dscp=[46], priority=7, weight=exp.weights[0])]
    rows = []
    for sched in ("strict", "wrr"):
        cfg = QosConfig(classes=classes, scheduler=sched, ecn_enabled=False)
        with ctx.fabric(topo, "single", f"priority {sched}", qos=cfg) as fab:
            # strict: the high class offers `high_load`; wrr: both classes saturate the port,
            # so that the shares are the scheduler's, not the offered loads'
            high_load = exp.high_load if sched == "strict" else exp.low_load
            flows = [Flow(src="h1", dst="h3", duration_s=exp.duration_s, omit_s=exp.omit_s,
                          port=5201, dscp=46, udp_mbps=high_load * exp.rate_mbps),
                     Flow(src="h2", dst="h3", duration_s=exp.duration_s, omit_s=exp.omit_s,
                          port=5202, dscp=0, udp_mbps=exp.low_load * exp.rate_mbps)]
            with _traffic_phase(ctx, fab, out, f"priority {sched}") as checks:
                res = FlowRunner(fab, ctx.out_dir / "flows").run(flows, f"prio-{sched}")
        high, low = res
        rows.append([sched, round(high.sent_mbps, 3), round(high.goodput_mbps, 3),
                     round(low.sent_mbps, 3), round(low.goodput_mbps, 3),
                     checks["cpu"]["cpu_bound"]])
    ctx.write_csv("priority.csv", ["scheduler", "high_offered_mbps", "high_received_mbps",
                                   "low_offered_mbps", "low_received_mbps", "cpu_bound"], rows)
    strict, wrr = rows
    payload = (ctx.spec.links.mtu_bytes - 28) / (ctx.spec.links.mtu_bytes + 14)
    w_hi, w_lo = exp.weights
    wrr_share = wrr[2] / (wrr[2] + wrr[4]) if wrr[2] + wrr[4] else 0.0
    out.headline = {
        "strict_high_kept": round(strict[2] / strict[1], 4) if strict[1] else None,
        "strict_low_received_mbps": strict[4],
        "wrr_high_share": round(wrr_share, 4),
        "wrr_expected_share": round(w_hi / (w_hi + w_lo), 4),
        "wrr_share_error": round(abs(wrr_share - w_hi / (w_hi + w_lo)) / (w_hi / (w_hi + w_lo)), 4),
        "bottleneck_payload_mbps": round(exp.rate_mbps * payload, 3),
    }
    if out.headline["strict_high_kept"] is not None and out.headline["strict_high_kept"] < 0.9:
        out.warnings.append("priority: the strict-priority class kept less than 90% of its load")
    return out


# ---- TCP incast ---------------------------------------------------------------------------

def _netstat(fab, host: str, key: str = "TCPTimeouts") -> int:
    """A TcpExt counter of one host's namespace (/proc/net/netstat is per namespace)."""
    text = run(in_netns(fab.host_pid(host), ["cat", "/proc/net/netstat"])).stdout.splitlines()
    for names, values in zip(text[::2], text[1::2]):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:])).get(key, 0))
    return 0


def pause_intervals(rows: list[dict]) -> dict[tuple[str, str, str], list[tuple[int, int]]]:
    """(upstream port, paused ingress port, class) -> [(pause_ns, resume_ns)] from the PFC
    app's event log: a pause opens an interval (a repeated pause does not reopen it), the
    next resume (an XON or the watchdog's) closes it."""
    open_at: dict[tuple[str, str, str], int] = {}
    spans: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for r in sorted(rows, key=lambda r: int(r["time_ns"])):
        key = (r["upstream_port"], r["port"], r["class"])
        if r["event"] == "pause":
            open_at.setdefault(key, int(r["time_ns"]))
        elif r["event"].startswith("resume") and key in open_at:
            spans.setdefault(key, []).append((open_at.pop(key), int(r["time_ns"])))
    return spans


def pfc_summary(status_dir: Path, t_from_ns: int = 0, t_to_ns: int | None = None) -> dict:
    """Pause counts per port and the pause mechanism's reaction time, from the PFC app's
    event log (controllers/apps/pfc_app.py)."""
    path = status_dir / "pfc_events.csv"
    if not path.exists():
        return {"pauses": 0}
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh)
                if int(r["time_ns"]) >= t_from_ns and (t_to_ns is None or int(r["time_ns"]) <= t_to_ns)]
    pauses = [r for r in rows if r["event"] == "pause"]
    resumes = [r for r in rows if r["event"] == "resume"]
    applied = sorted(float(r["xoff_to_applied_us"]) for r in pauses if r["xoff_to_applied_us"])
    stopped = sorted(float(r["xoff_to_last_arrival_us"]) for r in resumes
                     if r["xoff_to_last_arrival_us"])
    after = sorted(int(r["bytes_after_xoff"]) for r in resumes if r["bytes_after_xoff"])
    per_port: dict[str, int] = {}
    for r in pauses:
        key = f"{r['upstream_port']}->{r['port']}"
        per_port[key] = per_port.get(key, 0) + 1
    paused_ns: dict[str, int] = {}
    for (upstream, port, _), spans in pause_intervals(rows).items():
        key = f"{upstream}->{port}"
        paused_ns[key] = paused_ns.get(key, 0) + sum(end - start for start, end in spans)
    paused_ms = {key: round(ns / 1e6, 3) for key, ns in paused_ns.items()}

    def pct(values, q):
        return round(values[min(len(values) - 1, int(q / 100 * len(values)))], 1) if values else None
    return {"pauses": len(pauses), "resumes": len(resumes),
            "overflows": sum(r["event"] == "overflow" for r in rows),
            "paused_links": per_port, "paused_ms": paused_ms,
            "reaction_applied_us": {"p50": pct(applied, 50), "p90": pct(applied, 90),
                                    "max": applied[-1] if applied else None},
            "reaction_last_arrival_us": {"p50": pct(stopped, 50), "p90": pct(stopped, 90),
                                         "max": stopped[-1] if stopped else None},
            "bytes_after_xoff": {"p50": pct(after, 50), "max": after[-1] if after else None}}


def _netstat_all(fab, hosts: list[str]) -> int:
    return sum(_netstat(fab, h) for h in hosts)


def ingress_residual(dp: Dataplane) -> dict:
    """Bytes that switch ingress ports still count as held once the fabric is idle (should
    be 0: anything left is a packet whose departure was never seen), and arrivals that
    could not be tracked."""
    ncls = len(dp.classes)
    states = {(p["ifname"], c): dp.ingress(p["id"], c)
              for p in dp.ports if not p["is_host"] for c in range(ncls)}
    return {"ingress_residual_bytes": sum(st.bytes for st in states.values()),
            "ingress_residual_at": " ".join(f"{name}/{c}:{st.bytes}" for (name, c), st
                                            in states.items() if st.bytes),
            "ingress_untracked_pkts": sum(st.untracked for st in states.values())}


def _fabric_drops(dp: Dataplane) -> dict:
    """switch_drops counts every packet a switch dropped, headroom overflows of lossless
    classes included (they are dropped at the egress); lossless_overflow counts those.
    overflow_escaped counts packets that overflowed a headroom after OVS had already
    forwarded them (its egress hook ran before the ingress hook): a real switch would have
    dropped them; here they got through, so they are reported, not counted as drops."""
    ncls = len(dp.classes)
    switch = [p for p in dp.ports if not p["is_host"]]
    return {"switch_drops": sum(dp.queue(p["id"], c).drops for p in switch for c in range(ncls)),
            "lossless_overflow": sum(dp.ingress(p["id"], c).overflow_drops
                                     for p in switch for c in range(ncls)),
            "overflow_escaped": sum(dp.ingress(p["id"], c).overflow_escaped
                                    for p in switch for c in range(ncls)),
            "host_nic_drops": sum(dp.queue(p["id"], c).drops for p in dp.ports if p["is_host"]
                                  for c in range(ncls))}


def incast(ctx, exp: Incast) -> Outcome:
    out = Outcome()
    n_max = max(exp.senders)
    topo = dumbbell(senders=n_max, receivers=1, access_rate_mbps=exp.rate_mbps,
                    bottleneck_rate_mbps=exp.rate_mbps)
    reader = f"h{n_max + 1}"
    ecn_cc = "dctcp" if "dctcp" in congestion_controls() else "cubic"
    rows, summary, queue_rows = [], {}, []
    for variant in exp.variants:
        cfg = _incast_qos(exp, variant)
        hosts = dataclasses.replace(
            ctx.spec.hosts, ecn=variant == "ecn",
            congestion_control=ecn_cc if variant == "ecn" else ctx.spec.hosts.congestion_control,
            rto_min_us=exp.rto_min_us if variant == "rto" else None)
        label = f"incast {variant}"
        with ctx.fabric(topo, "single", label, qos=cfg, hosts=hosts, burst_us=exp.burst_us,
                        buffer_pkts=exp.buffer_pkts, buffer_bytes=None) as fab:
            dp = Dataplane(fab.qos_plane.description)
            sampler = switch_queue_sampler(dp)
            sampler.start()
            servers = [start_in_host(fab, f"h{i + 1}", [sys.executable, "-m",
                                     "testbed.workloads.incast", "serve", "--port", "7000",
                                     "--dscp", str(exp.dscp)], f"incast server h{i + 1}",
                                     ctx.out_dir / "flows" / f"incast-{variant}-server-h{i + 1}.log")
                       for i in range(n_max)]
            try:
                wait_listening(fab, [(f"h{i + 1}", 7000) for i in range(n_max)])
                for n in exp.senders:
                    senders = [f"h{i + 1}" for i in range(n)]
                    t_before = _netstat_all(fab, senders)
                    drops_before = _fabric_drops(dp)
                    t_ns = time.monotonic_ns()
                    with _traffic_phase(ctx, fab, out, f"{label} N={n}") as checks:
                        res = run_in_host(fab, reader, [
                            sys.executable, "-m", "testbed.workloads.incast", "read",
                            "--servers", ",".join(f"{topo.node(h).ip}:7000" for h in senders),
                            "--block-bytes", str(exp.block_bytes), "--rounds", str(exp.rounds),
                            "--dscp", str(exp.dscp)], timeout=exp.rounds * 30 + 30)
                    t_end_ns = time.monotonic_ns()
                    drops = {k: v - drops_before[k] for k, v in _fabric_drops(dp).items()}
                    timeouts = _netstat_all(fab, senders) - t_before
                    rounds = json.loads(res)["round_s"][1:]  # the first round opens cwnd
                    goodput = [exp.block_bytes * 8 / t / 1e6 for t in rounds]
                    pfc = pfc_summary(fab.qos_status_dir, t_ns, t_end_ns)
                    row = {"variant": variant, "senders": n,
                           "goodput_mbps": round(statistics.mean(goodput), 3),
                           "goodput_min_mbps": round(min(goodput), 3),
                           "round_p50_ms": round(statistics.median(rounds) * 1000, 2),
                           "round_max_ms": round(max(rounds) * 1000, 2),
                           "tcp_timeouts": timeouts, **drops,
                           "pauses": pfc["pauses"],
                           "pause_applied_p50_us": pfc.get("reaction_applied_us", {}).get("p50"),
                           "cpu_bound": checks["cpu"]["cpu_bound"],
                           "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"]}
                    rows.append(row)
                    ctx.log(f"  {label} N={n}: {row['goodput_mbps']} Mb/s, "
                            f"{timeouts} timeouts, {drops['switch_drops']} drops, "
                            f"{drops['lossless_overflow']} headroom overflows, "
                            f"{pfc['pauses']} pauses")
                summary[variant] = pfc_summary(fab.qos_status_dir)
            finally:
                stop_and_reap(servers)
                sampler.stop()
                queue_rows += class_queue_rows(dp, sampler, label)
                dp.close()
    ctx.write_csv("incast.csv", list(rows[0]), [list(r.values()) for r in rows])
    ctx.write_csv("class_queues.csv", CLASS_QUEUES_HEADER, queue_rows)
    payload = exp.rate_mbps * tcp_payload_fraction(ctx.spec.links.mtu_bytes)
    out.headline = {"link_payload_mbps": round(payload, 2), "burst_us": exp.burst_us,
                    "buffer_pkts": exp.buffer_pkts, "block_bytes": exp.block_bytes,
                    "pfc_reaction": summary.get("pfc")}
    for variant in exp.variants:
        vr = [r for r in rows if r["variant"] == variant]
        best = max(r["goodput_mbps"] for r in vr)
        at_max = [r for r in vr if r["senders"] == n_max][0]
        out.headline[variant] = {
            "goodput_at_max_n_mbps": at_max["goodput_mbps"],
            "collapse_from_best": round(1 - at_max["goodput_mbps"] / best, 3) if best else None,
            "drops_at_max_n": at_max["switch_drops"], "timeouts_at_max_n": at_max["tcp_timeouts"],
            "lossless_overflow_at_max_n": at_max["lossless_overflow"]}
    if "pfc" in exp.variants and (out.headline["pfc"]["drops_at_max_n"]
                                  or out.headline["pfc"]["lossless_overflow_at_max_n"]):
        out.warnings.append("incast: the fabric dropped packets with PFC on the lossless class "
                            "(headroom too small for the measured pause reaction time?)")
    return out


# ---- PFC congestion spreading: the victim flow ----------------------------------------------

def pfc_victim(ctx, exp: PfcVictim) -> Outcome:
    out = Outcome()
    hpl = exp.incast_senders + 1
    topo = leafspine(spines=1, leaves=3, hosts_per_leaf=hpl, host_rate=exp.host_rate_mbps,
                     uplink_rate=exp.uplink_rate_mbps)
    leaf = {i: [f"h{i * hpl + j + 1}" for j in range(hpl)] for i in range(3)}
    receiver = leaf[0][0]
    senders = leaf[1][:exp.incast_senders]
    victim_src, victim_dst = leaf[1][exp.incast_senders], leaf[2][0]
    ecn_cc = "dctcp" if "dctcp" in congestion_controls() else "cubic"
    rows, queue_rows = [], []
    for phase in exp.phases:
        cfg = _victim_qos(exp, phase)
        hosts = dataclasses.replace(ctx.spec.hosts, ecn=phase == "pfc+ecn",
                                    congestion_control=ecn_cc if phase == "pfc+ecn"
                                    else ctx.spec.hosts.congestion_control)
        label = f"pfc victim {phase}"
        with ctx.fabric(topo, "single", label, qos=cfg, hosts=hosts, mtu_bytes=exp.mtu_bytes,
                        burst_us=exp.burst_us, buffer_pkts=exp.buffer_pkts,
                        buffer_bytes=None) as fab:
            flows = [Flow(src=victim_src, dst=victim_dst, duration_s=exp.duration_s,
                          omit_s=exp.omit_s, port=5201, dscp=exp.dscp)]
            if phase != "no-incast":
                flows += [Flow(src=s, dst=receiver, duration_s=exp.duration_s,
                               omit_s=exp.omit_s, port=5202 + i, dscp=exp.dscp)
                          for i, s in enumerate(senders)]
            dp = Dataplane(fab.qos_plane.description)
            before = _fabric_drops(dp)
            sampler = switch_queue_sampler(dp)
            t_ns = time.monotonic_ns()
            with _traffic_phase(ctx, fab, out, label) as checks:
                sampler.start()
                res = FlowRunner(fab, ctx.out_dir / "flows").run(flows, f"victim-{phase}")
                sampler.stop()
            queue_rows += class_queue_rows(dp, sampler, label)
            drops = {k: v - before[k] for k, v in _fabric_drops(dp).items()}
            residual = ingress_residual(dp)
            dp.close()
            pfc = pfc_summary(fab.qos_status_dir, t_ns)
        victim, incast_flows = res[0], res[1:]
        hops = sorted(pfc.get("paused_links", {}))
        rows.append({"phase": phase, "victim_mbps": round(victim.goodput_mbps, 3),
                     "incast_mbps": round(sum(r.goodput_mbps for r in incast_flows), 3),
                     "victim_retransmits": victim.retransmits, **drops, **residual,
                     "pauses": pfc["pauses"], "paused_links": " ".join(hops),
                     "pause_applied_p50_us": pfc.get("reaction_applied_us", {}).get("p50"),
                     "pause_applied_p90_us": pfc.get("reaction_applied_us", {}).get("p90"),
                     "last_arrival_after_xoff_p90_us":
                         pfc.get("reaction_last_arrival_us", {}).get("p90"),
                     "cpu_bound": checks["cpu"]["cpu_bound"],
                     "lost_in_switches_pkts": checks["conservation"]["lost_in_switches"]})
        ctx.log(f"  {label}: victim {rows[-1]['victim_mbps']} Mb/s, incast "
                f"{rows[-1]['incast_mbps']} Mb/s, {pfc['pauses']} pauses on {len(hops)} links")
    ctx.write_csv("pfc_victim.csv", list(rows[0]), [list(r.values()) for r in rows])
    ctx.write_csv("class_queues.csv", CLASS_QUEUES_HEADER, queue_rows)
    by = {r["phase"]: r for r in rows}
    out.headline = {"victim": f"{victim_src}->{victim_dst}", "incast": f"{senders}->{receiver}",
                    **{f"victim_mbps_{p}": r["victim_mbps"] for p, r in by.items()},
                    **{f"paused_links_{p}": r["paused_links"] for p, r in by.items()
                       if p.startswith("pfc")}}
    if "pfc" in by and by["pfc"]["switch_drops"]:
        out.warnings.append("pfc victim: the fabric dropped packets with PFC on")
    return out
