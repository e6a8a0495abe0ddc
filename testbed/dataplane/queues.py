"""Per-interface queueing: the one owner of every qdisc in the fabric.

Each switch egress port gets an HTB root with one class at the link rate and a FIFO leaf
holding the configured buffer (packets: pfifo, bytes: bfifo). Host NICs get the same
shaping with a NIC-like queue: one FIFO, or with `links.host_queue: fair` one FIFO per flow
bucket under the link's class, served round robin (HTB's DRR among classes that borrow),
each flow in a bucket of its own (bpf/fairq.bpf.c): the per-flow fairness of fq or
fq_codel, which this kernel lacks. Delay and loss need netem, which not every kernel has; asking
for them on a kernel without it is an error, never a silent no-op.

Commands are rendered as argv lists first (golden-tested), then run in one `tc -batch` per
network namespace.
"""
from __future__ import annotations

import array
import fcntl
import fnmatch
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from testbed.config.units import frame_bytes, htb_burst_bytes
from testbed.core.system import TestbedError, in_netns, run

ROOT_HANDLE = "1:"
CLASS_ID = "1:1"
LEAF_HANDLE = "10:"
OFFLOADS = ("rx", "tx", "tso", "gso", "gro")
# links.host_queue: fair. 32 buckets, classes 1:100 to 1:11f; each new flow takes the next
# (round robin), so flows share one only when 32 others appeared between them on that NIC
FAIR_SOURCE = Path(__file__).resolve().parent / "bpf" / "fairq.bpf.c"
FAIR_BUCKETS = 32
FAIR_FIRST_MINOR = 0x100
# A bucket's DRR quantum: a host's own TCP hands the qdisc GSO packets of up to 64 KB (cut
# into frames after it, in software), forwarded packets are single frames, and HTB takes at
# least one whole packet from a class at each turn; a quantum of one frame served a host's
# own flow 5-7x the bytes of each flow it relayed (docs/FIDELITY.md)
FAIR_QUANTUM_BYTES = 65536 + 1514


def fair_defines() -> dict[str, int]:
    """What fairq.bpf.c is compiled with: the class ids it returns."""
    return {"FAIR_MAJOR": int(ROOT_HANDLE.rstrip(":")), "FAIR_FIRST_MINOR": FAIR_FIRST_MINOR,
            "FAIR_BUCKETS": FAIR_BUCKETS}


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
    fair: bool = False  # a FIFO of buffer_pkts per flow bucket (host NICs; see above)

    def __post_init__(self) -> None:
        if (self.buffer_pkts is None) == (self.buffer_bytes is None):
            raise ValueError(f"{self.ifname}: exactly one of buffer_pkts, buffer_bytes")
        if self.fair and (self.buffer_pkts is None or self.delay_us or self.loss_pct
                          or self.drop != "tail"):
            raise ValueError(f"{self.ifname}: a fair queue has packet-limited tail-drop "
                             "FIFOs and no netem")


