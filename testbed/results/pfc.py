"""The PFC app's event log (controllers/apps/pfc_app.py, `pfc_events.csv`) read as pause
intervals: what the PFC experiments' summaries and plots, the run's timeline and the live
view's replay all draw from."""
from __future__ import annotations

PauseKey = tuple[str, str, str]  # (upstream port, paused ingress port, class)


def pause_intervals(rows: list[dict]) -> tuple[dict[PauseKey, list[tuple[int, int, str]]],
                                              dict[PauseKey, int]]:
    """The closed pauses, (pause_ns, resume_ns, the resume's event) per (upstream port,
    paused ingress port, class), and the pauses still in effect when the log ends (their
    pause_ns). A pause opens an interval (a repeated pause does not reopen it), the next
    resume (an XON or the watchdog's) closes it."""
    open_at: dict[PauseKey, int] = {}
    spans: dict[PauseKey, list[tuple[int, int, str]]] = {}
    for r in sorted(rows, key=lambda r: int(r["time_ns"])):
        key = (r["upstream_port"], r["port"], r["class"])
        if r["event"] == "pause":
            open_at.setdefault(key, int(r["time_ns"]))
        elif r["event"].startswith("resume") and key in open_at:
            spans.setdefault(key, []).append((open_at.pop(key), int(r["time_ns"]), r["event"]))
    return spans, open_at
