"""Traffic classes, ECN marking and PFC: configuration and its rendering (pure).

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

The byte layouts here mirror the structs in testbed/bpf/tbqos.bpf.c.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Literal

NCLASS = 8
MAX_PORTS = 1024
NONE = 0xFFFFFFFF
ROOT_MAJOR = 1
PARENT_CLASS = "1:1"
PAUSED_RATE_BPS = 125  # 1 kbit/s: the smallest rate whose tbf bucket still fits in 32 bits
RUNNING_RATE_BPS = 1_250_000_000  # 10 Gbit/s: the tbf gate is transparent when open
ECN_OFF, ECN_STEP, ECN_RED = 0, 1, 2
PSCHED_NS_PER_TICK = 64  # PSCHED_SHIFT = 6 in the kernel


@dataclass(frozen=True, kw_only=True)
class EcnProfile:
    """Marking thresholds on the instantaneous queue of one class. `k` alone: DCTCP's step
    (mark every packet that finds more than K queued). `k` and `kmax`: RED-like, as in the HPCC
    simulator's configs (probability rising linearly from 0 at K to `pmax` at Kmax, 1 above).
    `unit` us means microseconds of the port's drain time, so one profile fits every speed."""
    k: float
    kmax: float | None = None
    pmax: float = 1.0
    unit: Literal["pkts", "bytes", "us"] = "pkts"


@dataclass(frozen=True, kw_only=True)
class TrafficClass:
    name: str
    dscp: list[int] = field(default_factory=list)
    priority: int = 0  # strict priority: a higher number is served first (0..7)
    weight: int = 1  # weighted round robin share
    buffer_pkts: int | None = None  # None: the links' buffer
    buffer_bytes: int | None = None
    lossless: bool = False
    ecn: EcnProfile | None = None


@dataclass(frozen=True, kw_only=True)
class PfcConfig:
    """Per ingress port and lossless class, as in a switch: XOFF when the bytes that came in
    through the port and are still in the switch exceed `xoff_bytes`, XON below `xon_bytes`;
    `headroom_bytes` absorbs what is in flight while the pause takes effect."""
    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int
    enabled: bool = True


@dataclass(frozen=True, kw_only=True)
class QosConfig:
    classes: list[TrafficClass]
    scheduler: Literal["strict", "wrr"] = "strict"
    port_schedulers: dict[str, str] = field(default_factory=dict)  # ifname -> strict | wrr
    pfc: PfcConfig | None = None
    ecn_enabled: bool = True  # off: profiles are kept but nothing is marked (a lossy baseline)

    def class_of_dscp(self) -> list[int]:
        table = [0] * 64
        for index, cls in enumerate(self.classes):
            for d in cls.dscp:
                table[d] = index
        return table


def config_from_dict(d: dict) -> QosConfig:
    """Inverse of dataclasses.asdict(QosConfig) (dataplane.json)."""
    classes = [TrafficClass(**{**c, "ecn": EcnProfile(**c["ecn"]) if c.get("ecn") else None})
               for c in d["classes"]]
    pfc = PfcConfig(**d["pfc"]) if d.get("pfc") else None
    return QosConfig(**{**d, "classes": classes, "pfc": pfc})


class QosError(ValueError):
    """Thresholds that cannot work; the message names the field."""


def validate(q: QosConfig, path: str, mtu_bytes: int, link_buffer_pkts: int | None,
             link_buffer_bytes: int | None) -> None:
    """Semantic checks; raises QosError('qos.classes[1].ecn.k: ...')."""
    frame = mtu_bytes + 14
    if not 1 <= len(q.classes) <= NCLASS:
        raise QosError(f"{path}.classes: between 1 and {NCLASS} classes (got {len(q.classes)})")
    seen: dict[int, str] = {}
    names = set()
    for i, cls in enumerate(q.classes):
        cp = f"{path}.classes[{i}]"
        if cls.name in names:
            raise QosError(f"{cp}.name: duplicate class name {cls.name!r}")
        names.add(cls.name)
        for j, d in enumerate(cls.dscp):
            if not 0 <= d <= 63:
                raise QosError(f"{cp}.dscp[{j}]: DSCP must be in 0..63 (got {d})")
            if d in seen:
                raise QosError(f"{cp}.dscp[{j}]: DSCP {d} already belongs to class {seen[d]!r}")
            seen[d] = cls.name
        if not 0 <= cls.priority <= 7:
            raise QosError(f"{cp}.priority: must be in 0..7 (got {cls.priority})")
        if cls.weight < 1:
            raise QosError(f"{cp}.weight: must be >= 1 (got {cls.weight})")
        if cls.buffer_pkts is not None and cls.buffer_bytes is not None:
            raise QosError(f"{cp}: set at most one of buffer_pkts and buffer_bytes")
        for name in ("buffer_pkts", "buffer_bytes"):
            value = getattr(cls, name)
            if value is not None and value <= 0:
                raise QosError(f"{cp}.{name}: a class needs a buffer (got {value})")
        limit = class_limit_bytes(cls, frame, link_buffer_pkts, link_buffer_bytes)
        if limit < frame:
            raise QosError(f"{cp}.buffer_bytes: must hold one full-size frame (>= {frame})")
        if cls.lossless and q.pfc is None:
            raise QosError(f"{cp}.lossless: a lossless class needs {path}.pfc thresholds")
        if cls.ecn is not None:
            e = cls.ecn
            if e.k <= 0:
                raise QosError(f"{cp}.ecn.k: must be > 0 (got {e.k})")
            if e.unit != "us" and not cls.lossless and threshold_bytes(e.k, e.unit, frame, 0) >= limit:
                raise QosError(f"{cp}.ecn.k: {e.k:g} {e.unit} is not below the class buffer "
                               f"({limit} bytes); nothing would ever be marked")
            if e.kmax is not None and e.kmax <= e.k:
                raise QosError(f"{cp}.ecn.kmax: must exceed k ({e.kmax:g} <= {e.k:g})")
            if not 0 < e.pmax <= 1:
                raise QosError(f"{cp}.ecn.pmax: must be in (0, 1] (got {e.pmax})")
    for name, sched in q.port_schedulers.items():
        if sched not in ("strict", "wrr"):
            raise QosError(f"{path}.port_schedulers.{name}: strict or wrr (got {sched!r})")
    if q.pfc is not None:
        p = q.pfc
        for name in ("xoff_bytes", "xon_bytes", "headroom_bytes"):
            if getattr(p, name) <= 0:
                raise QosError(f"{path}.pfc.{name}: must be > 0 (got {getattr(p, name)})")
        if p.xon_bytes >= p.xoff_bytes:
            raise QosError(f"{path}.pfc.xon_bytes: must be below xoff_bytes "
                           f"({p.xon_bytes} >= {p.xoff_bytes})")
        if p.headroom_bytes < 2 * frame:
            raise QosError(f"{path}.pfc.headroom_bytes: at least two full-size frames "
                           f"({2 * frame}) are in flight when a pause is sent")
        if p.xoff_bytes < frame:
            raise QosError(f"{path}.pfc.xoff_bytes: must hold one full-size frame (>= {frame})")
        if not any(c.lossless for c in q.classes):
            raise QosError(f"{path}.pfc: no class is lossless (set lossless: true on one)")


