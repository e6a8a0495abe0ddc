"""Running commands and reading kernel settings. Every command is an argv list."""
from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import subprocess
from pathlib import Path

from testbed.core.errors import TestbedError

# the checkout the testbed runs from (a cluster's servers have it at the same path)
REPO_ROOT = Path(__file__).resolve().parents[2]


def run(argv: list[str], check: bool = True, timeout: float = 60,
        input: str | None = None) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError as exc:
        raise TestbedError(f"{argv[0]} is not installed; run scripts/bootstrap.sh") from exc
    if check and proc.returncode != 0:
        raise TestbedError(f"`{' '.join(argv)}` failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[:400]}")
    return proc


def in_netns(pid: int, argv: list[str]) -> list[str]:
    """argv that runs `argv` inside the network namespace of process `pid`."""
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv]


IP_BATCH = ["ip", "-batch", "-"]


def batch_input(lines: list[str]) -> str:
    """`ip` commands (one per line, without the leading 'ip') as IP_BATCH's input."""
    return "".join(line + "\n" for line in lines)


ROUTE_STATE_WORDS = frozenset({"linkdown", "dead", "offload", "trap", "offload_failed",
                               "rt_offload", "rt_trap", "rt_offload_failed", "pervasive"})


def route_with_initcwnd(route: str, segments: int) -> str:
    """An IP_BATCH line that gives a route, as `ip -o route show` prints it, an initial
    congestion window: the options go before a multipath route's nexthops, and -o's
    backslashes between those go."""
    # what `ip` prints about a route's state but does not take back
    words = [w for w in route.replace("\\", " ").split() if w not in ROUTE_STATE_WORDS]
    if "initcwnd" in words:  # already set: replaced
        i = words.index("initcwnd")
        del words[i:i + 2]
    at = words.index("nexthop") if "nexthop" in words else len(words)
    return " ".join(["route", "change", *words[:at], "initcwnd", str(segments), *words[at:]])


def ip_batch(lines: list[str], netns_pid: int | None = None) -> None:
    """Run `ip` commands (one per line, without the leading 'ip') in one process."""
    if lines:
        run(in_netns(netns_pid, IP_BATCH) if netns_pid else IP_BATCH, input=batch_input(lines))


def is_root() -> bool:
    return os.geteuid() == 0


PM_QOS_LATENCY = Path("/dev/cpu_dma_latency")


def hold_wakeup_latency(us: int = 0) -> int | None:
    """Asks the kernel's power management (PM QoS) for CPUs that wake within `us` for as
    long as the returned descriptor stays open (closing it, or the process ending, gives the
    request back): idle CPUs then poll rather than halt. In a virtual machine a halted
    virtual CPU waits for the hypervisor to run it again, which made timer wake-ups late
    by tens of microseconds to milliseconds, and software pacing lose its pace
    (docs/FIDELITY.md). None where it cannot be asked (not root, no such device)."""
    try:
        fd = os.open(PM_QOS_LATENCY, os.O_WRONLY)
    except OSError:
        return None
    try:
        os.write(fd, struct.pack("i", us))
    except OSError:
        os.close(fd)
        return None
    return fd


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def sysctl_get(name: str) -> str:
    return sysctl_path(name).read_text().strip()


def sysctl_set(name: str, value: str | int) -> None:
    sysctl_path(name).write_text(f"{value}\n")


def kernel_release() -> str:
    return os.uname().release


def qdisc_supported(kind: str, args: tuple[str, ...] = ()) -> bool:
    """Whether the kernel accepts a qdisc, tried on the loopback of a throwaway namespace
    (`unshare -n`), so nothing on the machine changes."""
    if not (is_root() and have("unshare") and have("tc")):
        return False
    proc = subprocess.run(["unshare", "-n", "tc", "qdisc", "add", "dev", "lo", "root", kind, *args],
                          capture_output=True, text=True)
    return proc.returncode == 0


def congestion_controls() -> list[str]:
    return sysctl_get("net.ipv4.tcp_available_congestion_control").split()


def port_free(port: int) -> str | None:
    """None if 127.0.0.1:`port` can be bound, else why not (for a clear error before a
    run starts)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on 127.0.0.1 is in use (another live view?); " \
                       "choose another with --live-port"
            return f"cannot listen on 127.0.0.1:{port}: {exc.strerror}"
    return None
