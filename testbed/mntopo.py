"""Use the testbed's topologies from plain Mininet:

    sudo mn --custom testbed/mntopo.py --topo fattree,4 --switch ovs,datapath=user,protocols=OpenFlow13

Names, ports, dpids, MACs and IPs are the same as in a testbed run (both take them from
topologies/mnplan.py). Plain Mininet brings no
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
from topologies.mnplan import populate  # noqa: E402


class TestbedTopo(Topo):
    def build(self, kind="fattree", *args):  # noqa: D401 (Mininet's signature)
        populate(self, build(kind, **parse_params(kind, [str(a) for a in args])))


topos = {kind: (lambda *args, _kind=kind: TestbedTopo(_kind, *args)) for kind in KINDS}
