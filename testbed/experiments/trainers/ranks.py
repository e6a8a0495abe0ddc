"""A trainer job's ranks, one process each in its host: started together, watched until
all end, and when some fail, the one that failed first by its own fault named (its peers
fail after it, saying only that it went away)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.core.errors import TestbedError

from ..base import Phase


@dataclass(frozen=True)
class RankProcess:
    """One started rank: its job's folder (where it writes `rank<R>.error`), its rank, and
    how a message names it ("rank 3 in h4", "job a rank 3 in h4")."""
    job_dir: Path
    rank: int
    what: str
    proc: subprocess.Popen


def watch_ranks(ranks: list[RankProcess], *, deadline: float, timeout_s: float, label: str,
                poll_s: float, stopped: str = "", before: Callable[[], None] = lambda: None,
                after: Callable[[], None] = lambda: None) -> None:
    """Until every rank has ended well; when some fail, raises TestbedError naming the one
    that failed first by its own fault (`failure_key`, once `settled`), `label` first and
    `stopped` after the exit status. `before` runs at each look before the processes are
    polled, `after` once none has failed (each may raise); a look every `poll_s`."""
    failed_at: float | None = None
    while True:
        before()
        codes = [r.proc.poll() for r in ranks]
        failed = [(r, c) for r, c in zip(ranks, codes) if c not in (None, 0)]
        if failed:  # the first to fail by its own fault, not the first listed
            failed_at = failed_at or time.time()
            if not settled([failure_key(r.job_dir, r.rank)[0] for r, _ in failed],
                           any(c is None for c in codes), time.time() - failed_at):
                time.sleep(0.1)
                continue
            first = first_failed([(r.job_dir, r.rank) for r, _ in failed])
            r, code = next(f for f in failed if (f[0].job_dir, f[0].rank) == first)
            raise TestbedError(f"{label}: {r.what} failed (exit {code}){stopped}: "
                               f"{rank_failure(r.job_dir, r.rank)}")
        after()
        if all(c == 0 for c in codes):
            return
        if time.time() > deadline:
            raise TestbedError(f"{label}: not finished after {timeout_s:.0f} s "
                               "(job_timeout_s)")
        time.sleep(poll_s)


def run_processes(fab: Phase, ranks: list[tuple[int, str, str]], job_dir: Path,
                  argv_of: Callable[[int, str], list[str]], timeout_s: float,
                  label: str) -> dict:
    """Start every rank in its host (`ranks`: (rank, host, role) in rank order, a training
    job's `RankPlacement.ranks`); fail fast when one dies (its error in the message, which
    `label` starts, the others stopped). Returns the machine's peak memory in use while
    the job ran."""
    procs: list[RankProcess] = []
    mem_low = [_mem_available()]
    try:
        for rank, host, role in ranks:
            procs.append(RankProcess(job_dir, rank, f"rank {rank} in {host}", fab.start_process(
                host, argv_of(rank, host), f"training {role} rank {rank} in {host}",
                job_dir / f"rank{rank}.log")))

        def sample() -> None:
            mem_low[0] = min(mem_low[0], _mem_available())
        watch_ranks(procs, deadline=time.time() + timeout_s, timeout_s=timeout_s, label=label,
                    poll_s=0.3, before=sample)
    finally:
        fab.stop_processes([r.proc for r in procs])
    return {"mem_used_peak_gb": round((_mem_total() - mem_low[0]) / 2**30, 2)}


# what a rank says when a peer's exit broke its connections: the peer's failure, not its own
PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def failure_key(job_dir: Path, rank: int) -> tuple[bool, float, int]:
    """Orders failed ranks by how likely each is the cause: a failure of its own (a crash,
    a timeout) before one that only says a peer went away, then by when its error file was
    written (a rank killed without writing one, after those that did, before those that
    only say a peer went away). When a partition makes one rank time out, Gloo closes its
    connections at once and the ranks beside it fail with "connection closed by peer"
    within milliseconds, their error files sometimes written first."""
    err = job_dir / f"rank{rank}.error"
    text = err.read_text(errors="replace") if err.exists() else ""
    return (any(p in text for p in PEER_GONE), error_time(job_dir, rank), rank)


FAILURE_GRACE_S = 2.0  # how long ranks that only say a peer went away wait for the peer's exit


def settled(peer_gone: list[bool], running: bool, waited_s: float) -> bool:
    """Whether the failed ranks (`peer_gone`: each only says a peer went away) can be told
    apart now: one failed by its own fault, or none is still running, or FAILURE_GRACE_S
    has passed since the first failure. Under a partition a rank's "closed by peer" can end
    its process before the rank that timed out has ended its own (seen in CI: the job was
    named after the neighbour)."""
    return not all(peer_gone) or not running or waited_s >= FAILURE_GRACE_S


def first_failed(ranks: list[tuple[Path, int]]) -> tuple[Path, int]:
    """Of ranks that have exited with an error, the one that failed first by its own fault
    (`failure_key`). A crashed rank's peers fail after it ("connection closed by peer");
    when one look at the processes finds them all dead, the rank number must not decide
    which is named."""
    return min(ranks, key=lambda r: failure_key(*r))


def error_time(job_dir: Path, rank: int) -> float:
    """When a rank wrote its error file (infinity: it wrote none)."""
    err = job_dir / f"rank{rank}.error"
    return err.stat().st_mtime if err.exists() else float("inf")


def rank_failure(job_dir: Path, rank: int) -> str:
    """Why a rank failed: its error file (the worker's own account), else its log's end."""
    err = job_dir / f"rank{rank}.error"
    if err.exists():
        return err.read_text().strip()
    return (job_dir / f"rank{rank}.log").read_text(errors="replace").strip()[-600:]


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _mem_available() -> int:
    return _meminfo("MemAvailable")


def _mem_total() -> int:
    return _meminfo("MemTotal")
