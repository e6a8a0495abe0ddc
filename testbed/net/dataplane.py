"""Per-interface queueing: the one owner of every qdisc in the fabric.

Each switch egress port gets an HTB root with one class at the link rate and a FIFO leaf
holding the configured buffer (packets: pfifo, bytes: bfifo). Host NICs get the same
shaping with a NIC-like queue. Delay and loss need netem, which not every kernel has; asking
for them on a kernel without it is an error, never a silent no-op.

Commands are rendered as argv lists first (golden-tested), then run in one `tc -batch` per
network namespace.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.config.units import frame_bytes, htb_burst_bytes
from testbed.system import TestbedError, in_netns, run

ROOT_HANDLE = "1:"
CLASS_ID = "1:1"
LEAF_HANDLE = "10:"
OFFLOADS = ("rx", "tx", "tso", "gso", "gro")


@dataclass(frozen=True, kw_only=True)
class PortQueue:
    """Queue configuration of one egress interface."""
    ifname: str
    rate_mbps: float
    buffer_pkts: int | None = None
    buffer_bytes: int | None = None
    delay_us: int = 0
    loss_pct: float = 0.0
    drop: str = "tail"  # tail | head
    mtu_bytes: int = 1500
    burst_us: int = 0  # 0: tc's default burst (about rate/HZ + one frame)

    def __post_init__(self) -> None:
        if (self.buffer_pkts is None) == (self.buffer_bytes is None):
            raise ValueError(f"{self.ifname}: exactly one of buffer_pkts, buffer_bytes")


def _limit_pkts(q: PortQueue) -> int:
    """Packet limit for leaves that count packets only (netem, pfifo_head_drop)."""
    return q.buffer_pkts or max(1, q.buffer_bytes // frame_bytes(q.mtu_bytes))


def _burst_args(q: PortQueue) -> list[str]:
    """HTB may send `burst_us` worth of bytes at once after an idle gap (units.py says why)."""
    nbytes = htb_burst_bytes(q.rate_mbps, q.burst_us, q.mtu_bytes)
    return ["burst", str(nbytes), "cburst", str(nbytes)] if nbytes else []


def htb_commands(q: PortQueue) -> list[list[str]]:
    """tc argv lists (without the leading 'tc') that shape `q.ifname`."""
    rate = f"{int(round(q.rate_mbps * 1_000_000))}bit"
    cmds = [
        ["qdisc", "replace", "dev", q.ifname, "root", "handle", ROOT_HANDLE, "htb", "default", "1"],
        ["class", "replace", "dev", q.ifname, "parent", ROOT_HANDLE, "classid", CLASS_ID,
         "htb", "rate", rate, "ceil", rate, *_burst_args(q),
         "quantum", str(frame_bytes(q.mtu_bytes))],
    ]
    if q.delay_us or q.loss_pct:
        leaf = ["netem", "limit", str(_limit_pkts(q))]
        if q.delay_us:
            leaf += ["delay", f"{q.delay_us}us"]
        if q.loss_pct:
            leaf += ["loss", f"{q.loss_pct}%"]
    elif q.drop == "head":
        leaf = ["pfifo_head_drop", "limit", str(_limit_pkts(q))]
    elif q.buffer_pkts is not None:
        leaf = ["pfifo", "limit", str(q.buffer_pkts)]
    else:
        leaf = ["bfifo", "limit", str(q.buffer_bytes)]
    cmds.append(["qdisc", "replace", "dev", q.ifname, "parent", CLASS_ID, "handle", LEAF_HANDLE,
                 *leaf])
    return cmds


def offload_command(ifname: str) -> list[str]:
    """Checksum/segmentation offloads off: TCP through OVS's userspace datapath carries no
    bytes otherwise (bad checksums on veth), and queues must hold real MTU-size frames."""
    cmd = ["ethtool", "-K", ifname]
    for feature in OFFLOADS:
        cmd += [feature, "off"]
    return cmd


def mtu_commands(ifnames: list[str], mtu_bytes: int) -> list[str]:
    """`ip -batch` lines that set the MTU of interfaces (both ends of every link)."""
    return [f"link set dev {name} mtu {mtu_bytes}" for name in ifnames]


TC_BATCH = ["tc", "-batch", "-"]


def tc_lines(commands: list[list[str]]) -> str:
    """tc commands as the input of `tc -batch -` (TC_BATCH)."""
    return "".join(" ".join(c) + "\n" for c in commands)


def apply_tc(commands: list[list[str]], netns_pid: int | None = None) -> None:
    """Run tc commands in one `tc -batch` (in the namespace of `netns_pid` if given)."""
    if commands:
        run(in_netns(netns_pid, TC_BATCH) if netns_pid else TC_BATCH, input=tc_lines(commands))


def check_mechanisms(queues: list[PortQueue], netem_available: bool) -> None:
    for q in queues:
        if (q.delay_us or q.loss_pct) and not netem_available:
            raise TestbedError(
                f"link delay/loss requested on {q.ifname} but this kernel has no netem qdisc; "
                "remove links.delay_us/loss_pct or use a kernel with sch_netem")
