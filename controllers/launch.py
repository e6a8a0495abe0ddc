"""Starts the Ryu controller for a run: `python -m controllers.launch [ryu-manager args] APP...`.

The testbed starts this with an argv list; it applies the Ryu compatibility fix before Ryu's
manager parses its options. Every app reads the phase's configuration file, named by the one
variable the runner sets ($TESTBED_CONTROLLER_CONFIG; testbed/config/controller.py).
"""
from __future__ import annotations

import sys

from controllers.compat import manager


def main(argv: list[str] | None = None) -> None:
    manager.main(args=list(sys.argv[1:] if argv is None else argv), prog="testbed-controller")


if __name__ == "__main__":
    main()
