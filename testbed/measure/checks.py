"""The checks around every traffic phase: packet conservation inside the switches and the
CPU headroom of the machine while the traffic ran."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from testbed.core.errors import TestbedError
from testbed.results.verdict import steal_note

from .conservation import conservation_report, conservation_snapshot
from .cpu import CpuMonitor, servers_verdict

if TYPE_CHECKING:
    from testbed.net.fabric import Fabric


@contextlib.contextmanager
def traffic_phase(cpu: CpuMonitor, events: list[dict], fab: Fabric, warnings: list[str],
                  label: str) -> Iterator[dict]:
    """Wraps one traffic phase: counters before, the caller's traffic, then the packet
    conservation and CPU checks (warnings appended to `warnings`, the phase's record to
    `events`). The yielded dict holds "conservation" and "cpu" once the block has ended; a
    block that injected faults puts their steps under "faults" (packets a switch sent to a
    port that was down are lost without a counter, and the warning says so)."""
    checks: dict = {}
    t_start = time.time()
    before = conservation_snapshot(fab)
    yield checks
    t_end = time.time()
    time.sleep(0.8)  # let queues drain and the controller's counters be written
    report = conservation_report(before, conservation_snapshot(fab))
    # this machine's CPU, and a cluster's other servers' (their own monitors)
    windows = {fab.here: cpu.window(t_start - cpu.t0, t_end - cpu.t0),
               **fab.servers_cpu(t_start, t_end)}
    verdict = servers_verdict(windows, fab.packets_by_server(report["per_switch"]),
                              t_end - t_start, fab.links.mtu_bytes)
    if report["lost_in_switches"] > 0:
        why = (": sent to ports the faults took down" if checks.get("faults")
               else " (OVS send buffer?)")
        warnings.append(f"{label}: {report['lost_in_switches']} packets lost inside "
                        f"switches without being counted{why}")
    elif report["lost_in_switches"] < 0:
        warnings.append(f"{label}: {-report['lost_in_switches']} more packets left "
                        "switches than entered them: counters read out of step "
                        "(the controller's packet-out count late?); conservation "
                        "unverified")
    if report["socket_drops"]:
        warnings.append(f"{label}: {report['socket_drops']} packets dropped at OVS "
                        "receive sockets")
    # deaths the watch saw (and restarted) meanwhile, and a controller still dead now (the
    # same death reads the same both ways)
    now = fab.controller_report()
    deaths = list(dict.fromkeys(fab.deaths_report(t_start, time.time()) + ([now] if now else [])))
    # a kill the spec's fault made is not a death `on_death` is about
    unasked = [d for d in deaths if not (d == now and fab.controller_killed is not None)]
    for death in deaths:
        warnings.append(f"{label}: {death}")
        events.append({"phase": label, "controller": death})
    if verdict["cpu_bound"]:
        where = f" on server {verdict['server']}" if "server" in verdict else ""
        warnings.append(
            f"{label}: CPU-bound{where} (OVS's forwarding added {verdict['ovs_added_delay_p50_ms']} ms "
            f"of queueing (median), machine idle {verdict['machine_idle_mean']:.0%} on average"
            f"{steal_note(verdict.get('machine_steal_mean'))}); its numbers are not faithful")
    events.append({"phase": label, "seconds": round(t_end - t_start, 3),
                   "t_start": round(t_start, 3), "t_end": round(t_end, 3),
                   "conservation": report, "cpu": verdict, "faults": bool(checks.get("faults"))})
    checks.update(conservation=report, cpu=verdict)
    if unasked and fab.on_death == "fail":
        raise TestbedError(f"{label}: {unasked[0]} (controller.on_death: fail)")
