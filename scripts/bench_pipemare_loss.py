"""The loss an asynchronous pipeline reaches against a synchronous one, over seeds. A real
job's losses do not depend on timing (a schedule fixes the order of every forward,
backward and update, and so each micro-batch's delay), so its runs on loopback compute
exactly what they compute on a fabric; this runs the real-compute jobs of a spec's parallel
experiments there, once per seed, without root.

    .venv/bin/python scripts/bench_pipemare_loss.py [SPEC] [--seeds 0 1 2 3 4] [--out DIR]

Prints a Markdown table (docs/BENCHMARKS.md, `parallel_pipemare.yaml`): per experiment and
job, over the seeds, the mean training loss over the tenth of the run before a quarter,
half and all of it, and how many steps the job took to reach the loss the experiment's
first (synchronous) job had at half the run, against that job's own steps.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testbed.experiments.parallel.model import job_config  # noqa: E402
from testbed.experiments.parallel.spec import Parallel  # noqa: E402
from testbed.spec import load  # noqa: E402
from testbed.workloads.parallel.worker import local_job  # noqa: E402


def last_stage_losses(rows: dict[int, list[dict]]) -> list[float]:
    """The loss of every iteration, as the last stage computed it."""
    last = max(rows, key=lambda r: sum(x.get("loss") is not None for x in rows[r]))
    return [x["loss"] for x in rows[last]]


def window(losses: list[float], end: int, width: int) -> float:
    """The mean loss over the `width` iterations before `end`."""
    return statistics.mean(losses[max(0, end - width):end])


def steps_to(losses: list[float], target: float, width: int) -> int | None:
    """The first iteration at which the mean over the `width` before it is at most
    `target` (None: never)."""
    for end in range(width, len(losses) + 1):
        if window(losses, end, width) <= target:
            return end
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", nargs="?", default="experiments/parallel_pipemare.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="pipemare-loss-"))
    spec, _ = load(args.spec)
    print("| experiment | real | job | loss at N/4 | at N/2 | at N | steps to the first "
          "job's loss at N/2 (x its own) |\n|---|---|---|---|---|---|---|")
    for e, exp in enumerate(spec.experiments):
        if not isinstance(exp, Parallel) or exp.compute != "real":
            continue
        n, width = exp.iters, max(1, exp.iters // 10)
        what = f"lr {exp.real.lr:g}, momentum {exp.real.momentum:g}, N = {n}"
        runs = [(job.label(), [last_stage_losses(local_job(
            job_config(replace(exp, seed=seed), job, rate_mbps=0.0),
            out / f"e{e}-j{j}-s{seed}")) for seed in args.seeds])
            for j, job in enumerate(exp.jobs)]
        first = runs[0][1]
        targets = [window(losses, n // 2, width) for losses in first]
        own = [steps_to(losses, t, width) for losses, t in zip(first, targets)]
        for label, seeds in runs:
            at = [statistics.mean(window(losses, end, width) for losses in seeds)
                  for end in (n // 4, n // 2, n)]
            steps = [steps_to(losses, t, width) for losses, t in zip(seeds, targets)]
            reached = [s / o for s, o in zip(steps, own) if s is not None and o]
            took = (f"{statistics.mean(s for s in steps if s is not None):.0f} "
                    f"({statistics.mean(reached):.2f}x)" if reached else "never")
            missed = sum(s is None for s in steps)
            print(f"| {e} | {what} | {label} | "
                  + " | ".join(f"{x:.3f}" for x in at)
                  + f" | {took}{f', {missed} of {len(steps)} never' if missed and reached else ''} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
