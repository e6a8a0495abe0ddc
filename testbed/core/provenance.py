"""What produced a run: the project's code (commit, and whether the checkout differed from
it), the software it ran on, the machine and the command line. Written into every run's
manifest.json, so that a results directory can be tied to its code months later, and
printed by `testbed --version`."""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNKNOWN = "unknown"


def _git(*args: str) -> subprocess.CompletedProcess | None:
    """git in the project's checkout (None without git or a checkout), with no one's
    configuration but a global file naming the checkout safe: a run as root in a user's
    clone would otherwise be refused ("dubious ownership"; older gits, such as Ubuntu
    22.04's 2.34, read that only from a global or system file), and a user's diff settings
    (an external diff, colours, prefixes) would change the hash of the same tree."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        return None
    with tempfile.NamedTemporaryFile("w", prefix="testbed-git-", suffix=".cfg") as cfg:
        cfg.write(f"[safe]\n\tdirectory = {REPO}\n")
        cfg.flush()
        env = {**os.environ, "GIT_CONFIG_GLOBAL": cfg.name, "GIT_CONFIG_NOSYSTEM": "1"}
        try:
            return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                                  timeout=30, env=env)
        except (OSError, subprocess.TimeoutExpired):
            return None


def code_state() -> dict:
    """The commit checked out, whether tracked or new files differ from it (`dirty`), and
    a sha256 of that difference (`git diff HEAD` and each untracked file's name and
    contents), so that two runs of the same uncommitted change can be recognised. Every
    field is "unknown" outside a git checkout (an unpacked copy, a container without
    .git)."""
    head = _git("rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        return {"commit": UNKNOWN, "dirty": UNKNOWN, "diff_sha256": UNKNOWN}
    diff = _git("diff", "--no-ext-diff", "--no-textconv", "--no-color", "--binary", "HEAD")
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or untracked is None or diff.returncode or untracked.returncode:
        return {"commit": head.stdout.decode().strip(), "dirty": UNKNOWN,
                "diff_sha256": UNKNOWN}
    digest = hashlib.sha256(diff.stdout)
    new = sorted(n for n in untracked.stdout.decode(errors="replace").split("\0") if n)
    for name in new:
        digest.update(name.encode() + b"\0")
        path = REPO / name
        if path.is_file():
            digest.update(path.read_bytes())
    dirty = bool(diff.stdout or new)
    return {"commit": head.stdout.decode().strip(), "dirty": dirty,
            "diff_sha256": digest.hexdigest() if dirty else None}


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _first_line(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "absent"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return UNKNOWN
    return out.strip().splitlines()[0] if out.strip() else UNKNOWN


def versions() -> dict:
    """The software a run used: the project, Python and the packages and tools that shape
    its numbers."""
    try:
        from mininet.net import VERSION as mn_version
    except ImportError:
        mn_version = "absent"
    return {"testbed": package_version("dcn-testbed"), "python": platform.python_version(),
            "ryu": package_version("ryu"), "eventlet": package_version("eventlet"),
            "torch": package_version("torch"), "pyroute2": package_version("pyroute2"),
            "pandas": package_version("pandas"), "mininet": mn_version,
            "openvswitch": _first_line(["ovs-vsctl", "--version"]),
            "iperf3": _first_line(["iperf3", "--version"]),
            "clang": _first_line(["clang-14", "--version"]), "kernel": os.uname().release}


def machine() -> dict:
    """The machine: cores, memory, kernel, processor model."""
    mem_kib, model = None, UNKNOWN
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "memory_bytes": mem_kib * 1024 if mem_kib else None,
            "cpu_model": model, "kernel": os.uname().release, "hostname": platform.node()}


def command_line() -> list[str]:
    """The command that started this process: its program's name and its arguments."""
    return [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]


def version_line() -> str:
    """`testbed --version`: the version, the commit and whether the checkout differs."""
    state = code_state()
    commit = state["commit"]
    short = commit[:12] if commit != UNKNOWN else "commit unknown"
    dirty = " (uncommitted changes)" if state["dirty"] is True else ""
    return f"testbed {package_version('dcn-testbed')}, {short}{dirty}"
