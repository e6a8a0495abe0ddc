"""What one core of this machine carries, on a quiet machine: the
constants of `testbed plan` (testbed/plan.py, CAPACITY).

1. Forwarding: a Fat-Tree k=4 under ECMP, every host sending across the core (stride:8:
   5 switches per path), at link rates that take OVS's forwarding thread up to and past
   what it carries, at MTU 9000 and 1500. Per phase, from the run's own
   checks (events.jsonl): packets that entered a switch per second (packet conservation's
   packets_in, ACKs included), OVS's forwarding thread (a share of one core) and the whole
   machine's busy cores, and whether the phase was CPU-bound.
2. Trainers: the training worker with real compute (the small CNN), 1, 2 and 4 workers at
   once on one switch at 1 Gb/s: the compute time of an iteration against one worker's,
   i.e. how many computing trainers a core holds (`compute_cores`).
3. A trainer's CPU per iteration (its threads' run time, schedstat) in the ring jobs the
   shipped specs run, fitted to its bare step, the bytes it sends and the ring's steps;
   and a parallel rank's (emulated compute, eight data-parallel ranks) per MB it sends.

    sudo .venv/bin/python scripts/bench_capacity.py OUTDIR [EARLIER_OUTDIR...]
    sudo .venv/bin/python scripts/bench_capacity.py --forwarding N OUTDIR

With `--forwarding N`, part 1 only, its fabrics forwarded by N ovs-vswitchd processes
(`forwarding.processes`): what the split changes of the machine's packet capacity.

Prints Markdown tables and the fitted constants (docs/BENCHMARKS.md, "Capacity of one
machine"), and writes every run's results and bench.json under OUTDIR. With earlier runs'
directories, also the constants of all runs together (testbed/config/capacity.py): near
OVS's limit one run's verdict is a coin toss, so the limits are the least packet rate any
run was CPU-bound at and the most any carried below it, the rest the runs' means.
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

FORWARDING = [(9000, r) for r in (40, 80, 120, 160)] + [(1500, r) for r in (5, 10, 15, 20)]
TRAINERS = (1, 2, 4)


def run(out: Path, data: dict) -> Path:
    spec, topo = loads(data)
    return run_spec(spec, topo, json.dumps(data), out, log=lambda m: None)


def phases(done: Path) -> list[dict]:
    """Each traffic phase's conservation and CPU verdict, as the runner recorded them."""
    events = [json.loads(line) for line in (done / "events.jsonl").read_text().splitlines()]
    return [e for e in events if "conservation" in e]


def forwarding(out_dir: Path, mtu: int, rate: float, duration: float = 12.0,
               processes: int = 1) -> dict:
    done = run(out_dir / f"fwd-{mtu}-{rate:g}", {
        "name": f"bench-capacity-{mtu}-{rate:g}",
        "topology": {"kind": "fattree", "params": {"k": 4, "rate_mbps": rate}},
        "links": {"buffer_pkts": 100, "mtu_bytes": mtu},
        "forwarding": {"processes": processes},
        "experiments": [{"type": "permutation", "patterns": ["stride:8"],
                         "routings": ["ecmp"], "duration_s": duration, "omit_s": 2}]})
    (phase,) = phases(done)
    summary = json.loads((done / "summary.json").read_text())
    normalised = summary["experiments"]["0:permutation"]["headline"]["stride:8_ecmp_normalised"]
    seconds = phase["seconds"]
    cpu = phase["cpu"]
    return {"mtu": mtu, "rate_mbps": rate, "seconds": round(seconds, 2),
            "normalised": normalised,
            "pps": round(phase["conservation"]["packets_in"] / seconds),
            "ovs_thread_mean": cpu["ovs_thread_mean"], "ovs_thread_p90": cpu["ovs_thread_p90"],
            "machine_busy_cores": round((1 - cpu["machine_idle_mean"]) * os.cpu_count(), 3),
            "ovs_added_delay_p50_ms": cpu["ovs_added_delay_p50_ms"],
            "cpu_bound": cpu["cpu_bound"]}


