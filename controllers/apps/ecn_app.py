"""ECN marking policy: a step threshold K or a RED-like profile per switch port and class,
from the spec (thresholds in microseconds scale with each port's speed). `set_profile` changes
it while traffic runs."""
from __future__ import annotations

from controllers import qos_policy
from controllers.apps.qos_base import QosApp


class EcnApp(QosApp):
    NAME = "ecn"

    def configure(self, dp, cfg):
        marking = 0
        for port, cls, profile in qos_policy.ecn_settings(cfg, dp.ports):
            dp.set_ecn(port, cls, profile)
            marking += profile is not None
        return {"marking_queues": marking, "ecn_enabled": cfg.ecn_enabled}

    def set_profile(self, port: int, cls: int, profile) -> None:
        """Run-time change of one queue's marking (None: stop marking)."""
        self.dp.set_ecn(port, cls, profile)
