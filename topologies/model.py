"""A topology as plain data: hosts, switches and links with deterministic identities.

Nothing here imports Mininet, Ryu or torch. The runner writes a `Topology` to
`topology.json`; the controller and the fabric read that same file back.

Conventions (the same for every kind of topology):
- host ports are numbered from 0 (`h1-eth0`), switch ports from 1 (`e1-eth1`), and a
  switch's port number is its OpenFlow port number;
- host number n (1-based, in creation order) has IP 10.0.(n // 256).(n % 256) in 10.0.0.0/8
  and MAC 02:00:00:<port>:<n // 256>:<n % 256> on each of its ports;
- a switch's dpid is its creation index + 1; names are short enough that
  `<node>-eth<port>` fits the kernel's 15-character interface-name limit.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

IFNAME_MAX = 15  # IFNAMSIZ - 1


class TopologyError(ValueError):
    """A topology parameter is invalid; the message names the parameter."""


@dataclass(frozen=True, kw_only=True)
class Host:
    name: str
    ip: str
    macs: tuple[str, ...]  # one per port, index = port number
    relay: bool = False  # forwards packets for others (BCube servers)
    labels: tuple[tuple[str, int], ...] = ()  # e.g. (("pod", 0), ("edge", 1))

    @property
    def ports(self) -> int:
        return len(self.macs)

    def label(self, key: str) -> int | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True, kw_only=True)
class Switch:
    name: str
    dpid: int
    role: str  # core, agg, edge, spine, leaf, bcube, big
    labels: tuple[tuple[str, int], ...] = ()

    def label(self, key: str) -> int | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True, kw_only=True)
class Link:
    a: str
    a_port: int
    b: str
    b_port: int
    rate_mbps: float

    def ends(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return (self.a, self.a_port), (self.b, self.b_port)


@dataclass(frozen=True, kw_only=True)
class Topology:
    kind: str
    params: tuple[tuple[str, Any], ...]
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    # ---- lookups -------------------------------------------------------------
    def _idx(self) -> dict:
        if not self._index:
            nodes: dict[str, Host | Switch] = {h.name: h for h in self.hosts}
            nodes.update({s.name: s for s in self.switches})
            peer: dict[tuple[str, int], tuple[str, int]] = {}
            for link in self.links:
                peer[(link.a, link.a_port)] = (link.b, link.b_port)
                peer[(link.b, link.b_port)] = (link.a, link.a_port)
            self._index.update(nodes=nodes, peer=peer,
                               ip={h.ip: h for h in self.hosts},
                               dpid={s.dpid: s for s in self.switches})
        return self._index

    def node(self, name: str) -> Host | Switch:
        return self._idx()["nodes"][name]

    @property
    def relays(self) -> bool:
        """Whether servers forward each other's packets (BCube, DCell, FiConn, MDCube:
        `RELAY_KINDS` in kinds.py), so that routes live in hosts as well as in switches."""
        return any(h.relay for h in self.hosts)

    def host(self, name: str) -> Host:
        """The host `name` (KeyError if it is not one)."""
        node = self.node(name)
        if not isinstance(node, Host):
            raise KeyError(f"{name} is not a host")
        return node

    def switch(self, name: str) -> Switch:
        """The switch `name` (KeyError if it is not one)."""
        node = self.node(name)
        if not isinstance(node, Switch):
            raise KeyError(f"{name} is not a switch")
        return node

    def is_host(self, name: str) -> bool:
        return isinstance(self._idx()["nodes"].get(name), Host)

    def host_by_ip(self, ip: str) -> Host | None:
        return self._idx()["ip"].get(ip)

    def switch_by_dpid(self, dpid: int) -> Switch | None:
        return self._idx()["dpid"].get(dpid)

    def peer(self, node: str, port: int) -> tuple[str, int] | None:
        """The (node, port) at the other end of the link on `node`'s `port`."""
        return self._idx()["peer"].get((node, port))

    def neighbour(self, node: str, port: int) -> str:
        """The node at the other end of `node`'s connected `port` (KeyError if none)."""
        return self._idx()["peer"][(node, port)][0]

    def ports_of(self, node: str) -> list[tuple[int, str, int]]:
        """(port, peer node, peer port) for every connected port of `node`, by port."""
        by_node = self._idx().setdefault("ports", {})
        if not by_node:
            for (name, port), (pname, pport) in self._idx()["peer"].items():
                by_node.setdefault(name, []).append((port, pname, pport))
            for ports in by_node.values():
                ports.sort()
        return by_node.get(node, [])

    def link_at(self, node: str, port: int) -> Link:
        for link in self.links:
            if (link.a, link.a_port) == (node, port) or (link.b, link.b_port) == (node, port):
                return link
        raise KeyError((node, port))

    def link_between(self, a: str, b: str) -> Link | None:
        """The link joining nodes `a` and `b` (either way round), or None."""
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None

    def switch_ends(self, a: str, b: str) -> list[tuple[str, int]]:
        """The switch ends of every link between two nodes: what pulling their cables sets
        down (a host's end loses its carrier with it)."""
        return [end for link in self.links if {link.a, link.b} == {a, b}
                for end in link.ends() if not self.is_host(end[0])]

    def interfaces(self) -> Iterator[tuple[str, int, str]]:
        """(node, port, interface name) for every link end."""
        for link in self.links:
            for node, port in link.ends():
                yield node, port, ifname(node, port)

    def param(self, key: str) -> Any:
        return dict(self.params)[key]

    # ---- JSON ---------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "params": dict(self.params),
            "hosts": [_plain(asdict(h)) for h in self.hosts],
            "switches": [_plain(asdict(s)) for s in self.switches],
            "links": [asdict(link) for link in self.links],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> Topology:
        hosts = tuple(Host(name=h["name"], ip=h["ip"], macs=tuple(h["macs"]),
                           relay=bool(h.get("relay", False)),
                           labels=tuple(sorted(h.get("labels", {}).items())))
                      for h in data["hosts"])
        switches = tuple(Switch(name=s["name"], dpid=int(s["dpid"]), role=s["role"],
                                labels=tuple(sorted(s.get("labels", {}).items())))
                         for s in data["switches"])
        links = tuple(Link(**link) for link in data["links"])
        return cls(kind=data["kind"], params=tuple(sorted(data["params"].items())),
                   hosts=hosts, switches=switches, links=links)

    @classmethod
    def from_json(cls, text: str) -> Topology:
        return cls.from_dict(json.loads(text))


