"""Open vSwitch: starting it, choosing the datapath, and checking the userspace datapath's
socket buffers.

Why the buffers matter (docs/FIDELITY.md): with the userspace (netdev) datapath, OVS sends
every packet of every port through ONE AF_PACKET socket, created at the first packet OVS
transmits, with the `net.core.wmem_default` in force at that moment. Packets waiting in any
egress qdisc are charged to that socket, so the bytes queued in the whole fabric are capped
by its send buffer; beyond it OVS drops packets without counting them anywhere. Each port's
receive socket likewise takes `net.core.rmem_default` when the port is added. The testbed
raises both defaults while it builds the fabric and sends the first packet, then restores
them, and verifies the real buffer of the socket with `ss`.
"""
from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from testbed.config.datapath import Traits
from testbed.config.datapath import choose as choose_datapath
from testbed.config.units import frame_bytes
from testbed.core.system import TestbedError, have, run, sysctl_get, sysctl_set

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
# glibc's malloc thresholds for ovs-vswitchd. Started without them, it returned memory to
# the kernel and faulted it back in on every batch of packets throughout its first busy
# fabric (about 450,000 page faults a second, malloc and free on top of its profile, its
# thread busy from end to end: OVS added 1.2-4 ms of queueing where a warm one adds 0.1)
# until glibc raised its thresholds at the first large free, that fabric's teardown. Fixed
# thresholds keep the memory in its heap from the start (docs/FIDELITY.md).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"
PIDFILE = "/var/run/openvswitch/ovs-vswitchd.pid"
# What a socket buffer is charged per full-size frame: skb truesize, measured 2304 bytes for a
# 1514-byte frame; a jumbo frame's data alone takes a power-of-two slab (16 KiB for 9014).
TRUESIZE_1514 = 2304
MIN_PKT_BYTES = 64


def frame_truesize(mtu_bytes: int = 1500) -> int:
    """Best estimate of a full-size frame's truesize (to convert queued bytes to frames)."""
    if mtu_bytes <= 1500:
        return TRUESIZE_1514
    return (1 << (frame_bytes(mtu_bytes) + 320 - 1).bit_length()) + 1024  # data + headroom slab


def truesize_per_pkt(mtu_bytes: int = 1500) -> int:
    """An upper bound of the same, for sizing buffers: rounded up to whole pages."""
    return max(4096, frame_truesize(mtu_bytes))


def running() -> bool:
    if not have("ovs-vsctl"):
        return False
    return run(["ovs-vsctl", "--timeout=3", "show"], check=False).returncode == 0


def version() -> str:
    out = run(["ovs-vsctl", "--version"], check=False).stdout.splitlines()
    return out[0].split()[-1] if out else "unknown"


def kernel_datapath_available() -> bool:
    """The kernel datapath needs the openvswitch module (absent on the CI machines)."""
    if Path("/sys/module/openvswitch").exists():
        return True
    if have("modprobe"):
        run(["modprobe", "openvswitch"], check=False)
    return Path("/sys/module/openvswitch").exists()


# How long a bridge waits at most between attempts to reach a controller it lost (OVS's
# default, 8 s, would leave a restarted controller without its switches for that long)
RECONNECT_MAX_BACKOFF_MS = 1000


def quicken_reconnect(target: str, max_backoff_ms: int = RECONNECT_MAX_BACKOFF_MS,
                      runner: Callable[[list[str]], Any] = run) -> int:
    """Every bridge's connection to the controller at `target` ("tcp:127.0.0.1:6653") retries
    at least every `max_backoff_ms`; how many connections that was. `runner(argv)` runs the
    commands (another server's OVS: that server's)."""
    uuids = runner(["ovs-vsctl", "--bare", "--columns=_uuid", "find", "controller",
                    f'target="{target}"']).stdout.split()
    if uuids:
        runner(["ovs-vsctl", *(arg for uuid in uuids for arg in
                               ("--", "set", "controller", uuid,
                                f"max_backoff={max_backoff_ms}"))])
    return len(uuids)


def tables(bridge: str, runner: Callable[[list[str]], Any] = run) -> list[str]:
    """A bridge's OpenFlow entries and groups as ovs-ofctl prints them without counters:
    what a flow-table diff before and after a controller's restart compares. `runner(argv)`
    runs the commands (a switch of another process: aimed at it)."""
    out = []
    for what in ("dump-flows", "dump-groups"):
        argv = ["ovs-ofctl", "-O", "OpenFlow13", *(["--no-stats"] if what == "dump-flows"
                                                   else []), what, bridge]
        out += [line.strip() for line in runner(argv).stdout.splitlines()
                if line.strip() and " reply (" not in line]
    return out


