"""Mininet's vocabulary over the testbed: a Mininet script runs here once its imports are
renamed, `mininet.` to `testbed.mn.`:

    from testbed.mn.net import Mininet          # was: from mininet.net import Mininet
    from testbed.mn.topo import Topo            # was: from mininet.topo import Topo
    from testbed.mn.cli import CLI              # was: from mininet.cli import CLI
    from testbed.mn.log import setLogLevel      # was: from mininet.log import setLogLevel

The topology classes are Mininet's own (`Topo`, `SingleSwitchTopo`, `LinearTopo`...), and
so are the nodes a running network hands out (`net.get('h1')`, `net.hosts`), with their
`cmd`, `popen`, `IP` and `MAC`. What differs is underneath: at `net.start()` the testbed
builds the fabric with its own switches (userspace Open vSwitch), its controller and
routing (ECMP over every shortest path, as a spec's `controller.routing` says), its link
rates and queues, and a results directory; `net.stop()` tears down exactly what it built.
Options the testbed cannot honour are refused by name (testbed/mn/topo.py), not dropped.
"""
