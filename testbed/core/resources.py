"""What a run creates, written down before it is created, so that `testbed clean` removes
exactly that and nothing else; and the lock that keeps two runs apart.

Records live in /run/testbed (tmpfs: they survive a crash, not a reboot, like the
namespaces and bridges they describe).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.system import (
    TestbedError,
    delete_bridges,
    delete_links,
    expedited_rcu,
    iface_exists,
    run,
    sysctl_set,
)

BPF_PIN_ROOT = Path("/sys/fs/bpf/testbed")

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))


def _proc_start_time(pid: int) -> int | None:
    """Start time of a live process, None if it is gone or only a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status of a child of ours so that it does not linger as a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child (an earlier run's): init reaps it


@dataclass
class RunRecord:
    run_id: str
    out_dir: str
    owner_pid: int = field(default_factory=os.getpid)
    owner_start: int | None = field(default_factory=lambda: _proc_start_time(os.getpid()))
    started: float = field(default_factory=time.time)
    bridges: list[str] = field(default_factory=list)
    root_ifaces: list[str] = field(default_factory=list)
    pids: list[dict] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)  # name -> value to restore
    bpf_pins: list[str] = field(default_factory=list)  # directories under /sys/fs/bpf/testbed
    # BPF congestion controls registered for the run (dataplane/hostcc.py): each struct_ops
    # map's name, written before it is registered, and its id once it is
    struct_ops: list[dict] = field(default_factory=list)
    # a cluster's other servers: how to reach each and what the run makes there
    # (testbed/cluster/servers.py: name, address, user, ssh_config, bridges, ifaces, sysctls)
    servers: list[dict] = field(default_factory=list)
    # the directories of extra Open vSwitch processes (dataplane/forwarders.py), written
    # before their daemons start: `stop_directory` stops what runs from each and removes it
    forwarders: list[str] = field(default_factory=list)

    released: bool = False  # release_record has run: the record file is gone

    def __post_init__(self) -> None:
        if not self.run_id or "/" in self.run_id or self.run_id.startswith("."):
            raise TestbedError(f"run id {self.run_id!r} cannot name a file in {STATE_DIR}/runs")

    @property
    def path(self) -> Path:
        return STATE_DIR / "runs" / f"{self.run_id}.json"

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__, indent=1))
        os.replace(tmp, self.path)

    def add_pid(self, pid: int, what: str, group: bool = False,
                netns: int | None = None) -> None:
        """A process to stop at the end. `group`: it leads a process group of its own (a
        node's shell, in a session of its own), and what it started there (a command put in
        the background through the shell) is stopped with it; `netns`: the network
        namespace (its inode) the group lives in, which lets the members be found after
        their leader has ended. Nothing is recorded once the record is released (a node's
        `popen` after its network stopped)."""
        if self.released:
            return
        entry: dict = {"pid": pid, "start": _proc_start_time(pid), "what": what}
        if group:
            entry["group"] = True
        if netns is not None:
            entry["netns"] = netns
        self.pids.append(entry)
        self.save()

    def set_netns(self, namespaces: dict[int, int]) -> None:
        """The network namespace each recorded group lives in (leader pid -> its inode),
        once they are there."""
        for entry in self.pids:
            if entry.get("group") and entry["pid"] in namespaces:
                entry["netns"] = namespaces[entry["pid"]]
        self.save()

    def remember_sysctl(self, name: str, old_value: str) -> None:
        self.sysctls.setdefault(name, old_value)
        self.save()

    def add_struct_ops(self, maps: list[str], ids: list[int] | None = None) -> None:
        """Struct_ops maps about to be registered (`ids` None), or registered (their ids,
        in the order of `maps`)."""
        for i, name in enumerate(maps):
            entry = next((e for e in self.struct_ops if e["map"] == name), None)
            if entry is None:
                entry = {"map": name, "id": None}
                self.struct_ops.append(entry)
            if ids is not None:
                entry["id"] = ids[i]
        self.save()

    def owner_alive(self) -> bool:
        """Whether the process that made the run still runs (the same start time)."""
        return _proc_start_time(self.owner_pid) == self.owner_start

    @classmethod
    def load(cls, path: Path) -> RunRecord:
        return cls(**json.loads(path.read_text()))


