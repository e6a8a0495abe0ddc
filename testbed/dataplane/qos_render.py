"""Traffic classes, ECN marking and PFC: their rendering into tc commands, BPF map records
and netlink messages (pure; the configuration types are testbed/config/qos.py).

Every fabric interface gets the same structure when a spec has a `qos:` section:

    HTB root 1:  ── class 1:1 (the link rate, burst allowance) ──┬─ class 1:10 ─ tbf 10: (class 0)
                                                               ├─ class 1:11 ─ tbf 11: (class 1)
                                                               └─ ...
    clsact egress:  tbqos.bpf.c `tb_egress`  (DSCP -> class, buffer limit, ECN mark, counters)
    clsact ingress: tbqos.bpf.c `tb_ingress` (dequeue of the far end's queue, PFC accounting)

Strict priority is HTB's `prio` between classes with a token guaranteed rate; weighted round
robin gives each class a guaranteed rate and a DRR quantum in proportion to its weight. The
tbf leaf of each class is the PFC pause gate: changing it to a 1 kbit/s rate stops the class
(the other classes keep their share), changing it back resumes it (tbf resets its tokens on
change, HTB's classes would not). Buffer limits are enforced by the BPF program, not the
qdiscs (their limits are larger), so that drops are counted exactly once.

The byte layouts here mirror the structs in testbed/dataplane/bpf/tbqos.bpf.c.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from testbed.config.qos import (
    NCLASS,
    EcnProfile,
    QosConfig,
    threshold_bytes,
)
from testbed.config.units import class_minor, frame_bytes, htb_burst_bytes, htb_default_burst

MAX_PORTS = 1024
NONE = 0xFFFFFFFF
ROOT_MAJOR = 1
PARENT_CLASS = "1:1"
PAUSED_RATE_BPS = 125  # 1 kbit/s: the smallest rate whose tbf bucket still fits in 32 bits
RUNNING_RATE_BPS = 1_250_000_000  # 10 Gbit/s: the tbf gate is transparent when open
ECN_OFF, ECN_STEP, ECN_RED = 0, 1, 2
PSCHED_NS_PER_TICK = 64  # PSCHED_SHIFT = 6 in the kernel


# ---- ports --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class QosPort:
    """One fabric interface as the dataplane sees it."""
    id: int
    ifname: str
    node: str
    is_host: bool
    rate_mbps: float
    peer: int  # port id at the other end of the link
    switch_index: int  # NONE for host interfaces
    scheduler: str = "strict"


def htb_class_commands(port: QosPort, q: QosConfig, mtu_bytes: int, burst_us: int,
                       tbf_limits: list[int]) -> list[list[str]]:
    """tc argv lists (without 'tc') for the class structure of one interface."""
    frame = frame_bytes(mtu_bytes)
    rate_bit = int(round(port.rate_mbps * 1_000_000))
    burst = htb_burst_bytes(port.rate_mbps, burst_us, mtu_bytes)
    burst_args = ["burst", str(burst), "cburst", str(burst)] if burst else []
    dev = port.ifname
    cmds = [
        ["qdisc", "replace", "dev", dev, "root", "handle", f"{ROOT_MAJOR}:", "htb",
         "default", "10"],
        ["class", "replace", "dev", dev, "parent", f"{ROOT_MAJOR}:", "classid", PARENT_CLASS,
         "htb", "rate", f"{rate_bit}bit", "ceil", f"{rate_bit}bit", *burst_args,
         "quantum", str(frame)],
    ]
    weights = [c.weight for c in q.classes] if port.scheduler == "wrr" else None
    for index, cls in enumerate(q.classes):
        minor = class_minor(index)
        cmds.append(htb_class(port, index, mtu_bytes, burst_us, weights, cls.priority))
        cmds.append(["qdisc", "replace", "dev", dev, "parent", f"{ROOT_MAJOR}:{minor:x}",
                     "handle", f"{minor:x}:", "tbf", "rate", f"{RUNNING_RATE_BPS * 8}bit",
                     "burst", str(gate_burst(frame, paused=False)),
                     "limit", str(tbf_limits[index])])
    cmds.append(["qdisc", "replace", "dev", dev, "clsact"])
    return cmds


@dataclass(frozen=True)
class HtbClass:
    """One class's HTB leaf: under weighted round robin (`weights`, one per class) a
    guaranteed rate and a DRR quantum in proportion to its weight; under strict priority a
    token rate and HTB's `prio` from the class's priority. `burst` 0: tc's default."""
    minor: int
    rate_bit: int
    ceil_bit: int
    burst: int
    prio: int
    quantum: int


