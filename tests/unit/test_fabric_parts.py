"""A fabric is one `Fabric` over its parts, on one machine or across servers: the runner's
factory chooses the executor from the spec's `cluster`, and the fabric's commands reach a
node only through it. Nothing is built: no root, no Mininet, no server."""
from __future__ import annotations

import contextlib
import subprocess

import testbed.spec  # noqa: F401  (registers the experiment types)
from testbed.cluster import fabric as cluster_fabric
from testbed.cluster.fabric import ClusterExecutor
from testbed.config.spec import loads
from testbed.core.resources import RunRecord
from testbed.net.executor import LocalExecutor
from testbed.net.fabric import Fabric
from testbed.runner import build_fabric

TWO = [{"name": "a", "address": "localhost"}, {"name": "b", "address": "10.251.0.2",
                                                "user": "root"}]


def fabric_of(data: dict, tmp_path) -> Fabric:
    spec, topo = loads({"name": "f", "topology": {"kind": "leafspine", "params": {
        "spines": 2, "leaves": 2, "hosts_per_leaf": 2}},
        "experiments": [{"type": "reachability"}], **data})
    return build_fabric(spec, topo, "ecmp", links=spec.links, hosts=spec.hosts, qos=None,
                        hedera=spec.controller.hedera, circuits=spec.controller.circuits,
                        jobs=False, out_dir=tmp_path,
                        record=RunRecord(run_id="f-1", out_dir=str(tmp_path)),
                        topology_json=tmp_path / "topologies" / "p.json", log=lambda m: None,
                        flow_tag_prefix="0-")


class FakeNet:
    def get(self, name: str):
        return type("Node", (), {"pid": 4242})()


def test_one_machine_runs_its_commands_here(tmp_path):
    fab = fabric_of({}, tmp_path)
    assert type(fab.executor) is LocalExecutor and fab.executor.fab is fab
    assert fab.supervisor.fab is fab and fab.setup.fab is fab and fab.services.fab is fab
    fab.net = FakeNet()
    assert fab.host_argv("h1", ["true"]) == ["nsenter", "--net=/proc/4242/ns/net", "--", "true"]
    assert fab.switch_groups() == [["sp1", "sp2", "l1", "l2"]]
    assert (fab.here, fab.controller_host, fab.warnings) == ("this machine", "127.0.0.1", [])
    assert fab.controller is None and fab.controller_state() is None
    assert fab.controller_report() is None and fab.flow_results == []
    assert fab.slug == "p" and fab.flow_tag_prefix == "0-"


def test_a_cluster_is_the_same_fabric_with_its_executor(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_fabric, "STATE_DIR", tmp_path / "state")
    fab = fabric_of({"cluster": {"servers": TWO}}, tmp_path)
    assert type(fab) is Fabric and isinstance(fab.executor, ClusterExecutor)
    ex = fab.executor
    assert ex.fab is fab and set(ex.conns) == {"a", "b"}
    assert set(ex.where) == {n.name for n in [*fab.topo.hosts, *fab.topo.switches]}
    assert fab.here == "a"  # the server that is this machine
    # the switches grouped by the server that runs them, each node's argv on its server
    assert sorted(sum(fab.switch_groups(), [])) == sorted(s.name for s in fab.topo.switches)
    assert all(len({ex.where[s] for s in g}) == 1 for g in fab.switch_groups())
    fab.net = FakeNet()
    far = next(h.name for h in fab.topo.hosts if ex.where[h.name] == "b")
    assert "10.251.0.2" in " ".join(fab.host_argv(far, ["true"]))


def test_hosts_find_the_machines_name_servers_unreachable_at_once():
    """A name server inside the fabric's addresses would be on every host's link: its
    lookups would ARP into the fabric and time out. It gets an unreachable route; one
    outside them, IPv6, a fabric host's own address, and anything else are left alone."""
    from testbed.net.hostsetup import resolver_routes
    conf = ("# a VM's resolver\nnameserver 10.255.255.53\nnameserver 8.8.8.8\n"
            "nameserver fd00::53\nnameserver 10.0.0.2\nsearch example\nnameserver bogus\n"
            "  nameserver 10.1.2.3 \n")
    assert resolver_routes(conf, {"10.0.0.1", "10.0.0.2"}) == [
        ["ip", "route", "replace", "unreachable", "10.255.255.53/32"],
        ["ip", "route", "replace", "unreachable", "10.1.2.3/32"]]
    assert resolver_routes("", set()) == []


