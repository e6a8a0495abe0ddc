"""The jobs app's decisions besides the policy's own, pure: what
controllers/apps/jobs_app.py decides, without Ryu, the dataplane or a clock. The app reads
the round file, the switches' per-DSCP counters and the clock; this says what to do with
them.

- A round's lifecycle (`round_step`): the runner writes jobs_dir/round.json when a round
  starts and replaces or removes it when the round ends. Each look at it either ends the
  round in force (the file is gone or names another round: the fabric goes back to its
  classes as built, `reset`), begins one (a file and no round in force), or steps the
  round's policy (`tick`, while the policy has not failed).
- Where a schedule goes (`RoundControl.apply`): a start decision's weights or priorities
  go to every port the jobs' paths may share (the round's `ports`); a step's, which may
  come many times a second, only to the ports where the jobs have met, so that a
  Fat-Tree's 48 candidate ports do not cost a netlink request per class on 48 ports per
  step.
- Meeting ports (`RoundControl.look`, every MEETING_LOOK_S): a port where two jobs' DSCPs
  each enqueued MEETING_MIN_BYTES since the last look; a port found later gets the
  schedule in force at once.
- What each decision's log record says (decisions.jsonl): the round, when ("start",
  "step", "met"), the monotonic and wall-clock time, and what the decision set.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from testbed.config.qos import QosConfig

from .jobpolicy import Decision, RoundFile, dscp_table, meeting_ports
from .qos_policy import dscp_table as class_table

if TYPE_CHECKING:
    from testbed.workloads.model.jobsync import GateSetting

MEETING_LOOK_S = 0.5
MEETING_MIN_BYTES = 9000  # a jumbo frame: a job's traffic, not a stray packet
IDLE_S = 0.05  # how often the round file is looked for while no round is in force
UNREADABLE_S = 1.0  # the wait before reading a round file that could not be read again

Counts = dict[str, dict[int, int]]  # port (ifname) -> DSCP -> bytes enqueued


@dataclass(frozen=True)
class RoundStep:
    """What one look at the round file asks: end the round in force (the fabric back as it
    was built), begin the round the file describes, or step the round's policy. `end` and
    `begin` both: one round replaced by the next."""
    end: bool = False
    begin: bool = False
    tick: bool = False


def round_step(current: int | None, data: Any, policy_alive: bool) -> RoundStep:
    """`current`: the id of the round in force (None: none); `data`: the round file as
    read (None: there is none, or it is not JSON); `policy_alive`: the round's policy has
    not failed."""
    end = current is not None and (data is None or data["round"]["id"] != current)
    begin = data is not None and (current is None or end)
    return RoundStep(end=end, begin=begin,
                     tick=not end and current is not None and policy_alive)


def wait_s(rf: RoundFile | None) -> float:
    """How long to wait before the next look: the round's period, or IDLE_S between
    rounds."""
    return rf.period_s if rf is not None else IDLE_S


def unreadable_record(data: dict, exc: Exception) -> dict:
    """The log record of a round file that is not the runner's (it does not load)."""
    return {"round": data.get("round", {}).get("id"), "error": repr(exc)}


@dataclass(frozen=True)
class Apply:
    """What to send for a decision: the switches' DSCP -> class table (None: unchanged),
    the ports (ifnames) a schedule goes to with its weights or priorities (`ports` None: no
    schedule change; an empty list: one, on no port yet), each gate file's setting; then
    what to log (`note`, None: nothing) of round `round` at `when`."""
    dscp_map: list[int] | None = None
    ports: list[str] | None = None
    weights: list[int] | None = None
    priorities: list[int] | None = None
    gates: dict[str, GateSetting] | None = None
    round: int = 0
    when: str = ""
    note: dict[str, Any] | None = None

    def record(self, now: float, wall: float) -> dict[str, Any]:
        """The record for decisions.jsonl (when there is a `note`), stamped with when it
        was applied (`now` monotonic, `wall` the wall clock: read once it is sent)."""
        return {"round": self.round, "when": self.when, "t_mono": now, "t": wall,
                **(self.note or {})}


def reset(cfg: QosConfig, rf: RoundFile) -> Apply:
    """The fabric as it was built, once a round ends: the classes' own DSCP table, and on
    the round's ports the classes' own WRR weights."""
    return Apply(dscp_map=class_table(cfg), ports=list(rf.ports),
                 weights=[c.weight for c in cfg.classes])


def counted_dscps(rf: RoundFile) -> list[int]:
    """The DSCPs whose bytes are counted on each of a round's ports: its jobs'."""
    return [j.dscp for j in rf.round.jobs]


class RoundControl:
    """One round's state besides its policy: the ports where its jobs have met, the
    schedule in force, and the counters at the last look."""

    def __init__(self, rf: RoundFile, now: float, counts: Counts):
        """`counts`: the round's ports' bytes per job DSCP (`counted_dscps`), read just
        before `now`, when the round begins."""
        self.rf = rf
        self.meeting: set[str] = set()
        self.schedule: tuple[list[int] | None, list[int] | None] | None = None
        self.counted = counts
        self.looked = now

    def look_due(self, now: float) -> bool:
        return now - self.looked >= MEETING_LOOK_S

    def look(self, now: float, counts: Counts) -> Apply | None:
        """The counters, read just before `now`: the ports the jobs met on since the last
        look that were not known yet get the schedule in force (if any), and a record;
        None when no new port was found."""
        deltas = {p: {d: b - self.counted[p][d] for d, b in by.items()}
                  for p, by in counts.items()}
        self.counted, self.looked = counts, now
        new = meeting_ports(deltas, MEETING_MIN_BYTES) - self.meeting
        if not new:
            return None
        self.meeting |= new
        note = {"ports": sorted(self.meeting)}
        if self.schedule is None:
            return Apply(round=self.rf.round.id, when="met", note=note)
        weights, priorities = self.schedule
        return Apply(ports=sorted(new), weights=weights, priorities=priorities,
                     round=self.rf.round.id, when="met", note=note)

    def apply(self, decision: Decision, when: str, base: list[int]) -> Apply:
        """What `decision` (`when`: "start" or "step") sends: each job's DSCP to its class
        on top of `base` (the classes' own table), the weights or priorities to the round's
        ports at the start and to the meeting ports on a step (becoming the schedule in
        force), the gates to the jobs' gate files; and what it set, for its record."""
        rnd = self.rf.round
        dscp_map = (dscp_table(base, rnd.jobs, decision.classes)
                    if decision.classes is not None else None)
        ports = None
        if decision.weights is not None or decision.priorities is not None:
            self.schedule = (decision.weights, decision.priorities)
            ports = list(self.rf.ports) if when == "start" else sorted(self.meeting)
        gates = {self.rf.gates[name]: gate for name, gate in (decision.gates or {}).items()}
        return Apply(dscp_map=dscp_map, ports=ports, weights=decision.weights,
                     priorities=decision.priorities, gates=gates, round=rnd.id, when=when,
                     note={k: v for k, v in asdict(decision).items() if v not in (None, {})})
