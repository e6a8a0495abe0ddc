"""One rank of a parallel training job:

    python -m testbed.workloads.parallel.worker --rank R --world-size W --master IP:PORT \\
        --config job.json --out DIR [--ifname h1-eth0]

The layout (`job.JobConfig.layout`) splits the world into tensor-, pipeline-, data- and
expert-parallel groups, each its own Gloo process group whose TCP connections carry the
DSCP of its collective type, so that switches can tell them apart and the worker can count
each type's bytes from its own sockets (TCP_INFO). An iteration runs the pipeline schedule
(GPipe or 1F1B) over the micro-batches; inside each layer the tensor-parallel allreduces,
the expert all-to-alls and (ZeRO-3) the parameter all-gathers; after the last micro-batch
the data-parallel synchronisation (allreduce, or reduce-scatter and all-gather).

Compute is real (the MLP on the digits data, its weights sliced as Megatron-LM slices them,
forward and backward written out so that every collective sits where Megatron puts it) or
emulated (a wait as long as the layer's FLOPs take on the stated device, or its profiled
time; the tensors exchanged are the real sizes times the scale).

The modules beside this one: `comm` (the process groups and their collectives),
`shards` (a stage's parameters, their data-parallel synchronisation and ZeRO), `real`
and `emulated` (the two kinds of stage), `runner` (the iteration and its rows).

Writes `rank<R>.jsonl` (one line per iteration), `rank<R>.trace.json` (Chrome trace: compute,
each collective, pipeline waits), `rank<R>.summary.json`, and `rank<R>.error` on failure.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

from testbed.config.loader import load_json
from testbed.workloads.model.parallel.job import JobConfig

from ..rank import exit_now, run_rank
from .runner import Runner

IN_FLIGHT: list[str] = []  # what a failed rank was waiting for, for its error file


def run(cfg: JobConfig, rank: int, world: int, master: str, out: Path,
        ifname: str | None) -> None:
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if world != cfg.layout.world:
        raise ValueError(f"world size {world} is not dp*tp*pp = {cfg.layout.world}")
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=cfg.timeout_s))
    r = Runner(cfg, rank, out, ifname)
    IN_FLIGHT[:] = [""]
    try:
        r.run()
        if cfg.roce is not None:
            dist.barrier()   # every rank's last message acknowledged before engines end
    except Exception:
        IN_FLIGHT[:] = [r.comm.in_flight]
        raise
    finally:
        r.close()
    dist.barrier()
    dist.destroy_process_group()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="parallel-worker")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master", required=True, help="IP:PORT of rank 0's rendezvous")
    ap.add_argument("--config", required=True, help="the job's JSON (job.JobConfig)")
    ap.add_argument("--ifname", default=None, help="the host's interface (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--out", required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_rank(args.out, args.rank, lambda out: run(
        load_json(JobConfig, args.config), args.rank, args.world_size, args.master, out,
        args.ifname), where=lambda: f" (during {IN_FLIGHT[0]})" if IN_FLIGHT and IN_FLIGHT[0]
        else "")


if __name__ == "__main__":
    exit_now(main())


def local_job(cfg: JobConfig, out: Path, timeout_s: float = 300.0) -> dict[int, list[dict]]:
    """Every rank of a job as a process on loopback (development and unit tests, no root);
    returns each rank's iteration rows. Raises with the first failed rank's error."""
    import subprocess

    from testbed.config.loader import dump_json

    from ..launch import REPO_ROOT, free_port, parallel_argv
    out.mkdir(parents=True, exist_ok=True)
    dump_json(cfg, out / "job.json")
    port = free_port()
    world = cfg.layout.world
    procs = [subprocess.Popen(
        parallel_argv(r, world, f"127.0.0.1:{port}", out, "lo"), cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for r in range(world)]
    deadline = time.time() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.time() > deadline:
                break
            time.sleep(0.1)
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed or any(p.poll() is None for p in procs):
            r = failed[0] if failed else -1
            err = out / f"rank{r}.error"
            why = err.read_text().strip() if r >= 0 and err.exists() else "timed out"
            raise RuntimeError(f"rank {r} failed: {why}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return {r: [json.loads(line) for line in (out / f"rank{r}.jsonl").read_text().splitlines()]
            for r in range(world)}
