"""Pure topology descriptions (no Mininet, Ryu or torch imports)."""
from .builders import bcube, dumbbell, fattree, leafspine, nonblocking, oversubscription
from .kinds import KINDS, build, parse_params
from .model import Host, Link, Switch, Topology, TopologyError, ifname
from .survey import dcell, ficonn, hybrid, mdcube, rail, torus, vl2

__all__ = ["KINDS", "Host", "Link", "Switch", "Topology", "TopologyError", "bcube", "build",
           "dcell", "dumbbell", "fattree", "ficonn", "hybrid", "ifname", "leafspine",
           "mdcube", "nonblocking", "oversubscription", "parse_params", "rail", "torus",
           "vl2"]
