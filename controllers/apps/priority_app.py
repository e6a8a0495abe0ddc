"""Priority mapping: which DSCP selects which traffic class on every port."""
from __future__ import annotations

from controllers import qos_policy
from controllers.apps.qos_base import QosApp


class PriorityApp(QosApp):
    NAME = "priority"

    def configure(self, dp, cfg):
        table = qos_policy.dscp_table(cfg)
        dp.set_dscp_map(table)
        return {"dscp_to_class": table}