def trainers(out_dir: Path, workers: int) -> dict:
    """Compute alone: the small CNN's ring on one switch at 1 Gb/s, its traffic a few
    thousand packets; how much longer an iteration computes with `workers` at once."""
    done = run(out_dir / f"compute-{workers}", {
        "name": f"bench-capacity-compute-{workers}",
        "topology": {"kind": "nonblocking", "params": {"hosts": 4, "rate_mbps": 1000}},
        "links": {"mtu_bytes": 9000},
        "experiments": [{"type": "training", "model": "cnn", "width": 32, "depth": 2,
                         "batch": 64, "iters": 12, "warmup_iters": 2,
                         "jobs": [{"sync": "ring", "workers": workers}]}]})
    steady = iterations(done)
    return {"workers": workers,
            "compute_s": round(statistics.median(float(r["compute_s"]) for r in steady), 4),
            "cpu_wait_s": round(statistics.median(float(r["cpu_wait_s"]) for r in steady), 4),
            "machine_busy_cores": round((1 - phases(done)[0]["cpu"]["machine_idle_mean"])
                                        * os.cpu_count(), 3)}


def iterations(done: Path) -> list[dict]:
    rows = list(csv.DictReader((done / "metrics" / "training_iterations.csv").open()))
    return [r for r in rows if int(r["iteration"]) >= 2]


# (model, width, depth, batch, workers, link rate): ring jobs as the shipped specs run them
RINGS = [("mlp", 256, 2, 32, 4, 20), ("mlp", 256, 2, 32, 8, 20), ("mlp", 256, 2, 32, 16, 20),
         ("cnn", 32, 2, 16, 16, 100)]


def ring_cpu(out_dir: Path, model: str, width: int, depth: int, batch: int, workers: int,
             rate: float) -> dict:
    """A trainer's CPU per iteration in a ring job on the Fat-Tree (MTU 1500), against its
    bare step's compute, the bytes it sends and the ring's steps."""
    from testbed.workloads.models import step_seconds
    step, _ = step_seconds(model, width, depth, batch)
    done = run(out_dir / f"ring-{model}-{workers}-{rate:g}", {
        "name": f"bench-capacity-ring-{model}-{workers}",
        "topology": {"kind": "fattree", "params": {"k": 4}},
        "experiments": [{"type": "training", "model": model, "width": width, "depth": depth,
                         "batch": batch, "iters": 12, "warmup_iters": 2,
                         "rates_mbps": [rate], "jobs": [{"sync": "ring", "workers": workers}]}]})
    steady = iterations(done)
    summary = list(csv.DictReader((done / "metrics" / "training.csv").open()))[0]

    def median(key: str) -> float:
        return statistics.median(float(r[key]) for r in steady)
    return {"model": model, "workers": workers, "rate_mbps": rate, "step_s": round(step, 5),
            "cpu_s": round(median("cpu_s"), 5), "sent_mb": round(median("tx_bytes") / 1e6, 4),
            "ring_steps": 2 * (workers - 1), "iter_s": round(median("iter_s"), 4),
            "wait_share": float(summary["worker_cpu_wait_share"]),
            "cpu_bound": summary["cpu_bound"] == "True"}


def parallel_cpu(out_dir: Path, rate: float = 20) -> dict:
    """A parallel rank's CPU per iteration (emulated compute: its tensors, Gloo's
    reductions and copies) and the bytes it sends: eight data-parallel ranks of the shrunk
    GPT-2 small, as parallel_fsdp.yaml runs them."""
    done = run(out_dir / f"parallel-dp8-{rate:g}", {
        "name": "bench-capacity-parallel",
        "topology": {"kind": "fattree", "params": {"k": 4}},
        "experiments": [{"type": "parallel", "model": "gpt2-small", "scale": 0.01,
                         "device_tflops": 150, "reference_link_gbps": 100, "iters": 4,
                         "warmup_iters": 1, "sample_hz": 50, "rates_mbps": [rate],
                         "jobs": [{"dp": 8}]}]})
    rows = [r for r in csv.DictReader((done / "metrics" / "parallel_iterations.csv").open())
            if int(r["iteration"]) >= 1]
    summary = list(csv.DictReader((done / "metrics" / "parallel.csv").open()))[0]
    cpu = statistics.median(float(r["cpu_s"]) for r in rows)
    sent = statistics.median(float(r["tx_bytes"]) for r in rows) / 1e6
    return {"ranks": 8, "rate_mbps": rate, "cpu_s": round(cpu, 4), "sent_mb": round(sent, 3),
            "iter_s": round(statistics.median(float(r["iter_s"]) for r in rows), 3),
            "wait_share": float(summary["worker_cpu_wait_share"]),
            "cpu_bound": summary["cpu_bound"] == "True"}


