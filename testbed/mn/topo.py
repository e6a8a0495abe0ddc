"""Mininet's topology classes, as they are, and what the testbed builds of one.

A `Topo` (a script's subclass, or Mininet's `SingleSwitchTopo`, `LinearTopo`...) becomes a
testbed topology of kind `mininet`: its hosts in Mininet's order, numbered as Mininet
numbers them (10.0.0.1, 10.0.0.2, ...), its switches, and its links on the ports Mininet
gave them. A link's `bw` is its rate in Mb/s. What a testbed fabric cannot be told per node
or per link is refused by name, with what to do instead."""
from __future__ import annotations

from typing import Any

from mininet.topo import LinearTopo, MinimalTopo, SingleSwitchReversedTopo, SingleSwitchTopo, Topo

from testbed.config.loader import SpecError
from topologies.model import Builder, Topology, host_ip, host_mac, ifname

__all__ = ["LinearTopo", "MinimalTopo", "SingleSwitchReversedTopo", "SingleSwitchTopo",
           "Topo", "KIND", "to_topology"]

KIND = "mininet"

# what a script may pass that the testbed's own choice replaces (the testbed's switches are
# userspace Open vSwitch under its controller, with datapath ids of its own)
SWITCH_IGNORED = frozenset({"cls", "dpid", "protocols", "failMode", "datapath", "inband",
                            "stp", "batch", "listenPort", "inNamespace", "opts"})
HOST_IGNORED = frozenset({"cls", "inNamespace", "privateDirs"})
LINK_IGNORED = frozenset({"cls", "intf", "key"})
NO_NETEM = ("this kernel has no netem, so the testbed's links add no delay or loss per link "
            "(a spec's links.delay_us / links.loss_pct apply fabric-wide where netem exists)")
WHY: dict[str, str] = {
    "delay": NO_NETEM, "jitter": NO_NETEM, "loss": NO_NETEM,
    "max_queue_size": "the switches' buffers are the spec's links.buffer_pkts (or "
                      "buffer_bytes), the same on every port",
    "enable_ecn": "ECN marking is the spec's qos (traffic classes with an ecn profile)",
    "enable_red": "RED-like marking is the spec's qos (an ecn profile with kmin/kmax/pmax)",
    "use_htb": "every testbed port is shaped by HTB already",
    "speedup": "a link runs at its bw",
    "cpu": "the testbed does not limit a host's CPU; it reports when the machine was "
           "CPU-bound instead",
    "cores": "the testbed does not pin hosts to cores",
    "defaultRoute": "the controller routes every host; hosts have one address each",
}


def to_topology(topo: Any, rate_mbps: float) -> Topology:
    """The testbed topology of a Mininet `Topo`: hosts and switches in Mininet's order
    (natural sort of their names), links on their Mininet ports, at their `bw` or at
    `rate_mbps`. SpecError names the first node or link option that cannot be honoured."""
    hosts, switches = topo.hosts(sort=True), topo.switches(sort=True)
    if not hosts:
        raise SpecError("topo: no hosts (a Topo's build() adds them with addHost)")
    b = Builder(KIND, {"hosts": len(hosts), "switches": len(switches)})
    for n, name in enumerate(hosts, start=1):
        _check(name, topo.nodeInfo(name), HOST_IGNORED, {"ip", "mac"})
        info = topo.nodeInfo(name)
        ip, mac = info.get("ip"), info.get("mac")
        if ip is not None and ip.split("/")[0] != host_ip(n):
            raise SpecError(f"topo: {name}: ip={ip!r}: the testbed numbers hosts in order "
                            f"({name} is {host_ip(n)}; the controller routes by these)")
        if mac is not None and mac.lower() != host_mac(n, 0):
            raise SpecError(f"topo: {name}: mac={mac!r}: the testbed gives host {n} the MAC "
                            f"{host_mac(n, 0)}")
        b.host(name, ports=max(1, _ports(topo, name)))
    for name in switches:
        _check(name, topo.nodeInfo(name), SWITCH_IGNORED, {"isSwitch"})
        b.switch(name, "switch")
    for a, z, info in topo.links(sort=True, withInfo=True):
        where = f"link {a}-{z}"
        _check(where, info, LINK_IGNORED, {"node1", "node2", "port1", "port2", "bw",
                                            "intfName1", "intfName2"})
        n1, n2, p1, p2 = info["node1"], info["node2"], info["port1"], info["port2"]
        for node, port, key in ((n1, p1, "intfName1"), (n2, p2, "intfName2")):
            if info.get(key) not in (None, ifname(node, port)):
                raise SpecError(f"topo: {where}: {key}={info[key]!r}: the testbed names a "
                                f"port <node>-eth<port> ({ifname(node, port)})")
        rate = info.get("bw", rate_mbps)
        if not isinstance(rate, int | float) or rate <= 0:
            raise SpecError(f"topo: {where}: bw={rate!r}: a rate in Mb/s, > 0")
        b.link(n1, n2, rate, a_port=p1, b_port=p2)
    return b.build()


def _ports(topo: Any, host: str) -> int:
    return sum(host in (info["node1"], info["node2"])
               for _, _, info in topo.links(withInfo=True))


def _check(what: str, info: dict, ignored: frozenset, handled: set[str]) -> None:
    for key in sorted(set(info) - ignored - handled):
        why = WHY.get(key, "not an option the testbed knows")
        raise SpecError(f"topo: {what}: {key}={info[key]!r}: {why}")
