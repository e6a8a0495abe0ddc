"""Mininet's log, as it is: `setLogLevel('info')` shows what `pingAll` and `iperf` print."""
from mininet.log import debug, error, info, lg, output, setLogLevel, warn

__all__ = ["debug", "error", "info", "lg", "output", "setLogLevel", "warn"]
