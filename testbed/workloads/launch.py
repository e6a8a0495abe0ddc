"""Command lines of training processes, shared by the runner (one per emulated host) and
local jobs on loopback (development and unit tests, no root):

    python -m testbed.workloads.launch --world 3 --out /tmp/job -- --sync ps --iters 20
"""
from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

from testbed.core.system import REPO_ROOT


def train_argv(rank: int, world: int, master: str, out: Path | str, ifname: str | None,
               **opts) -> list[str]:
    """argv of one process; `opts` are train.py options by their Python names."""
    argv = [sys.executable, "-m", "testbed.workloads.train", "--rank", str(rank),
            "--world-size", str(world), "--master", master, "--out", str(out)]
    if ifname:
        argv += ["--ifname", ifname]
    for key, value in opts.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def parallel_argv(rank: int, world: int, master: str, job_dir: Path | str,
                  ifname: str) -> list[str]:
    """argv of one rank of a parallel job whose config is `job_dir`/job.json (the parallel
    worker, testbed/workloads/parallel/worker.py)."""
    return [sys.executable, "-m", "testbed.workloads.parallel.worker", "--rank", str(rank),
            "--world-size", str(world), "--master", master,
            "--config", str(Path(job_dir) / "job.json"), "--out", str(job_dir),
            "--ifname", ifname]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local(rank: int, world: int, port: int, out: Path | str, **opts) -> subprocess.Popen:
    """One process of a job on loopback."""
    return subprocess.Popen(train_argv(rank, world, f"127.0.0.1:{port}", out, "lo", **opts),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launch", description="a training job on loopback")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("train_args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    extra = [a for a in args.train_args if a != "--"]
    port = free_port()
    procs = [subprocess.Popen(train_argv(r, args.world, f"127.0.0.1:{port}", args.out, "lo")
                              + extra, cwd=REPO_ROOT) for r in range(args.world)]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