def datapath_for(setting: str) -> Traits:
    """The datapath a run uses for the spec's `datapath` setting on this machine
    (config/datapath.choose; the kernel module is looked for only when it could be used);
    TestbedError, saying why, when it cannot have it."""
    try:
        return choose_datapath(setting, setting != "user" and kernel_datapath_available())
    except ValueError as exc:
        raise TestbedError(str(exc)) from None


def bridges() -> list[str]:
    out = run(["ovs-vsctl", "--timeout=5", "list-br"], check=False).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def packet_sockets_argv(owner: bool) -> list[str]:
    return ["ss", "-0", "-m", *(["-p"] if owner else [])]


def _packet_sockets(owner: str | None = "ovs-vswitchd", ifaces: set[str] | None = None,
                    out: str | None = None) -> list[dict]:
    """AF_PACKET sockets: iface ('*' for the shared send socket), rcvbuf, sndbuf, drops and
    bytes queued, from `ss -0 -m`. With `owner`, only that program's sockets (`ss -p`, which
    scans every process's descriptors); with `ifaces` instead, the sockets bound to those
    interfaces -- in a fabric only OVS binds to switch ports, and this is much cheaper.
    `out`: the output of `packet_sockets_argv` run elsewhere (another server)."""
    if out is None:
        out = run(packet_sockets_argv(owner is not None), check=False).stdout
    socks = []
    for line in out.splitlines():
        if not line.startswith("p_") or (owner and owner not in line):
            continue
        mem = re.search(r"skmem:\((.*?)\)", line)
        fields = dict(re.findall(r"([a-z]+)(\d+)", mem.group(1))) if mem else {}
        local = line.split()[3]  # "*:<iface>" for a port's socket, "[0]:*" for the send socket
        iface = local.rsplit(":", 1)[1]
        unbound = local.startswith("[0]")
        if ifaces is not None and (unbound or iface not in ifaces):
            continue
        socks.append({"iface": "*" if unbound else iface,
                      "rcvbuf": int(fields.get("rb", 0)), "sndbuf": int(fields.get("tb", 0)),
                      "drops": int(fields.get("d", 0)),
                      "queued": int(fields.get("r", 0))})
    return socks


def send_socket_buffer(out: str | None = None, pid: int | None = None) -> int | None:
    """Send buffer (bytes) of OVS's shared AF_PACKET send socket; None before it exists.
    `out`: `ss`'s output (packet_sockets_argv(True)) from another server (its one
    ovs-vswitchd's); `pid`: that of this ovs-vswitchd process (here, by default the
    machine's own, not a forwarding process of a split fabric)."""
    if pid is None and out is None:
        pid = vswitchd_pid()
    owner = "ovs-vswitchd" if pid is None else f"pid={pid},"
    for sock in _packet_sockets(owner=owner, out=out):
        if sock["iface"] == "*":
            return sock["sndbuf"]
    return None


def send_socket_buffers(pids: Iterable[int]) -> dict[int, int | None]:
    """send_socket_buffer of each of these ovs-vswitchd processes, from one `ss -p`: it
    scans every process's descriptors (30 ms a call with a Fat-Tree k=8 up)."""
    out = run(packet_sockets_argv(True), check=False).stdout
    return {pid: send_socket_buffer(out=out, pid=pid) for pid in pids}


def rx_backlog_bytes(ifaces: set[str]) -> int:
    """Bytes (skb truesize) waiting in OVS's receive sockets of these switch ports: packets
    the forwarding thread has not picked up yet. Near zero while it keeps up."""
    if not ifaces:
        return 0
    return sum(s["queued"] for s in _packet_sockets(owner=None, ifaces=ifaces))


def port_socket_drops(ifaces: set[str]) -> dict[str, int]:
    """Packets dropped at OVS's per-port receive sockets (socket buffer full)."""
    return {s["iface"]: s["drops"] for s in _packet_sockets(owner=None, ifaces=ifaces)}


