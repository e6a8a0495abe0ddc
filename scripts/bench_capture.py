#!/usr/bin/env python3
"""What packet capture costs a run: the same stride-8 permutation on the k=4 Fat-Tree
(permutation_fattree.yaml with one pattern, single-path routing so that every run takes
the same paths, one repeat) without a capture, with tcpdump on the four ports of one edge
switch keeping 128 bytes a packet, and keeping whole frames. Per variant: the goodput
against the ideal and against the max-min model of its paths, the machine's busy fraction
while the flows ran, OVS's thread, the CPU verdict, and what the capture wrote and the
kernel dropped.

    sudo .venv/bin/python scripts/bench_capture.py OUTDIR [RUNS]
"""
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETS = ["experiments.0.patterns=[stride:8]", "experiments.0.routings=[single]",
        "experiments.0.repeats=1", "experiments.0.duration_s=15"]
PORTS = "[e1-eth1, e1-eth2, e1-eth3, e1-eth4]"
VARIANTS = {"none": [],
            "headers (128 B)": [f"capture={{ports: {PORTS}, snaplen: 128}}"],
            "whole frames": [f"capture={{ports: {PORTS}, snaplen: 9100}}"]}


def one(out: Path, sets: list[str]) -> dict:
    argv = [sys.executable, "-m", "testbed.cli", "run",
            str(REPO / "experiments" / "permutation_fattree.yaml"), "--out", str(out)]
    for s in SETS + sets:
        argv += ["--set", s]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    (row,) = list(csv.DictReader(open(out / "metrics" / "permutation.csv")))
    busy = [float(r["machine_busy_fraction"]) for r in csv.DictReader(open(out / "metrics" / "cpu.csv"))
            if r["experiment"]]
    ovs = [float(r["ovs_thread_core_fraction"]) for r in csv.DictReader(open(out / "metrics" / "cpu.csv"))
           if r["experiment"]]
    caps = [r for f in out.glob("capture/*/capture.json") for r in json.loads(f.read_text())]
    return {"normalised": float(row["normalised_to_ideal"]), "cpu_bound": row["cpu_bound"],
            "of_model": float(row["normalised_to_ideal"]) / float(row["routed_model"]),
            "ovs_p90": float(row["ovs_thread_p90_core"]),
            "busy": statistics.mean(busy), "ovs": statistics.mean(ovs),
            "packets": sum(c["packets"] or 0 for c in caps),
            "mb": sum(c["bytes"] for c in caps) / 1e6,
            "dropped": sum(c["dropped_by_kernel"] or 0 for c in caps)}


def main(out: Path, runs: int) -> None:
    print("| capture | goodput of ideal | of its paths' model | machine busy | OVS thread mean / p90 | "
          "CPU-bound | packets written | file MB | kernel drops |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i in range(runs):
        for name, sets in VARIANTS.items():
            r = one(out / f"{i}-{name.split()[0]}", sets)
            print(f"| {name} | {r['normalised']:.3f} | {r['of_model']:.3f} | {r['busy']:.3f} | "
                  f"{r['ovs']:.3f} / {r['ovs_p90']:.3f} | "
                  f"{r['cpu_bound']} | {r['packets']} | {r['mb']:.1f} | {r['dropped']} |",
                  flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