def rank_per_mb(par: dict, fit: dict) -> float:
    """A parallel rank's CPU per MB it sends: what its iteration took besides the training
    worker's base and per-step costs (its ring's 2 (n - 1) steps)."""
    steps = 2 * (par["ranks"] - 1)
    return (par["cpu_s"] - fit["base_s"] - fit["per_step_s"] * steps) / par["sent_mb"]


def fit_trainer_cpu(rings: list[dict], overhead: float, compute_cores: float) -> dict:
    """cpu_s - overhead x step = base + per_mb x MB sent + per_step x ring steps (least
    squares over the ring runs); and the share of the `max(0, n / compute_cores - 1) x
    cpu_s` a trainer would wait if all wanted their CPU at once that they did wait (least
    squares through 0)."""
    import numpy as np
    a = np.array([[1.0, r["sent_mb"], r["ring_steps"]] for r in rings])
    y = np.array([r["cpu_s"] - overhead * r["step_s"] for r in rings])
    (base, per_mb, per_step), *_ = np.linalg.lstsq(a, y, rcond=None)
    x = [max(0.0, r["workers"] / compute_cores - 1) * r["cpu_s"] for r in rings]
    w = [r["wait_share"] * r["iter_s"] for r in rings]
    factor = sum(p * q for p, q in zip(x, w)) / sum(p * p for p in x)
    return {"base_s": float(base), "per_mb_s": float(per_mb), "per_step_s": float(per_step),
            "wait_factor": factor}


def packets_per_segment(fwd: list[dict]) -> float:
    """Packets entering switches per data segment per switch crossed (ACKs, ARP, ...): the
    measured rate over the segments the measured goodput makes on stride:8's 5 switches."""
    ratios = [r["pps"] / (r["normalised"] * 16 * r["rate_mbps"] * 1e6 * 5 / 8 / r["mtu"])
              for r in fwd if not r["cpu_bound"]]
    return statistics.median(ratios)


def combine(runs: list[dict]) -> dict:
    """The constants of several runs of this benchmark."""
    fwd = [r for run in runs for r in run["forwarding"]]
    limits = {}
    for mtu in sorted({r["mtu"] for r in fwd}):
        bound = min((r["pps"] for r in fwd if r["mtu"] == mtu and r["cpu_bound"]),
                    default=None)
        fits = max(r["pps"] for r in fwd if r["mtu"] == mtu and not r["cpu_bound"]
                   and (bound is None or r["pps"] < bound))
        limits[mtu] = {"fits": fits, "bound": bound}

    def mean(get) -> float:
        return statistics.mean(get(run) for run in runs)
    return {"ovs_fits_pps": {m: v["fits"] for m, v in limits.items()},
            "ovs_bound_pps": {m: v["bound"] for m, v in limits.items()},
            "packets_per_segment": mean(lambda r: r["packets_per_segment"]),
            "compute_cores": mean(lambda r: r["compute_cores"]),
            "step_overhead": mean(lambda r: r["step_overhead"]),
            **{f"trainer_{k}": mean(lambda r, k=k: r["trainer_cpu"][k])
               for k in ("base_s", "per_mb_s", "per_step_s", "wait_factor", "rank_per_mb_s")}}


FORWARDING_TABLE = ("| MTU | rate (Mb/s) | normalised | packets into switches /s | OVS thread "
                    "(mean, p90) | machine busy (cores) | OVS added delay p50 (ms) | "
                    "CPU-bound |\n|---|---|---|---|---|---|---|---|")


def forwarding_rows(fwd: list[dict]) -> list[str]:
    return [f"| {r['mtu']} | {r['rate_mbps']:g} | {r['normalised']} | {r['pps']} | "
            f"{r['ovs_thread_mean']}, {r['ovs_thread_p90']} | {r['machine_busy_cores']} | "
            f"{r['ovs_added_delay_p50_ms']} | {r['cpu_bound']} |" for r in fwd]


