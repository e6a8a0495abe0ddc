"""Starts the Ryu controller for a run: `python -m controllers.apps.launch [ryu-manager args] APP...`.

The testbed starts this with an argv list; it applies the Ryu compatibility fix before Ryu's
manager parses its options, and puts the plugin guard (controllers/apps/guard.py) in front
of every message sent to a switch. Every app reads the phase's configuration file, named by
the one variable the runner sets ($TESTBED_CONTROLLER_CONFIG; testbed/config/controller.py).
"""
from __future__ import annotations

import logging
import sys

from controllers.apps import guard
from controllers.apps.compat import manager
from testbed.config.controller import phase_config


def main(argv: list[str] | None = None) -> None:
    guard.install(phase_config().topology(),
                  warn=logging.getLogger("testbed.plugin_guard").warning)
    manager.main(args=list(sys.argv[1:] if argv is None else argv), prog="testbed-controller")


if __name__ == "__main__":
    main()