def class_limit_bytes(cls: TrafficClass, frame: int, link_pkts: int | None,
                      link_bytes: int | None) -> int:
    if cls.buffer_bytes is not None:
        return cls.buffer_bytes
    pkts = cls.buffer_pkts if cls.buffer_pkts is not None else link_pkts
    if pkts is not None:
        return pkts * frame
    return link_bytes or 0


def threshold_bytes(value: float, unit: str, frame: int, rate_mbps: float) -> int:
    if unit == "pkts":
        return int(round(value * frame))
    if unit == "bytes":
        return int(round(value))
    return int(round(value * rate_mbps / 8))  # us at rate_mbps: bits/us = Mb/s


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
    frame = mtu_bytes + 14
    rate_bit = int(round(port.rate_mbps * 1_000_000))
    burst = max(2 * frame, int(port.rate_mbps * burst_us / 8)) if burst_us else 0
    burst_args = ["burst", str(burst), "cburst", str(burst)] if burst else []
    dev = port.ifname
    cmds = [
        ["qdisc", "replace", "dev", dev, "root", "handle", f"{ROOT_MAJOR}:", "htb",
         "default", "10"],
        ["class", "replace", "dev", dev, "parent", f"{ROOT_MAJOR}:", "classid", PARENT_CLASS,
         "htb", "rate", f"{rate_bit}bit", "ceil", f"{rate_bit}bit", *burst_args,
         "quantum", str(frame)],
    ]
    total_w = sum(c.weight for c in q.classes)
    min_w = min(c.weight for c in q.classes)
    for index, cls in enumerate(q.classes):
        minor = 0x10 + index
        if port.scheduler == "wrr":
            rate = max(8000, rate_bit * cls.weight // total_w)
            prio, quantum = 0, frame * cls.weight // min_w
        else:
            rate, prio, quantum = 8000, 7 - cls.priority, frame
        cmds.append(["class", "replace", "dev", dev, "parent", PARENT_CLASS,
                     "classid", f"{ROOT_MAJOR}:{minor:x}", "htb", "rate", f"{rate}bit",
                     "ceil", f"{rate_bit}bit", *burst_args, "prio", str(prio),
                     "quantum", str(quantum)])
        cmds.append(["qdisc", "replace", "dev", dev, "parent", f"{ROOT_MAJOR}:{minor:x}",
                     "handle", f"{minor:x}:", "tbf", "rate", f"{RUNNING_RATE_BPS * 8}bit",
                     "burst", str(gate_burst(frame, paused=False)),
                     "limit", str(tbf_limits[index])])
    cmds.append(["qdisc", "replace", "dev", dev, "clsact"])
    return cmds


def bpf_attach_commands(ifname: str, prog_dir: str, host: bool) -> list[list[str]]:
    """Host NICs get the program variants that know them by MAC (see if_key in tbqos.bpf.c)."""
    suffix = "_host" if host else ""
    return [["filter", "replace", "dev", ifname, direction, "prio", "1", "handle", "1", "bpf",
             "da", "object-pinned", f"{prog_dir}/tb_{direction}{suffix}"]
            for direction in ("egress", "ingress")]


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
PFC_CFG = struct.Struct("4I")
INGRESS = struct.Struct("q9Q")
EVENT = struct.Struct("4Q4Iq")
PORT_CFG = struct.Struct("4I")
RX_CFG = struct.Struct("4I")
U32 = struct.Struct("I")
IF_KEY = struct.Struct("QII")  # mac (host NICs), ifindex (switch ports), pad
EV_XOFF, EV_XON, EV_OVERFLOW = 1, 2, 3
PORT_HOST = 1  # port_cfg flag: drops go back to the sending host's stack (TC_ACT_SHOT)


def slot(port_id: int, cls: int) -> int:
    return port_id * NCLASS + cls


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

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ACK = 1, 4
TCA_KIND, TCA_OPTIONS, TCA_TBF_PARMS, TCA_TBF_BURST = 1, 2, 1, 6
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