def split(out_dir: Path, processes: int) -> int:
    """Part 1 alone, with the fabric forwarded by `processes` processes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    forwarding(out_dir / "warm-up", 9000, 10, duration=4, processes=processes)
    fwd = [forwarding(out_dir, mtu, rate, processes=processes) for mtu, rate in FORWARDING]
    (out_dir / "bench.json").write_text(json.dumps({"processes": processes,
                                                    "forwarding": fwd}, indent=1))
    print(f"forwarding processes: {processes} (OVS thread: the busiest one's)")
    print("\n".join([FORWARDING_TABLE, *forwarding_rows(fwd)]))
    return 0


def main(out_dir: Path, earlier: list[Path]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    forwarding(out_dir / "warm-up", 9000, 10, duration=4)  # the first run after OVS starts
    fwd = [forwarding(out_dir, mtu, rate) for mtu, rate in FORWARDING]
    train = [trainers(out_dir, n) for n in TRAINERS]
    rings = [ring_cpu(out_dir, *ring) for ring in RINGS]
    from testbed.workloads.models import step_seconds
    overhead = train[0]["compute_s"] / step_seconds("cnn", 32, 2, 64)[0]
    compute_cores = TRAINERS[-1] * train[0]["compute_s"] / train[-1]["compute_s"]
    cpu_fit = fit_trainer_cpu(rings, overhead, compute_cores)
    par = parallel_cpu(out_dir)
    cpu_fit["rank_per_mb_s"] = rank_per_mb(par, cpu_fit)
    limits = {}
    for mtu in sorted({m for m, _ in FORWARDING}):
        ok = [r["pps"] for r in fwd if r["mtu"] == mtu and not r["cpu_bound"]]
        bound = [r["pps"] for r in fwd if r["mtu"] == mtu and r["cpu_bound"]]
        limits[mtu] = {"carried_max_pps": max(ok, default=None),
                       "cpu_bound_min_pps": min(bound, default=None)}
    results = {"forwarding": fwd, "trainers": train, "limits": limits, "rings": rings,
               "step_overhead": overhead, "compute_cores": compute_cores,
               "trainer_cpu": cpu_fit, "packets_per_segment": packets_per_segment(fwd),
               "parallel": par}
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    print("\n".join([FORWARDING_TABLE, *forwarding_rows(fwd)]))
    for mtu, lim in limits.items():
        print(f"\nMTU {mtu}: carried {lim['carried_max_pps']} packets/s into switches "
              f"without being CPU-bound; CPU-bound from {lim['cpu_bound_min_pps']}")
    print()
    print("| trainers computing at once | compute per iteration (median, s) | x one's | "
          "CPU wait (s) | machine busy (cores) |\n|---|---|---|---|---|")
    for r in train:
        print(f"| {r['workers']} | {r['compute_s']} | "
              f"{r['compute_s'] / train[0]['compute_s']:.2f} | {r['cpu_wait_s']} | "
              f"{r['machine_busy_cores']} |")
    print(f"\ncompute cores (trainers computing at once / stretch): "
          f"{results['compute_cores']:.2f}; a trainer's iteration computes "
          f"{overhead:.2f}x its bare step\n")
    print("| ring job | link | trainer CPU / iteration | bare step | MB sent | ring steps | "
          "iteration | wait share | CPU-bound |\n|---|---|---|---|---|---|---|---|---|")
    for r in rings:
        print(f"| {r['model']} {r['workers']}w | {r['rate_mbps']:g} Mb/s | "
              f"{r['cpu_s'] * 1000:.2f} ms | {r['step_s'] * 1000:.2f} ms | {r['sent_mb']} | "
              f"{r['ring_steps']} | {r['iter_s']} s | {r['wait_share']:.0%} | "
              f"{r['cpu_bound']} |")
    print(f"\ntrainer CPU per iteration = {overhead:.2f} x step + {cpu_fit['base_s'] * 1000:.2f} "
          f"ms + {cpu_fit['per_mb_s'] * 1000:.2f} ms/MB sent + "
          f"{cpu_fit['per_step_s'] * 1000:.3f} ms/ring step; waited "
          f"{cpu_fit['wait_factor']:.2f} of the all-at-once wait; "
          f"{results['packets_per_segment']:.2f} packets per segment per switch")
    print(f"\nparallel: 8 DP ranks of GPT-2 small x0.01 at {par['rate_mbps']:g} Mb/s: "
          f"{par['cpu_s'] * 1000:.0f} ms of CPU per rank-iteration, {par['sent_mb']} MB sent, "
          f"iteration {par['iter_s']} s, waited {par['wait_share']:.0%} (CPU-bound: "
          f"{par['cpu_bound']}): {cpu_fit['rank_per_mb_s'] * 1000:.1f} ms per MB sent")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] == "--forwarding" and len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "--forwarding":
        sys.exit(split(Path(sys.argv[3]), int(sys.argv[2])))
    sys.exit(main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]))
