"""Mininet's link classes, so that a script naming them imports. Every testbed link is
rate-limited by its queues: a link's `bw` (Mb/s) is its rate whichever class the script
names, and one without `bw` runs at the spec's `links.rate_mbps` (testbed/mn/topo.py)."""
from mininet.link import Intf, Link, OVSLink, TCIntf, TCLink, TCULink

__all__ = ["Intf", "Link", "OVSLink", "TCIntf", "TCLink", "TCULink"]