def test_a_local_fabric_is_torn_down_all_at_once(tmp_path, monkeypatch):
    """One ovs-vsctl transaction for the bridges and one group of links, with grace periods
    expedited; each link by the end in the root namespace (a switch's), a link with none
    stopped as Mininet does; then every node's shell ended, as Mininet ends them."""
    from testbed.net import executor as executor_mod
    done: list = []

    class Node:
        def __init__(self, name: str, in_ns: bool):
            self.name, self.inNamespace = name, in_ns

        def terminate(self):
            done.append(("terminate", self.name))

        stop = terminate

    class Link:
        def __init__(self, a: Node, b: Node):
            self.intf1 = type("Intf", (), {"node": a, "name": f"{a.name}-eth"})()
            self.intf2 = type("Intf", (), {"node": b, "name": f"{b.name}-eth"})()

        def stop(self):
            done.append(("link", self.intf1.name))

    h1, h2, s1, s2 = Node("h1", True), Node("h2", True), Node("s1", False), Node("s2", False)
    net = type("Net", (), {"controllers": [Node("c0", False)], "switches": [s1, s2],
                           "hosts": [h1, h2], "terms": [],
                           "links": [Link(h1, s1), Link(s1, s2), Link(h1, h2)]})()

    @contextlib.contextmanager
    def expedited(remember):
        done.append("expedited")
        yield True
        done.append("as before")

    monkeypatch.setattr(executor_mod, "expedited_rcu", expedited)
    monkeypatch.setattr(executor_mod, "delete_bridges", lambda n: done.append(("bridges", n)))
    monkeypatch.setattr(executor_mod, "delete_links", lambda n: done.append(("links", n)))
    fab = fabric_of({}, tmp_path)
    fab.executor.teardown(net)
    assert done == [("terminate", "c0"), "expedited", ("bridges", ["s1", "s2"]),
                    ("links", ["s1-eth", "s1-eth"]), "as before", ("link", "h1-eth"),
                    ("terminate", "s1"), ("terminate", "s2"), ("terminate", "h1"),
                    ("terminate", "h2")]


def test_grace_periods_expedited_only_while_asked_and_put_back(tmp_path, monkeypatch):
    import pytest

    from testbed.core import system
    from testbed.core.errors import TestbedError
    knob = tmp_path / "rcu_expedited"
    monkeypatch.setattr(system, "RCU_EXPEDITED", str(knob))
    knob.write_text("0\n")
    remembered: dict = {}
    with system.expedited_rcu(remembered.setdefault) as on:
        assert on and knob.read_text() == "1\n"
    assert knob.read_text() == "0\n" and remembered == {str(knob): "0"}
    knob.write_text("1\n")  # expedited already (the machine's own setting): left alone
    with system.expedited_rcu(remembered.setdefault) as on:
        assert on
    assert knob.read_text() == "1\n"
    knob.unlink()  # no such setting: nothing to do
    with system.expedited_rcu() as on:
        assert not on
    assert system.sysctl_path(str(knob)) == knob
    with pytest.raises(TestbedError, match="not a setting"):  # a record naming another file
        system.sysctl_path("/etc/passwd")
    assert str(system.sysctl_path("net.core.wmem_max")) == "/proc/sys/net/core/wmem_max"


def test_links_and_host_addresses_are_made_in_batches():
    """Each recorded pair is one `ip -batch` line that puts each end straight into its
    node's namespace with its MAC (a switch's end stays in the root namespace); a host's
    loopback, address and ports are one batch of its own; what a batch cannot set raises."""
    import pytest

    from testbed.net.mnbatch import BatchHost, BatchIntf, link_add_line
    host = type("Node", (), {"inNamespace": True, "pid": 4242})()
    switch = type("Node", (), {"inNamespace": False, "pid": 77})()
    assert link_add_line((("h1-eth0", "00:00:00:00:00:01", host), ("e1-eth1", None, switch))
                         ) == ("link add name h1-eth0 address 00:00:00:00:00:01 netns 4242 "
                               "type veth peer name e1-eth1")
    assert link_add_line((("e1-eth3", None, switch), ("a1-eth1", None, switch))) == \
        "link add name e1-eth3 type veth peer name a1-eth1"

    class Intf:
        def __init__(self, name, mac):
            self.name, self.mac, self.ip, self.prefixLen = name, mac, None, None

    ports = [Intf("h1-eth0", "00:00:00:00:00:01"), Intf("h1-eth1", "00:00:00:00:00:02")]
    fake = type("Fake", (), {"name": "h1", "defaultIntf": lambda self: ports[0],
                             "intfList": lambda self: ports})()
    assert BatchHost.config(fake, mac="00:00:00:00:00:01", ip="10.0.0.1/8") == {}
    assert fake.batch_lines == ["link set dev lo up", "addr add 10.0.0.1/8 brd + dev h1-eth0",
                                "link set dev h1-eth0 up", "link set dev h1-eth1 up"]
    assert (ports[0].ip, ports[0].prefixLen) == ("10.0.0.1", "8")  # as Mininet keeps them
    BatchHost.config(fake, mac="00:00:00:00:00:09", ip="10.0.0.2/32")
    assert fake.batch_lines[1:3] == ["link set dev h1-eth0 address 00:00:00:00:00:09",
                                     "addr add 10.0.0.2/32 brd + dev h1-eth0"]
    assert ports[0].mac == "00:00:00:00:00:09"
    with pytest.raises(NotImplementedError, match="defaultRoute"):
        BatchHost.config(fake, ip="10.0.0.1/8", defaultRoute="h1-eth0")
    with pytest.raises(NotImplementedError, match="only a MAC"):
        BatchIntf.config(Intf("s1-eth1", None), ip="10.0.0.9/8")


