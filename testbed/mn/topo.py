"""Mininet's topology classes, as they are, and what the testbed builds of one.

A `Topo` (a script's subclass, or Mininet's `SingleSwitchTopo`, `LinearTopo`...) becomes a
testbed topology of kind `mininet`: its hosts in the natural order of their names (h1, h2,
..., h10), numbered in that order (10.0.0.1, 10.0.0.2, ...), its switches, and its links
on the ports Mininet gave them. A link's `bw` is its rate in Mb/s. What a testbed fabric
cannot be told per node or per link is refused by name, with what to do instead; an option
at its neutral value (None, 0, '0ms', False) is no option."""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from mininet.node import CPULimitedHost, Host
from mininet.topo import LinearTopo, MinimalTopo, SingleSwitchReversedTopo, SingleSwitchTopo, Topo

from testbed.config.loader import SpecError
from topologies.model import Builder, Topology, host_ip, ifname

__all__ = ["LinearTopo", "MinimalTopo", "SingleSwitchReversedTopo", "SingleSwitchTopo",
           "Topo", "KIND", "to_topology", "unwrap", "mininet_mac"]

KIND = "mininet"

# what a script may pass that the testbed's own choice replaces (the testbed's switches are
# userspace Open vSwitch under its controller, with datapath ids of its own; every port is
# shaped by HTB)
SWITCH_IGNORED = frozenset({"cls", "dpid", "protocols", "failMode", "datapath", "inband",
                            "stp", "batch", "listenPort", "inNamespace", "opts"})
HOST_IGNORED = frozenset({"inNamespace"})
LINK_IGNORED = frozenset({"cls", "intf", "key", "use_htb"})
NEUTRAL = (None, False, 0, 0.0, "", "0", "0ms", "0us", "0s", "0%")
NO_NETEM = ("this kernel has no netem, so the testbed's links add no delay or loss per link "
            "(a spec's links.delay_us / links.loss_pct apply fabric-wide where netem exists)")
WHY: dict[str, str] = {
    "delay": NO_NETEM, "jitter": NO_NETEM, "loss": NO_NETEM,
    "max_queue_size": "the switches' buffers are the spec's links.buffer_pkts (or "
                      "buffer_bytes), the same on every port",
    "enable_ecn": "ECN marking is the spec's qos (traffic classes with an ecn profile)",
    "enable_red": "RED-like marking is the spec's qos (an ecn profile with kmin/kmax/pmax)",
    "speedup": "a link runs at its bw",
    "cpu": "the testbed does not limit a host's CPU; it reports when the machine was "
           "CPU-bound instead",
    "cores": "the testbed does not pin hosts to cores",
    "defaultRoute": "the controller routes every host; hosts have one address each",
    "privateDirs": "the testbed's hosts share the machine's file system",
    "cls": "the testbed's hosts are Mininet's plain Host (a subclass's own config() would "
           "not run)",
}


def unwrap(factory: Any) -> tuple[Any, dict]:
    """A class given to Mininet as it is, through functools.partial or Mininet's
    `custom(cls, **params)`: the class and the parameters it carries."""
    params: dict = {}
    while True:
        if isinstance(factory, functools.partial):
            params = {**factory.keywords, **params}
            factory = factory.func
        elif not isinstance(factory, type) and getattr(factory, "__closure__", None):
            cells = [c.cell_contents for c in factory.__closure__]
            inner = next((c for c in cells if isinstance(c, type) or callable(c)), None)
            given = next((c for c in cells if isinstance(c, dict)), {})
            if inner is None or inner is factory:
                return factory, params
            params = {**given, **params}
            factory = inner
        else:
            return factory, params


def mininet_mac(n: int) -> str:
    """The MAC Mininet's autoSetMacs gives host n (its address's number)."""
    return ":".join(f"{(n >> (8 * i)) & 0xff:02x}" for i in reversed(range(6)))


