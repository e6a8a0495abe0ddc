"""Shared shell of the QoS apps: wait for the fabric's dataplane to exist, open the
dataplane API on it, apply the app's policy once, report that in a status file the runner
waits for. Subclasses implement `configure(dp, cfg)`; `serve(dp, cfg)` may run forever."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from controllers.apps.compat import RyuApp, hub
from testbed.config.controller import phase_config
from testbed.config.qos import QosConfig
from testbed.dataplane.dpapi import Dataplane


class QosApp(RyuApp):
    NAME = "qos"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = time.time()
        config = phase_config()
        self.restarted = config.resync  # the dataplane was built for the controller it replaces
        if config.dataplane_json is None or config.status_dir is None:
            raise RuntimeError(f"{self.NAME}: this phase has no QoS dataplane")
        self.description = Path(config.dataplane_json)
        self.status_dir = Path(config.status_dir)
        self.status_dir.mkdir(parents=True, exist_ok=True)
        self.dp: Dataplane | None = None
        self.cfg: QosConfig | None = None
        hub.spawn(self._main)

    def _main(self):
        while True:
            try:
                desc = json.loads(self.description.read_text())
                # this phase's, not a previous one's (a restart takes the phase's own)
                if self.restarted or desc.get("written", 0) >= self.started - 1:
                    break
            except (OSError, ValueError):
                pass
            hub.sleep(0.05)
        try:
            self.dp = Dataplane(self.description)
            self.cfg = self.dp.qos
            summary = self.configure(self.dp, self.cfg) or {}
        except Exception as exc:  # reported to the runner, which fails the start
            self.logger.exception("%s: configuring the dataplane failed", self.NAME)
            self.write_status({"error": repr(exc)})
            return
        self.write_status({"applied": time.time(), **summary})
        self.serve(self.dp, self.cfg)

    def configure(self, dp: Dataplane, cfg: QosConfig) -> dict | None:
        raise NotImplementedError

    def serve(self, dp: Dataplane, cfg: QosConfig) -> None:
        """Runs after configure(); the default does nothing more."""

    def write_status(self, status: dict) -> None:
        path = self.status_dir / f"{self.NAME}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"app": self.NAME, "pid": os.getpid(), **status}))
        os.replace(tmp, path)
