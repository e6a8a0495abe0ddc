import subprocess

import pytest

from testbed.core.system import TestbedError, in_netns, route_with_initcwnd
from testbed.dataplane.queues import PortQueue, check_mechanisms, htb_commands, offload_command


def test_htb_pfifo_head_drop_golden():
    q = PortQueue(ifname="e1-eth3", rate_mbps=20, buffer_pkts=100, drop="head")
    assert htb_commands(q) == [
        ["qdisc", "replace", "dev", "e1-eth3", "root", "handle", "1:", "htb", "default", "1"],
        ["class", "replace", "dev", "e1-eth3", "parent", "1:", "classid", "1:1", "htb",
         "rate", "20000000bit", "ceil", "20000000bit", "quantum", "1514"],
        ["qdisc", "replace", "dev", "e1-eth3", "parent", "1:1", "handle", "10:",
         "pfifo_head_drop", "limit", "100"],
    ]


def test_tail_drop_packets_and_bytes():
    assert htb_commands(PortQueue(ifname="x", rate_mbps=10, buffer_pkts=5, drop="tail"))[-1][-3:] == \
        ["pfifo", "limit", "5"]
    assert htb_commands(PortQueue(ifname="x", rate_mbps=10, buffer_bytes=30000, drop="tail"))[-1][-3:] == \
        ["bfifo", "limit", "30000"]
    assert htb_commands(PortQueue(ifname="x", rate_mbps=10, buffer_bytes=30280, drop="head"))[-1][-3:] == \
        ["pfifo_head_drop", "limit", "20"]


def test_netem_rendering_and_refusal():
    q = PortQueue(ifname="x", rate_mbps=10, buffer_pkts=50, delay_us=500, loss_pct=1.5)
    assert htb_commands(q)[-1][-7:] == ["netem", "limit", "50", "delay", "500us", "loss", "1.5%"]
    with pytest.raises(TestbedError, match="no netem"):
        check_mechanisms([q], netem_available=False)
    check_mechanisms([q], netem_available=True)


def test_buffer_must_be_one_kind():
    with pytest.raises(ValueError):
        PortQueue(ifname="x", rate_mbps=1, buffer_pkts=1, buffer_bytes=1)


def test_offloads_and_netns_argv():
    assert offload_command("h1-eth0") == ["ethtool", "-K", "h1-eth0", "rx", "off", "tx", "off",
                                          "tso", "off", "gso", "off", "gro", "off"]
    assert in_netns(42, ["tc", "-batch", "f"]) == ["nsenter", "--net=/proc/42/ns/net", "--",
                                                   "tc", "-batch", "f"]


def test_sysctl_script_writes_each_setting_and_names_the_one_that_fails(tmp_path):
    from testbed.core.system import sysctl_script
    line = sysctl_script(["net.ipv4.tcp_ecn=1", "net.ipv4.tcp_congestion_control=dc tcp"])
    assert line.startswith("{ echo 1 2>/dev/null > /proc/sys/net/ipv4/tcp_ecn || ")
    assert "echo 'dc tcp' 2>/dev/null > /proc/sys/net/ipv4/tcp_congestion_control" in line
    # the same line with its files somewhere writable, and one that is not
    fake = line.replace("/proc/sys/net/ipv4/tcp_ecn", str(tmp_path / "ecn")).replace(
        "/proc/sys/net/ipv4/tcp_congestion_control", str(tmp_path / "missing" / "cc"))
    done = subprocess.run(["sh", "-c", fake], capture_output=True, text=True)
    assert done.returncode != 0
    assert (tmp_path / "ecn").read_text() == "1\n"
    assert done.stderr.strip() == "cannot set net.ipv4.tcp_congestion_control=dc tcp"


def test_jumbo_frames_quantum_limits_and_mtu_commands():
    from testbed.dataplane.queues import mtu_commands
    q = PortQueue(ifname="x", rate_mbps=20, buffer_bytes=90140, drop="head", mtu_bytes=9000)
    cmds = htb_commands(q)
    assert cmds[1][-2:] == ["quantum", "9014"]
    assert cmds[2][-3:] == ["pfifo_head_drop", "limit", "10"]  # 90140 B of 9014-B frames
    assert mtu_commands(["a-eth1", "b-eth0"], 9000) == ["link set dev a-eth1 mtu 9000",
                                                        "link set dev b-eth0 mtu 9000"]


