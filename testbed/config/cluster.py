"""The spec's `cluster` section: a fabric split across servers (docs/CLUSTER.md).

    cluster:
      servers:
        - {name: a, address: localhost}          # the machine that runs `testbed`
        - {name: b, address: 10.251.0.2, user: root}
      placement: pods        # pods | switch_bin | explicit
      nodes: {b: [h9, e5]}   # explicit only: server -> nodes (the rest on the first server)
      tunnel: vxlan          # vxlan | gre: how links between servers are carried
      tunnel_mtu: lower_inner  # or raise_outer: how a frame and the tunnel's header fit
      ssh_config: null       # an ssh client configuration (ssh -F) for every ssh the run makes

Where each node goes is a pure function of the topology and this section
(`testbed/config/placement.py`); the checks here need no server.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from .loader import SpecError

LOCAL = "localhost"
# overhead in bytes between the inner frame's IP packet and the outer network's MTU:
# VXLAN: inner Ethernet 14 + VXLAN 8 + UDP 8 + IP 20; GRE (gretap with a key): 14 + 8 + 20
TUNNEL_OVERHEAD = {"vxlan": 50, "gre": 42}
SERVER_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,15}")


@dataclass(frozen=True, kw_only=True)
class Server:
    name: str
    address: str  # host name or IPv4 address; "localhost" is the machine running `testbed`
    user: str | None = None  # SSH user; None: the user who ran sudo (the cluster edition's)

    @property
    def local(self) -> bool:
        return self.address == LOCAL


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    servers: list[Server] = field(default_factory=list)
    placement: Literal["pods", "switch_bin", "explicit"] = "pods"
    nodes: dict[str, list[str]] = field(default_factory=dict)
    tunnel: Literal["vxlan", "gre"] = "vxlan"
    tunnel_mtu: Literal["lower_inner", "raise_outer"] = "lower_inner"
    ssh_config: str | None = None

    @property
    def overhead(self) -> int:
        return TUNNEL_OVERHEAD[self.tunnel]

    def server(self, name: str) -> Server:
        return next(s for s in self.servers if s.name == name)

    def check(self) -> None:
        """What can be judged without the topology (placement.place judges the rest)."""
        if len(self.servers) < 2:
            raise SpecError(f"cluster.servers: a cluster needs at least two servers (got "
                            f"{len(self.servers)}); leave `cluster` out to run on this machine")
        seen_names: set[str] = set()
        seen_addresses: set[str] = set()
        for i, server in enumerate(self.servers):
            path = f"cluster.servers[{i}]"
            if not SERVER_NAME_RE.fullmatch(server.name):
                raise SpecError(f"{path}.name: a letter, then up to 15 letters, digits, '_' or "
                                f"'-' (got {server.name!r}); it names the server in files")
            if server.name in seen_names:
                raise SpecError(f"{path}.name: {server.name!r} is named twice")
            if not server.address or any(c.isspace() for c in server.address):
                raise SpecError(f"{path}.address: a host name or address (got "
                                f"{server.address!r})")
            if server.address in seen_addresses:
                raise SpecError(f"{path}.address: {server.address} is given twice; one "
                                "server is one entry")
            seen_names.add(server.name)
            seen_addresses.add(server.address)
        if self.placement == "explicit" and not self.nodes:
            raise SpecError("cluster.nodes: placement explicit needs nodes "
                            "(server name -> the nodes on it)")
        if self.placement != "explicit" and self.nodes:
            raise SpecError(f"cluster.nodes: only with placement explicit (placement is "
                            f"{self.placement})")
        for name in self.nodes:
            if name not in seen_names:
                raise SpecError(f"cluster.nodes: no server {name!r} (servers: "
                                f"{', '.join(sorted(seen_names))})")
