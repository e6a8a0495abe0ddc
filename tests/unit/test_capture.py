"""Packet capture's pure parts: a spec's `capture:` checked against the fabric, the tcpdump
each interface gets (its count keeping the file within the cap), and what tcpdump's
closing lines say."""
import pytest

from testbed.config.capture import CaptureSpec
from testbed.config.loader import SpecError
from testbed.config.spec import loads
from testbed.measure.capture import counts, warnings
from topologies import build

LEAFSPINE = {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2}}


def spec(capture: dict):
    return loads({"name": "x", "topology": LEAFSPINE, "capture": capture},
                 experiments_required=False)


def test_a_capture_names_ports_and_hosts_of_the_fabric():
    s, topo = spec({"ports": ["l1-eth1", "sp1-eth2"], "hosts": ["h1", "h3"],
                    "filter": "tcp port 5201"})
    assert s.capture.interfaces(topo) == (["l1-eth1", "sp1-eth2"],
                                          {"h1": ["h1-eth0"], "h3": ["h3-eth0"]})
    # another fabric (an experiment's own dumbbell) captures what it has of them
    assert s.capture.interfaces(build("dumbbell")) == ([], {"h1": ["h1-eth0"]})
    argv = s.capture.tcpdump_argv("l1-eth1", "/r/l1-eth1.pcap")
    assert argv[:5] == ["tcpdump", "-i", "l1-eth1", "-w", "/r/l1-eth1.pcap"]
    assert argv[-2:] == ["--", "tcp port 5201"] and argv[argv.index("-Z") + 1] == "root"


@pytest.mark.parametrize("capture, words", [
    ({"ports": ["x9-eth1"]}, ["capture.ports", "'x9-eth1'", "not a switch port", "l1-eth1"]),
    ({"ports": ["h1-eth0"]}, ["'h1-eth0'", "not a switch port"]),   # a host's: name the host
    ({"hosts": ["h9"]}, ["capture.hosts", "no host 'h9'", "h1..h4"]),
    ({}, ["name ports", "or hosts"]),
    ({"ports": ["l1-eth1"], "snaplen": 20}, ["capture.snaplen", "64..262144"]),
    ({"ports": ["l1-eth1"], "max_mb": 0}, ["capture.max_mb"]),
    ({"ports": ["l1 eth1"]}, ["not an interface name"]),
    ({"ports": ["l1-eth1"], "filter": "tcp\nudp"}, ["one line"]),
    ({"ports": ["l1-eth1"], "snap": 64}, ["snap"]),
])
def test_bad_captures_are_refused_by_name(capture, words):
    with pytest.raises(SpecError) as err:
        spec(capture)
    assert all(w in str(err.value) for w in words), err.value


def test_the_packet_count_keeps_a_file_within_its_cap():
    cap = CaptureSpec(ports=["l1-eth1"], snaplen=128, max_mb=1)
    n = cap.max_packets()
    assert 24 + n * (128 + 16) <= 1_000_000 < 24 + (n + 1) * (128 + 16)
    assert CaptureSpec(ports=["a-eth1"], snaplen=65535, max_mb=0.01).max_packets() == 1


def test_tcpdumps_closing_counts_and_the_runs_warnings():
    text = ("tcpdump: listening on l1-eth1, link-type EN10MB (Ethernet), snapshot length 128 "
            "bytes\n3120 packets captured\n3125 packets received by filter\n"
            "5 packets dropped by kernel\n")
    assert counts(text) == (3120, 5)
    assert counts("1 packet captured\n0 packets dropped by kernel\n") == (1, 0)
    assert counts("tcpdump: syntax error") == (None, None)
    report = [{"iface": "l1-eth1", "packets": 3120, "dropped_by_kernel": 5, "capped": False},
              {"iface": "h1-eth0", "packets": 100, "dropped_by_kernel": 0, "capped": True}]
    said = warnings("permutation", report)
    assert len(said) == 2 and "dropped 5 packets" in said[0] and "its cap" in said[1]
