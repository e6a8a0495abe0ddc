"""Fabrics that stay up between commands, as containerlab's deploy/exec/destroy:

    testbed up SPEC --detach      # returns once the fabric is up, printing its name
    testbed exec NAME h1 -- ping -c 1 10.0.0.2
    testbed status                # what is up
    testbed down NAME             # exactly that fabric torn down, its results written

`up --detach` starts a holder process (`python -m testbed.detached`) that opens the session
as `testbed up` does (the run lock, the record `testbed clean` reads, the results directory)
and builds the fabric, then waits for `down` (SIGTERM). Its state file says where each node
is; `exec` enters a host's network namespace (a switch's commands run in the root one).
A holder that was killed leaves its record, which `testbed clean` releases, its state file
with it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testbed.core.errors import TestbedError
from testbed.core.resources import STATE_DIR, _proc_start_time
from testbed.core.system import in_netns

UP_TIMEOUT_S = 600.0
DOWN_TIMEOUT_S = 120.0


def folder() -> Path:
    return STATE_DIR / "fabrics"


@dataclass
class Detached:
    """A detached fabric's state file: its holder (pid and start time: a reused pid is not
    it), what it runs, each node's namespace (a host's PID; None for a switch), and the
    environment of a switch forwarded by an extra process (its Open vSwitch tools reach
    that process: net/partitioned.py)."""
    name: str
    pid: int
    start: int | None
    spec: str
    out_dir: str
    since: float
    status: str                      # "starting", then "up"
    nodes: dict[str, int | None]
    log: str
    switch_env: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return folder() / f"{self.name}.json"

    def alive(self) -> bool:
        return self.start is not None and _proc_start_time(self.pid) == self.start

    def save(self) -> None:
        folder().mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.path)


def fabrics() -> list[Detached]:
    """Every state file, alive or not."""
    if not folder().exists():
        return []
    out = []
    for path in sorted(folder().glob("*.json")):
        try:
            out.append(Detached(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue  # half-written by a holder that died: `clean` removes it
    return out


def find(name: str, stopping_too: bool = False) -> Detached:
    """The fabric `name` that is up (or going down, with `stopping_too`), or TestbedError
    saying what is."""
    for d in fabrics():
        if d.name == name:
            if not d.alive():
                raise TestbedError(f"fabric {name!r}: its holder (pid {d.pid}) is gone; "
                                   "`sudo testbed clean` removes what it left")
            if d.status == "starting":
                raise TestbedError(f"fabric {name!r} is still coming up; try again when "
                                   "`testbed status` says it is up")
            if d.status == "stopping" and not stopping_too:
                raise TestbedError(f"fabric {name!r} is going down")
            return d
    up = [d.name for d in fabrics() if d.alive()]
    raise TestbedError(f"no fabric {name!r} is up" + (f" (up: {', '.join(up)})" if up else
                                                      " (none is; `testbed up SPEC --detach`)"))


def exec_argv(d: Detached, node: str, argv: list[str]) -> list[str]:
    """`argv` in `node` of a detached fabric: in a host's network namespace, or as it is
    for a switch (the root namespace, as Mininet runs a switch's commands)."""
    if not argv:
        raise TestbedError("exec: give a command after --, e.g. testbed exec NAME h1 -- ip addr")
    if node not in d.nodes:
        names = list(d.nodes)
        raise TestbedError(f"exec: no node {node!r} in fabric {d.name!r} (nodes: "
                           f"{', '.join(names[:8])}{'...' if len(names) > 8 else ''})")
    pid = d.nodes[node]
    if pid is not None:
        return in_netns(pid, argv)
    env = d.switch_env.get(node, {})
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv] if env else argv


def refuse_second() -> None:
    """A second `up` while one is up (or coming up, or going down) is refused by name."""
    for d in fabrics():
        if d.alive():
            state = {"up": "is up", "starting": "is coming up"}.get(d.status, "is going down")
            raise TestbedError(f"fabric {d.name!r} {state} ({d.spec}, since "
                               f"{time.strftime('%H:%M:%S', time.localtime(d.since))}): "
                               f"`testbed down {d.name}` first (one fabric at a time)")


