"""What passes between a training job's workers, the runner and a cross-job policy while
jobs share a fabric: the start the runner gives every job once all are ready
(so that the jobs' first iterations begin when the spec says, not when each job's
processes happened to finish starting), the gate a policy sets (when each iteration may
start) and the progress a job reports (how far into its iteration it is, in bytes). All are
small JSON files in the round's directory, replaced atomically; times are CLOCK_MONOTONIC
seconds (`time.monotonic()`), the same in every network namespace of the machine.

The gate releases iteration `it` (>= `first_iter`) at `anchor + offset_s + (it -
first_iter) * period_s`: a job that is early waits, a job that is late starts at once (it
never waits for a later slot), so a periodic schedule holds its phase without adding a
whole period after one slow iteration.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class GateSetting:
    anchor: float       # monotonic seconds
    period_s: float
    offset_s: float
    first_iter: int = 0

    def release(self, it: int) -> float | None:
        """When iteration `it` may start (None: it is not gated)."""
        if it < self.first_iter or self.period_s <= 0:
            return None
        return self.anchor + self.offset_s + (it - self.first_iter) * self.period_s


@dataclass(frozen=True)
class Progress:
    """A job's rank 0 at `t`: in iteration `iteration`, in its compute or its
    synchronisation, having sent `sent_bytes` (TCP payload acknowledged) since the
    iteration began; `last_bytes` is what the previous whole iteration sent."""
    t: float
    iteration: int
    phase: str          # "compute" | "sync" | "gate" | "done"
    sent_bytes: int
    last_bytes: int


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def write_gate(path: Path, gate: GateSetting) -> None:
    write_json(path, asdict(gate))


def write_start(path: Path, at: float) -> None:
    write_json(path, {"at": at})


def wait_start(path: str, timeout_s: float) -> float:
    """Before iteration 0: wait for the runner's start (the file) and then until its time;
    returns the seconds waited. TimeoutError when no start comes."""
    t0 = time.monotonic()
    while True:
        try:
            at = float(json.loads(Path(path).read_text())["at"])
            break
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"no start from the runner within {timeout_s:g} s "
                                   f"({path})") from None
            time.sleep(0.01)
    now = time.monotonic()
    if at > now:
        time.sleep(at - now)
    return time.monotonic() - t0


def read_progress(path: Path) -> Progress | None:
    try:
        return Progress(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


class Gate:
    """The worker's side: waits for an iteration's release, re-reading the file when it
    changes (a policy may set or move the gate while the job runs)."""

    def __init__(self, path: str):
        self.path = Path(path) if path else None
        self.mtime = -1.0
        self.setting: GateSetting | None = None

    def _read(self) -> GateSetting | None:
        if self.path is None:
            return None
        try:
            mtime = self.path.stat().st_mtime
        except OSError:
            return self.setting
        if mtime != self.mtime:
            try:
                self.setting = GateSetting(**json.loads(self.path.read_text()))
                self.mtime = mtime
            except (OSError, ValueError, TypeError):
                pass
        return self.setting

    def wait(self, it: int) -> float:
        """Sleep until iteration `it` is released; returns the seconds waited."""
        setting = self._read()
        release = setting.release(it) if setting else None
        now = time.monotonic()
        if release is None or release <= now:
            return 0.0
        time.sleep(release - now)
        return release - now


class Reporter:
    """A thread writing the job's progress every `period_s` (rank 0 only)."""

    def __init__(self, path: str, sent: Callable[[], int], period_s: float = 0.02):
        self.path = Path(path) if path else None
        self.sent, self.period_s = sent, period_s
        self.iteration, self.phase, self.base, self.last = 0, "compute", 0, 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.path is not None:
            self.base = self.sent()
            self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
            self._thread.start()

    def begin(self, it: int, phase: str = "compute") -> None:
        """A new iteration (or the gate before it) starts: its bytes count from here."""
        if self.path is None:
            return
        now = self.sent()
        if it != self.iteration:
            self.last = now - self.base
            self.base = now
        self.iteration, self.phase = it, phase

    def set_phase(self, phase: str) -> None:
        self.phase = phase

    def _write(self) -> None:
        assert self.path is not None
        write_json(self.path, asdict(Progress(time.monotonic(), self.iteration, self.phase,
                                              self.sent() - self.base, self.last)))

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self._write()
            except OSError:
                pass

    def stop(self) -> None:
        if self._thread is not None:
            self.phase = "done"
            self._stop.set()
            self._thread.join()
            self._write()


def before_iteration(gate: Gate, reporter: Reporter, it: int, start_file: str,
                     timeout_s: float) -> float:
    """What a job's rank does before iteration `it` when jobs share a fabric: waits for the
    policy's gate and, before the first, for the runner's common start; the progress it
    reports says so. Returns the seconds waited (the iteration's `gate_wait_s`)."""
    reporter.begin(it, "gate")
    waited = gate.wait(it)
    if it == 0 and start_file:
        waited += wait_start(start_file, timeout_s)
    reporter.begin(it, "compute")
    return waited
