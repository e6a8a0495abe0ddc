"""Executes a fault timeline (testbed/config/faults.py) during a traffic phase: a thread
sleeps until each step's time, sets the step's switch ports down or up, and records what it
did and when. For the half second before a port goes down it reads the headers on that
port (measure/linkflows.py): the connections the failure is about to cut. Whatever is
still down when the phase ends is brought back up, so the phase's teardown and the next
phase find the fabric whole."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from testbed.config.faults import FabricFault, Step, timeline
from testbed.measure.linkflows import connections_on
from topologies.model import ifname

from .fabric import Fabric


class FaultInjector:
    LOOK_S = 0.5  # how long before a failure its ports' connections are read

    def __init__(self, fab: Fabric, faults: list[FabricFault], label: str,
                 log: Callable[[str], None]):
        self.fab, self.faults, self.label, self.log = fab, faults, label, log
        self.steps = timeline(faults, fab.topo)
        self.done: list[dict] = []   # one record per executed step
        self.errors: list[str] = []
        self._down: dict[int, tuple[tuple[str, int], ...]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for step in self.steps:
            seen: set = set()
            if step.action == "down" and step.ports:
                if self._stop.wait(max(0.0, self.t0 + step.t_s - self.LOOK_S - time.time())):
                    return
                look = min(self.LOOK_S, max(0.0, self.t0 + step.t_s - time.time()))
                if look > 0:
                    seen = connections_on([ifname(n, p) for n, p in step.ports], look)
            if self._stop.wait(max(0.0, self.t0 + step.t_s - time.time())):
                return
            self._apply(step, seen)

    def _apply(self, step: Step, seen: set | None = None) -> None:
        fault = self.faults[step.fault]
        t = time.time()
        try:
            if fault.controller:
                self.fab.kill_controller()
            else:
                self.fab.set_ports(step.ports, up=step.action == "up")
        except Exception as exc:  # noqa: BLE001 (recorded; the phase reports it)
            self.errors.append(f"{fault.target()} {step.action}: {exc}")
            return
        if step.action == "down" and not fault.controller:  # a controller stays dead
            self._down[step.fault] = step.ports
        else:
            self._down.pop(step.fault, None)
        self.done.append({"phase": self.label, "fault": fault.target(), "action": step.action,
                          "planned_s": step.t_s, "at_s": round(t - self.t0, 4), "time": t,
                          "ports": [ifname(n, p) for n, p in step.ports],
                          "connections_seen": sorted(list(c) for c in seen or ())})
        self.log(f"  [{self.label}] t={t - self.t0:.2f} s: {fault.target()} {step.action}")

    def stop(self) -> None:
        """Stop the timeline and bring up whatever it left down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for index, ports in list(self._down.items()):
            self._apply(Step(time.time() - self.t0, "up", index, ports))