def needed_buffer_bytes(buffers_pkts: list[int], buffers_bytes: list[int],
                        mtu_bytes: int = 1500) -> int:
    """Send buffer that holds every switch egress queue full at once: packet-limited
    queues of full-size frames, byte-limited queues of minimum-size frames (worst case)."""
    need = sum(buffers_pkts) * truesize_per_pkt(mtu_bytes)
    need += sum(b // MIN_PKT_BYTES + 1 for b in buffers_bytes) * 1024
    return max(need + 4 * 1024 * 1024, 8 * 1024 * 1024)


# the socket buffer defaults and limits OVS's sockets take when they are made
BUFFER_SYSCTLS = ("net.core.wmem_max", "net.core.wmem_default", "net.core.rmem_max",
                  "net.core.rmem_default")


@contextlib.contextmanager
def raised_socket_defaults(nbytes: int, remember: Callable[[str, str], None] | None = None
                          ) -> Iterator[dict[str, str]]:
    """Raise the default/max socket buffers while OVS creates its sockets, then restore.
    `remember(name, old value)` is called before each change (a run's record, so that
    `testbed clean` restores them after a SIGKILL that skips the `finally`)."""
    names = BUFFER_SYSCTLS
    saved = {name: sysctl_get(name) for name in names}
    nbytes = min(nbytes, 2**31 - 1)
    # only those below: a server in a network namespace may not write them (they are the
    # machine's, raised already by the runner that shares it)
    low = [name for name in names if int(saved[name]) < nbytes]
    try:
        for name in low:
            if remember:
                remember(name, saved[name])
            sysctl_set(name, nbytes)
        yield saved
    finally:
        for name in reversed(low):
            sysctl_set(name, saved[name])


def ctl_argv(*args: str) -> list[str]:
    """ovs-ctl with `args`, its daemons started with MALLOC_TUNABLES."""
    return ["env", f"GLIBC_TUNABLES={MALLOC_TUNABLES}", OVS_CTL, *args]


def vswitchd_pid() -> int | None:
    """The machine's own ovs-vswitchd (its pidfile's), None when it is not running."""
    try:
        return int(Path(PIDFILE).read_text().strip())
    except (OSError, ValueError):
        return None


def malloc_tuned() -> bool:
    """Whether the running ovs-vswitchd was started with MALLOC_TUNABLES (True when that
    cannot be read: not ours to judge)."""
    try:
        pid = Path(PIDFILE).read_text().strip()
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return True
    return MALLOC_TUNABLES.split(":", 1)[0].encode() in env


def start(sndbuf_bytes: int) -> None:
    """Start ovsdb-server and ovs-vswitchd (no systemd needed)."""
    with raised_socket_defaults(sndbuf_bytes):
        proc = run(ctl_argv("start", "--system-id=random"), check=False, timeout=120)
    if not running():
        raise TestbedError(f"Open vSwitch did not start: {proc.stderr.strip()[-300:]}")


def restart_vswitchd(sndbuf_bytes: int,
                     remember: Callable[[str, str], None] | None = None) -> None:
    """Restart ovs-vswitchd so that its send socket is created again with a larger buffer.
    Only done when OVS carries no bridges at all (nothing of anyone else's is disturbed)."""
    if bridges():
        raise TestbedError(
            "Open vSwitch's send socket buffer is too small for this fabric and OVS carries "
            f"other bridges ({', '.join(bridges()[:5])}); remove them or restart OVS with "
            f"net.core.wmem_default >= {sndbuf_bytes} (see docs/FIDELITY.md)")
    with raised_socket_defaults(sndbuf_bytes, remember):
        run(ctl_argv("restart", "--system-id=random"), check=False, timeout=120)
    deadline = time.time() + 20
    while not running() and time.time() < deadline:
        time.sleep(0.2)
    if not running():
        raise TestbedError("Open vSwitch did not come back after a restart; see "
                           "/var/log/openvswitch/ovs-vswitchd.log")


def restart_reason(buffer_bytes: int | None, needed_bytes: int, tuned: bool,
                   has_bridges: bool) -> str | None:
    """Why a running ovs-vswitchd must be restarted before a fabric is built, or None: its
    send socket is smaller than the fabric's queues need (restart_vswitchd refuses while
    others' bridges are up), or it was started without MALLOC_TUNABLES and carries no
    bridges (with bridges it is not ours to restart)."""
    if buffer_bytes is not None and buffer_bytes < needed_bytes:
        return f"OVS send buffer {buffer_bytes} B < {needed_bytes} B needed"
    if not tuned and not has_bridges:
        return "ovs-vswitchd started without the testbed's malloc thresholds"
    return None


def ensure_started(sndbuf_bytes: int = 256 * 1024 * 1024) -> str:
    """Start OVS if needed; if its send socket already exists with too small a buffer,
    restart ovs-vswitchd. Returns what was done."""
    if not have("ovs-vsctl"):
        raise TestbedError("Open vSwitch is not installed; run scripts/bootstrap.sh")
    if not running():
        start(sndbuf_bytes)
        return "started"
    tuned = malloc_tuned()
    reason = restart_reason(send_socket_buffer(), sndbuf_bytes, tuned,
                            not tuned and bool(bridges()))
    if reason:
        restart_vswitchd(sndbuf_bytes)
        return f"restarted ({reason})"
    return "running"


def main(argv: list[str]) -> int:
    """`ensure-started [SNDBUF_BYTES]`: by the bootstrap, and by a cluster's runner on each
    other server (with the send buffer its part of the fabric needs)."""
    if argv[:1] == ["ensure-started"]:
        need = int(argv[1]) if len(argv) > 1 else needed_buffer_bytes([], [])
        try:
            print(f"[bootstrap] Open vSwitch {version() if have('ovs-vsctl') else ''}: "
                  f"{ensure_started(need)}", file=sys.stderr)
        except TestbedError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m testbed.dataplane.ovs ensure-started [SNDBUF_BYTES]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