def to_topology(topo: Any, rate_mbps: float, link_defaults: dict | None = None,
                host_defaults: dict | None = None, auto_macs: bool = False) -> Topology:
    """The testbed topology of a Mininet `Topo`: hosts and switches in Mininet's order
    (natural sort of their names), links on their Mininet ports, at their `bw` (else the
    link class's, else `rate_mbps`). A host's `mac` is kept, else Mininet's autoSetMacs
    one with `auto_macs`. SpecError names the first option that cannot be honoured."""
    hosts, switches = topo.hosts(sort=True), topo.switches(sort=True)
    if not hosts:
        raise SpecError("topo: no hosts (a Topo's build() adds them with addHost)")
    b = Builder(KIND, {"hosts": len(hosts), "switches": len(switches)})
    macs: dict[str, str] = {}
    for n, name in enumerate(hosts, start=1):
        info = {**(host_defaults or {}), **topo.nodeInfo(name)}
        check_host(name, info)
        ip, mac = info.get("ip"), info.get("mac")
        if ip not in NEUTRAL and str(ip).split("/")[0] != host_ip(n):
            raise SpecError(f"topo: {name}: ip={ip!r}: the testbed numbers hosts in the "
                            f"natural order of their names ({name} is {host_ip(n)}); the "
                            "controller routes by these")
        if mac not in NEUTRAL or auto_macs:
            macs[name] = str(mac).lower() if mac not in NEUTRAL else mininet_mac(n)
        b.host(name, ports=max(1, _ports(topo, name)))
    for name in switches:
        _check(name, topo.nodeInfo(name), SWITCH_IGNORED, {"isSwitch"})
        b.switch(name, "switch")
    for a, z, given in topo.links(sort=True, withInfo=True):
        info = {**(link_defaults or {}), **given}
        where = f"link {a}-{z}"
        _check(where, info, LINK_IGNORED, {"node1", "node2", "port1", "port2", "bw",
                                            "intfName1", "intfName2"})
        n1, n2, p1, p2 = info["node1"], info["node2"], info["port1"], info["port2"]
        for node, port, key in ((n1, p1, "intfName1"), (n2, p2, "intfName2")):
            if info.get(key) not in (None, ifname(node, port)):
                raise SpecError(f"topo: {where}: {key}={info[key]!r}: the testbed names a "
                                f"port <node>-eth<port> ({ifname(node, port)})")
        rate = rate_mbps if info.get("bw") is None else info["bw"]
        if not isinstance(rate, int | float) or rate <= 0:
            raise SpecError(f"topo: {where}: bw={rate!r}: a rate in Mb/s, > 0")
        b.link(n1, n2, rate, a_port=p1, b_port=p2)
    built = b.build()
    if len(set(macs.values())) != len(macs):
        raise SpecError(f"topo: two hosts with one MAC ({sorted(macs.values())})")
    return dataclasses.replace(built, hosts=tuple(
        dataclasses.replace(h, macs=(macs[h.name], *h.macs[1:])) if h.name in macs else h
        for h in built.hosts))


def check_host(name: str, info: dict) -> None:
    """A host's options: Mininet's plain Host (its class, given or through `custom`), an
    address and a MAC; SpecError for the rest."""
    cls = info.get("cls")
    if cls is not None:
        cls, params = unwrap(cls)
        if isinstance(cls, type) and issubclass(cls, CPULimitedHost):
            raise SpecError(f"topo: {name}: cls=CPULimitedHost: {WHY['cpu']}")
        if cls is not Host:
            raise SpecError(f"topo: {name}: cls={cls!r}: {WHY['cls']}")
        info = {**params, **info}
    _check(name, info, HOST_IGNORED | {"cls"}, {"ip", "mac"})


def _ports(topo: Any, host: str) -> int:
    return sum(host in (info["node1"], info["node2"])
               for _, _, info in topo.links(withInfo=True))


def _check(what: str, info: dict, ignored: frozenset, handled: set[str]) -> None:
    for key in sorted(set(info) - ignored - handled):
        if info[key] in NEUTRAL and key != "cls":
            continue
        why = WHY.get(key, "not an option the testbed knows")
        raise SpecError(f"topo: {what}: {key}={info[key]!r}: {why}")
