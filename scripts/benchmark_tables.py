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


def main(out: Path) -> None:
    for title, fn in (("Reachability", reachability), ("Link calibration", link),
                      ("Queue calibration", queue), ("Startup", startup)):
        print(f"\n### {title}\n")
        fn(out)
    for name in ("permutation_fattree", "permutation_fattree_mtu1500"):
        print(f"\n### {name}\n")
        permutation(out, name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
