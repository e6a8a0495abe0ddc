"""Mininet's CLI on a testbed network: `CLI(net)` opens `testbed up`'s prompt (Mininet's
commands, and the testbed's `queue`, `paths`, `ports` and `routing`) on the running
fabric, and returns when it is left."""
from __future__ import annotations

import sys
from typing import Any


class CLI:
    """`CLI(net)` as in Mininet: the prompt, until `exit` or Ctrl-D, or the commands of
    `script` (a file, one per line)."""

    def __init__(self, mininet: Any, stdin: Any = sys.stdin, script: str | None = None) -> None:
        from testbed.net.shell import TestbedCLI
        TestbedCLI(mininet.live_fabric(), script=script, stdin=stdin)
