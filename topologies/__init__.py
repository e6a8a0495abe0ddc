"""Pure topology descriptions (no Mininet, Ryu or torch imports)."""
from .builders import (
    KINDS,
    bcube,
    build,
    dumbbell,
    fattree,
    leafspine,
    nonblocking,
    oversubscription,
    parse_params,
)
from .model import Host, Link, Switch, Topology, TopologyError, ifname

__all__ = ["KINDS", "Host", "Link", "Switch", "Topology", "TopologyError", "bcube", "build",
           "dumbbell", "fattree", "ifname", "leafspine", "nonblocking", "oversubscription",
           "parse_params"]
