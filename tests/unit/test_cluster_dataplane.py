"""The class dataplane of a fabric split across servers: each server's ports are
reached through that server's agent, its queues sampled there, its CPU judged with the
others'; what the runner removes from a server's own devices. No BPF and no server: a fake
agent stands for the other server (tests/integration/test_cluster.py runs the real one)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbed.cluster.fabric import MAKE_DIR
from testbed.cluster.servers import underlay_script
from testbed.config.qos import QosConfig, TrafficClass
from testbed.dataplane.dpapi import Dataplane, QueueState
from testbed.dataplane.qosplane import QosPlane
from testbed.measure.cpu import forwarding_verdict, servers_verdict
from testbed.measure.queues import ClassQueueSampler
from topologies import build

CFG = QosConfig(classes=[TrafficClass(name="be", dscp=[0], buffer_pkts=50)], ecn_enabled=False)


class FakeAgent:
    """Records the calls a Dataplane sends to another server; answers like the agent."""

    def __init__(self, replies: dict | None = None):
        self.calls: list[tuple] = []
        self.replies = replies or {}

    def call(self, method: str, *args):
        self.calls.append((method, *args))
        return self.replies.get(method)


def description(here_has_ports: bool) -> dict:
    """Four ports: 0-1 on server a, 2-3 on server b (or all on b)."""
    ports = [{"id": i, "ifname": f"s{i}-eth1", "node": f"s{i}", "is_host": False,
              "rate_mbps": 10.0, "peer": i ^ 1, "switch_index": i, "scheduler": "strict",
              "ifindex": 10 + i, "netns": None, "tbf_limits": [100000], "limits": [[0, 50]],
              "server": "a" if here_has_ports and i < 2 else "b"} for i in range(4)]
    return {"map_dir": None, "mtu_bytes": 1500, "burst_us": 0, "ports": ports,
            "qos": {"classes": [{"name": "be", "dscp": [0]}]},
            "servers": {"b": {"map_dir": "/x", "prog_dir": "/y", "agent": ["true"]}},
            "here": "a"}


def test_another_servers_ports_are_read_and_set_through_its_agent():
    dp = Dataplane(description(here_has_ports=False))
    assert not dp.mine and dp.elsewhere() == ["b"] and not dp.is_here(2)
    state = QueueState(bytes=9000, pkts=6, enq_pkts=60, deq_pkts=54, drops=1, marks=2,
                       not_ect_over_k=0, enq_bytes=90000, kicks=0)
    agent = FakeAgent({"queue": vars(state)})
    dp._agents["b"] = agent  # type: ignore[assignment]
    assert dp.queue(2, 0) == state
    dp.set_dscp_map([0] * 64)  # every server's map
    dp.set_schedule([2, 3], weights=[1])
    dp.prepare([0])
    assert agent.calls == [("queue", 2, 0), ("set_dscp_map", [0] * 64),
                           ("set_schedule", [2, 3], [1], None), ("prepare", [0])]


def test_an_agent_reaches_only_its_own_server():
    dp = Dataplane(description(here_has_ports=False), forward=False)  # server a's agent
    assert dp.elsewhere() == [] and not dp.is_here(3)
    dp.set_dscp_map([0] * 64)  # its own maps only: none here, nothing sent
    try:
        dp.queue(2, 0)
    except OSError as exc:
        assert "server a's agent was asked about server b's port" in str(exc)
    else:
        raise AssertionError("an agent forwarded a request")


class SamplingDataplane:
    """This server's queues (port 0) constant; port 2's sampled by server b's agent, whose
    clock started 5 s after ours."""

    ports = [{"id": i, "ifname": f"s{i}-eth1"} for i in range(4)]

    def __init__(self):
        self.agent_ = FakeAgent({"sample_stop": {
            "t0": 0.0, "t_end": 1.0, "ticks": 50,
            "samples": [[0.2, 2, 0, 1500, 1, 0, 0], [0.6, 2, 0, 0, 0, 0, 0]],
            "loads": [[0.2, 2, 0, 1500]]}})

    def is_here(self, port: int) -> bool:
        return port < 2

    def server_of(self, port: int) -> str:
        return "a" if port < 2 else "b"

    def agent(self, server: str) -> FakeAgent:
        assert server == "b"
        return self.agent_

    def queue(self, port: int, cls: int) -> QueueState:
        return QueueState(bytes=3000, pkts=2, enq_pkts=2, deq_pkts=0, drops=0, marks=0,
                          not_ect_over_k=0, enq_bytes=3000, kicks=0)


def test_a_sampler_joins_the_rows_another_server_sampled_on_its_clock():
    dp = SamplingDataplane()
    sampler = ClassQueueSampler(dp, [(0, 0), (2, 0)], rate_hz=200)
    assert sampler.slots == [(0, 0)] and sampler.away == {"b": [(2, 0)]}
    sampler.start()
    sampler.stop()
    assert dp.agent_.calls[0] == ("sample_start", [(2, 0)], 200)
    shift = 0.0 - sampler.t0
    far = [s for s in sampler.samples if s.port == 2]
    assert [round(s.t - shift, 6) for s in far] == [0.2, 0.6] and far[0].bytes == 1500
    assert [s.t for s in sampler.samples] == sorted(s.t for s in sampler.samples)
    assert any(s.port == 0 for s in sampler.samples)
    assert sampler.achieved_rate_hz() == 50  # the slower server's


def window(idle: float, backlog: int) -> dict:
    return {"ovs_rx_backlog_p50_bytes": backlog, "ovs_rx_backlog_p90_bytes": backlog,
            "machine_idle_min": idle, "machine_idle_mean": idle, "ovs_thread_p90": 0.5,
            "ovs_thread_mean": 0.5}


def test_a_split_fabric_is_cpu_bound_when_any_server_is():
    one = servers_verdict({"here": window(0.5, 0)}, {"here": 1000}, 10, 9000)
    assert one == forwarding_verdict(window(0.5, 0), 1000, 10, 9000)
    two = servers_verdict({"a": window(0.5, 0), "b": window(0.02, 0)},
                          {"a": 1000, "b": 1000}, 10, 9000)
    assert two["cpu_bound"] and two["server"] == "b" and two["machine_idle_mean"] == 0.02
    assert set(two["servers"]) == {"a", "b"} and not two["servers"]["a"]["cpu_bound"]
    calm = servers_verdict({"a": window(0.5, 0), "b": window(0.4, 0)}, {"a": 10, "b": 10},
                           10, 9000)
    assert not calm["cpu_bound"] and calm["server"] == "b"  # the less idle one


def test_a_plane_crosses_to_another_server_as_data():
    topo = build("fattree", k=4)
    plane = QosPlane(topo, CFG, rate_of=lambda link: 20.0, host_pid=lambda h: 100,
                     mtu_bytes=8950, burst_us=1000, buffer_pkts=50, buffer_bytes=None,
                     host_queue_pkts=1000, pin_dir=Path("/sys/fs/bpf/testbed/x"),
                     out_dir=Path("/tmp/x"))
    again = QosPlane.from_data(plane.to_data({h.name: 7 for h in topo.hosts}))
    assert again.ports == plane.ports and again.cfg == plane.cfg
    assert again.host_pid("h9") == 7 and again.frame == plane.frame
    assert [again.tbf_limits(p) for p in again.ports] == [plane.tbf_limits(p) for p in plane.ports]


def test_what_the_dataplane_adds_to_a_servers_own_device_is_removed():
    script = underlay_script({"underlay": [{"dev": "eth0", "clsact_added": True},
                                           {"dev": "br0", "clsact_added": False}]})
    assert "tc filter del dev \"$d\" egress prio 4789" in script
    assert "for d in eth0 br0; do" in script and "for d in eth0; do" in script
    assert subprocess.run(["sh", "-n", "-c", script]).returncode == 0
    assert subprocess.run(["sh", "-n", "-c", underlay_script({})]).returncode == 0


def test_a_remote_output_directory_is_made_and_its_outermost_new_part_named(tmp_path):
    def make(path: Path) -> str:
        return subprocess.run(["sh", "-c", MAKE_DIR, "-", str(path)], capture_output=True,
                              text=True, check=True).stdout.strip()

    assert make(tmp_path / "run" / "training" / "job") == str(tmp_path / "run")
    assert (tmp_path / "run" / "training" / "job").is_dir()
    assert make(tmp_path / "run" / "training" / "job") == ""  # there already


def test_the_modules_run_on_servers_are_the_ones_the_probe_checks():
    """Every module a fabric runs on a server is in REMOTE_MODULES (module() refuses others)
    and is a file of this checkout, which the probe looks for on each server."""
    from testbed.cluster import servers
    from testbed.core.system import REPO_ROOT
    for name in servers.REMOTE_MODULES:
        assert (REPO_ROOT / (name.replace(".", "/") + ".py")).is_file(), name
        assert servers.module(name)[-1] == name
    with pytest.raises(ValueError, match="REMOTE_MODULES"):
        servers.module("testbed.net.ovs")
