"""The PFC app's event log (controllers/apps/pfc_app.py, `pfc_events.csv`) read as pause
intervals: what the PFC experiments' summaries and plots, the run's timeline and the live
view's replay all draw from. Its rows are `PfcRecord`s (testbed/config/replies.py), read
here once, every cell checked."""
from __future__ import annotations

from pathlib import Path

from testbed.config.replies import PfcRecord, pfc_record

from .files import read_rows

PauseKey = tuple[str, str, int]  # (upstream port, paused ingress port, class)


# each log as last read, by path, with the size and time it had then: a run reads a
# fabric's log for its summary, its plot and its timeline, and checking every cell of a
# phase's 40,000 events costs about a second each time
_READ: dict[Path, tuple[tuple[int, int], tuple[PfcRecord, ...]]] = {}


def read_pfc_events(path: Path) -> list[PfcRecord]:
    """The records of one fabric's pfc_events.csv, in the order they were written. A row
    with fewer or more cells than the header (a line cut short by a controller killed
    while writing, and the line its successor appended to it) is left out, as
    `read_jsonl` leaves out a cut line; every other row must be a record. A log unchanged
    since it was last read (same size and modification time) is not parsed again."""
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    known = _READ.get(path)
    if known is None or known[0] != stamp:
        known = _READ[path] = (stamp, tuple(pfc_record(row) for row in read_rows(path)
                                            if None not in row and None not in row.values()))
    return list(known[1])


def pause_intervals(events: list[PfcRecord]) -> tuple[dict[PauseKey, list[tuple[int, int, str]]],
                                                      dict[PauseKey, int]]:
    """The closed pauses, (pause_ns, resume_ns, the resume's event) per (upstream port,
    paused ingress port, class), and the pauses still in effect when the log ends (their
    pause_ns). A pause opens an interval (a repeated pause does not reopen it), the next
    resume (an XON or the watchdog's) closes it."""
    open_at: dict[PauseKey, int] = {}
    spans: dict[PauseKey, list[tuple[int, int, str]]] = {}
    for e in sorted(events, key=lambda e: e.time_ns):
        key = (e.upstream_port, e.port, e.cls)
        if e.event == "pause":
            open_at.setdefault(key, e.time_ns)
        elif e.event.startswith("resume") and key in open_at:
            spans.setdefault(key, []).append((open_at.pop(key), e.time_ns, e.event))
    return spans, open_at
