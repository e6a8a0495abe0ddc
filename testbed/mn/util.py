"""Mininet's helpers that scripts import, as they are (they work on Mininet's node objects,
which a testbed network hands out)."""
from mininet.util import (
    custom,
    dumpNetConnections,
    dumpNodeConnections,
    dumpPorts,
    irange,
    natural,
    naturalSeq,
    quietRun,
    waitListening,
)

__all__ = ["custom", "dumpNetConnections", "dumpNodeConnections", "dumpPorts", "irange",
           "natural", "naturalSeq", "quietRun", "waitListening"]
