"""Priority flow control's executor, pure: what controllers/apps/pfc_app.py decides,
without Ryu, the dataplane or a clock. The app reads the dataplane's events, its ports
and the set of transmitters it has paused, and the monotonic clock; this says what to
set up, which pauses and resumes to apply, and what each event's record is (with the
reaction times computed from the kernel's timestamps).

- At start (`setup`): which classes are lossless, the thresholds of every switch ingress
  port (`qos_policy.pfc_settings`), and the classes whose pauses a restart reconciles
  with what the switches' ingresses ask now (`qos_policy.reconcile_pauses`).
- A batch of events (`to_apply`): `qos_policy.plan_batch` gives one action per
  transmitter and class; a pause is applied only to a transmitter not yet paused, a
  resume only to one that is (the others are already as asked).
- Each event's record (`event_record`): a pause says how long it took from the XOFF
  crossing to the pause being applied (in this batch, or by an earlier one still in
  force); a resume how long after XOFF the last packet arrived and how many bytes did.
- The watchdog (`timeout_record`, `late_pause_record`): a pause `qos_policy.expired_pauses`
  ends, or one `qos_policy.missed_pauses` applies.

The records are `PfcRecord`s (testbed/config/replies.py): pfc_events.csv's rows, and
pfc.txt's lines (`txt_line`).
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from testbed.config.qos import EV_XOFF, EV_XON, PfcConfig, QosConfig
from testbed.config.replies import PfcEventName, PfcRecord

from .qos_policy import PauseAction, pfc_settings

WATCHDOG_S = 0.005  # how often the executor looks for pauses that have expired
STALL_S = 0.05      # a longer gap between the executor's turns is logged
SLOW_BATCH_NS = 3_000_000  # a batch acted on later than this after its oldest event: a warning
TXT_HEADER = "# time_ns node port class event\n"

Slot = tuple[int, int]  # (transmitter port id, class)


class Event(Protocol):
    """A PFC event as the dataplane decodes it (testbed/dataplane/dpapi.py `PfcEvent`): when it
    was posted (`ns`), the ingress port and class, its kind (EV_XOFF, EV_XON,
    EV_OVERFLOW) and name, the bytes held, and for an XON the XOFF's time, the last
    arrival's and the bytes that arrived after XOFF. Times are CLOCK_MONOTONIC ns."""

    @property
    def ns(self) -> int: ...
    @property
    def xoff_ns(self) -> int: ...
    @property
    def last_arrival_ns(self) -> int: ...
    @property
    def bytes_after_xoff(self) -> int: ...
    @property
    def kind(self) -> int: ...
    @property
    def rx_port(self) -> int: ...
    @property
    def cls(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class PfcSetup:
    """What the executor sets up before the first event: per class whether the dataplane
    tracks it as lossless (`lossless`, only with PFC configured), each switch ingress port
    and class's thresholds (None: no PFC there), the lossless classes whose pause gates
    are prepared, and those whose pauses are reconciled at start (none without PFC)."""
    lossless: list[bool]
    thresholds: list[tuple[int, int, PfcConfig | None]]
    prepare: list[int]
    reconcile: list[int]
    pfc: dict[str, Any] | None = None  # the thresholds, for the status file

    def status(self, realtime: bool, at_start: Iterable[PauseAction]) -> dict[str, Any]:
        """The app's status file: lossless ingress queues, whether the executor runs at
        real-time priority, how many pauses it applied at start, the thresholds."""
        return {"lossless_ingress_queues": sum(t is not None for _, _, t in self.thresholds),
                "realtime_priority": realtime,
                "pauses_at_start": sum(1 for a in at_start if a.verb == "pause"),
                "pfc": self.pfc}


def setup(cfg: QosConfig, ports: list[dict]) -> PfcSetup:
    """The executor's start on a fabric with classes `cfg` and dataplane ports `ports`."""
    lossless = [i for i, c in enumerate(cfg.classes) if c.lossless]
    return PfcSetup(lossless=[c.lossless and cfg.pfc is not None for c in cfg.classes],
                    thresholds=pfc_settings(cfg, ports), prepare=lossless,
                    reconcile=lossless if cfg.pfc is not None else [],
                    pfc=None if cfg.pfc is None else dict(vars(cfg.pfc)))


def to_apply(actions: Iterable[PauseAction], paused: Collection[Slot]) -> list[PauseAction]:
    """Of a batch's actions (one per transmitter and class, `qos_policy.plan_batch`), those
    that change something: a pause of a transmitter not in `paused`, a resume of one in
    it; in their order (pauses first)."""
    return [a for a in actions
            if (a.verb == "pause" and (a.port, a.cls) not in paused)
            or (a.verb == "resume" and (a.port, a.cls) in paused)]


def _us(ns: int) -> float:
    return round(ns / 1000, 1)


def event_record(ev: Event, ports: list[dict], applied: Mapping[Slot, int],
                 paused: Collection[Slot], t_acted: int) -> PfcRecord:
    """The record of one event of a batch. `applied`: when each pause or resume of the
    batch took effect (the kernel's ns); `paused`: the transmitters paused once the batch
    was done, at `t_acted`. A pause's transmitter that this batch did not touch but that
    is paused (an earlier pause, or a resume and a pause cancelled in this batch) counts
    as applied at `t_acted`. Reaction times are in microseconds, to 0.1."""
    rx = ports[ev.rx_port]
    upstream = rx["peer"]
    done = applied.get((upstream, ev.cls)) or (
        t_acted if (upstream, ev.cls) in paused else None)
    xon = ev.kind == EV_XON
    return PfcRecord(
        time_ns=ev.ns, node=rx["node"], port=rx["ifname"], cls=ev.cls,
        event=cast(PfcEventName, ev.name),  # the dataplane's: pause, resume or overflow
        upstream_port=ports[upstream]["ifname"], bytes_held=ev.bytes,
        xoff_to_applied_us=_us(done - ev.ns) if done and ev.kind == EV_XOFF else None,
        xoff_to_last_arrival_us=(_us(ev.last_arrival_ns - ev.xoff_ns)
                                 if xon and ev.last_arrival_ns >= ev.xoff_ns else None),
        bytes_after_xoff=ev.bytes_after_xoff if xon else None)


def partner(ports: list[dict], port: int) -> int:
    """The ingress port at the other end of transmitter `port`'s link: the one whose
    thresholds pause it."""
    return int(ports[port]["peer"])


def timeout_record(now_ns: int, action: PauseAction, ports: list[dict],
                   held: int) -> PfcRecord:
    """The record of the watchdog's resume of `action`'s transmitter at `now_ns`, its
    partner's ingress holding `held` bytes."""
    rx = ports[partner(ports, action.port)]
    return PfcRecord(time_ns=now_ns, node=rx["node"], port=rx["ifname"], cls=action.cls,
                     event="resume-timeout", upstream_port=ports[action.port]["ifname"],
                     bytes_held=held)


def late_pause_record(now_ns: int, action: PauseAction, ports: list[dict],
                      held: int) -> PfcRecord:
    """The record of the watchdog's pause of `action`'s transmitter at `now_ns`, its
    partner's ingress holding `held` bytes and asking for it with no event seen."""
    rx = ports[partner(ports, action.port)]
    return PfcRecord(time_ns=now_ns, node=rx["node"], port=rx["ifname"], cls=action.cls,
                     event="pause-late", upstream_port=ports[action.port]["ifname"],
                     bytes_held=held)


def txt_line(rec: PfcRecord) -> str:
    """A record as its line of pfc.txt, the HPCC simulator's format, which knows pause,
    resume and overflow: the watchdog's resume is a resume there, its pause a pause."""
    event = {"resume-timeout": "resume", "pause-late": "pause"}.get(rec.event, rec.event)
    return f"{rec.time_ns} {rec.node} {rec.port} {rec.cls} {event}\n"


def slow_batch(t_start: int, t_acted: int, oldest_ns: int) -> tuple[float, float] | None:
    """For a batch whose oldest event was posted at `oldest_ns`, handled from `t_start`
    and acted on at `t_acted`: None if it was acted on within SLOW_BATCH_NS of its oldest
    event, else (ms it queued before handling, ms acting took) for the warning."""
    if t_acted - oldest_ns <= SLOW_BATCH_NS:
        return None
    return (t_start - oldest_ns) / 1e6, (t_acted - t_start) / 1e6
