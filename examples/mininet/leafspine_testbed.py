#!/usr/bin/env python3
"""examples/mininet/leafspine.py on the testbed: a two-tier leaf-spine (2 spines, 2 leaves,
2 hosts a leaf, 10 Mb/s links), every host pinging every other, a command in a host, and
one TCP flow between the racks.

This is its testbed twin: the same script, its imports renamed (`mininet.` to
`testbed.mn.`). The testbed brings the controller, ECMP routing over both spines, the
link rates and a results directory (results/mininet-script-*):

    sudo .venv/bin/python examples/mininet/leafspine_testbed.py
"""
from testbed.mn.link import TCLink
from testbed.mn.log import setLogLevel
from testbed.mn.net import Mininet
from testbed.mn.node import OVSSwitch, RemoteController
from testbed.mn.topo import Topo


class LeafSpine(Topo):
    "Spines s1.., then leaves, each leaf linked to every spine and to its hosts."

    def build(self, spines=2, leaves=2, hosts_per_leaf=2, bw=10):
        spine = [self.addSwitch("s%d" % (i + 1)) for i in range(spines)]
        for leaf_n in range(leaves):
            leaf = self.addSwitch("s%d" % (spines + leaf_n + 1))
            for s in spine:
                self.addLink(leaf, s, bw=bw)
            for h in range(hosts_per_leaf):
                host = self.addHost("h%d" % (leaf_n * hosts_per_leaf + h + 1))
                self.addLink(host, leaf, bw=bw)


def main():
    setLogLevel("info")
    net = Mininet(topo=LeafSpine(), switch=OVSSwitch, link=TCLink,
                  controller=RemoteController)
    net.start()
    loss = net.pingAll()
    h1, h4 = net.get("h1", "h4")
    print(h1.cmd("ip -4 -o addr show dev h1-eth0"))
    print(h1.cmd("ping -c 3", h4.IP()))
    server, client = net.iperf((h1, h4), seconds=4)
    net.stop()
    print("loss %s%%, iperf server %s, client %s" % (loss, server, client))


if __name__ == "__main__":
    main()
