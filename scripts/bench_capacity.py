"""What one core of this machine carries (issue 16, part 4), on a quiet machine: the
constants of `testbed plan` (testbed/plan.py, CAPACITY).

1. Forwarding: a Fat-Tree k=4, single path, every host sending across the core (stride:8:
   5 switches per path), at several link rates and MTUs. Per phase, from the run's own
   checks (events.jsonl): packets that entered a switch per second (packet conservation's
   packets_in, ACKs included), OVS's forwarding thread (a share of one core) and the whole
   machine's busy cores, and whether the phase was CPU-bound.
2. Trainers: the training worker with real compute (the small CNN), 1, 2 and 4 workers at
   once on one switch at 1 Gb/s: the compute time of an iteration against one worker's,
   i.e. how many computing trainers a core holds.

    sudo .venv/bin/python scripts/bench_capacity.py OUTDIR

Prints Markdown tables and the fitted constants (docs/BENCHMARKS.md, "Capacity of one
machine"), and writes every run's results and bench.json under OUTDIR.
"""
from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from pathlib import Path

from testbed.runner import run_spec
from testbed.spec import loads

FORWARDING = [(9000, r) for r in (10, 20, 40, 80)] + [(1500, r) for r in (5, 10, 20)]
TRAINERS = (1, 2, 4)


def run(out: Path, data: dict) -> Path:
    spec, topo = loads(data)
    return run_spec(spec, topo, json.dumps(data), out, log=lambda m: None)


def phases(done: Path) -> list[dict]:
    """Each traffic phase's conservation and CPU verdict, as the runner recorded them."""
    events = [json.loads(line) for line in (done / "events.jsonl").read_text().splitlines()]
    return [e for e in events if "conservation" in e]


def forwarding(out_dir: Path, mtu: int, rate: float, duration: float = 12.0) -> dict:
    done = run(out_dir / f"fwd-{mtu}-{rate:g}", {
        "name": f"bench-capacity-{mtu}-{rate:g}",
        "topology": {"kind": "fattree", "params": {"k": 4, "rate_mbps": rate}},
        "links": {"buffer_pkts": 100, "mtu_bytes": mtu},
        "experiments": [{"type": "permutation", "patterns": ["stride:8"],
                         "routings": ["single"], "duration_s": duration, "omit_s": 2}]})
    (phase,) = phases(done)
    seconds = phase["seconds"]
    cpu = phase["cpu"]
    return {"mtu": mtu, "rate_mbps": rate, "seconds": round(seconds, 2),
            "pps": round(phase["conservation"]["packets_in"] / seconds),
            "ovs_thread_mean": cpu["ovs_thread_mean"], "ovs_thread_p90": cpu["ovs_thread_p90"],
            "machine_busy_cores": round((1 - cpu["machine_idle_mean"]) * os.cpu_count(), 3),
            "ovs_added_delay_p50_ms": cpu["ovs_added_delay_p50_ms"],
            "cpu_bound": cpu["cpu_bound"]}


def trainers(out_dir: Path, workers: int) -> dict:
    done = run(out_dir / f"train-{workers}", {
        "name": f"bench-capacity-train-{workers}",
        "topology": {"kind": "nonblocking", "params": {"hosts": 4, "rate_mbps": 1000}},
        "links": {"mtu_bytes": 9000},
        "experiments": [{"type": "training", "model": "cnn", "width": 32, "depth": 2,
                         "batch": 64, "iters": 12, "warmup_iters": 2,
                         "jobs": [{"sync": "ring", "workers": workers}]}]})
    rows = list(csv.DictReader((done / "metrics" / "training_iterations.csv").open()))
    steady = [r for r in rows if int(r["iteration"]) >= 2]
    return {"workers": workers,
            "compute_s": round(statistics.median(float(r["compute_s"]) for r in steady), 4),
            "cpu_wait_s": round(statistics.median(float(r["cpu_wait_s"]) for r in steady), 4),
            "machine_busy_cores": round((1 - phases(done)[0]["cpu"]["machine_idle_mean"])
                                        * os.cpu_count(), 3)}


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def main(out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    forwarding(out_dir / "warm-up", 9000, 10, duration=4)  # the first run after OVS starts
    fwd = [forwarding(out_dir, mtu, rate) for mtu, rate in FORWARDING]
    train = [trainers(out_dir, n) for n in TRAINERS]
    honest = [r for r in fwd if not r["cpu_bound"]]
    ovs = fit([(r["pps"], r["ovs_thread_mean"]) for r in honest])
    machine = fit([(r["pps"], r["machine_busy_cores"]) for r in honest])
    results = {"forwarding": fwd, "trainers": train,
               "ovs_thread_fit": {"base": ovs[0], "us_per_packet": ovs[1] * 1e6},
               "machine_fit": {"base_cores": machine[0], "us_per_packet": machine[1] * 1e6}}
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    print("| MTU | rate (Mb/s) | packets into switches /s | OVS thread (mean, p90) | "
          "machine busy (cores) | OVS added delay p50 (ms) | CPU-bound |\n"
          "|---|---|---|---|---|---|---|")
    for r in fwd:
        print(f"| {r['mtu']} | {r['rate_mbps']:g} | {r['pps']} | {r['ovs_thread_mean']}, "
              f"{r['ovs_thread_p90']} | {r['machine_busy_cores']} | "
              f"{r['ovs_added_delay_p50_ms']} | {r['cpu_bound']} |")
    print(f"\nOVS thread = {ovs[0]:.3f} + {ovs[1] * 1e6:.2f} us x packets/s; machine = "
          f"{machine[0]:.3f} cores + {machine[1] * 1e6:.2f} us x packets/s "
          f"(fitted on the {len(honest)} phases not CPU-bound)\n")
    print("| trainers computing at once | compute per iteration (median, s) | x one's | "
          "CPU wait (s) | machine busy (cores) |\n|---|---|---|---|---|")
    for r in train:
        print(f"| {r['workers']} | {r['compute_s']} | "
              f"{r['compute_s'] / train[0]['compute_s']:.2f} | {r['cpu_wait_s']} | "
              f"{r['machine_busy_cores']} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
