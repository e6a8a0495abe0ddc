"""Traffic classes, ECN marking and PFC as a spec describes them, their checks, and the
facts both validation and the dataplane use: the buffer precedence of a class and the
conversion of thresholds to bytes. The rendering into tc commands and BPF map records is
the dataplane's (testbed/dataplane/qos_render.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .units import frame_bytes

NCLASS = 8
# what the dataplane reports of a lossless ingress queue (its ring buffer), and the
# controller's PFC policy reads: XOFF crossed, back under XON, headroom overflowed
EV_XOFF, EV_XON, EV_OVERFLOW = 1, 2, 3


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
        """table[dscp] = class index; code points no class names go to class 0."""
        table = [0] * 64
        for index, cls in enumerate(self.classes):
            for d in cls.dscp:
                table[d] = index
        return table


class QosError(ValueError):
    """Thresholds that cannot work; the message names the field."""


def class_buffer(cls: TrafficClass, link_pkts: int | None,
                 link_bytes: int | None) -> tuple[int, int]:
    """(limit_bytes, limit_pkts) of a class's queue on a switch port, 0 meaning no limit of
    that kind: the class's own buffer in bytes, else its buffer in packets, else the links'
    buffer in packets, else the links' buffer in bytes. Validation and the dataplane's
    enforcement both take it from here."""
    if cls.buffer_bytes is not None:
        return cls.buffer_bytes, 0
    if cls.buffer_pkts is not None:
        return 0, cls.buffer_pkts
    if link_pkts is not None:
        return 0, link_pkts
    return link_bytes or 0, 0


def class_limit_bytes(cls: TrafficClass, frame: int, link_pkts: int | None,
                      link_bytes: int | None) -> int:
    """The class's buffer in bytes (a packet limit counted in full-size frames)."""
    limit_bytes, limit_pkts = class_buffer(cls, link_pkts, link_bytes)
    return limit_bytes or limit_pkts * frame


def threshold_bytes(value: float, unit: str, frame: int, rate_mbps: float) -> int:
    """A marking threshold in bytes: packets count full-size frames, microseconds the
    port's drain time at `rate_mbps`."""
    if unit == "pkts":
        return int(round(value * frame))
    if unit == "bytes":
        return int(round(value))
    return int(round(value * rate_mbps / 8))  # us at rate_mbps: bits/us = Mb/s


def check_pfc_thresholds(xoff_bytes: int, xon_bytes: int, headroom_bytes: int,
                         mtu_bytes: int, path: str) -> None:
    """PFC thresholds that can work, each named `path.<field>` when it cannot."""
    frame = frame_bytes(mtu_bytes)
    for name, value in (("xoff_bytes", xoff_bytes), ("xon_bytes", xon_bytes),
                        ("headroom_bytes", headroom_bytes)):
        if value <= 0:
            raise QosError(f"{path}.{name}: must be > 0 (got {value})")
    if xon_bytes >= xoff_bytes:
        raise QosError(f"{path}.xon_bytes: must be below xoff_bytes "
                       f"({xon_bytes} >= {xoff_bytes})")
    if headroom_bytes < 2 * frame:
        raise QosError(f"{path}.headroom_bytes: at least two full-size frames "
                       f"({2 * frame}) are in flight when a pause is sent")
    if xoff_bytes < frame:
        raise QosError(f"{path}.xoff_bytes: must hold one full-size frame (>= {frame})")


def validate(q: QosConfig, path: str, mtu_bytes: int, link_buffer_pkts: int | None,
             link_buffer_bytes: int | None) -> None:
    """Semantic checks; raises QosError('qos.classes[1].ecn.k: ...')."""
    frame = frame_bytes(mtu_bytes)
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
        check_pfc_thresholds(p.xoff_bytes, p.xon_bytes, p.headroom_bytes, mtu_bytes,
                             f"{path}.pfc")
        if not any(c.lossless for c in q.classes):
            raise QosError(f"{path}.pfc: no class is lossless (set lossless: true on one)")


# ---- in-band telemetry (testbed/dataplane/bpf/int_wire.h) ------------------------------
INT_RATES = 8  # the telemetry records' rate index has 3 bits


def int_rate_table(rates_mbps: list[float]) -> list[float]:
    """The link rates a telemetry record can name, by index: the fabric's distinct rates,
    slowest first (the first INT_RATES of them; a port at another rate writes no record).
    The switches and the RoCE engines are given the same table."""
    return sorted(set(rates_mbps))[:INT_RATES]
