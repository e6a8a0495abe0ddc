"""The testbed's extensions of Mininet's cluster edition (mininet.examples.cluster), the
engine of multi-server fabrics (docs/CLUSTER.md says why this engine):

- `remote_classes`: its RemoteHost and RemoteOVSSwitch with the cluster's ssh options (an
  `ssh -F` configuration, a control path per server) added to every ssh it runs;
- `VxlanLink`: a RemoteLink whose links between servers are VXLAN devices (the kernels here
  have no GRE, which RemoteGRELink needs; an SSH tunnel is Ethernet over TCP). Links within
  a server stay veth pairs, as the engine makes them.
"""
from __future__ import annotations

from itertools import groupby
from operator import attrgetter
from typing import Any

from mininet.examples.cluster import RemoteHost, RemoteLink, RemoteOVSSwitch
from mininet.link import Link
from mininet.node import OVSSwitch
from mininet.util import quietRun

VXLAN_PORT = 4789


def remote_classes(ssh_options: list[str]) -> tuple[type, type]:
    """RemoteHost and RemoteOVSSwitch classes whose ssh commands carry `ssh_options`."""
    base = list(RemoteHost.sshbase)
    sshbase = base[:-1] + ssh_options + base[-1:]  # before the trailing -tt

    class Host(RemoteHost):
        pass

    class Switch(RemoteOVSSwitch):
        # The engine starts a server's switches with one ovs-vsctl command line typed into a
        # node's shell, whose terminal cuts lines at 4095 characters (canonical mode); its
        # limit is OVSSwitch's 128000, so beyond ~10 switches the line was cut and no bridge
        # was made ("max: argument does not end in ="). Below the terminal's limit:
        argmax = 4000

        @classmethod
        def batchStartup(cls, switches: Any, **_kwargs: Any) -> Any:  # noqa: N802
            # the engine's, with this class's argmax (it calls OVSSwitch's with OVSSwitch's)
            key = attrgetter("server")
            for _server, group in groupby(sorted(switches, key=key), key):
                members = tuple(group)
                OVSSwitch.batchStartup.__func__(cls, members, run=members[0].cmd)
            return switches

    Host.sshbase = sshbase
    Switch.sshbase = sshbase
    return Host, Switch


def server_ip(node: Any, toward: str) -> str:
    """The address `node`'s server uses toward address `toward`: for a remote node its
    server's address; for a local one the source of the local route to `toward`."""
    if getattr(node, "isRemote", False):
        return str(node.serverIP)
    route = quietRun(f"ip route get {toward}")
    return route.split(" src ")[1].split()[0]


class VxlanLink(RemoteLink):
    """A link whose two ends may be on different servers; between servers each end is a
    VXLAN device (`vni`, a link parameter, unique in the fabric) in its server's root
    namespace, moved into its node like the engine's GRE links. The inner MTU is set by the
    testbed afterwards (the tunnel takes 50 bytes of the servers' network's MTU)."""

    def __init__(self, node1: Any, node2: Any, vni: int = 0, **kwargs: Any) -> None:
        self.vni = vni
        RemoteLink.__init__(self, node1, node2, **kwargs)

    def makeIntfPair(self, intfname1: str, intfname2: str, addr1: str | None = None,  # noqa: N802
                     addr2: str | None = None, node1: Any = None, node2: Any = None,
                     deleteIntfs: bool = True) -> Any:  # noqa: N803
        node1 = self.node1 if node1 is None else node1
        node2 = self.node2 if node2 is None else node2
        if getattr(node1, "server", "localhost") == getattr(node2, "server", "localhost"):
            return Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2,
                                     deleteIntfs=deleteIntfs)
        if not self.vni:
            raise ValueError(f"{intfname1}-{intfname2} crosses servers without a VXLAN id")
        ip1 = server_ip(node1, node2.serverIP)
        ip2 = server_ip(node2, node1.serverIP)
        for node, name, addr, local, remote in ((node1, intfname1, addr1, ip1, ip2),
                                                (node2, intfname2, addr2, ip2, ip1)):
            node.rcmd(f"ip link del {name}")
            out = node.rcmd(f"ip link add name {name} type vxlan id {self.vni} local {local} "
                            f"remote {remote} dstport {VXLAN_PORT} nolearning")
            if out.strip():
                raise RuntimeError(f"VXLAN {name} on {node.server}: {out.strip()}")
            if addr:
                node.rcmd(f"ip link set {name} address {addr}")
            node.rcmd(f"ip link set {name} up")
            if not self.moveIntf(name, node):
                raise RuntimeError(f"could not move {name} into {node} on {node.server}")
        self.tunnel: bool | None = True  # RemoteLink.stop deletes both ends, not one veth
        return None

    def stop(self) -> None:
        if self.tunnel:
            self.intf1.delete()
            self.intf2.delete()
        else:
            Link.stop(self)
        self.tunnel = None
