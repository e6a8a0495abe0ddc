"""Mininet's vocabulary (testbed/mn): a Mininet Topo as the testbed builds it, the options it
cannot honour refused by name, and the shipped Mininet example's testbed twin."""
import functools
import re
from pathlib import Path

import pytest

from testbed.config.loader import SpecError
from testbed.core.errors import TestbedError
from testbed.mn.link import TCLink
from testbed.mn.net import Mininet, NodeError, rate_text
from testbed.mn.node import CPULimitedHost, Host, OVSSwitch, RemoteController
from testbed.mn.topo import (
    LinearTopo,
    SingleSwitchTopo,
    Topo,
    mininet_mac,
    to_topology,
    unwrap,
)
from testbed.mn.util import custom

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


def test_neutral_values_are_no_option_and_a_link_class_carries_defaults():
    neutral = {"bw": None, "delay": "0ms", "loss": 0, "max_queue_size": None, "jitter": None,
               "enable_ecn": False, "use_htb": True}
    links = {(x.a, x.b): x.rate_mbps for x in to_topology(Pair(**neutral), 10).links}
    assert links[("h1", "s1")] == 10.0                       # bw None: the default rate
    # Mininet(link=partial(TCLink, bw=7)) or custom(TCLink, bw=7): every link's default
    for factory in (functools.partial(TCLink, bw=7), custom(TCLink, bw=7)):
        cls, params = unwrap(factory)
        assert cls is TCLink and params == {"bw": 7}
        rates = {(x.a, x.b): x.rate_mbps for x in to_topology(Pair(), 10, params).links}
        assert rates == {("h1", "s1"): 7.0, ("h2", "s2"): 7.0, ("s1", "s2"): 40.0}
    with pytest.raises(SpecError, match="delay='5ms'.*no netem"):
        to_topology(Pair(), 10, unwrap(custom(TCLink, bw=7, delay="5ms"))[1])


def test_host_options_and_network_arguments_refused_by_name():
    class Addressed(Topo):
        def build(self, **opts):
            self.addLink(self.addHost("h1", **opts), self.addSwitch("s1"))
    assert to_topology(Addressed(ip="10.0.0.1/8", cls=Host), 10).hosts
    with pytest.raises(SpecError, match=r"ip='10.0.0.9/8'.*h1 is 10.0.0.1"):
        to_topology(Addressed(ip="10.0.0.9/8"), 10)
    with pytest.raises(SpecError, match="cpu=0.5.*CPU-bound"):
        to_topology(Addressed(cpu=0.5), 10)
    with pytest.raises(SpecError, match="CPULimitedHost"):
        to_topology(Addressed(cls=custom(CPULimitedHost, cpu=0.2)), 10)
    with pytest.raises(SpecError, match="plain Host"):
        to_topology(Addressed(cls=type("LinuxRouter", (Host,), {})), 10)
    with pytest.raises(SpecError, match="no hosts"):
        to_topology(Topo(), 10)
    for kwargs, match in (({"host": CPULimitedHost}, "CPU"),
                          ({"host": functools.partial(CPULimitedHost, cpu=0.1)}, "CPU"),
                          ({"ipBase": "192.168.0.0/16"}, "10.0.0.0/8"),
                          ({"xterms": True}, "xterm h1"),
                          ({"controller": functools.partial(RemoteController, ip="192.0.2.1")},
                           "controller.plugins")):
        with pytest.raises(SpecError, match=match):
            Mininet(topo=Pair(), **kwargs)
    with pytest.raises(TypeError):
        Mininet(topo=Pair(), nat=True)
    # Mininet's positional order: topo, switch, host, controller, link
    net = Mininet(Pair(), OVSSwitch, Host, RemoteController, TCLink, autoSetMacs=True)
    net.addController("c0", ip="127.0.0.1", port=6653)       # the usual line: accepted
    with pytest.raises(SpecError, match="controller.plugins"):
        net.addController("c1", ip="192.0.2.1", port=6653)


def test_nodes_added_before_start_are_names_then_handles():
    net = Mininet()
    h1, s1 = net.addHost("h1"), net.addSwitch("s1")
    net.addLink(h1, s1, bw=5)
    net.addLink(net.addHost("h2", mac="02:00:00:00:00:aa"), s1)
    assert h1 == "h1" and "h1" in net.topo.hosts()
    with pytest.raises(TestbedError, match="not started"):
        h1.cmd("true")                              # a handle: the node once it runs
    topo = to_topology(net.topo, 10, auto_macs=True)
    # a MAC given is kept; Mininet's autoSetMacs numbering for the others
    assert [h.macs[0] for h in topo.hosts] == ["00:00:00:00:00:01", "02:00:00:00:00:aa"]
    assert mininet_mac(258) == "00:00:00:00:01:02"
    with pytest.raises(KeyError):                    # Mininet's error, as well as ours
        raise NodeError("no node 'h9'")
    assert str(NodeError("no node 'h9'")) == "no node 'h9'"


def test_rates_print_as_iperf_prints_them():
    assert [rate_text(x) for x in (9.574, 95.66, 100.2, 1234.0, 0.5)] == [
        "9.57 Mbits/sec", "95.7 Mbits/sec", "100 Mbits/sec", "1.23 Gbits/sec", "500 Kbits/sec"]


def test_the_testbed_twin_is_the_mininet_script_with_its_imports_renamed():
    def code(path):  # after the module's docstring
        text = (REPO / "examples" / "mininet" / path).read_text()
        return text[text.index('"""', text.index('"""') + 3) + 3:]
    ported = re.sub(r"^from mininet\.", "from testbed.mn.", code("leafspine.py"), flags=re.M)
    assert ported == code("leafspine_testbed.py")
