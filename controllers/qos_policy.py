"""QoS policy decisions (pure): which DSCP goes to which class, where and how ECN marks, where
PFC thresholds apply, and what a PFC event asks the dataplane to do.

The Ryu apps in controllers/apps (priority_app, ecn_app, pfc_app) are thin shells that apply
these through the testbed's dataplane API; a user's plugin can call the same functions or
replace them.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from testbed.config.qos import EV_OVERFLOW, EV_XOFF, EV_XON, EcnProfile, PfcConfig, QosConfig


def dscp_table(cfg: QosConfig) -> list[int]:
    """table[dscp] = class index; code points no class names go to class 0."""
    return cfg.class_of_dscp()


def ecn_settings(cfg: QosConfig, ports: list[dict]) -> list[tuple[int, int, EcnProfile | None]]:
    """(port id, class, profile) for every switch egress port and class. Host NICs never
    mark: the queue that matters is the switch's. With `ecn_enabled` off every profile is
    None (the lossy or PFC-only baselines)."""
    out = []
    for p in ports:
        if p["is_host"]:
            continue
        for c, cls in enumerate(cfg.classes):
            out.append((p["id"], c, cls.ecn if cfg.ecn_enabled else None))
    return out


def pfc_settings(cfg: QosConfig, ports: list[dict]) -> list[tuple[int, int, PfcConfig | None]]:
    """(switch ingress port id, class, thresholds) for every lossless class."""
    out = []
    for p in ports:
        if p["is_host"]:
            continue
        for c, cls in enumerate(cfg.classes):
            out.append((p["id"], c, cfg.pfc if cls.lossless and cfg.pfc else None))
    return out


@dataclass(frozen=True)
class PauseAction:
    verb: str  # "pause" | "resume" | "none"
    port: int  # the transmitter to act on: the far end of the ingress port that asked
    cls: int


def on_event(kind: int, rx_port: int, cls: int, ports: list[dict]) -> PauseAction:
    """PFC as in 802.1Qbb: the link partner of the congested ingress port (`rx_port`) stops
    (XOFF) or restarts (XON) that priority. A headroom overflow is only logged: it means the
    pause reacted too slowly for the configured headroom."""
    upstream = ports[rx_port]["peer"]
    if kind == EV_XOFF:
        return PauseAction("pause", upstream, cls)
    if kind == EV_XON:
        return PauseAction("resume", upstream, cls)
    if kind == EV_OVERFLOW:
        return PauseAction("none", upstream, cls)
    raise ValueError(f"unknown PFC event kind {kind}")


def plan_batch(events: list[tuple[int, int, int]], ports: list[dict]) -> list[PauseAction]:
    """The actions for a batch of (kind, rx_port, class) events read at once: one per link
    and class, its last event deciding (a pause and its resume in the same batch cancel
    out), pauses first -- a late pause loses packets, a late resume only throughput."""
    last: dict[tuple[int, int], PauseAction] = {}
    for kind, rx_port, cls in events:
        action = on_event(kind, rx_port, cls, ports)
        if action.verb != "none":
            last[(action.port, action.cls)] = action
    return sorted(last.values(), key=lambda a: a.verb != "pause")


def reconcile_pauses(ports: list[dict], classes: Iterable[int],
                     asks: Callable[[int, int], bool]) -> list[PauseAction]:
    """What a (re)started executor does first, for every switch ingress port and lossless
    class: its link partner is paused if the BPF flag says the port asks for a pause
    (`asks(rx_port, cls)`), resumed otherwise. The executor keeps its own set of paused
    transmitters, empty at start: a pause its predecessor applied would never be ended by
    an XON (it resumes only pauses it knows), and one whose XON came while no executor ran
    would stay in force with nobody asking for it (measured: the lossless class froze)."""
    return [PauseAction("pause" if asks(p["id"], cls) else "resume", p["peer"], cls)
            for p in ports if not p["is_host"] for cls in classes]


def missed_pauses(paused: Collection[tuple[int, int]], ports: list[dict],
                  classes: Iterable[int], ingress: Callable[[int, int], tuple[bool, int]],
                  xoff_bytes: int) -> list[PauseAction]:
    """The other half of the watchdog: a switch ingress port whose BPF flag asks for a
    pause and that holds more than XOFF while its partner transmits. The flag is set once,
    by the packet that crosses XOFF, which posts the one event that pauses the partner; if
    that event never reaches the executor, the flag alone stops every later XOFF, and the
    partner sends on into the headroom until it overflows (measured: a host past 190 KB
    on a 30 Mb/s Fat-Tree under web-search load, 247 packets lost in a lossless class)."""
    out = []
    for p in ports:
        if p["is_host"]:
            continue
        for cls in classes:
            asks, held = ingress(p["id"], cls)
            if asks and held > xoff_bytes and (p["peer"], cls) not in paused:
                out.append(PauseAction("pause", p["peer"], cls))
    return out


def expired_pauses(paused: Iterable[tuple[int, int]], ports: list[dict],
                   ingress: Callable[[int, int], tuple[bool, int]],
                   xon_bytes: int) -> list[PauseAction]:
    """Like the pause timer of 802.1Qbb (a pause expires unless renewed): a paused
    transmitter (port, class) stays paused only while its partner's ingress still asks for
    it and holds more than XON; `ingress(rx_port, cls)` gives (asks, bytes held). Ends
    pauses whose XON was lost to a race between the two CPUs' BPF programs."""
    out = []
    for port, cls in sorted(paused):
        asks, held = ingress(ports[port]["peer"], cls)
        if not (asks and held > xon_bytes):
            out.append(PauseAction("resume", port, cls))
    return out
