"""The Ryu controller process of a phase: started from an argv list with an explicit
environment (its only setting: the path of the phase's configuration file), bound to
127.0.0.1, stopped by PID; and what it writes back, read as `ControllerState`
(testbed/config/replies.py), added up across the controllers a restart replaced."""
from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controllers import plugin_guard
from testbed.config.controller import CONFIG_ENV, ControllerConfig
from testbed.config.loader import dump_json
from testbed.config.replies import ControllerState, Resync, read_state
from testbed.core.system import TestbedError

from .traffic import REPO_ROOT, host_env

BUILTIN_APP = "controllers.apps.routing_app"
FLOW_APP = "controllers.apps.flow_app"  # the routing app + Hedera and/or flow priorities
CIRCUIT_APP = "controllers.apps.circuit_app"  # the routing app + c-Through's circuits


@dataclass(frozen=True, kw_only=True)
class ControllerLaunch:
    """How the controller process of one phase is started: its configuration file (what
    every app reads), the port it listens on, and the apps it loads. `rest_port`: where
    Ryu's WSGI server listens, on 127.0.0.1 too, should a plugin use it (`ryu.app.ofctl_rest`,
    `ryu.app.rest_topology`...; Ryu's default is every address, port 8080)."""
    config: ControllerConfig
    config_path: Path
    port: int
    rest_port: int
    plugins: tuple[str, ...] = ()
    qos_apps: tuple[str, ...] = ()  # names of controllers/apps/<name>_app.py to load
    host: str = "127.0.0.1"  # where switches reach it (a cluster's: this server's address)

    def argv(self) -> list[str]:
        routing_app = (CIRCUIT_APP if self.config.routing == "cthrough" else
                       FLOW_APP if self.config.per_flow else BUILTIN_APP)
        return [sys.executable, "-m", "controllers.apps.launch",
                "--ofp-listen-host", self.host, "--ofp-tcp-listen-port", str(self.port),
                "--wsapi-host", "127.0.0.1", "--wsapi-port", str(self.rest_port),
                routing_app, *(f"controllers.apps.{name}_app" for name in self.qos_apps),
                # a plugin file as the spec named it, from where the run was started (the
                # controller runs in the project's root)
                *(str(Path(p).resolve()) if p.endswith(".py") else p for p in self.plugins)]

    def env(self) -> dict[str, str]:
        return {**host_env(), "PYTHONWARNINGS": "ignore::DeprecationWarning",
                CONFIG_ENV: str(self.config_path)}


class ControllerProcess:
    def __init__(self, launch: ControllerLaunch, log_path: Path):
        self.launch = launch
        self.log_path = log_path
        self.state_json = Path(launch.config.state_json)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> int:
        """Started and listening; its PID."""
        pid = self.spawn()
        self.wait_listening(timeout)
        return pid

    def spawn(self) -> int:
        """Started (its PID); Ryu takes about a second to import before it listens, which
        a fabric spends building its network (`wait_listening` before the switches
        start)."""
        self.state_json.unlink(missing_ok=True)
        dump_json(self.launch.config, self.launch.config_path)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.launch.argv(), env=self.launch.env(), cwd=REPO_ROOT,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        return self.proc.pid

    def wait_listening(self, timeout: float = 30.0) -> None:
        """Until the spawned controller accepts OpenFlow connections."""
        assert self.proc is not None, "spawn() first"
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise TestbedError(f"the controller exited at start; see {self.log_path}")
            with socket.socket() as s:
                if s.connect_ex((self.launch.host, self.launch.port)) == 0:
                    return
            time.sleep(0.05)
        raise TestbedError(f"the controller did not listen on {self.launch.host}:{self.launch.port} "
                           f"within {timeout:.0f} s; see {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        """Its exit status once it has ended (a signal: minus its number), else None."""
        return self.proc.poll() if self.proc is not None else None

    def kill(self) -> None:
        """SIGKILL, as a crash would: no chance to tidy up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, lines: int = 3) -> list[str]:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def state(self) -> ControllerState | None:
        """Its state file as last written (None: none yet)."""
        return read_state(self.state_json)

    def wait_ready(self, n_switches: int, timeout: float = 60.0) -> ControllerState:
        """Until every switch has connected and acknowledged its flows (barrier)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise TestbedError(f"the controller died; see {self.log_path}")
            st = self.state()
            if st is not None and len(st.ready) >= n_switches:
                return st
            time.sleep(0.1)
        st = self.state()
        raise TestbedError(f"only {len(st.ready) if st else 0} of {n_switches} switches got "
                           f"their paths within {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def merged_state(past: list[ControllerState], state: ControllerState) -> ControllerState:
    """`state` with the packet counters and reroutes of the controllers it replaced (`past`,
    oldest first) added: a restart starts its own from zero."""
    if not past:
        return state
    counters: dict[str, dict[str, int]] = {}
    for s in [*past, state]:
        for dpid, c in s.counters.items():
            mine = counters.setdefault(dpid, {})
            for key, n in c.items():
                mine[key] = mine.get(key, 0) + n
    return dataclasses.replace(state, counters=counters,
                               reroutes=[r for s in [*past, state] for r in s.reroutes])


def resync_summary(resyncs: list[Resync]) -> dict:
    """What a restarted controller's resync of every switch read, kept and changed, and
    the longest it took on one switch (a fault step's record)."""
    return {"switches": len(resyncs),
            "rules_read": sum(r.rules_read for r in resyncs),
            "groups_read": sum(r.groups_read for r in resyncs),
            "kept": sum(r.kept for r in resyncs),
            "changes": sum(r.changes for r in resyncs),
            "took_s_max": max((r.took_s for r in resyncs), default=None)}


def controller_death(returncode: int | None, killed_at: float | None,
                     log_tail: list[str], died_at: float | None = None) -> str | None:
    """What to say of a controller that is not running (None while it runs): a fault's
    doing, or a death nobody asked for (`died_at`: when the runner saw it), with its exit
    status and its last log lines."""
    if returncode is None:
        return None
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    if killed_at is not None:
        return (f"the controller was killed by the spec's fault at "
                f"{time.strftime('%H:%M:%S', time.localtime(killed_at))} ({how}); the "
                "switches kept their flows")
    tail = " | ".join(log_tail) or "its log is empty"
    when = f" at {time.strftime('%H:%M:%S', time.localtime(died_at))}" if died_at else ""
    return f"the controller died during the phase{when} ({how}); last log lines: {tail}"


def plugin_warnings(label: str, guard: dict[str, dict[str, int]]) -> list[str]:
    """One warning per plugin whose messages the plugin guard changed or refused in a phase
    (controllers/plugin_guard.py; `guard`: its counts per plugin), naming each kind."""
    out = []
    for who, counts in sorted(guard.items()):
        changed = plugin_guard.changes(counts)
        if changed:
            out.append(f"{label}: plugin {who}: {', '.join(changed)} (the plugin guard keeps "
                       "plugins from flooding the fabric, shadowing its routing or taking its "
                       "ports and switch settings; README)")
    return out
