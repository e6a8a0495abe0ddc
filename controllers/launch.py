"""Starts the Ryu controller for a run: `python -m controllers.launch [ryu-manager args] APP...`.

The testbed starts this with an argv list; it applies the Ryu compatibility fix before Ryu's
manager parses its options. The routing app reads its configuration from the environment
(TESTBED_TOPOLOGY, TESTBED_ROUTING, TESTBED_STATE) that the runner sets explicitly.
"""
from __future__ import annotations

import sys

from controllers.compat import manager


def main(argv: list[str] | None = None) -> None:
    manager.main(args=list(sys.argv[1:] if argv is None else argv), prog="testbed-controller")


if __name__ == "__main__":
    main()