def htb_class_params(port: QosPort, index: int, mtu_bytes: int, burst_us: int,
                     weights: list[int] | None, priority: int = 0) -> HtbClass:
    frame = frame_bytes(mtu_bytes)
    rate_bit = int(round(port.rate_mbps * 1_000_000))
    burst = htb_burst_bytes(port.rate_mbps, burst_us, mtu_bytes)
    if weights is not None:
        rate = max(8000, rate_bit * weights[index] // sum(weights))
        prio, quantum = 0, frame * weights[index] // min(weights)
    else:
        rate, prio, quantum = 8000, 7 - priority, frame
    return HtbClass(class_minor(index), rate, rate_bit, burst, prio, quantum)


def htb_class(port: QosPort, index: int, mtu_bytes: int, burst_us: int,
              weights: list[int] | None, priority: int = 0, verb: str = "replace") -> list[str]:
    """tc argv (without 'tc') of one class's HTB leaf (`htb_class_params`)."""
    c = htb_class_params(port, index, mtu_bytes, burst_us, weights, priority)
    burst_args = ["burst", str(c.burst), "cburst", str(c.burst)] if c.burst else []
    return ["class", verb, "dev", port.ifname, "parent", PARENT_CLASS,
            "classid", f"{ROOT_MAJOR}:{c.minor:x}", "htb", "rate", f"{c.rate_bit}bit",
            "ceil", f"{c.ceil_bit}bit", *burst_args, "prio", str(c.prio),
            "quantum", str(c.quantum)]


def bpf_attach_commands(ifname: str, prog_dir: str, host: bool) -> list[list[str]]:
    """Host NICs get the program variants that know them by MAC (see if_key in tbqos.bpf.c)."""
    suffix = "_host" if host else ""
    return [["filter", "replace", "dev", ifname, direction, "prio", "1", "handle", "1", "bpf",
             "da", "object-pinned", f"{prog_dir}/tb_{direction}{suffix}"]
            for direction in ("egress", "ingress")]


UNDERLAY_PRIO = 4789  # the tc filter preference of tb_underlay on a server's own device


def underlay_attach_commands(dev: str, prog_dir: str) -> list[list[str]]:
    """tb_underlay on the egress of a server's own network device (its clsact qdisc is
    added by the caller when the device has none)."""
    return [["filter", "replace", "dev", dev, "egress", "prio", str(UNDERLAY_PRIO), "handle",
             "1", "bpf", "da", "object-pinned", f"{prog_dir}/tb_underlay"]]


def if_key(ifindex: int, mac: str | None) -> bytes:
    """Map key of an interface: MAC for host NICs, ifindex for switch ports."""
    if mac is not None:
        return IF_KEY.pack(int.from_bytes(bytes.fromhex(mac.replace(":", "")) + b"\0\0",
                                          "little"), 0, 0)
    return IF_KEY.pack(0, ifindex, 0)


def gate_burst(frame: int, paused: bool) -> int:
    """tbf drops any packet longer than its bucket (max_size), and the kernel derives
    max_size from the bucket's duration, rounded down: a bucket of exactly one frame drops
    full-size frames. A closed gate holds one frame and a little (so at most the frame "on the
    wire" passes after a pause, as with real PFC); an open one is far larger than any burst."""
    return frame + 64 if paused else max(64 * 1024, 8 * frame)


# ---- BPF map records (layouts of tbqos.bpf.c) ----------------------------------------------

QCFG = struct.Struct("8I")
QSTATE = struct.Struct("qq7Q")
DSCP_STATS = struct.Struct("4Q")  # per port and DSCP: enq_bytes, enq_pkts, marks, drops
NDSCP = 64
PFC_CFG = struct.Struct("4I")
INGRESS = struct.Struct("q9Q")
EVENT = struct.Struct("4Q4Iq")
PORT_CFG = struct.Struct("4I")
RX_CFG = struct.Struct("4I")
U32 = struct.Struct("I")
IF_KEY = struct.Struct("QII")  # mac (host NICs), ifindex (switch ports), pad
PORT_HOST = 1  # port_cfg flag: drops go back to the sending host's stack (TC_ACT_SHOT)


def slot(port_id: int, cls: int) -> int:
    return port_id * NCLASS + cls


def dscp_slot(port_id: int, dscp: int) -> int:
    return port_id * NDSCP + dscp


def qcfg_record(limit_bytes: int, limit_pkts: int, ecn: EcnProfile | None, frame: int,
                rate_mbps: float, enabled: bool = True) -> bytes:
    if ecn is None or not enabled:
        return QCFG.pack(limit_bytes, limit_pkts, ECN_OFF, 0, 0, 0, 0, 0)
    kmin = threshold_bytes(ecn.k, ecn.unit, frame, rate_mbps)
    if ecn.kmax is None:
        return QCFG.pack(limit_bytes, limit_pkts, ECN_STEP, kmin, kmin, 1_000_000, 0, 0)
    kmax = threshold_bytes(ecn.kmax, ecn.unit, frame, rate_mbps)
    return QCFG.pack(limit_bytes, limit_pkts, ECN_RED, kmin, kmax,
                     int(round(ecn.pmax * 1_000_000)), 0, 0)


# ---- netlink messages that open and close a class's tbf gate --------------------------------

RTM_NEWQDISC, RTM_NEWTCLASS = 36, 40
NLM_F_REQUEST, NLM_F_ACK = 1, 4
TCA_KIND, TCA_OPTIONS, TCA_TBF_PARMS, TCA_TBF_BURST = 1, 2, 1, 6
TCA_HTB_PARMS = 1
TC_LINKLAYER_ETHERNET = 1


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def tbf_change_message(ifindex: int, minor: int, rate_bps: int, burst: int, limit: int,
                       seq: int = 0) -> bytes:
    """RTM_NEWQDISC (change) of the tbf under HTB class 1:minor, as `tc qdisc change` sends
    it; built once per gate so that a pause costs one send and one ack (no fork)."""
    ratespec = struct.pack("BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate_bps)
    buffer_ticks = int(burst * 1_000_000_000 / rate_bps / PSCHED_NS_PER_TICK)
    if buffer_ticks >= 1 << 32:
        raise ValueError("tbf bucket does not fit in 32 bits; raise the rate or lower the burst")
    qopt = ratespec + bytes(12) + struct.pack("III", limit, buffer_ticks, 0)
    tcm = struct.pack("BBHiIII", 0, 0, 0, ifindex, minor << 16,
                      (ROOT_MAJOR << 16) | minor, 0)
    # TCA_TBF_BURST: without it the kernel caps the bucket at 2^32 ns (4.3 s), which at a
    # closed gate's rate is less than one frame, and tbf would drop every full-size frame.
    options = _attr(TCA_TBF_PARMS, qopt) + _attr(TCA_TBF_BURST, struct.pack("I", burst))
    body = tcm + _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS, options)
    return struct.pack("IHHII", 16 + len(body), RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK,
                       seq, 0) + body


def _ticks(nbytes: int, rate_bps: int) -> int:
    """Time to send `nbytes` at `rate_bps` bytes/s in psched ticks, as tc_calc_xmittime
    computes it: whole microseconds first (tc_core_time2tick takes an unsigned), then
    ticks."""
    return int(int(1_000_000 * (nbytes / rate_bps)) * (1000 / PSCHED_NS_PER_TICK))


def htb_class_change_message(ifindex: int, c: HtbClass, seq: int = 0) -> bytes:
    """RTM_NEWTCLASS (change) of HTB class 1:minor, as `tc class change` sends it with the
    same settings (`htb_class`): rate and ceil with an Ethernet link layer (so the kernel
    needs no rate table), bucket and ceil bucket as times in ticks. Sent from the process
    that holds the dataplane, it costs one send and one ack (no tc process)."""
    rate, ceil = c.rate_bit // 8, c.ceil_bit // 8
    if ceil >= 1 << 32:
        raise ValueError("HTB rates above 32 Gbit/s need TCA_HTB_RATE64")
    burst_r = c.burst or htb_default_burst(rate)     # tc's own, given no `burst`
    burst_c = c.burst or htb_default_burst(ceil)
    opt = (struct.pack("BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate)
           + struct.pack("BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, ceil)
           + struct.pack("IIIII", _ticks(burst_r, rate), _ticks(burst_c, ceil), c.quantum, 0,
                         c.prio))
    tcm = struct.pack("BBHiIII", 0, 0, 0, ifindex, (ROOT_MAJOR << 16) | c.minor,
                      (ROOT_MAJOR << 16) | 1, 0)
    body = tcm + _attr(TCA_KIND, b"htb\0") + _attr(TCA_OPTIONS, _attr(TCA_HTB_PARMS, opt))
    return struct.pack("IHHII", 16 + len(body), RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK,
                       seq, 0) + body