def _plain(d: dict) -> dict:
    if "labels" in d:
        d["labels"] = dict(d["labels"])
    if "macs" in d:
        d["macs"] = list(d["macs"])
    return d


def ifname(node: str, port: int) -> str:
    """The interface name of a node's port, `<node>-eth<port>`."""
    return f"{node}-eth{port}"


def port_of(name: str) -> tuple[str, int]:
    """The node and port an interface name (`ifname`) stands for."""
    node, _, port = name.rpartition("-eth")
    return node, int(port)


def host_ip(n: int) -> str:
    if not 1 <= n < 65536:
        raise TopologyError(f"host number {n} outside 1..65535 (10.0.0.0/16 addressing)")
    return f"10.0.{n // 256}.{n % 256}"


def host_mac(n: int, port: int) -> str:
    return f"02:00:00:{port:02x}:{n // 256:02x}:{n % 256:02x}"


class Builder:
    """Accumulates nodes and links with deterministic numbering."""

    def __init__(self, kind: str, params: dict[str, Any]):
        self.kind = kind
        self.params = params
        self.hosts: list[Host] = []
        self.switches: list[Switch] = []
        self.links: list[Link] = []
        self._next_port: dict[str, int] = {}

    def host(self, name: str, ports: int = 1, relay: bool = False, **labels: int) -> str:
        n = len(self.hosts) + 1
        self.hosts.append(Host(name=name, ip=host_ip(n),
                               macs=tuple(host_mac(n, p) for p in range(ports)),
                               relay=relay, labels=tuple(sorted(labels.items()))))
        self._next_port[name] = 0
        return name

    def switch(self, name: str, role: str, **labels: int) -> str:
        self.switches.append(Switch(name=name, dpid=len(self.switches) + 1, role=role,
                                    labels=tuple(sorted(labels.items()))))
        self._next_port[name] = 1
        return name

    def link(self, a: str, b: str, rate_mbps: float, a_port: int | None = None,
             b_port: int | None = None) -> None:
        """Join `a` and `b`: each end on its next free port, or on the port given (a fabric
        whose convention numbers ports by role, with gaps, like the torus's)."""
        pa = self._next_port[a] if a_port is None else a_port
        pb = self._next_port[b] if b_port is None else b_port
        self._next_port[a] = max(self._next_port[a], pa + 1)
        self._next_port[b] = max(self._next_port[b], pb + 1)
        self.links.append(Link(a=a, a_port=pa, b=b, b_port=pb, rate_mbps=float(rate_mbps)))

    def build(self) -> Topology:
        ends = [end for link in self.links for end in link.ends()]
        if len(set(ends)) != len(ends):
            raise AssertionError(f"{self.kind}: a port carries two links")
        for node, last in self._next_port.items():
            longest = ifname(node, max(last - 1, 0))
            if len(longest) > IFNAME_MAX:
                raise TopologyError(
                    f"interface name {longest!r} exceeds the kernel's {IFNAME_MAX}-character limit")
        return Topology(kind=self.kind, params=tuple(sorted(self.params.items())),
                        hosts=tuple(self.hosts), switches=tuple(self.switches),
                        links=tuple(self.links))


def at_rate(topo: Topology, rate: float | None, slow_host: str | None = None,
            slow_rate: float | None = None) -> Topology:
    """The topology with every link at `rate` (None: as built) and one host's link slower."""
    links = []
    for link in topo.links:
        r = rate or link.rate_mbps
        if slow_host and slow_rate and slow_host in (link.a, link.b):
            r = slow_rate
        links.append(dataclasses.replace(link, rate_mbps=r))
    return dataclasses.replace(topo, links=tuple(links), _index={})
