"""Whether a run's numbers can be trusted: the reasons a phase was not faithful, from the
warnings the run gave, the records the checks around every traffic phase wrote
(events.jsonl) and what broke without a fault to explain it. `summary.json` keeps the list
as `unfaithful`; `testbed run --strict` fails a run that has any."""
from __future__ import annotations

from testbed.config.capacity import ENGINE_PACE_LOST_MAX

CPU_BOUND = "CPU-bound"  # how every warning of a phase limited by the machine's CPU says it
# how every warning of a phase whose timers the hypervisor held back says it (a virtual
# machine's CPU not run while it was due: docs/FIDELITY.md); not faithful, not CPU-bound
HOST_STALLED = "stalled by the host"


def cpu_bound(warnings: list[str]) -> list[str]:
    """The warnings that say a phase was limited by the machine's CPU: the checks around
    every traffic phase (OVS fell behind) and the experiments' own (workers waiting for a
    core)."""
    return [w for w in warnings if CPU_BOUND in w]


def engine_late(lost_us: float | None, span_us: float | None) -> bool:
    """Whether the RoCE engine lost more than ENGINE_PACE_LOST_MAX of `span_us` (a flow's
    completion, a job's run) to waking late (`lost_us`: its queue pairs' `pace_lost_us`)."""
    return bool(lost_us and span_us and lost_us > ENGINE_PACE_LOST_MAX * span_us)


def engine_verdict(lost_us: float | None, cpu_us: float | None, span_us: float | None,
                   stolen_us: float | None = None) -> str | None:
    """Why the RoCE engine's pace is not faithful over `span_us`, if it is not: CPU_BOUND
    when the part of its late wake-ups it spent running or waiting for a core (`cpu_us`,
    `pace_lost_cpu_us`; None: unknown, all of it), beyond what the hypervisor took from the
    cores meanwhile (`stolen_us`, steal summed over the cores: a runnable engine waits while
    its virtual CPU is not run), is too much (`engine_late`); HOST_STALLED when that part is
    not, but the whole of its lateness is (the rest: it slept past its timer, or the
    hypervisor held its core)."""
    cpu = lost_us if cpu_us is None else cpu_us
    if engine_late(max(0.0, (cpu or 0) - (stolen_us or 0)), span_us):
        return CPU_BOUND
    return HOST_STALLED if engine_late(lost_us, span_us) else None


def late_rank(row: dict, iters: int) -> str | None:
    """Why a job's row (parallel or jobs experiment) is not faithful by its RoCE engines
    (`engine_verdict` of its worst rank's `roce_pace_lost_us` and `roce_pace_lost_cpu_us`,
    less the phase's `machine_steal_s`, against `iters` iterations of its median), starting
    with CPU_BOUND or HOST_STALLED; None when it is."""
    lost = row.get("roce_pace_lost_us") or 0
    cpu = row.get("roce_pace_lost_cpu_us")
    stolen = (row.get("machine_steal_s") or 0) * 1e6
    why = engine_verdict(lost, cpu, iters * (row.get("iter_s_median") or 0) * 1e6, stolen)
    if why is None:
        return None
    return (f"{why} (a rank's RoCE engine lost {lost / 1e3:.0f} ms of sending to waking late, "
            f"{(lost if cpu is None else cpu) / 1e3:.0f} ms of it running or waiting for a "
            f"core; the hypervisor took {stolen / 1e3:.0f} ms of the cores)")


def unfaithful(events: list[dict], degraded: list[str], warnings: list[str]) -> list[str]:
    """One line per reason: every CPU-bound or host-stalled warning, packets lost inside
    the switches or at OVS's sockets with no fault in the phase to explain them, and every
    `degraded` reason (pings lost, flows that carried nothing)."""
    out = [w for w in warnings if CPU_BOUND in w or HOST_STALLED in w]
    for ev in events:
        if "cpu" not in ev or "phase" not in ev:
            continue
        phase, cons = ev["phase"], ev.get("conservation") or {}
        if cons.get("lost_in_switches", 0) > 0 and not ev.get("faults"):
            out.append(f"{phase}: {cons['lost_in_switches']} packets lost inside switches "
                       "without being counted")
        if cons.get("socket_drops"):
            out.append(f"{phase}: {cons['socket_drops']} packets dropped at OVS's sockets")
    return out + [f"degraded: {d}" for d in degraded]
