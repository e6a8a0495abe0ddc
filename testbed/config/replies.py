"""What crosses the process boundary back from the controller, typed once: the state file
the routing app keeps (`ControllerState`, the phase's `state_json`), the commands the
runner appends while a phase runs and the app's answers to them (`ControllerCommand`,
`CommandReply`; `ControllerConfig.commands_jsonl`), and the PFC app's event log
(`PfcRecord`, a row of `pfc_events.csv`).

`ControllerConfig` (controller.py) is what the runner tells the controller; these are what
it hears back. Both sides read and write them with the strict loader (loader.py), so that
a key renamed on one side is an error on the other, not a silent `.get(..., {})`. The
files keep the keys they always had: a field whose default is None is left out while it
is None (`to_data(omit_none=True)`), as the apps' dictionaries left those keys out.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .loader import dump_json, from_data, from_text, to_data, to_text


@dataclass(frozen=True, kw_only=True)
class Reroute:
    """The routing app replanned: a port went down or came back (`port`, `down`,
    `ports_down`: how many are down now, `switches` changed, `decided_s`), or the runner
    switched the routing (`routing`: "ecmp -> single"). `unsent`: changes for switches
    that were not connected."""
    time: float
    routing: str | None = None
    port: str | None = None      # "s1-eth2"
    down: bool | None = None
    ports_down: int | None = None
    changes: int
    switches: int | None = None
    unsent: int
    decided_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Resync:
    """A restarted controller read one switch's tables and sent only the difference from
    its plan: what it read, the per-flow entries it kept, the changes by kind
    (`ops`: "add_rule" -> count) and how long it took from the switch's connection."""
    time: float
    switch: str
    rules_read: int
    groups_read: int
    kept: int
    changes: int
    ops: dict[str, int]
    took_s: float


@dataclass(frozen=True, kw_only=True)
class GuardReport:
    """The plugin guard (controllers/plugin_guard.py): per plugin, what it saw and changed
    of the plugin's messages ("flood_confined" -> count), and per switch (dpid in decimal)
    the copies plugins' packet-outs put into it, for the runner's packet accounting."""
    plugins: dict[str, dict[str, int]] = field(default_factory=dict)
    packet_outs: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ControllerCommand:
    """One line of the phase's commands file: the runner asks the routing app for a change
    while the phase runs. Only `op` "routing" is known (route by `mode` from now on);
    `id` numbers the fabric's commands, the answer carries it back. The runner always
    writes every field; one missing is refused by the app's answer, as an unknown `op`
    is (controllers/recovery.py `command_error`), and a line that is no command at all
    (`refusal`)."""
    id: int | None = None
    op: str | None = None
    mode: str | None = None
    time: float | None = None  # when the runner asked (wall clock)


@dataclass(frozen=True, kw_only=True)
class CommandReply:
    """The routing app's answer to a command, in its state file: why it would not carry it
    out (`error`), or the changes it sent, on how many switches, how many it could not send
    and how long it took to decide. `id`, `op` and `mode` are the command's."""
    id: int | None
    time: float
    op: str | None
    mode: str | None
    error: str | None = None
    changes: int | None = None
    switches: int | None = None
    unsent: int | None = None
    decided_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class ControllerState:
    """The routing app's state file, rewritten every 0.5 s and on every change: its
    process and routing mode, when it started and wrote this (`time`, wall clock), the
    switches connected and those that acknowledged their paths (dpid in decimal -> when),
    per switch its packet counters ("packet_in", "packet_out", "errors" ...), the ports it
    knows are down, its reroutes, whether it is a restart (`resync`) and what each
    switch's resync did, the plugin guard's report and its answers to the runner's
    commands. The runner waits on it (every switch ready), accounts for the packets the
    controller injected, and reads the answers."""
    pid: int
    mode: str
    started: float
    time: float
    switches: int
    connected: dict[str, float]
    ready: dict[str, float]
    counters: dict[str, dict[str, int]]
    ports_down: list[str]
    reroutes: list[Reroute]
    resync: bool
    resyncs: list[Resync]
    plugin_guard: GuardReport
    commands: list[CommandReply]


def reply_data(obj: Any) -> Any:
    """A reply as the plain data its file holds (the keys a None leaves out, left out):
    what a script's `LiveFabric.controller_state()` and `set_routing()` return."""
    return to_data(obj, omit_none=True)


def write_state(state: ControllerState, path: str | Path) -> None:
    """The routing app's side: the state file, replaced atomically, on one line."""
    dump_json(state, path, indent=None, omit_none=True)


def read_state(path: str | Path) -> ControllerState | None:
    """The runner's side: the state file, or None while there is none (or it cannot be
    read as JSON: a controller that never wrote one). A file of the wrong shape is a
    SpecError: the two sides disagree."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return from_data(ControllerState, data, "controller_state")


def command_line(cmd: ControllerCommand) -> str:
    """The runner's side: a command as its line of the commands file."""
    return json.dumps(reply_data(cmd)) + "\n"


def read_command(line: str) -> ControllerCommand:
    """The routing app's side: one line of the commands file (ValueError: not JSON,
    SpecError: not a command)."""
    return from_data(ControllerCommand, json.loads(line), "command")


def refusal(line: str, why: str, now: float) -> CommandReply:
    """The answer to a line of the commands file that is not a command (`why`: what
    `read_command` said), carrying its `id` when it has an integer one, so that the runner
    waiting for that id hears why at once rather than timing out."""
    try:
        data = json.loads(line)
    except ValueError:
        data = None
    cmd_id = data.get("id") if isinstance(data, dict) else None
    return CommandReply(id=cmd_id if type(cmd_id) is int else None, time=now, op=None,
                        mode=None, error=f"not a command: {why}")


# ---- the PFC app's event log (pfc_events.csv) -----------------------------------------
PfcEventName = Literal["pause", "resume", "overflow", "resume-timeout", "pause-late"]


@dataclass(frozen=True, kw_only=True)
class PfcRecord:
    """One PFC event (controllers/apps/pfc_app.py, decided in controllers/pfcctl.py): at
    `time_ns` (CLOCK_MONOTONIC) the ingress `port` of `node` asked its link partner
    (`upstream_port`) to stop or restart class `cls` (column "class"), holding `bytes_held`;
    "resume-timeout" is the executor's watchdog ending a pause no XON ended, "pause-late"
    its pause of a partner whose ingress asked for one no event brought. A pause says
    how long the pause took to apply from the threshold crossing (`xoff_to_applied_us`); a
    resume how long after XOFF the last packet still arrived and how many bytes did."""
    time_ns: int
    node: str
    port: str
    cls: int
    event: PfcEventName
    upstream_port: str
    bytes_held: int
    xoff_to_applied_us: float | None = None
    xoff_to_last_arrival_us: float | None = None
    bytes_after_xoff: int | None = None


PFC_COLUMN_OF = {"cls": "class"}  # a field whose column has another name (a keyword)
# the columns of pfc_events.csv, in order: every writer and reader of the log uses these
PFC_COLUMNS = tuple(PFC_COLUMN_OF.get(f.name, f.name) for f in dataclasses.fields(PfcRecord))
PFC_HEADER = ",".join(PFC_COLUMNS) + "\n"


def pfc_line(rec: PfcRecord) -> str:
    """A record as its line of pfc_events.csv (an absent value an empty cell)."""
    return ",".join(to_text(rec)) + "\n"


def pfc_record(row: dict[str | None, Any]) -> PfcRecord:
    """A row of pfc_events.csv (`csv.DictReader`'s) as its record, every cell checked."""
    return from_text(PfcRecord, row, "pfc_events", PFC_COLUMN_OF)
