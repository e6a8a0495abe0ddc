"""What every rank of a training job keeps of itself, whichever worker runs it (the
training worker, train.py, and the parallel worker, parallel/worker.py): its counters
(bytes on the host's interfaces, CPU run and wait time), its Chrome trace, the time its
spans cover, and how it reports a failure and exits.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


def iface_bytes(ifname: str | None) -> tuple[int, int]:
    """(rx, tx) bytes on the wire of this host, from its namespace's /proc/net/dev: every
    interface but loopback (a BCube host has several), or loopback alone for a local job."""
    if not ifname:
        return 0, 0
    rx = tx = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        name = name.strip()
        if (name == "lo") == (ifname == "lo"):
            f = rest.split()
            rx, tx = rx + int(f[0]), tx + int(f[8])
    return rx, tx


def cpu_times() -> tuple[float, float]:
    """Seconds this process's threads (the trainer and Gloo's) have run on a CPU, and spent
    runnable but waiting for one, from the scheduler's /proc/<pid>/task/<tid>/schedstat
    (first and second fields, nanoseconds). Time a worker waits for a core stretches its
    iteration; on a 2-core machine with many workers this is what makes a run CPU-bound
    rather than network-bound. The run time is what `testbed plan` charges a trainer."""
    run = wait = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
            run, wait = run + int(fields[0]), wait + int(fields[1])
        except (OSError, IndexError, ValueError):  # a thread that just exited
            continue
    return run / 1e9, wait / 1e9


def counters(ifname: str | None) -> tuple[int, int, float, float]:
    """(rx bytes, tx bytes, CPU run and wait seconds) now; an iteration's row is the
    difference."""
    return (*iface_bytes(ifname), *cpu_times())


class Timeline:
    """Chrome trace events (complete events, microseconds from `t0`). The trace carries
    `t0` on the machine's monotonic clock (`otherData.t0_monotonic_s`), which every
    process and namespace shares, so the run's timeline can merge ranks on one clock."""

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self.t0 = time.perf_counter()
        self.t0_monotonic = time.monotonic()
        self.lock = threading.Lock()

    def span(self, name: str, cat: str, start: float, end: float, tid: int = 0, **args):
        with self.lock:
            self.events.append({"name": name, "cat": cat, "ph": "X", "pid": self.rank,
                                "tid": tid, "ts": (start - self.t0) * 1e6,
                                "dur": (end - start) * 1e6, "args": args})

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms",
                                    "otherData": {"rank": self.rank,
                                                  "t0_monotonic_s": self.t0_monotonic}}))


def run_rank(out_dir: str, rank: int, body: Callable[[Path], None],
             where: Callable[[], str] = lambda: "") -> int:
    """A rank's whole life as a process: its output folder made, `body` run in it, and a
    failure written where the runner reads it (`report_failure`, `where` saying what the
    rank was doing); the exit status."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        body(out)
        return 0
    except Exception as exc:
        return report_failure(out, rank, exc, where())


def report_failure(out: Path, rank: int, exc: Exception, where: str = "") -> int:
    """Writes `rank<R>.error`, which the runner reads to say which rank failed and why
    (`where`: what it was doing); returns the exit status."""
    (out / f"rank{rank}.error").write_text(f"{type(exc).__name__}: {exc}{where}\n")
    print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1


def exit_now(code: int) -> None:
    """Ends a worker whose outputs are all written and closed, without the interpreter's
    finalisation: torch's C++ objects (Gloo's, DDP's) tear down there, and now and then
    abort (SIGABRT, "terminate called without an active exception") or crash (SIGSEGV)
    with no Python frame left: 5 of 460 loopback worker processes here (torch 2.13.0,
    CPU), and once in CI; 0 of 240 without the finalisation. A job that had finished then
    looked failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def union_s(spans) -> float:
    """Seconds covered by at least one (start, end, ...) span."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e, *_ in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)