def test_short_commands_side_by_side_fail_if_any_fails():
    import subprocess

    from testbed.core.system import side_by_side
    argv = side_by_side([["echo", "a b"], ["echo", "c"], ["echo", "d"]], ways=2)
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0 and sorted(done.stdout.split("\n")) == ["", "a b", "c", "d"]
    assert subprocess.run(side_by_side([["true"], ["false"], ["true"]], ways=2)).returncode == 1
    assert subprocess.run(side_by_side([["false"], ["true"]], ways=4)).returncode == 1
    assert subprocess.run(side_by_side([], ways=2)).returncode == 0


def test_links_go_as_one_group_unless_the_group_holds_another_interface(monkeypatch):
    from testbed.core import system
    present = {"e1-eth1", "e1-eth2", "a1-eth1"}
    calls: list = []
    foreign: list[str] = []

    in_group: set[str] = set()

    def run(argv, check=True, timeout=60, input=None):
        calls.append((argv, input))
        out = ""
        if argv[:4] == ["ip", "-o", "link", "show"]:
            out = "".join(f"{i}: {n}@if9: <BROADCAST> mtu 1500\n"
                          for i, n in enumerate(sorted(in_group) + foreign))
        elif argv[:3] == ["ip", "link", "del"]:
            present.difference_update(in_group)
            in_group.clear()
        elif input and "group" in input:
            in_group.update(line.split()[3] for line in input.splitlines())
        elif input and "link del" in input:
            present.difference_update(line.split()[-1] for line in input.splitlines())
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(system, "run", run)
    monkeypatch.setattr(system, "iface_exists", lambda n: n in present)
    group = str(system.link_group())
    system.delete_links(["e1-eth1", "e1-eth2", "gone-eth1"])
    assert calls[0][1] == (f"link set dev e1-eth1 group {group}\n"
                           f"link set dev e1-eth2 group {group}\n")
    assert calls[-1][0] == ["ip", "link", "del", "group", group]
    assert present == {"a1-eth1"}  # not asked for: left
    # another interface in the group (not the fabric's): ours one by one, the group kept
    present.update({"e1-eth1", "e1-eth2"})
    foreign.append("vethX")
    calls.clear()
    system.delete_links(["e1-eth1", "e1-eth2"])
    assert ["ip", "link", "del", "group", group] not in [argv for argv, _ in calls]
    assert calls[-1][1] == "link del dev e1-eth1\nlink del dev e1-eth2\n"
    assert present == {"a1-eth1"}
    calls.clear()
    system.delete_links(["gone-eth1"])
    assert calls == []


def test_a_recorded_group_is_stopped_with_what_its_leader_left_in_the_background():
    """A node's shell is recorded as a group: `testbed clean` stops what a script put in the
    background through it as well; a plain process is stopped alone."""
    import os
    import time

    from testbed.core.resources import _proc_start_time, netns_of, stop_pid
    leader = subprocess.Popen(["sh", "-c", "sleep 100 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    child = int(leader.stdout.readline())
    assert os.getpgid(child) == leader.pid
    # a PID that is now another process (another start time): neither it nor its group
    assert not stop_pid(leader.pid, _proc_start_time(leader.pid) - 1, timeout=1.0, group=True)
    assert _proc_start_time(child) is not None and leader.poll() is None
    assert stop_pid(leader.pid, _proc_start_time(leader.pid), timeout=1.0, group=True)
    deadline = time.time() + 3
    while time.time() < deadline and _proc_start_time(child) is not None:
        time.sleep(0.02)
    assert _proc_start_time(child) is None
    leader.wait(timeout=5)

    # the leader already gone (a shell that ended when the run was killed): its job stays
    # in the group, and is stopped by its PID, if it is in the group's recorded namespace
    gone = subprocess.Popen(["sh", "-c", "sleep 100 & echo $!; read x"], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True, start_new_session=True)
    orphan = int(gone.stdout.readline())
    gone_start = _proc_start_time(gone.pid)
    gone.stdin.close()                                 # the leader ends; its job stays
    gone.wait(timeout=5)
    assert _proc_start_time(orphan) is not None and os.getpgid(orphan) == gone.pid
    assert not stop_pid(gone.pid, gone_start, timeout=1.0, group=True)  # no namespace known
    assert not stop_pid(gone.pid, gone_start, timeout=1.0, group=True, netns=1)  # another's
    assert _proc_start_time(orphan) is not None
    assert stop_pid(gone.pid, gone_start, timeout=1.0, group=True, netns=netns_of(orphan))
    deadline = time.time() + 3
    while time.time() < deadline and _proc_start_time(orphan) is not None:
        time.sleep(0.02)
    assert _proc_start_time(orphan) is None

    alone = subprocess.Popen(["sh", "-c", "sleep 100 & echo $!; wait"], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    left = int(alone.stdout.readline())
    assert stop_pid(alone.pid, _proc_start_time(alone.pid), timeout=1.0)
    assert _proc_start_time(left) is not None   # not a group: its background job stays
    os.kill(left, 9)
    alone.wait(timeout=5)
