#!/usr/bin/env python3
"""Markdown tables for docs/BENCHMARKS.md from the results of `scripts/benchmarks.sh OUTDIR`.

    .venv/bin/python scripts/benchmark_tables.py OUTDIR
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def rows(run: Path, name: str) -> list[dict]:
    with (run / "metrics" / name).open() as fh:
        return list(csv.DictReader(fh))


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]


def headline(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    return next(iter(summary["experiments"].values()))["headline"]


def reachability(out: Path) -> None:
    print("| spec | pairs | pings | loss | path RTT (median of per-pair min) | RTT median / max |\n"
          "|---|---|---|---|---|---|")
    for name in ("reachability", "reachability_leafspine", "reachability_bcube", "startup_fattree6"):
        h = headline(out / name)
        print(f"| `{name}.yaml` | {h['pairs']} | {h['pings_sent']} | **{h['loss_pct']:g}%** | "
              f"{h['rtt_min_median_ms']:.2f} ms | {h['rtt_median_ms']:.1f} / {h['rtt_max_ms']:.1f} ms |")


def link(out: Path) -> None:
    print("| configured | goodput | goodput / rate | TCP payload limit | retransmits | lost in switch |")
    print("|---|---|---|---|---|---|")
    for r in rows(out / "link_calibration", "link_calibration.csv"):
        print(f"| {float(r['rate_mbps']):g} Mb/s | {r['goodput_mbps']} Mb/s | "
              f"**{100 * float(r['goodput_over_rate']):.1f}%** | "
              f"{100 * float(r['tcp_payload_limit']):.1f}% | {r['retransmits_pkts']} | "
              f"{r['lost_in_switches_pkts']} |")


def queue(out: Path) -> None:
    h = headline(out / "queue_calibration")
    cpu = events(out / "queue_calibration")[0]["cpu"]
    print("| max | p50 | p90 | drops at the queue | retransmits | lost inside switches | goodput "
          "| sender cc | sampled at | OVS adds (p50) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| **{h['queue_max_pkts']}** pkts | {h['queue_p50_pkts']} | {h['queue_p90_pkts']} | "
          f"**{h['qdisc_drops_s1_pkts']}** | {h['retransmits_pkts']} | "
          f"**{h['lost_in_switches_pkts']}** | {h['goodput_mbps']} Mb/s | "
          f"{', '.join(h['sender_cc'])} | {h['sample_rate_hz']} Hz | "
          f"{cpu['ovs_added_delay_p50_ms']} ms |")


def permutation(out: Path, name: str) -> None:
    print("| routing | pattern | repeat | normalised | OVS adds (p50) | machine idle | CPU-bound |")
    print("|---|---|---|---|---|---|---|")
    for r in rows(out / name, "permutation.csv"):
        print(f"| {r['routing']} | {r['pattern']} | {r['repeat']} | "
              f"**{float(r['normalised_to_ideal']):.3f}** | {r['ovs_added_delay_p50_ms']} ms | "
              f"{100 * float(r['machine_idle_mean']):.0f}% | {r['cpu_bound']} |")
    h = headline(out / name)
    ratios = {k: v for k, v in h.items() if k.endswith("_ecmp_over_single")}
    print("\nECMP / single path (means): " + ", ".join(f"{k.split('_')[0]} **{v}**"
                                                       for k, v in ratios.items()))


def _models(run: Path, table: list[dict]) -> dict[str, float]:
    """The max-min model of each pattern (testbed.experiments.permutation.model's
    maxmin_model): from the CSV, or for runs older than that column from the flows saved in
    patterns/."""
    first = [r for r in table if r["routing"] == table[0]["routing"]]
    by_pattern: dict[str, list[float]] = {}
    if first[0].get("maxmin_model"):
        for r in first:
            by_pattern.setdefault(r["pattern"], []).append(float(r["maxmin_model"]))
    else:
        from testbed.experiments.permutation.model import maxmin_model
        from testbed.spec import load
        spec, topo = load(run / "spec.yaml")
        for pattern in dict.fromkeys(r["pattern"] for r in first):
            for f in sorted((run / "patterns").glob(
                    f"{table[0]['routing']}-{pattern.replace(':', '_')}-*.json")):
                flows = [tuple(x) for x in json.loads(f.read_text())["flows"]]
                by_pattern.setdefault(pattern, []).append(
                    maxmin_model(flows, len(topo.hosts), spec.links.mtu_bytes))
    return {k: sum(v) / len(v) for k, v in by_pattern.items()}


def hedera(out: Path, name: str) -> None:
    """One row per pattern, one column per routing (fraction of the bisection; CPU-bound
    phases marked), the max-min model of a non-blocking switch and how far the measured
    non-blocking reference is from it, then the means without CPU-bound phases."""
    run = out / name
    table = rows(run, "permutation.csv")
    routings = list(dict.fromkeys(r["routing"] for r in table))
    print("| pattern | " + " | ".join(routings) + " | max-min model | non-blocking / model |")
    print("|---|" + "---|" * (len(routings) + 2))
    models = _models(run, table)
    for pattern in models:
        cells = []
        for routing in routings:
            sel = [r for r in table if r["pattern"] == pattern and r["routing"] == routing]
            cells.append(" / ".join(f"{float(r['normalised_to_ideal']):.3f}"
                                    + (" (CPU-bound)" if r["cpu_bound"] == "True" else "")
                                    for r in sel) or "-")
        model = models[pattern]
        nb = [float(r["normalised_to_ideal"]) for r in table
              if r["pattern"] == pattern and r["routing"] == "nonblocking"]
        ratio = f"{sum(nb) / len(nb) / model:.3f}" if nb else "-"
        print(f"| {pattern} | " + " | ".join(cells) + f" | {model:.3f} | {ratio} |")
    h = headline(run)
    print("| **mean** | " + " | ".join(f"**{h.get(f'mean_{r}_normalised')}**"
                                       for r in routings)
          + f" | {sum(models.values()) / len(models):.3f} | |")
    print("\nCPU-bound phases (left out of the means): " + ", ".join(
        f"{r} {h.get(f'cpu_bound_phases_{r}', 0)}" for r in routings))


def startup(out: Path) -> None:
    print("| fabric | net up | controller connected | paths installed | teardown "
          "| machine idle (min / mean) | OVS thread p90 |")
    print("|---|---|---|---|---|---|---|")
    for name in ("reachability", "reachability_leafspine", "reachability_bcube", "startup_fattree6"):
        r = rows(out / name, "startup.csv")[0]
        print(f"| {r['topology']} ({r['hosts']} hosts, {r['switches']} switches) | {r['net_up_s']} s | "
              f"{r['controller_connected_s']} s | **{r['paths_installed_s']} s** | "
              f"**{r['teardown_s']} s** | {r['startup_machine_idle_min']} / "
              f"{r['startup_machine_idle_mean']} | {r['startup_ovs_thread_p90_core']} |")


def ecn(out: Path) -> None:
    summary = json.loads((out / "ecn_queue" / "summary.json").read_text())
    print("| flows | phase | sender | queue mean / p50 / p90 / max (pkts) | marks | drops | "
          "goodput (of link) | Jain | alpha mean / marked fraction | CPU core-ms/MB | "
          "marking with qdisc <= K (ticks < K) | 1 ms bound: qdisc / own count | BPF vs qdisc p50 / p99 (pkts) | "
          "sampling "
          "| CPU-bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for exp in summary["experiments"].values():
        h = exp["headline"]
        flows = h.get("senders", "")
        for r in [h["droptail"], *h["ecn_phases"].values()]:
            b = r["marks_with_real_queue_below_k"]
            frac = "n/a" if b["fraction"] is None else \
                f"{b['fraction']:.1%} ({b.get('ticks_marking_qdisc_below_k', '?')} below)"
            bound = "n/a" if b.get("interval_bound") is None else \
                f"{b['interval_bound']:.1%} / {b['interval_bound_own_view']:.1%}"
            alpha = "n/a" if r.get("alpha_mean") is None else f"{r['alpha_mean']:.3f}"
            print(f"| {flows} | {r['phase']} | {r['sender_cc'][0]}{' +ECN' if r['ecn'] else ''} | "
                  f"**{r['queue_mean_pkts']}** / {r['queue_p50_pkts']} / {r['queue_p90_pkts']} / "
                  f"{r['queue_max_pkts']} | {r['marks_pkts']} | {r['drops_pkts']} | "
                  f"{r['goodput_mbps']} Mb/s ({r['goodput_of_link']:.1%}) | "
                  f"{r['jain_fairness']} | {alpha} / {r['marked_fraction']} | "
                  f"{r['cpu_core_ms_per_mb']} | {frac} | {bound} | {b.get('bpf_minus_qdisc_p50_pkts')} / "
                  f"{b.get('bpf_minus_qdisc_p99_pkts')} | {r['sample_rate_hz']} Hz | "
                  f"{r['cpu_bound']} |")


def priority(out: Path) -> None:
    h = headline(out / "priority")
    print("| scheduler | high offered / received | low offered / received | CPU-bound |\n"
          "|---|---|---|---|")
    for r in rows(out / "priority", "priority.csv"):
        print(f"| {r['scheduler']} | {r['high_offered_mbps']} / **{r['high_received_mbps']}** | "
              f"{r['low_offered_mbps']} / **{r['low_received_mbps']}** | {r['cpu_bound']} |")
    print(f"\nStrict: the high class kept **{h['strict_high_kept']:.1%}** of its load. "
          f"WRR 3:1: high share **{h['wrr_high_share']:.3f}** (expected "
          f"{h['wrr_expected_share']}, error {h['wrr_share_error']:.1%}).")


def incast(out: Path) -> None:
    table = rows(out / "incast", "incast.csv")
    variants = list(dict.fromkeys(r["variant"] for r in table))
    ns = list(dict.fromkeys(r["senders"] for r in table))
    by = {(r["variant"], r["senders"]): r for r in table}
    print("Goodput in Mb/s (TCP timeouts, fabric drops of which headroom overflows); link "
          "payload ceiling "
          f"{headline(out / 'incast')['link_payload_mbps']} Mb/s.\n")
    print("| N | " + " | ".join(variants) + " |\n|---|" + "---|" * len(variants))
    for n in ns:
        cells = []
        for v in variants:
            r = by[(v, n)]
            over = int(r["lossless_overflow"])
            drops = f"{r['switch_drops']}" + (f" of which {over}" if over else "")
            cells.append(f"{r['goodput_mbps']} ({r['tcp_timeouts']}, {drops})")
        print(f"| {n} | " + " | ".join(cells) + " |")
    pfc = [r for r in table if r["variant"] == "pfc"]
    if pfc:
        cpu = any(r["cpu_bound"] == "True" for r in table)
        print(f"\nPFC: {sum(int(r['pauses']) for r in pfc)} pauses, pause applied "
              f"{min(float(r['pause_applied_p50_us']) for r in pfc if r['pause_applied_p50_us'])}-"
              f"{max(float(r['pause_applied_p50_us']) for r in pfc if r['pause_applied_p50_us'])} us "
              f"after XOFF (median per N). CPU-bound phases: {'yes' if cpu else 'none'}.")
    h = headline(out / "incast").get("pfc_reaction") or {}
    if h:
        print(f"Whole PFC run: pause applied p50 / p90 / max "
              f"{h['reaction_applied_us']['p50']} / {h['reaction_applied_us']['p90']} / "
              f"{h['reaction_applied_us']['max']} us; last arrival after XOFF p50 / p90 / max "
              f"{h['reaction_last_arrival_us']['p50']} / {h['reaction_last_arrival_us']['p90']} / "
              f"{h['reaction_last_arrival_us']['max']} us; bytes after XOFF max "
              f"{h['bytes_after_xoff']['max']}; headroom overflows {h['overflows']}.")


def victim(out: Path) -> None:
    print("| phase | victim goodput | incast goodput | pauses | paused links (upstream->ingress) | "
          "pause applied p50 / p90 | fabric drops | residual | CPU-bound |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for r in rows(out / "pfc_victim", "pfc_victim.csv"):
        drops = r["switch_drops"]  # headroom overflows are dropped at the egress, counted here
        print(f"| {r['phase']} | **{r['victim_mbps']}** | {r['incast_mbps']} | {r['pauses']} | "
              f"{r['paused_links'] or '-'} | {r['pause_applied_p50_us'] or '-'} / "
              f"{r['pause_applied_p90_us'] or '-'} us | {drops} | "
              f"{r['ingress_residual_bytes']} B | {r['cpu_bound']} |")


QOS = (("ECN queue occupancy", "ecn_queue", ecn), ("Priority scheduling", "priority", priority),
       ("TCP incast", "incast", incast), ("PFC victim flow", "pfc_victim", victim))


def _g(r: dict, key: str, fmt: str = "{:g}") -> str:
    v = r.get(key, "")
    if v in ("", "None"):
        return "-"
    try:
        return fmt.format(float(v))
    except ValueError:
        return v


def training(out: Path, name: str) -> None:
    """One row per job: iteration and communication against the model, bytes, accuracy,
    the sampled queue toward the busiest receiver, memory and CPU headroom."""
    print("| fabric | job | bg | iteration (median) | comm | model | comm/model | bytes sent per sync "
          "| wire/expected | test acc | queue to receiver p99 / max; deepest port max (pkts) | staleness | peak RSS/worker "
          "| link busy in comm | machine idle | workers' CPU wait / iteration | CPU-bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(out / name, "training.csv"):
        print(f"| {r['fabric']} | {r['job']} | {r['background'] or '-'} "
              f"| {_g(r, 'iter_s_median', '{:.3f}')} s "
              f"| {_g(r, 'comm_s_median', '{:.3f}')} s | {_g(r, 'model_comm_s', '{:.3f}')} s "
              f"| **{_g(r, 'comm_over_model', '{:.2f}')}** "
              f"| {_g(r, 'tx_bytes_per_sync', '{:,.0f}')} | {_g(r, 'tx_over_expected', '{:.3f}')}"
              + (" (relayed)" if r.get("hosts_relay") == "True" else "") + " "
              f"| {_g(r, 'test_acc', '{:.3f}')} "
              f"| {r['queue_p99_pkts']} / {r['queue_max_pkts']}"
              + (f"; {r['deepest_port']} {r['deepest_max_pkts']}" if r.get("deepest_port") else "")
              + " "
              f"| {_g(r, 'max_staleness')} | {_g(r, 'peak_rss_mb_max', '{:.0f}')} MB "
              f"| {_g(r, 'link_busy_in_comm', '{:.0%}')} "
              f"| {_g(r, 'machine_idle_mean', '{:.0%}')} "
              f"| {_g(r, 'worker_cpu_wait_share', '{:.0%}')} | {_training_cpu_bound(r)} |")


def scheduling(out: Path, name: str) -> None:
    """Layer-wise jobs beside their schedule's model (workloads/commsched.py)."""
    print("| job | iteration (median) | model | x | pieces | partition / credit | "
          "negotiations / iteration | a round | fitted a, b | CPU-bound |\n"
          "|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(out / name, "training.csv"):
        sizes = (f"{_g(r, 'partition_bytes', '{:,.0f}')} / {_g(r, 'credit_bytes', '{:,.0f}')} B"
                 if r.get("partition_bytes") not in (None, "", "None") else "-")
        print(f"| {r['job']} | {_g(r, 'iter_s_median', '{:.3f}')} s "
              f"| {_g(r, 'model_iter_s', '{:.3f} s')} | **{_g(r, 'iter_over_model_iter', '{:.2f}')}** "
              f"| {_g(r, 'pieces')} | {sizes} | {_g(r, 'negotiations')} "
              f"| {_g(r, 'negotiation_ms', '{:.1f} ms')} "
              f"| {_g(r, 'comm_a_ms', '{:.0f} ms')}, {_g(r, 'comm_b_us_per_kb', '{:.0f} us/KB')} "
              f"| {_training_cpu_bound(r)} |")


def _training_cpu_bound(r: dict) -> bool:
    """The run's verdict, with the workers' CPU-wait limit of the current code."""
    from testbed.experiments.trainers.model import cpu_bound_verdict
    from testbed.measure.cpu import MACHINE_IDLE_MEAN_MIN, OVS_DELAY_LIMIT_MS

    def num(key):
        v = r.get(key)
        return float(v) if v not in (None, "", "None") else None
    monitor = r.get("ovs_added_delay_p50_ms") not in (None, "", "None") and (
        float(r["ovs_added_delay_p50_ms"]) > OVS_DELAY_LIMIT_MS
        or float(r["machine_idle_mean"]) < MACHINE_IDLE_MEAN_MIN)
    return cpu_bound_verdict(monitor, num("worker_cpu_wait_share"), num("link_busy_in_comm"))


TRAINING = ("training_priority", "training_compression", "training_consistency",
            "training_16_cnn", "training_link_rate", "training_ring_vs_ps",
            "training_large_batch", "training_fusion", "training_scheduling")


PARALLEL = ("parallel_collectives", "parallel_pipeline", "parallel_fsdp", "parallel_moe",
            "parallel_placement", "parallel_16", "parallel_roce", "parallel_roce_ecmp",
            "parallel_pipemare")


def parallel(out: Path, name: str) -> None:
    """One row per job, then one per (job, collective type)."""
    print("| fabric | job | iteration | model | x | pipeline bubble (ideal) | core bytes/iter "
          "(model) | machine idle | rank CPU wait | CPU-bound |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(out / name, "parallel.csv"):
        bubble = (f"{_g(r, 'bubble', '{:.3f}')} ({_g(r, 'bubble_ideal', '{:.3f}')})"
                  if int(r["pp"]) > 1 else "-")
        core = (f"{float(r['core_bytes_per_iter']) / 1e6:.2f} MB "
                f"({float(r['model_core_bytes_per_iter']) / 1e6:.2f})"
                if r.get("core_bytes_per_iter") not in (None, "", "None") else "-")
        print(f"| {r['fabric']} | {r['job']} | {_g(r, 'iter_s_median', '{:.3f} s')} | "
              f"{_g(r, 'model_iter_s', '{:.3f} s')} | **{_g(r, 'iter_over_model', '{:.2f}')}** | "
              f"{bubble} | {core} | {_g(r, 'machine_idle_mean', '{:.0%}')} | "
              f"{_g(r, 'worker_cpu_wait_share', '{:.0%}')} | {r['cpu_bound']} |")
    print("\n| fabric | job | type | bytes/rank/iter | model | x | wire x | comm | model | x "
          "| busiest link load, model | x hashed model |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(out / name, "parallel_kinds.csv"):
        print(f"| {r['fabric']} | {r['job']} | {r['kind']} | "
              f"{_g(r, 'bytes_per_rank', '{:,.0f}')} | {_g(r, 'model_bytes_per_rank', '{:,.0f}')} | "
              f"**{_g(r, 'bytes_over_model', '{:.3f}')}** | {_g(r, 'wire_over_model', '{:.3f}')} | "
              f"{_g(r, 'comm_s', '{:.3f} s')} | {_g(r, 'model_comm_s', '{:.3f} s')} | "
              f"**{_g(r, 'comm_over_model', '{:.2f}')}** | {_g(r, 'measured_link_load', '{:.2f}')}, "
              f"{_g(r, 'link_load', '{:.2f}')} | {_g(r, 'comm_over_hashed_model', '{:.2f}')} |")
    roce = [r for r in rows(out / name, "parallel.csv") if r.get("roce_tx_pkts")]
    if roce:
        print("\n| fabric | job | RoCE packets | resent | timeouts | CNPs | rate cuts "
              "| reordered (most) | PFC pauses (paused) | engines' CPU |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    for r in roce:
        print(f"| {r['fabric']} | {r['job']} | {int(r['roce_tx_pkts']):,} | "
              f"{r['roce_retx_pkts']} | {r['roce_timeouts']} | {r['roce_cnps_rx']} | "
              f"{r['roce_rate_cuts']} | {r['roce_reordered']} ({r['roce_reorder_max']}) | "
              f"{r.get('pfc_pauses') or '-'} ({r.get('pfc_paused_ms') or '-'} ms) | "
              f"{float(r['roce_cpu_s']):.1f} s |")


def pipemare(out: Path, name: str) -> None:
    """The asynchronous pipeline's price: each job's delays (measured, model) and losses."""
    print("| experiment | job | iteration | delay in updates (model) | loss, last step | "
          "loss, last tenth |\n|---|---|---|---|---|---|")
    for r in rows(out / name, "parallel.csv"):
        if r.get("tail_loss") in (None, "", "None"):
            continue
        print(f"| {r['experiment']} | {r['job']} | {_g(r, 'iter_s_median', '{:.4f} s')} | "
              f"{_g(r, 'staleness', '{:.3f}')} ({_g(r, 'model_staleness', '{:.3f}')}) | "
              f"{_g(r, 'final_loss', '{:.3f}')} | **{_g(r, 'tail_loss', '{:.3f}')}** |")


def main(out: Path) -> None:
    for title, fn in (("Reachability", reachability), ("Link calibration", link),
                      ("Queue calibration", queue), ("Startup", startup)):
        if (out / "reachability").exists():
            print(f"\n### {title}\n")
            fn(out)
    for name in ("permutation_fattree", "permutation_fattree_mtu1500"):
        if (out / name).exists():
            print(f"\n### {name}\n")
            permutation(out, name)
    for name in ("hedera_fattree", "hedera_fattree_20mbps"):
        if (out / name).exists():
            print(f"\n### {name}\n")
            hedera(out, name)
    for title, name, fn in QOS:
        if (out / name).exists():
            print(f"\n### {title}\n")
            fn(out)
    for name in TRAINING:
        if (out / name / "metrics" / "training.csv").exists():
            print(f"\n### {name}\n")
            training(out, name)
            if name == "training_scheduling":
                print()
                scheduling(out, name)
    for name in PARALLEL:
        if (out / name / "metrics" / "parallel.csv").exists():
            print(f"\n### {name}\n")
            parallel(out, name)
            if name == "parallel_pipemare":
                print()
                pipemare(out, name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
