"""The plugin guard put in front of this controller process's switches: every
`Datapath.send_msg` goes through `controllers/plugin_guard.py`'s `Guard` (the decisions,
pure and unit-tested there), and the routing app reports what it saw."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from controllers.apps.compat import Datapath
from controllers.plugin_guard import Guard, flood_ports, sender
from testbed.config.replies import GuardReport
from topologies.model import Topology

_GUARD: Guard | None = None


def install(topo: Topology, warn: Callable[..., None]) -> Guard:
    """Puts the guard in front of every `Datapath.send_msg` of this controller process."""
    global _GUARD
    guard = _GUARD = Guard(ports=flood_ports(topo), warn=warn)
    original = Datapath.send_msg

    def send_msg(self: Any, msg: Any, close_socket: bool = False) -> Any:
        who = sender(sys._getframe(1))
        if who is not None:
            msg = guard.check(self, msg, who)
            if msg is None:
                return False
        return original(self, msg, close_socket=close_socket)

    Datapath.send_msg = send_msg
    return guard


def report() -> GuardReport:
    """The installed guard's report (empty without one)."""
    return _GUARD.report() if _GUARD is not None else GuardReport()
