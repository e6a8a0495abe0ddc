"""What every experiment phase shares: its outcome (headline metrics and fidelity warnings),
the wrapper that checks packet conservation and CPU headroom around its traffic, and the
check that senders ran the congestion control they were given."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from .monitor import conservation_report, conservation_snapshot, forwarding_verdict


def tcp_payload_fraction(mtu_bytes: int) -> float:
    """iperf3 goodput counts TCP payload: MTU - 52 (IP, TCP with timestamps) of every
    MTU + 14 bytes that HTB counts (1448 / 1514 = 95.6% at 1500)."""
    return (mtu_bytes - 52) / (mtu_bytes + 14)


@dataclass
class Outcome:
    headline: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _traffic_phase(ctx, fab, outcome: Outcome, label: str):
    """Wraps one traffic phase: counters before, the caller's traffic, then the packet
    conservation and CPU checks (warnings go to `outcome`). The yielded dict holds
    "conservation" and "cpu" once the block has ended."""
    checks: dict = {}
    t_start = time.time()
    before = conservation_snapshot(fab)
    yield checks
    t_end = time.time()
    time.sleep(0.8)  # let queues drain and the controller's counters be written
    report = conservation_report(before, conservation_snapshot(fab))
    cpu = forwarding_verdict(ctx.cpu.window(t_start - ctx.cpu.t0, t_end - ctx.cpu.t0),
                             report["packets_in"], t_end - t_start, fab.links.mtu_bytes)
    if report["lost_in_switches"] > 0:
        outcome.warnings.append(f"{label}: {report['lost_in_switches']} packets lost inside "
                                "switches without being counted (OVS send buffer?)")
    elif report["lost_in_switches"] < 0:
        outcome.warnings.append(f"{label}: {-report['lost_in_switches']} more packets left "
                                "switches than entered them: counters read out of step "
                                "(the controller's packet-out count late?); conservation "
                                "unverified")
    if report["socket_drops"]:
        outcome.warnings.append(f"{label}: {report['socket_drops']} packets dropped at OVS "
                                "receive sockets")
    if cpu["cpu_bound"]:
        outcome.warnings.append(
            f"{label}: CPU-bound (OVS's forwarding added {cpu['ovs_added_delay_p50_ms']} ms "
            f"of queueing (median), machine idle {cpu['machine_idle_mean']:.0%} on average); "
            "its numbers are not faithful")
    ctx.events.append({"phase": label, "conservation": report, "cpu": cpu})
    checks.update(conservation=report, cpu=cpu)


def _check_cc(results, expected: str, outcome: Outcome, label: str) -> list[str]:
    used = sorted({r.sender_cc for r in results})
    if used != [expected]:
        outcome.warnings.append(f"{label}: senders used {used}, not {expected}")
    return used
