"""A fabric is one `Fabric` over its parts, on one machine or across servers: the runner's
factory chooses the executor from the spec's `cluster`, and the fabric's commands reach a
node only through it. Nothing is built: no root, no Mininet, no server."""
from __future__ import annotations

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
