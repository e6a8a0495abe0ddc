"""Whether a run's numbers can be trusted: the reasons a phase was not faithful, from the
records the checks around every traffic phase wrote (events.jsonl) and what broke without a
fault to explain it. `summary.json` keeps the list as `unfaithful`; `testbed run --strict`
fails a run that has any."""
from __future__ import annotations


def unfaithful(events: list[dict], degraded: list[str]) -> list[str]:
    """One line per reason: a traffic phase limited by the machine's CPU, packets lost
    inside the switches or at OVS's sockets with no fault in the phase to explain them, and
    every `degraded` reason (pings lost, flows that carried nothing)."""
    out = []
    for ev in events:
        if "cpu" not in ev or "phase" not in ev:
            continue
        phase, cpu, cons = ev["phase"], ev["cpu"], ev.get("conservation") or {}
        if cpu.get("cpu_bound"):
            out.append(f"{phase}: CPU-bound (OVS added {cpu.get('ovs_added_delay_p50_ms')} ms "
                       "of queueing, median)")
        if cons.get("lost_in_switches", 0) > 0 and not ev.get("faults"):
            out.append(f"{phase}: {cons['lost_in_switches']} packets lost inside switches "
                       "without being counted")
        if cons.get("socket_drops"):
            out.append(f"{phase}: {cons['socket_drops']} packets dropped at OVS's sockets")
    return out + [f"degraded: {d}" for d in degraded]


def strict_reasons(summary: dict) -> list[str]:
    """Why `--strict` fails a finished run (empty: it passes). A summary written before
    runs listed `unfaithful` falls back on its CPU-bound flag and status."""
    if "unfaithful" in summary:
        return list(summary["unfaithful"])
    reasons = [w for w in summary.get("fidelity_warnings", []) if "CPU-bound" in w]
    if summary.get("status") == "degraded":
        reasons.append("the run ended degraded")
    return reasons