def _limit_pkts(q: PortQueue) -> int:
    """Packet limit for leaves that count packets only (netem, pfifo_head_drop)."""
    return q.buffer_pkts or max(1, (q.buffer_bytes or 0) // frame_bytes(q.mtu_bytes))


def _burst_args(q: PortQueue) -> list[str]:
    """HTB may send `burst_us` worth of bytes at once after an idle gap (units.py says why)."""
    nbytes = htb_burst_bytes(q.rate_mbps, q.burst_us, q.mtu_bytes)
    return ["burst", str(nbytes), "cburst", str(nbytes)] if nbytes else []


def htb_commands(q: PortQueue, fair_object: Path | None = None) -> list[list[str]]:
    """tc argv lists (without the leading 'tc') that shape `q.ifname`; a fair queue's
    classifier is `fair_object` (fairq.bpf.c built with fair_defines())."""
    rate_bit = int(round(q.rate_mbps * 1_000_000))
    rate = f"{rate_bit}bit"
    default = f"{FAIR_FIRST_MINOR:x}" if q.fair else "1"
    cmds = [
        ["qdisc", "replace", "dev", q.ifname, "root", "handle", ROOT_HANDLE, "htb",
         "default", default],
        ["class", "replace", "dev", q.ifname, "parent", ROOT_HANDLE, "classid", CLASS_ID,
         "htb", "rate", rate, "ceil", rate, *_burst_args(q),
         "quantum", str(frame_bytes(q.mtu_bytes))],
    ]
    if q.fair:
        if fair_object is None:
            raise ValueError(f"{q.ifname}: a fair queue needs its classifier's object")
        return cmds + _fair_commands(q, rate_bit, fair_object)
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


def _fair_commands(q: PortQueue, rate_bit: int, fair_object: Path) -> list[list[str]]:
    """One class per bucket, each guaranteed an equal part of the link and borrowing the
    rest (so that the busy buckets share it equally: HTB serves borrowers by DRR), a FIFO
    of `buffer_pkts` in each, and the classifier."""
    major = ROOT_HANDLE.rstrip(":")
    part = f"{max(1, rate_bit // FAIR_BUCKETS)}bit"
    cmds = []
    for i in range(FAIR_BUCKETS):
        minor = f"{FAIR_FIRST_MINOR + i:x}"
        cmds.append(["class", "replace", "dev", q.ifname, "parent", CLASS_ID,
                     "classid", f"{major}:{minor}", "htb", "rate", part,
                     "ceil", f"{rate_bit}bit", *_burst_args(q),
                     "quantum", str(FAIR_QUANTUM_BYTES)])
        cmds.append(["qdisc", "replace", "dev", q.ifname, "parent", f"{major}:{minor}",
                     "handle", f"{minor}:", "pfifo", "limit", str(q.buffer_pkts)])
    cmds.append(["filter", "replace", "dev", q.ifname, "parent", ROOT_HANDLE, "protocol",
                 "all", "prio", "1", "handle", "1", "bpf", "obj", str(fair_object),
                 "sec", "classifier"])
    return cmds


def offload_command(ifname: str) -> list[str]:
    """Checksum/segmentation offloads off: TCP through OVS's userspace datapath carries no
    bytes otherwise (bad checksums on veth), and queues must hold real MTU-size frames."""
    cmd = ["ethtool", "-K", ifname]
    for feature in OFFLOADS:
        cmd += [feature, "off"]
    return cmd


# `ethtool -K IF rx off tx off tso off gso off gro off` by ioctl (linux/ethtool.h): the
# device features each of OFFLOADS names in ethtool's own table, by name pattern.
OFFLOAD_FEATURES = {"rx": "rx-checksum", "tx": "tx-checksum-*",
                    "tso": "tx-tcp*-segmentation", "gso": "tx-generic-segmentation",
                    "gro": "rx-gro"}
_SIOCETHTOOL = 0x8946
_GSSET_INFO, _GSTRINGS, _SFEATURES = 0x37, 0x1B, 0x3B
_SS_FEATURES = 4  # the string set of device features
_NAME_BYTES = 32  # ETH_GSTRING_LEN


def _ethtool(sock: socket.socket, ifname: str, request: bytearray) -> None:
    """One SIOCETHTOOL ioctl on `ifname` with `request` (filled in by the kernel)."""
    data = array.array("B", request)
    ifreq = struct.pack("16sP", ifname.encode(), data.buffer_info()[0]).ljust(40, b"\0")
    fcntl.ioctl(sock, _SIOCETHTOOL, ifreq)
    request[:] = data.tobytes()


def _feature_names(sock: socket.socket) -> list[str]:
    """The kernel's device feature names, by bit (the same for every device)."""
    info = bytearray(struct.pack("IIQI", _GSSET_INFO, 0, 1 << _SS_FEATURES, 0))
    _ethtool(sock, "lo", info)
    count = struct.unpack_from("I", info, 16)[0]
    strings = bytearray(struct.pack("III", _GSTRINGS, _SS_FEATURES, count)
                        + bytes(count * _NAME_BYTES))
    _ethtool(sock, "lo", strings)
    return [strings[12 + i * _NAME_BYTES:12 + (i + 1) * _NAME_BYTES].split(b"\0")[0].decode()
            for i in range(count)]


def offloads_off(ifnames: list[str]) -> None:
    """offload_command's effect on these interfaces of this process's namespace, by ioctl,
    with no process per interface (640 `ethtool` runs took 0.3 s of a Fat-Tree k=8's
    start). The kernel turns off what depends on them as it does for `ethtool -K`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        names = _feature_names(sock)
        blocks = [0] * ((len(names) + 31) // 32)
        for bit, name in enumerate(names):
            if any(fnmatch.fnmatchcase(name, OFFLOAD_FEATURES[f]) for f in OFFLOADS):
                blocks[bit // 32] |= 1 << (bit % 32)
        # struct ethtool_sfeatures: each block's mask of what to set, and its value (off)
        request = struct.pack(f"II{2 * len(blocks)}I", _SFEATURES, len(blocks),
                              *(v for mask in blocks for v in (mask, 0)))
        for name in ifnames:
            try:
                _ethtool(sock, name, bytearray(request))
            except OSError as exc:
                raise TestbedError(f"{name}: turning offloads off: {exc.strerror}") from None


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