def records() -> list[RunRecord]:
    folder = STATE_DIR / "runs"
    return [RunRecord.load(p) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


class RunLock:
    """One run at a time. flock is released by the kernel if the holder dies. `label`: what
    holds it, for the refusal another run gets."""

    def __init__(self, label: str = "") -> None:
        self.fd: int | None = None
        self.label = label

    def acquire(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path = STATE_DIR / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise TestbedError(f"another testbed run is active ({holder}); wait for it to "
                               "finish or stop it (Ctrl-C; a fabric left up: `testbed status`, "
                               "`testbed down NAME`) before starting a new one") from None
        os.ftruncate(fd, 0)
        os.write(fd, (f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}"
                      + (f": {self.label}" if self.label else "")).encode())
        self.fd = fd
        leftovers = [r for r in records() if r.owner_pid != os.getpid()]
        for rec in leftovers:
            mark_killed(rec)  # we hold the lock: its owner is gone
        if leftovers:
            self.release()
            raise TestbedError(f"an earlier run ({leftovers[0].run_id}) left resources behind; "
                               "run `testbed clean` first")

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def process_groups() -> dict[int, list[tuple[int, int]]]:
    """Every live process by its group: pgid -> [(pid, start time)] (one pass over /proc)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out.setdefault(int(fields[2]), []).append((int(entry.name), int(fields[19])))
    return out


def netns_of(pid: int) -> int | None:
    """The inode of a process's network namespace (None: gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def stop_pid(pid: int, start: int | None, timeout: float = 3.0, group: bool = False,
             groups: dict[int, list[tuple[int, int]]] | None = None,
             netns: int | None = None) -> bool:
    """Stop one process we started, if it is still that process (same start time). A PID
    recorded without a start time cannot be told from a reused one and is left alone.
    `group`: the process leads a group of its own (a node's shell), and what it left in
    that group is stopped too: each member by its PID, if it started after the leader.
    While the leader lives, its group is its own. Once it has ended, its members are known
    only by the group's id, which the kernel gives no other process while the group has
    members, but which another group may take once it has none: then only members in the
    recorded network namespace (`netns`, one the run made) are taken, and none without it.
    A leader whose PID now belongs to another process is left alone with its group. SIGHUP
    first, which ends an interactive shell and its jobs. `groups`: `process_groups()`,
    read once by a caller stopping many."""
    if start is None:
        _reap(pid)
        return False
    now = _proc_start_time(pid)
    alive = now == start
    if now is not None and not alive:  # the PID is another process's: not ours to touch
        return False
    members: list[tuple[int, int]] = []
    if group:
        if groups is None:
            groups = process_groups()
        members = [m for m in groups.get(pid, []) if m[1] >= start and m[0] != pid]
        if not alive:
            members = [m for m in members if netns is not None and netns_of(m[0]) == netns]
    if not alive and not members:
        _reap(pid)
        return False
    targets = ([(pid, start)] if alive else []) + members

    def signal_all(sig: int) -> None:
        for p, t in targets:
            if _proc_start_time(p) == t:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass

    if group:
        signal_all(signal.SIGHUP)
    signal_all(signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and any(_proc_start_time(p) == t for p, t in targets):
        _reap(pid)
        time.sleep(0.05)
    signal_all(signal.SIGKILL)
    _reap(pid)
    return True


def directory_daemons(directory: Path) -> dict[str, int]:
    """The daemons running from `directory`: each pidfile's (`<name>.pid`) process, if its
    command line names the directory (not a reused PID)."""
    out = {}
    for pidfile in sorted(directory.glob("*.pid")):
        try:
            pid = int(pidfile.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if f"{directory}/".encode() in cmdline and _proc_start_time(pid) is not None:
            out[pidfile.stem] = pid
    return out


def stop_directory(directory: Path, timeout: float = 5.0) -> list[str]:
    """Stop the daemons running from `directory` (SIGTERM, then SIGKILL), then remove it;
    what was removed."""
    found = directory_daemons(directory)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in directory_daemons(directory).values():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            _reap(pid)
        deadline = time.time() + timeout
        while directory_daemons(directory) and time.time() < deadline:
            time.sleep(0.05)
        if not directory_daemons(directory):
            break
    if left := directory_daemons(directory):
        raise TestbedError(f"could not stop {left} of {directory}")
    existed = directory.exists()
    shutil.rmtree(directory, ignore_errors=True)
    return [f"process {pid} ({name} of {directory})" for name, pid in found.items()] + \
        ([f"directory {directory}"] if existed else [])


# what removes a record's things on other servers (a cluster's, `testbed/cluster/servers.py`
# `release_servers`): given the record's servers and its run id, what it removed. The record
# sits below the cluster layer, so whoever releases a record passes it in.
ServerRelease = Callable[[list[dict], str], list[str]]


def release_record(rec: RunRecord, release_servers: ServerRelease | None = None) -> list[str]:
    """Remove everything `rec` lists; returns what was removed. Safe to call twice. A record
    with other servers is refused unless `release_servers` can reach them."""
    if rec.servers and release_servers is None:
        raise TestbedError(f"run {rec.run_id} made things on other servers; "
                           "`sudo testbed clean` removes them")
    removed: list[str] = []
    groups = process_groups() if any(e.get("group") for e in rec.pids) else None
    for entry in reversed(rec.pids):
        if stop_pid(entry["pid"], entry.get("start"), group=entry.get("group", False),
                    groups=groups, netns=entry.get("netns")):
            removed.append(f"process {entry['pid']} ({entry['what']})")
    failed = []
    for directory in rec.forwarders:
        try:
            removed += stop_directory(Path(directory))
        except TestbedError as exc:  # the rest is removed all the same, then this is said
            failed.append(str(exc))
    existing = set(run(["ovs-vsctl", "--timeout=5", "list-br"], check=False).stdout.split())
    doomed = [b for b in rec.bridges if b in existing]
    with expedited_rcu():
        delete_bridges(doomed)
        ifaces = [name for name in rec.root_ifaces if iface_exists(name)]
        delete_links(ifaces)
    removed += [f"bridge {b}" for b in doomed] + [f"interface {name}" for name in ifaces]
    for pin in rec.bpf_pins:
        path = Path(pin)
        if path.parent == BPF_PIN_ROOT and path.exists():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"BPF pins {pin}")
    for name, value in rec.sysctls.items():
        try:
            sysctl_set(name, value)
        except (OSError, TestbedError):  # gone, or not a setting the testbed changes
            pass
    removed += unregister_struct_ops(rec.struct_ops)
    if rec.servers and release_servers is not None:
        removed += release_servers(rec.servers, rec.run_id)
    if failed:
        raise TestbedError("; ".join(failed) + " (everything else of run "
                           f"{rec.run_id} was removed; `testbed clean` again)")
    mark_killed(rec)
    rec.released = True
    rec.path.unlink(missing_ok=True)
    return removed


def struct_ops_registered() -> dict[int, str]:
    """The struct_ops maps the kernel holds (BPF congestion controls among them): id ->
    name."""
    out = run(["bpftool", "-j", "struct_ops", "show"], check=False).stdout or "[]"
    try:
        return {m["id"]: m["name"] for m in json.loads(out)}
    except (ValueError, KeyError, TypeError):
        return {}


def unregister_struct_ops(entries: list[dict]) -> list[str]:
    """Unregister a record's struct_ops maps that are still registered: by id when the
    record has it and the name still matches, else by name."""
    if not entries:
        return []
    live = struct_ops_registered()
    removed = []
    for entry in entries:
        known = entry.get("id")
        ids = [known] if known is not None and live.get(known) == entry["map"] else \
            [i for i, name in live.items() if name == entry["map"]]
        for i in ids:
            if run(["bpftool", "struct_ops", "unregister", "id", str(i)],
                   check=False).returncode == 0:
                removed.append(f"BPF congestion control {entry['map']} (struct_ops id {i})")
                live.pop(i, None)
    return removed


IN_PROGRESS = "the run is in progress"


def mark_killed(rec: RunRecord) -> None:
    """A run whose process died without writing its summary (SIGKILL, a crash, power) gets
    one that says so, found by whatever finds it dead: `testbed clean` or the next run. A
    finished run's summary is left as it is."""
    out_dir = Path(rec.out_dir)
    if not out_dir.is_dir() or rec.owner_pid == os.getpid():
        return
    summary = out_dir / "summary.json"
    try:
        reason = json.loads(summary.read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        reason = IN_PROGRESS
    if reason == IN_PROGRESS:
        died = time.strftime("%Y-%m-%dT%H:%M:%S")
        summary.write_text(json.dumps({
            "status": "killed",
            "reason": f"the run's process (pid {rec.owner_pid}) died before it finished; "
                      f"found dead at {died}"}))


def clean(release_servers: ServerRelease | None = None) -> list[str]:
    """Remove what earlier runs left behind (never what a live run owns)."""
    removed: list[str] = []
    for rec in records():
        if rec.owner_pid != os.getpid() and rec.owner_alive():
            raise TestbedError(f"run {rec.run_id} (pid {rec.owner_pid}) is still active; "
                               "stop it first (Ctrl-C; a detached fabric: `testbed down "
                               "NAME`; or kill that pid)")
        removed += release_record(rec, release_servers)
    return removed
