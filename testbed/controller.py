"""The Ryu controller process of a run: started from an argv list with an explicit
environment, bound to 127.0.0.1, stopped by PID."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controllers.flowsched import SA_ITERATIONS

from .system import TestbedError


REPO_ROOT = Path(__file__).resolve().parent.parent
BUILTIN_APP = "controllers.apps.routing_app"
FLOW_APP = "controllers.apps.flow_app"  # the routing app + Hedera and/or flow priorities


@dataclass(frozen=True, kw_only=True)
class ControllerSpec:
    topology_json: Path
    state_json: Path
    routing: str
    port: int
    plugins: tuple[str, ...] = ()
    qos_apps: tuple[str, ...] = ()  # names of controllers/apps/<name>_app.py to load
    dataplane_json: Path | None = None
    status_dir: Path | None = None
    hedera: dict | None = None  # HederaSpec fields, for routing hedera
    hedera_dir: Path | None = None  # where the scheduler logs its decisions
    flow_priority: dict | None = None  # FlowPriority fields (policy "none": off)

    @property
    def per_flow(self) -> bool:
        """Hedera or a priority policy: flows get their own entries (the flow app)."""
        return self.routing == "hedera" or bool(
            self.flow_priority and self.flow_priority.get("policy", "none") != "none")

    def argv(self) -> list[str]:
        routing_app = FLOW_APP if self.per_flow else BUILTIN_APP
        return [sys.executable, "-m", "controllers.launch",
                "--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(self.port),
                routing_app, *(f"controllers.apps.{name}_app" for name in self.qos_apps),
                *self.plugins]

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                "PYTHONPATH": str(REPO_ROOT),
                "PYTHONWARNINGS": "ignore::DeprecationWarning",
                "TESTBED_TOPOLOGY": str(self.topology_json),
                "TESTBED_STATE": str(self.state_json),
                "TESTBED_ROUTING": self.routing,
                **({"TESTBED_DATAPLANE": str(self.dataplane_json),
                    "TESTBED_APP_STATUS": str(self.status_dir)} if self.dataplane_json else {}),
                **(self._flow_env() if self.per_flow else {})}

    def _flow_env(self) -> dict[str, str]:
        hedera = self.hedera or {}
        period = hedera.get("period_s", 5.0)
        if self.routing != "hedera" and self.flow_priority:
            period = self.flow_priority.get("period_s", 1.0)
        return {"TESTBED_HEDERA_PERIOD_S": str(period),
                "TESTBED_HEDERA_ELEPHANT": str(hedera.get("elephant_fraction", 0.1)),
                "TESTBED_HEDERA_IDLE_S": str(hedera.get("idle_timeout_s", 10)),
                "TESTBED_HEDERA_BASE": hedera.get("base", "ecmp"),
                "TESTBED_HEDERA_PLACEMENT": hedera.get("placement", "gff"),
                "TESTBED_HEDERA_SA_ITERATIONS": str(hedera.get("annealing_iterations", SA_ITERATIONS)),
                "TESTBED_HEDERA_SA_SEED": str(hedera.get("annealing_seed", 0)),
                "TESTBED_HEDERA_DIR": str(self.hedera_dir),
                "TESTBED_FLOW_PRIORITY": json.dumps(self.flow_priority or {})}


class ControllerProcess:
    def __init__(self, spec: ControllerSpec, log_path: Path):
        self.spec = spec
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> int:
        self.spec.state_json.unlink(missing_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.spec.argv(), env=self.spec.env(), cwd=REPO_ROOT,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise TestbedError(f"the controller exited at start; see {self.log_path}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.spec.port)) == 0:
                    return self.proc.pid
            time.sleep(0.1)
        raise TestbedError(f"the controller did not listen on 127.0.0.1:{self.spec.port} "
                           f"within {timeout:.0f} s; see {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def state(self) -> dict:
        try:
            return json.loads(self.spec.state_json.read_text())
        except (OSError, ValueError):
            return {}

    def wait_ready(self, n_switches: int, timeout: float = 60.0) -> dict:
        """Until every switch has connected and acknowledged its flows (barrier)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise TestbedError(f"the controller died; see {self.log_path}")
            st = self.state()
            if len(st.get("ready", {})) >= n_switches:
                return st
            time.sleep(0.1)
        st = self.state()
        raise TestbedError(f"only {len(st.get('ready', {}))} of {n_switches} switches got their "
                           f"paths within {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
