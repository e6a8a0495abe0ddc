"""Detached fabrics' state (testbed/detached.py): where `exec` runs a command, and what
`status`, a second `up` and `clean` make of a holder that is alive or gone."""
import os
import subprocess

import pytest

import testbed.detached as detached
from testbed.core.errors import TestbedError
from testbed.core.resources import _proc_start_time
from testbed.detached import Detached, exec_argv, fabrics, find, forget_dead, refuse_second


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(detached, "STATE_DIR", tmp_path)
    return tmp_path


def holder(name: str, pid: int, status: str = "up") -> Detached:
    d = Detached(name=name, pid=pid, start=_proc_start_time(pid), spec="s", out_dir="/r",
                 since=0.0, status=status, nodes={"h1": 4242, "l1": None}, log="/l")
    d.save()
    return d


def test_exec_enters_a_hosts_namespace_and_runs_a_switchs_as_it_is(state):
    d = holder("f", os.getpid())
    assert exec_argv(d, "h1", ["ip", "addr"]) == ["nsenter", "--net=/proc/4242/ns/net", "--",
                                                  "ip", "addr"]
    assert exec_argv(d, "l1", ["ovs-ofctl", "show", "l1"]) == ["ovs-ofctl", "show", "l1"]
    with pytest.raises(TestbedError, match=r"no node 'h9' in fabric 'f' \(nodes: h1, l1\)"):
        exec_argv(d, "h9", ["true"])
    with pytest.raises(TestbedError, match="give a command after --"):
        exec_argv(d, "h1", [])
    # a switch forwarded by an extra process: its tools aimed at that process
    d.switch_env = {"l1": {"OVS_RUNDIR": "/run/testbed/ovs/x.1"}}
    d.save()
    (again,) = fabrics()
    assert exec_argv(again, "l1", ["ovs-ofctl", "show", "l1"]) == [
        "env", "OVS_RUNDIR=/run/testbed/ovs/x.1", "ovs-ofctl", "show", "l1"]


def test_a_live_holder_is_found_and_refuses_a_second_up(state):
    holder("f", os.getpid())
    assert find("f").pid == os.getpid()
    with pytest.raises(TestbedError, match="fabric 'f' is up .*`testbed down f` first"):
        refuse_second()
    with pytest.raises(TestbedError, match=r"no fabric 'g' is up \(up: f\)"):
        find("g")
    holder("f", os.getpid(), status="starting")
    with pytest.raises(TestbedError, match="still coming up"):
        find("f")
    with pytest.raises(TestbedError, match="'f' is coming up"):
        refuse_second()
    holder("f", os.getpid(), status="stopping")
    with pytest.raises(TestbedError, match="going down"):
        find("f")
    assert find("f", stopping_too=True).status == "stopping"   # `down` waits for it


def test_a_gone_holder_is_named_and_its_state_cleaned(state):
    proc = subprocess.Popen(["true"])
    start = _proc_start_time(proc.pid)
    proc.wait()
    Detached(name="dead", pid=proc.pid, start=start, spec="s", out_dir="/r", since=0.0,
             status="up", nodes={}, log="/l").save()
    (state / "fabrics" / "torn.json").write_text("{")   # half-written by a holder that died
    with pytest.raises(TestbedError, match="holder .* is gone; `sudo testbed clean`"):
        find("dead")
    refuse_second()                                      # a dead one does not block
    assert forget_dead() == [f"state of detached fabric dead (holder pid {proc.pid} gone)"]
    assert fabrics() == [] and list((state / "fabrics").glob("*.json")) == []
    with pytest.raises(TestbedError, match=r"no fabric 'dead' is up \(none is"):
        find("dead")
