"""Whether a run's numbers can be trusted: the reasons a phase was not faithful, from the
warnings the run gave, the records the checks around every traffic phase wrote
(events.jsonl) and what broke without a fault to explain it. `summary.json` keeps the list
as `unfaithful`; `testbed run --strict` fails a run that has any."""
from __future__ import annotations

from testbed.config.capacity import ENGINE_PACE_LOST_MAX

CPU_BOUND = "CPU-bound"  # how every warning of a phase limited by the machine's CPU says it


def cpu_bound(warnings: list[str]) -> list[str]:
    """The warnings that say a phase was limited by the machine's CPU: the checks around
    every traffic phase (OVS fell behind) and the experiments' own (workers waiting for a
    core)."""
    return [w for w in warnings if CPU_BOUND in w]


def engine_late(lost_us: float | None, span_us: float | None) -> bool:
    """The RoCE engine's verdict: it lost more than ENGINE_PACE_LOST_MAX of `span_us` (a
    flow's completion, a job's run) to waking late (`pace_lost_us` of its queue pairs)."""
    return bool(lost_us and span_us and lost_us > ENGINE_PACE_LOST_MAX * span_us)


def steal_note(steal: float | None) -> str:
    """What a CPU-bound reason adds when the hypervisor took some of the cores (`steal`,
    `machine_steal_mean`): "; the hypervisor took x% of the cores", else nothing."""
    return f"; the hypervisor took {steal:.1%} of the cores" if steal else ""


def late_rank(row: dict, iters: int) -> str | None:
    """Why a job's row (parallel or jobs experiment) is CPU-bound by its RoCE engines: its
    worst rank's sending lost to waking late (`roce_pace_lost_us`) against `iters`
    iterations of its median (`engine_late`); None when it is not. The reason says how much
    of it a rank's engine spent running or waiting for a core (`roce_pace_lost_cpu_us`, the
    largest of any rank) and the hypervisor's steal over the phase (`machine_steal_mean`)."""
    lost = row.get("roce_pace_lost_us") or 0
    if not engine_late(lost, iters * (row.get("iter_s_median") or 0) * 1e6):
        return None
    cpu, steal = row.get("roce_pace_lost_cpu_us"), row.get("machine_steal_mean")
    return (f"{CPU_BOUND} (a rank's RoCE engine lost {lost / 1e3:.0f} ms of sending to waking "
            "late" + (f"; up to {cpu / 1e3:.0f} ms running or waiting for a core"
                      if cpu is not None else "")
            + steal_note(steal) + ")")


def unfaithful(events: list[dict], degraded: list[str], warnings: list[str]) -> list[str]:
    """One line per reason: every CPU-bound warning, packets lost inside the switches or
    at OVS's sockets with no fault in the phase to explain them, and every `degraded`
    reason (pings lost, flows that carried nothing)."""
    out = cpu_bound(warnings)
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
