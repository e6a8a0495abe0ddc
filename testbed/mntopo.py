"""Use the testbed's topologies from plain Mininet:

    sudo mn --custom testbed/mntopo.py --topo fattree,4 --switch ovs,datapath=user,protocols=OpenFlow13

Names, ports, dpids, MACs and IPs are the same as in a testbed run. Plain Mininet brings no
routing for looped fabrics: point it at a controller (`--controller remote`) or use
`testbed run`.
"""
import inspect
import os
import sys

# `mn --custom` runs this file with exec() and no __file__; the code object keeps its name.
_HERE = os.path.abspath(inspect.currentframe().f_code.co_filename)
sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))

from mininet.topo import Topo  # noqa: E402

from topologies import KINDS, build, parse_params  # noqa: E402
from topologies.model import ifname  # noqa: E402


class TestbedTopo(Topo):
    def build(self, kind="fattree", *args):  # noqa: D401 (Mininet's signature)
        t = build(kind, **parse_params(kind, [str(a) for a in args]))
        for h in t.hosts:
            self.addHost(h.name, ip=f"{h.ip}/8", mac=h.macs[0])
        for s in t.switches:
            self.addSwitch(s.name, dpid=f"{s.dpid:016x}")
        for link in t.links:
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port,
                         intfName1=ifname(link.a, link.a_port),
                         intfName2=ifname(link.b, link.b_port))


topos = {kind: (lambda *args, _kind=kind: TestbedTopo(_kind, *args)) for kind in KINDS}
