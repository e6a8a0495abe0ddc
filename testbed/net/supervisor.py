"""The controller of a running phase, supervised: its Ryu process started, waited for,
watched (a death noticed, recorded and, with `on_death: restart`, restarted), killed and
restarted by faults, asked for routing changes, and its state file read (the counters of
the controllers it replaced added).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.config.replies import CommandReply, ControllerCommand, ControllerState, command_line
from testbed.core.system import TestbedError

from .controller import (
    ControllerLaunch,
    ControllerProcess,
    controller_death,
    merged_state,
    resync_summary,
)

if TYPE_CHECKING:
    from .fabric import Fabric


class ControllerSupervisor:
    """The controller process of one fabric, and what happened to those before it."""
    WATCH_S = 0.5  # how often the runner looks whether its controller is alive

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.controller: ControllerProcess | None = None
        self.controller_killed: float | None = None  # when a fault killed it (time.time())
        self.past_controllers: list[ControllerState] = []  # the states of replaced ones
        self.controller_deaths: list[dict] = []  # unasked, seen by the watch
        self.commands_sent = 0
        self._ctl_lock = threading.RLock()
        self._watch_stop = threading.Event()

    def launch(self, launch: ControllerLaunch, log_path: Path) -> None:
        """The controller started (its PID in the run's record), no command sent to it yet;
        it listens once `wait_listening` returns."""
        self.fab.commands_jsonl.unlink(missing_ok=True)
        self.commands_sent = 0
        self.controller = ControllerProcess(launch, log_path)
        self.fab.record.add_pid(self.controller.spawn(), "ryu controller")

    def wait_listening(self) -> None:
        self.controller.wait_listening()

    def wait_connected(self, t0: float, timeout: float = 60.0) -> float:
        """Until every switch has connected to the controller; how long that took since
        `t0`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.controller.state()
            if state is not None and len(state.connected) >= len(self.fab.topo.switches):
                return time.time() - t0
            time.sleep(0.05)
        raise TestbedError("not every switch connected to the controller within "
                           f"{timeout:.0f} s; see {self.controller.log_path}")

    def watch(self) -> None:
        """The controller watched from now on, in a thread of its own (`stop_watch` ends it)."""
        threading.Thread(target=self._watch_controller, name="controller-watch",
                         daemon=True).start()

    def _watch_controller(self) -> None:
        """Notices a controller that died without a fault killing it: records when, how
        and its last log lines, and with `on_death: restart` starts it again."""
        while not self._watch_stop.wait(self.WATCH_S):
            with self._ctl_lock:
                ctl = self.controller
                if ctl is None or ctl.proc is None or ctl.alive() \
                        or self.controller_killed is not None \
                        or any(d["pid"] == ctl.proc.pid for d in self.controller_deaths):
                    continue
                death = {"time": time.time(), "pid": ctl.proc.pid,
                         "returncode": ctl.returncode(), "log_tail": ctl.log_tail(),
                         "action": self.fab.on_death}
                self.fab.log(f"  the controller died ({controller_death(ctl.returncode(), None, [])})"
                             + ("; restarting it" if self.fab.on_death == "restart" else ""))
                self.controller_deaths.append(death)
                if self.fab.on_death == "restart":
                    try:
                        death["restart"] = self.restart_controller()
                    except TestbedError as exc:
                        death["restart_error"] = str(exc)

    def set_routing(self, mode: str, timeout: float = 10.0) -> CommandReply:
        """Route the fabric by `mode` (ecmp or single) from now on: the controller replans
        and sends the difference while traffic runs (controllers/apps/routing_app.py); its
        answer (changes, switches, how long it took to decide), or TestbedError with why it
        would not."""
        self.commands_sent += 1
        cmd_id = self.commands_sent
        with open(self.fab.commands_jsonl, "a") as fh:
            fh.write(command_line(ControllerCommand(id=cmd_id, op="routing", mode=mode,
                                                    time=time.time())))
        deadline = time.time() + timeout
        while time.time() < deadline:
            state = self.controller_state()
            done = [c for c in (state.commands if state else []) if c.id == cmd_id]
            if done:
                if done[0].error is not None:
                    raise TestbedError(f"routing {mode}: {done[0].error}")
                self.fab.routing = mode
                return done[0]
            if self.controller is not None and not self.controller.alive():
                raise TestbedError("routing: the controller is not running")
            time.sleep(0.05)
        raise TestbedError(f"routing {mode}: the controller did not answer within "
                           f"{timeout:g} s; see {self.fab.out_dir / 'controller.log'}")

    def kill_controller(self) -> None:
        """The controller killed outright (a fault): the switches keep the flows they have
        (fail-mode secure) and nobody answers them until the phase ends."""
        with self._ctl_lock:
            if self.controller is None or not self.controller.alive():
                raise TestbedError("the controller is not running")
            self.controller_killed = time.time()  # before: the watch must not take it
            self.controller.kill()

    def restart_controller(self, timeout: float = 60.0) -> dict:
        """A controller that was killed, started again on the same port with the same
        configuration, told to resynchronise (`resync`: it reads the tables the switches
        kept and sends only the difference); once every switch has reconnected and
        acknowledged its changes, returns how long that took and what the resync read and
        changed."""
        with self._ctl_lock:
            t0 = time.time()
            old = self.controller
            if old is None or old.alive():
                raise TestbedError("the controller is running; only a dead one is restarted")
            if (past := old.state()) is not None:
                self.past_controllers.append(past)
            launch = dataclasses.replace(old.launch, config=dataclasses.replace(
                old.launch.config, resync=True))
            self.controller = ControllerProcess(launch, old.log_path)
            self.fab.record.add_pid(self.controller.start(), "ryu controller (restarted)")
            self.controller_killed = None
            state = self.controller.wait_ready(len(self.fab.topo.switches), timeout)
            return {"ready_s": round(time.time() - t0, 3),
                    "resync": resync_summary(state.resyncs)}

    def controller_state(self, since: float | None = None,
                         timeout: float = 2.0) -> ControllerState | None:
        """The controller's state file (None: it has written none), its packet counters and
        reroutes added to those of the controllers it replaced (a restart starts them from
        zero). With `since`: as written at or after that time (it writes every 0.5 s and on
        each packet-out), so that what it did before then is in it; a controller that has
        ended is not waited for."""
        state = self._controller_state_since(since, timeout)
        return merged_state(self.past_controllers, state) if state is not None else None

    def _controller_state_since(self, since: float | None,
                                timeout: float) -> ControllerState | None:
        if self.controller is None:
            return None
        deadline = time.time() + timeout
        state = self.controller.state()
        while since is not None and (state.time if state else 0) < since \
                and time.time() < deadline and self.controller.returncode() is None:
            time.sleep(0.05)
            state = self.controller.state()
        return state

    def controller_report(self) -> str | None:
        """Why the controller is not running, if it is not (None while it runs)."""
        if self.controller is None:
            return None
        seen = [d["time"] for d in self.controller_deaths
                if self.controller.proc is not None and d["pid"] == self.controller.proc.pid]
        said = controller_death(self.controller.returncode(), self.controller_killed,
                                self.controller.log_tail(), seen[0] if seen else None)
        if said and self.fab.qos is not None and self.fab.qos.pfc is not None:
            said += ("; PFC's pause executor runs in the controller, so the pauses in force "
                     "stayed in force and the lossless classes froze")
        return said

    def deaths_report(self, t_start: float, t_end: float) -> list[str]:
        """The controller deaths the watch saw between two times, each with what was done
        (restarted and resynchronised, or not)."""
        out = []
        for d in self.controller_deaths:
            if not t_start <= d["time"] <= t_end:
                continue
            text = controller_death(d["returncode"], None, d["log_tail"], d["time"]) or ""
            if "restart" in d:
                r = d["restart"]
                text += (f"; restarted: {r['resync']['switches']} switches resynchronised in "
                         f"{r['ready_s']:.1f} s with {r['resync']['changes']} changes")
            elif "restart_error" in d:
                text += f"; the restart failed: {d['restart_error']}"
            out.append(text)
        return out

    def stop_watch(self) -> None:
        """The watch ends (a controller stopped from now on is not a death)."""
        self._watch_stop.set()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