def start(spec: str | dict, spec_name: str, name: str, out: Path | None) -> Detached:
    """Start the holder of `spec` (a spec file's path, or a spec's data) and wait until its
    fabric is up, or it failed (what it said). Ctrl-C meanwhile stops the holder."""
    refuse_second()
    folder().mkdir(parents=True, exist_ok=True)
    log = folder() / f"{name}.log"
    fd, request = tempfile.mkstemp(prefix=f"{name}.", suffix=".request", dir=folder())
    with os.fdopen(fd, "w") as fh:
        json.dump({"spec": spec, "spec_name": spec_name, "name": name,
                   "out": str(out.resolve()) if out else None}, fh)
    offset = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "testbed.detached", request],
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=os.getcwd())
    deadline = time.time() + UP_TIMEOUT_S
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                with open(log, errors="replace") as fh:
                    fh.seek(offset)
                    said = fh.read().strip().splitlines()[-6:]
                raise TestbedError(f"fabric {name!r} did not come up: " + "\n".join(said))
            for d in fabrics():
                if d.name == name and d.pid == proc.pid and d.status == "up":
                    return d
            time.sleep(0.1)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)  # the holder tears down what it built
        proc.wait(timeout=DOWN_TIMEOUT_S)
        raise TestbedError(f"fabric {name!r}: interrupted while it came up; torn down") \
            from None
    proc.send_signal(signal.SIGTERM)
    raise TestbedError(f"fabric {name!r} not up within {UP_TIMEOUT_S:g} s; see {log}")


def stop(name: str) -> tuple[Detached, str]:
    """`down`: SIGTERM to the holder (once: a fabric already going down is waited for),
    which tears the fabric down and writes its results; returns once it has ended, with
    how its results say the session ended."""
    d = find(name, stopping_too=True)
    if d.status == "up":
        os.kill(d.pid, signal.SIGTERM)
    deadline = time.time() + DOWN_TIMEOUT_S
    while d.alive():
        if time.time() > deadline:
            raise TestbedError(f"fabric {name!r}: its holder (pid {d.pid}) still tearing down "
                               f"after {DOWN_TIMEOUT_S:g} s; see {d.log}")
        time.sleep(0.1)
    try:
        status = json.loads((Path(d.out_dir) / "summary.json").read_text()).get("status", "?")
    except (OSError, ValueError, AttributeError):
        status = "unknown (no summary.json)"
    return d, status


def forget_dead() -> list[str]:
    """State files of holders that are gone, and requests no holder read (`testbed clean`,
    which runs only when no run holds the lock: no holder is starting)."""
    removed = []
    for d in fabrics():
        if not d.alive():
            d.path.unlink(missing_ok=True)
            removed.append(f"state of detached fabric {d.name} (holder pid {d.pid} gone)")
    if folder().exists():
        for path in [*folder().glob("*.request"), *folder().glob("*.tmp")]:
            path.unlink(missing_ok=True)
        for path in folder().glob("*.json"):
            try:
                json.loads(path.read_text())
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
    return removed


def serve(request_path: Path) -> int:
    """The holder: the session and its fabric, until SIGTERM (`down`) or SIGINT; the
    first ends it, any more are ignored while it tears down."""
    from testbed.api import Testbed
    from testbed.runner import Interrupted
    request = json.loads(request_path.read_text())
    request_path.unlink(missing_ok=True)
    name = request["name"]
    state = Detached(name=name, pid=os.getpid(), start=_proc_start_time(os.getpid()),
                     spec=request["spec_name"], out_dir="", since=time.time(),
                     status="starting", nodes={}, log=str(folder() / f"{name}.log"))
    saved = False
    try:
        tb = Testbed(request["spec"], out=request["out"],
                     what=f"`testbed up --detach` (fabric {name})")
        with tb:
            state.out_dir = str(tb.out_dir)
            state.save()
            saved = True
            try:
                live = tb.fabric("up")
                state.nodes = {**{h.name: live.pid(h.name) for h in live.topo.hosts},
                               **{s.name: None for s in live.topo.switches}}
                state.switch_env = {s.name: env for s in live.topo.switches
                                    if (env := live.fabric.switch_env(s.name))}
                state.status = "up"
                state.save()
                print(f"{name}: up; results in {tb.out_dir}", flush=True)
                while True:
                    time.sleep(3600)
            except (KeyboardInterrupt, Interrupted):  # `testbed down` (SIGTERM), Ctrl-C
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_IGN)  # the teardown is not interrupted
                if state.status != "up":
                    raise  # stopped while it came up: the results say so
                state.status = "stopping"
                state.save()
                print(f"{name}: going down", flush=True)
    except TestbedError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    finally:
        if saved:
            state.path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1])))
