"""Executes a fault timeline (testbed/config/faults.py) during a traffic phase: a thread
sleeps until each step's time (a training fault at an iteration: until the job reports that
iteration done), sets the step's switch ports down or up, and records what it did and
when. For the half second before a port goes down it reads the headers on that port
(measure/linkflows.py): the connections the failure is about to cut. Before the
controller is killed it dumps every switch's tables, and once a restarted controller has
resynchronised it dumps them again: the step records the difference (`table_diff`, what the
restart changed). Whatever is still down when the phase ends is brought back up (a
controller with a restart time is restarted), so the phase's teardown and the next phase
find the fabric whole."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from testbed.config.faults import FabricFault, Step, fault_ports, timeline
from testbed.measure.linkflows import connections_on
from topologies.model import ifname

from .fabric import Fabric


class FaultInjector:
    LOOK_S = 0.5  # how long before a failure its ports' connections are read
    DUMP_S = 2.0  # how long before the controller's kill the tables are dumped (about 1 s)

    def __init__(self, fab: Fabric, faults: list[FabricFault], label: str,
                 log: Callable[[str], None], progress: Callable[[], int] | None = None):
        """`progress`: the iterations a training job has finished (for `at_iter` faults)."""
        self.fab, self.faults, self.label, self.log = fab, faults, label, log
        self.progress = progress
        self.triggered: dict[int, float] = {}  # at_iter faults: when their iteration came
        self.done: list[dict] = []   # one record per executed step
        self.errors: list[str] = []
        self._down: dict[int, tuple[tuple[str, int], ...]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = 0.0
        self._tables_before: dict[str, list[str]] = {}

    def start(self) -> None:
        self.t0 = time.time()
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._thread.start()

    def _lead_s(self, step: Step) -> float:
        """How long before the step its preparation starts (reading connections on the
        ports; dumping the tables before the controller's kill)."""
        if step.action != "down":
            return 0.0
        if self.faults[step.fault].controller:
            return self.DUMP_S
        return self.LOOK_S if step.ports else 0.0

    def _run(self) -> None:
        waiting = {i for i, f in enumerate(self.faults) if f.at_iter is not None}
        executed: set[tuple[int, str]] = set()  # (fault, action)
        while True:
            now = time.time() - self.t0
            if waiting and self.progress is not None:
                reached = self.progress()
                for i in sorted(waiting):
                    at_iter = self.faults[i].at_iter
                    if at_iter is not None and reached >= at_iter:
                        # what a timed fault prepares before it (the ports' connections,
                        # the tables) is done after the iteration, then the fault
                        waiting.discard(i)
                        self.triggered[i] = now + self._lead_s(
                            Step(now, "down", i, fault_ports(self.faults[i], self.fab.topo)))
            steps = [s for s in timeline(self.faults, self.fab.topo, self.triggered)
                     if (s.fault, s.action) not in executed]
            if not steps and not waiting:
                return
            if steps and steps[0].t_s - now <= self._lead_s(steps[0]):
                self._prepare_and_apply(steps[0])
                executed.add((steps[0].fault, steps[0].action))
                continue
            wait = 0.05 if waiting else float("inf")  # polling the job's progress
            if steps:
                wait = min(wait, steps[0].t_s - self._lead_s(steps[0]) - now)
            if self._stop.wait(max(0.0, wait)):
                return

    def _prepare_and_apply(self, step: Step) -> None:
        seen: set = set()
        if step.action == "down" and self.faults[step.fault].controller:
            self._tables_before = self.fab.flow_tables()
        elif step.action == "down" and step.ports:
            look = min(self.LOOK_S, max(0.0, self.t0 + step.t_s - time.time()))
            if look > 0:
                seen = connections_on([ifname(n, p) for n, p in step.ports], look)
        if self._stop.wait(max(0.0, self.t0 + step.t_s - time.time())):
            return
        self._apply(step, seen)

    def _apply(self, step: Step, seen: set | None = None) -> None:
        fault = self.faults[step.fault]
        t = time.time()
        extra: dict = {}
        try:
            if fault.controller and step.action == "down":
                self.fab.kill_controller()
            elif fault.controller:
                extra = self._restart()
            else:
                self.fab.set_ports(step.ports, up=step.action == "up")
        except Exception as exc:  # noqa: BLE001 (recorded; the phase reports it)
            self.errors.append(f"{fault.target()} {step.action}: {exc}")
            return
        # a killed controller stays dead unless its fault restarts it
        if step.action == "down" and (not fault.controller or fault.for_s is not None):
            self._down[step.fault] = step.ports
        else:
            self._down.pop(step.fault, None)
        self.done.append({"phase": self.label, "fault": fault.target(), "index": step.fault,
                          "action": step.action, "planned_s": step.t_s,
                          "at_iter": fault.at_iter, "at_s": round(t - self.t0, 4), "time": t,
                          "ports": [ifname(n, p) for n, p in step.ports],
                          "connections_seen": sorted(list(c) for c in seen or ()), **extra})
        what = "restarted" if fault.controller and step.action == "up" else step.action
        self.log(f"  [{self.label}] t={t - self.t0:.2f} s: {fault.target()} {what}"
                 + (f" (resynchronised in {extra['ready_s']:.2f} s, "
                    f"{extra['resync']['changes']} changes, flow tables "
                    f"{'unchanged' if not extra['table_diff'] else 'CHANGED'})" if extra else ""))

    def _restart(self) -> dict:
        """Restart the controller, wait until every switch is resynchronised, and compare
        the tables with those dumped before the kill."""
        done = self.fab.restart_controller()
        return {**done, "table_diff": table_diff(self._tables_before, self.fab.flow_tables())}

    def stop(self) -> None:
        """Stop the timeline and bring up whatever it left down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=90)  # a restart waits for its switches (60 s at most)
        for index, ports in list(self._down.items()):
            self._apply(Step(time.time() - self.t0, "up", index, ports))


def table_diff(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, dict]:
    """Per switch whose tables differ: the lines only before (`gone`) and only after
    (`new`). Empty: the tables are exactly as they were."""
    out = {}
    for sw in sorted(set(before) | set(after)):
        b, a = set(before.get(sw, [])), set(after.get(sw, []))
        if a != b:
            out[sw] = {"gone": sorted(b - a), "new": sorted(a - b)}
    return out
