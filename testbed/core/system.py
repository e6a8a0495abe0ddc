"""Running commands and reading kernel settings. Every command is an argv list."""
from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
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


def delete_bridges(names: list[str]) -> None:
    """Open vSwitch bridges `names`, with their ports, in one ovs-vsctl transaction (those
    already gone are skipped)."""
    if names:
        argv = ["ovs-vsctl", "--timeout=60"]
        for name in names:
            argv += ["--", "--if-exists", "del-br", name]
        run(argv, check=False, timeout=90)


def link_group() -> int:
    """The interface group this process moves a fabric's links into to delete them in one
    call: one per process (any number no other interface uses is fine; delete_links checks
    the group holds nothing else before deleting it)."""
    return 0x7E570000 + os.getpid() % 0x10000


def iface_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def delete_links(names: list[str]) -> None:
    """Interfaces `names` of the root namespace, with their veth peers, at once. Deleted one
    by one, each waits for the kernel's network to quiesce (about 15 ms here; Mininet's
    stop spent 9 s of a Fat-Tree k=8's teardown on its 384 links); moved into one interface
    group and deleted as a group, the kernel unregisters them together (0.1 s for 160). If
    any other interface is in that group, they are deleted one by one instead."""
    here = [n for n in names if iface_exists(n)]
    if not here:
        return
    group = str(link_group())
    run(["ip", "-force", *IP_BATCH[1:]], check=False,
        input=batch_input([f"link set dev {n} group {group}" for n in here]))
    listed = run(["ip", "-o", "link", "show", "group", group], check=False).stdout
    grouped = {line.split(":")[1].strip().split("@")[0] for line in listed.splitlines()
               if line.count(":") >= 2}
    if grouped and grouped <= set(here):
        run(["ip", "link", "del", "group", group], check=False)
    left = [n for n in here if iface_exists(n)]
    if left:
        run(["ip", "-force", *IP_BATCH[1:]], check=False,
            input=batch_input([f"link del dev {n}" for n in left]))


RCU_EXPEDITED = "/sys/kernel/rcu_expedited"


@contextlib.contextmanager
def expedited_rcu(remember: Callable[[str, str], None] | None = None) -> Iterator[bool]:
    """The kernel's RCU grace periods expedited while a fabric is torn down, then as they
    were; yields whether they are. OVS closes a packet socket for every port it removes, and
    the kernel waits a full grace period for each (packet_release calls synchronize_net):
    14-19 ms a port here, 12 s of a Fat-Tree k=8's teardown (640 switch ports), 2.4 s for 20
    bridges of 8 ports. Expedited, a grace period is forced at once (an interrupt to each
    other core): 0.5 s for those 20 bridges. Nothing is left changed: `remember(path, old
    value)` before the change (a run's record, so that `testbed clean` restores it after a
    SIGKILL that skips the `finally`). Where the setting cannot be written (no /sys, not
    root), grace periods stay as they are."""
    path = Path(RCU_EXPEDITED)
    try:
        old = path.read_text().strip()
    except OSError:
        old = None
    if old != "0":  # unreadable, or expedited already
        yield old is not None
        return
    if remember is not None:
        remember(RCU_EXPEDITED, old)
    try:
        path.write_text("1\n")
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        path.write_text(old + "\n")


def side_by_side(commands: list[list[str]], ways: int = 4) -> list[str]:
    """One `sh -c` argv that runs `commands` in `ways` chains side by side (each chain in
    order, stopping at its first failure) and fails if any chain failed: hundreds of short
    processes (ethtool on a Fat-Tree k=8's 640 switch ports) take half the time on two
    cores. Every chain is waited for, failed or not."""
    chains = [commands[i::ways] for i in range(ways) if commands[i::ways]]
    script = "".join(f"( {' && '.join(shlex.join(c) for c in chain)} ) & pids=\"$pids $!\"; "
                     for chain in chains)
    return ["sh", "-c",
            f'pids=; rc=0; {script}for p in $pids; do wait "$p" || rc=1; done; exit $rc']


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
    """A sysctl's file (`net.core.wmem_max`), or RCU_EXPEDITED (the one other kernel setting
    the testbed changes and a run's record may name)."""
    if name.startswith("/"):
        if name != RCU_EXPEDITED:
            raise TestbedError(f"{name}: not a setting the testbed changes")
        return Path(name)
    return Path("/proc/sys") / name.replace(".", "/")


def sysctl_get(name: str) -> str:
    return sysctl_path(name).read_text().strip()


def sysctl_set(name: str, value: str | int) -> None:
    sysctl_path(name).write_text(f"{value}\n")


def sysctl_script(settings: list[str]) -> str:
    """A shell line that makes these settings ("net.ipv4.tcp_ecn=1") as `sysctl -w` would,
    by the shell's own echo (no process: one per host was a tenth of a Fat-Tree k=8's
    start); it fails, naming the first setting that could not be made."""
    writes = []
    for setting in settings:
        name, value = setting.split("=", 1)
        writes.append(f"{{ echo {shlex.quote(value)} 2>/dev/null > "
                      f"{shlex.quote(str(sysctl_path(name)))} || "
                      f"{{ echo {shlex.quote(f'cannot set {setting}')} >&2; false; }}; }}")
    return " && ".join(writes)


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
