"""Mininet's vocabulary (testbed/mn): a Mininet Topo as the testbed builds it, the options it
cannot honour refused by name, and the shipped Mininet example's testbed twin."""
import re
from pathlib import Path

import pytest

from testbed.config.loader import SpecError
from testbed.mn.net import Mininet, rate_text
from testbed.mn.topo import LinearTopo, SingleSwitchTopo, Topo, to_topology

REPO = Path(__file__).resolve().parents[2]


class Pair(Topo):
    def build(self, **link):
        s1, s2 = self.addSwitch("s1"), self.addSwitch("s2", dpid="00000000000000aa")
        self.addLink(self.addHost("h1"), s1, **link)
        self.addLink(self.addHost("h2"), s2)
        self.addLink(s1, s2, port1=7, port2=9, bw=40)


def test_a_topo_keeps_mininet_names_order_ports_and_rates():
    topo = to_topology(Pair(bw=5), rate_mbps=100)
    assert topo.kind == "mininet"
    assert [(h.name, h.ip, h.macs) for h in topo.hosts] == [
        ("h1", "10.0.0.1", ("02:00:00:00:00:01",)), ("h2", "10.0.0.2", ("02:00:00:00:00:02",))]
    assert [s.name for s in topo.switches] == ["s1", "s2"]
    links = {(link.a, link.a_port, link.b, link.b_port): link.rate_mbps for link in topo.links}
    # a host's port 0, a switch's from 1, the ports a script gave kept; bw, else the default
    assert links == {("h1", 0, "s1", 1): 5.0, ("h2", 0, "s2", 1): 100.0,
                     ("s1", 7, "s2", 9): 40.0}
    # hosts in Mininet's natural order, as Mininet numbers their addresses
    linear = to_topology(LinearTopo(k=2, n=2), rate_mbps=10)
    assert [h.name for h in linear.hosts] == ["h1s1", "h1s2", "h2s1", "h2s2"]
    assert len(to_topology(SingleSwitchTopo(12), 10).hosts) == 12


@pytest.mark.parametrize("link, words", [
    ({"delay": "5ms"}, ["delay='5ms'", "no netem"]),
    ({"loss": 1}, ["loss=1", "no netem"]),
    ({"max_queue_size": 50}, ["max_queue_size=50", "links.buffer_pkts"]),
    ({"bw": 0}, ["bw=0", "> 0"]),
    ({"intfName1": "eth7"}, ["intfName1='eth7'", "h1-eth0"]),
    ({"colour": "red"}, ["colour='red'", "not an option"]),
])
def test_link_options_the_testbed_cannot_honour_are_refused(link, words):
    with pytest.raises(SpecError) as err:
        to_topology(Pair(**link), rate_mbps=10)
    assert all(w in str(err.value) for w in words), err.value
    assert "link h1-s1" in str(err.value)


def test_host_options_and_network_arguments_refused_by_name():
    class Addressed(Topo):
        def build(self, **opts):
            self.addLink(self.addHost("h1", **opts), self.addSwitch("s1"))
    assert to_topology(Addressed(ip="10.0.0.1/8", mac="02:00:00:00:00:01"), 10).hosts
    with pytest.raises(SpecError, match=r"ip='10.0.0.9/8'.*h1 is 10.0.0.1"):
        to_topology(Addressed(ip="10.0.0.9/8"), 10)
    with pytest.raises(SpecError, match="cpu=0.5.*CPU-bound"):
        to_topology(Addressed(cpu=0.5), 10)
    with pytest.raises(SpecError, match="no hosts"):
        to_topology(Topo(), 10)
    from testbed.mn.node import CPULimitedHost
    for kwargs, match in (({"host": CPULimitedHost}, "CPU"), ({"ipBase": "192.168.0.0/16"}, "10.0.0.0/8"),
                          ({"xterms": True}, "xterm h1"), ({"nat": True}, "nat=")):
        with pytest.raises(SpecError, match=match):
            Mininet(topo=Pair(), **kwargs)
    net = Mininet(topo=Pair(), switch=object, controller=object, autoSetMacs=True)
    with pytest.raises(SpecError, match="controller.plugins"):
        net.addController("c1", ip="192.0.2.1", port=6653)
    assert net.addHost("h3") == "h3" and "h3" in net.topo.hosts()  # before start: the topology


def test_rates_print_as_iperf_prints_them():
    assert [rate_text(x) for x in (9.574, 95.66, 100.2, 1234.0, 0.5)] == [
        "9.57 Mbits/sec", "95.7 Mbits/sec", "100 Mbits/sec", "1.23 Gbits/sec", "500 Kbits/sec"]


def test_the_testbed_twin_is_the_mininet_script_with_its_imports_renamed():
    def code(path):  # after the module's docstring
        text = (REPO / "examples" / "mininet" / path).read_text()
        return text[text.index('"""', text.index('"""') + 3) + 3:]
    ported = re.sub(r"^from mininet\.", "from testbed.mn.", code("leafspine.py"), flags=re.M)
    assert ported == code("leafspine_testbed.py")
