"""A fabric split across servers: the spec's `cluster` section, where each node
runs, which links become tunnels and at what MTU, and how commands reach a server. No
server is needed: the integration tests build one (tests/integration/test_cluster.py)."""
from __future__ import annotations

import pytest

import testbed.spec  # noqa: F401  (registers the experiment types)
from testbed.cluster.servers import Conn, ssh_failure
from testbed.config.cluster import ClusterSpec, Server
from testbed.config.loader import SpecError
from testbed.config.placement import crossings, groups, inner_mtu, place
from testbed.config.spec import loads
from topologies import build

TWO = [{"name": "a", "address": "localhost"}, {"name": "b", "address": "10.251.0.2",
                                                "user": "root"}]


def spec(cluster: dict, experiments: list | None = None, **extra) -> dict:
    return {"name": "c", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": experiments or [{"type": "reachability"}],
            "cluster": cluster, **extra}


def cluster(**kw) -> ClusterSpec:
    return ClusterSpec(servers=[Server(**s) for s in kw.pop("servers", TWO)], **kw)


def test_pods_keep_each_fattree_pod_whole_and_deal_the_cores():
    topo = build("fattree", k=4)
    where = place(topo, cluster())
    for pod in range(4):
        members = [s.name for s in topo.switches if s.label("pod") == pod]
        members += [h.name for h in topo.hosts if h.label("pod") == pod]
        assert len({where[n] for n in members}) == 1, pod
    assert [where[f"h{i}"] for i in (1, 5, 9, 13)] == ["a", "a", "b", "b"]
    assert [where[c] for c in ("c1", "c2", "c3", "c4")] == ["a", "b", "a", "b"]
    cross = crossings(topo, where)
    # pods 0-1 on a, 2-3 on b: each core reaches the other server's two pods
    assert len(cross) == 8 and all(c.a_server != c.b_server for c in cross)
    assert [c.vni for c in cross] == sorted({c.vni for c in cross})  # unique, stable
    assert crossings(topo, place(topo, cluster())) == cross


def test_pods_of_a_leafspine_and_of_bcube_keep_a_leaf_or_cell_with_its_hosts():
    ls = build("leafspine", spines=2, leaves=4, hosts_per_leaf=2)
    where = place(ls, cluster())
    assert where["l1"] == where["h1"] == where["h2"] == "a"
    assert where["l4"] == where["h7"] == where["h8"] == "b"
    bc = build("bcube", n=4, k=1)
    grouped, spread = groups(bc)
    assert len(grouped) == 4 and spread == ["b1_0", "b1_1", "b1_2", "b1_3"]
    assert all(len(g) == 5 for g in grouped)  # a level-0 switch and its four servers


def test_switch_bin_cuts_switches_in_order_and_hosts_follow_their_switch():
    topo = build("fattree", k=4)
    where = place(topo, cluster(placement="switch_bin"))
    names = [s.name for s in topo.switches]
    assert [where[n] for n in names] == ["a"] * 10 + ["b"] * 10
    for h in topo.hosts:
        assert where[h.name] == where[topo.peer(h.name, 0)[0]]


def test_explicit_placement_and_a_switch_on_two_servers():
    topo = build("fattree", k=4)
    where = place(topo, cluster(placement="explicit", nodes={"b": ["c1", "c2", "c3", "c4"]}))
    assert {where[c] for c in ("c1", "c4")} == {"b"} and where["e1"] == "a"
    three = TWO + [{"name": "c", "address": "10.251.0.3"}]
    with pytest.raises(SpecError, match="switch e1 is placed on both b and c; a switch runs "
                                        "on one server"):
        place(topo, cluster(servers=three, placement="explicit",
                            nodes={"b": ["e1"], "c": ["e1", "c1"]}))
    with pytest.raises(SpecError, match="cluster.nodes.b: no node 'x9'"):
        place(topo, cluster(placement="explicit", nodes={"b": ["x9"]}))
    with pytest.raises(SpecError, match="leaves server b without a switch"):
        place(topo, cluster(placement="explicit", nodes={"b": ["h1"]}))


@pytest.mark.parametrize("bad, message", [
    ({"servers": TWO[:1]}, "at least two servers"),
    ({"servers": [TWO[0], {**TWO[1], "name": "a"}]}, "'a' is named twice"),
    ({"servers": [TWO[0], {**TWO[1], "address": "localhost"}]}, "localhost is given twice"),
    ({"servers": [TWO[0], {**TWO[1], "name": "b c"}]}, "servers\\[1\\].name"),
    ({"servers": TWO, "placement": "explicit"}, "placement explicit needs nodes"),
    ({"servers": TWO, "nodes": {"b": ["h1"]}}, "only with placement explicit"),
    ({"servers": TWO, "placement": "explicit", "nodes": {"z": ["h1"]}}, "no server 'z'"),
    ({"servers": TWO, "tunnel": "ssh"}, "cluster.tunnel"),
])
def test_bad_cluster_sections_are_refused_naming_the_field(bad, message):
    with pytest.raises(SpecError, match=message):
        loads(spec(bad))