def test_burst_allowance_for_emulator_jitter():
    q = PortQueue(ifname="x", rate_mbps=20, buffer_pkts=100, burst_us=5000)
    assert htb_commands(q)[1][11:17] == ["ceil", "20000000bit", "burst", "12500", "cburst", "12500"]
    small = PortQueue(ifname="x", rate_mbps=1, buffer_pkts=100, burst_us=5000)
    assert "3028" in htb_commands(small)[1]  # never below two full frames
    assert "burst" not in htb_commands(PortQueue(ifname="x", rate_mbps=1, buffer_pkts=1))[1]


def test_fair_host_queue_one_fifo_per_flow_bucket():
    from pathlib import Path

    from testbed.dataplane.queues import FAIR_BUCKETS, FAIR_FIRST_MINOR, fair_defines
    q = PortQueue(ifname="h1-eth1", rate_mbps=20, buffer_pkts=100, mtu_bytes=9000, fair=True)
    cmds = htb_commands(q, Path("/b/fairq.o"))
    assert cmds[0][-2:] == ["default", "100"]  # unclassified: the first bucket, a leaf
    classes = [c for c in cmds if c[0] == "class"][1:]
    leaves = [c for c in cmds if c[0] == "qdisc"][1:]
    assert len(classes) == len(leaves) == FAIR_BUCKETS == 32
    # each bucket is guaranteed 1/32 of the link and may borrow all of it; DRR by a GSO packet
    assert classes[0] == ["class", "replace", "dev", "h1-eth1", "parent", "1:1",
                          "classid", "1:100", "htb", "rate", "625000bit", "ceil",
                          "20000000bit", "quantum", "67050"]
    assert classes[-1][7] == "1:11f"
    assert leaves[-1][-5:] == ["handle", "11f:", "pfifo", "limit", "100"]
    assert cmds[-1] == ["filter", "replace", "dev", "h1-eth1", "parent", "1:", "protocol",
                        "all", "prio", "1", "handle", "1", "bpf", "obj", "/b/fairq.o",
                        "sec", "classifier"]
    # the classifier returns 1:(first + hash % buckets): compiled with the same numbers
    assert fair_defines() == {"FAIR_MAJOR": 1, "FAIR_FIRST_MINOR": FAIR_FIRST_MINOR,
                              "FAIR_BUCKETS": FAIR_BUCKETS}
    with pytest.raises(ValueError, match="classifier"):
        htb_commands(q)
    with pytest.raises(ValueError, match="packet-limited"):
        PortQueue(ifname="x", rate_mbps=1, buffer_bytes=30000, fair=True)
    with pytest.raises(ValueError, match="packet-limited"):
        PortQueue(ifname="x", rate_mbps=1, buffer_pkts=10, delay_us=10, fair=True)


def test_initial_window_on_a_route_as_ip_prints_it():
    """A plain route gains initcwnd at its end; a multipath one before its nexthops (which
    `ip -o` joins with backslashes); a window already set is replaced, not repeated."""
    assert route_with_initcwnd("10.0.0.0/8 dev h1-eth0 proto kernel scope link src 10.0.0.1 ",
                               2) == ("route change 10.0.0.0/8 dev h1-eth0 proto kernel scope "
                                      "link src 10.0.0.1 initcwnd 2")
    multipath = ("10.0.1.2 proto static \\\tnexthop via 10.0.0.2 dev h1-eth0 weight 1 "
                 "\\\tnexthop via 10.0.0.3 dev h1-eth1 weight 1 ")
    assert route_with_initcwnd(multipath, 4) == (
        "route change 10.0.1.2 proto static initcwnd 4 nexthop via 10.0.0.2 dev h1-eth0 "
        "weight 1 nexthop via 10.0.0.3 dev h1-eth1 weight 1")
    assert route_with_initcwnd("10.0.1.0/24 dev h1-eth1 initcwnd 10", 2) == (
        "route change 10.0.1.0/24 dev h1-eth1 initcwnd 2")
    # a port down: `ip` prints linkdown, which it does not take back
    assert route_with_initcwnd("10.0.1.0/24 dev h1-eth1 scope link linkdown", 2) == (
        "route change 10.0.1.0/24 dev h1-eth1 scope link initcwnd 2")
