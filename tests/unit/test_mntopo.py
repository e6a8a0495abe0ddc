"""testbed/mntopo.py as `mn --custom` loads it: exec'd without __file__."""
from pathlib import Path

import pytest

from topologies import bcube, fattree

mininet_topo = pytest.importorskip("mininet.topo", reason="needs Debian's mininet package")

FILE = Path(__file__).resolve().parents[2] / "testbed" / "mntopo.py"


def load_like_mn() -> dict:
    namespace: dict = {}
    exec(compile(FILE.read_text(), str(FILE), "exec"), namespace, namespace)  # what mn does
    return namespace["topos"]


def test_mn_custom_builds_the_same_fabric():
    topos = load_like_mn()
    t = topos["fattree"](4)
    ref = fattree(4)
    assert sorted(t.hosts()) == sorted(h.name for h in ref.hosts)
    assert sorted(t.switches()) == sorted(s.name for s in ref.switches)
    assert len(t.links()) == len(ref.links)
    assert t.nodeInfo("e1")["dpid"] == f"{ref.node('e1').dpid:016x}"
    assert t.nodeInfo("h1")["mac"] == ref.node("h1").macs[0]
    b = topos["bcube"](4, 1)
    assert len(b.hosts()) == len(bcube(4, 1).hosts) and len(b.switches()) == 8