def test_what_does_not_run_on_a_cluster_yet_is_refused_before_anything_is_built():
    with pytest.raises(SpecError, match="experiments\\[0\\].type: incast does not run on a "
                                        "cluster yet"):
        loads(spec({"servers": TWO}, [{"type": "incast"}]))
    lossless = {"classes": [{"name": "be", "dscp": [0]},
                            {"name": "rdma", "dscp": [26], "lossless": True}],
                "pfc": {"xoff_bytes": 40000, "xon_bytes": 20000, "headroom_bytes": 30000}}
    with pytest.raises(SpecError, match="qos.pfc: PFC and lossless classes run on one machine"):
        loads(spec({"servers": TWO}, qos=lossless))
    with pytest.raises(SpecError, match="experiments\\[0\\].faults: fabric faults do not run"):
        loads(spec({"servers": TWO}, [{"type": "training", "faults": [
            {"link": ["e1", "a1"], "at_s": 1.0}]}]))
    with pytest.raises(SpecError, match="links.host_queue: fair runs on one machine only"):
        loads(spec({"servers": TWO}, links={"host_queue": "fair"}))
    loaded, _ = loads(spec({"servers": TWO}, [{"type": "permutation"}]))
    assert loaded.cluster is not None and loaded.cluster.overhead == 50
    # classes and ECN run on every server's own dataplane, and training with them
    loads(spec({"servers": TWO}, [{"type": "training"}],
               qos={"classes": [{"name": "be", "dscp": [0]}], "ecn_enabled": True}))


def test_the_tunnel_mtu_is_fitted_to_the_servers_network():
    assert inner_mtu(9000, 9216, 50, "lower_inner") == (9000, 9216)  # fits
    assert inner_mtu(9000, 1500, 50, "lower_inner") == (1450, 1500)  # the fabric's lowered
    assert inner_mtu(1500, 1500, 42, "lower_inner") == (1458, 1500)  # GRE's header
    assert inner_mtu(9000, 1500, 50, "raise_outer") == (9000, 9050)  # asks for 9050


def test_commands_reach_a_server_over_ssh_as_root():
    local = Conn(Server(name="a", address="localhost"))
    assert local.argv(["ip", "link"], netns_pid=42) == [
        "nsenter", "--net=/proc/42/ns/net", "--", "ip", "link"]
    root = Conn(Server(name="b", address="10.0.9.2", user="root"), "/k/cfg")
    argv = root.argv(["tc", "-batch", "-"], netns_pid=7)
    assert argv[:3] == ["ssh", "-F", "/k/cfg"] and "root@10.0.9.2" in argv
    assert argv[-2:] == ["--", "nsenter --net=/proc/7/ns/net -- tc -batch -"]
    assert "-tt" not in argv and "-tt" in root.argv(["iperf3", "-s"], tty=True)
    user = Conn(Server(name="b", address="10.0.9.2", user="ann"))
    argv = user.argv(["ovs-vsctl", "show"])
    assert argv[:4] == ["sudo", "-E", "-u", "ann"] and argv[-1] == "sudo -E ovs-vsctl show"


@pytest.mark.parametrize("stderr, says", [
    ("ssh: connect to host 10.0.9.2 port 22: Connection refused", "SSH refused: no sshd"),
    ("ssh: connect to host 10.0.9.2 port 22: Connection timed out", "unreachable"),
    ("root@10.0.9.2: Permission denied (publickey).", "refused the key"),
    ("Host key verification failed.", "host key is not known"),
])
def test_an_ssh_failure_names_the_server_and_the_fix(stderr, says):
    conn = Conn(Server(name="b", address="10.0.9.2", user="root"))
    text = ssh_failure(conn, stderr, 255)
    assert text.startswith("server b (root@10.0.9.2): ") and says in text


def test_a_long_run_id_leaves_the_ssh_control_socket_short_enough():
    from pathlib import Path

    from testbed.cluster.servers import CONTROL_NAME, control_dir

    run_id = "bench-link-10-two-servers-class-dataplane-20261124-140913"
    where = control_dir(Path("/run/testbed"), run_id)
    assert where == control_dir(Path("/run/testbed"), run_id)  # `testbed clean` finds it
    # ssh's %C is 40 hex digits, and ssh appends a random suffix of 17 while it binds
    assert len(f"{where}/{CONTROL_NAME}") - 2 + 40 + 17 < 107
