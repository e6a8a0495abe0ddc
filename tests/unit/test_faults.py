"""Fault specs and the pure parts of fault handling (issue 14): what a fault names is checked
against the fabric, the timeline orders every down and up, iperf3's receiver intervals say
how long each flow carried nothing."""
import json

import pytest

from testbed.config.faults import FabricFault, fault_ports, timeline
from testbed.spec import SpecError, loads
from testbed.workloads.flows import outage, parse_iperf3
from topologies import fattree


def spec(**perm):
    return {"name": "f", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "permutation", "duration_s": 10, "omit_s": 1, **perm}]}


@pytest.mark.parametrize("faults,message", [
    ([{"at_s": 2}], "experiments[0].faults[0]: give exactly one of link and switch"),
    ([{"link": ["a1", "c1"], "switch": "c1", "at_s": 2}], "give exactly one"),
    ([{"link": ["a1"], "at_s": 2}], "experiments[0].faults[0].link: two different nodes"),
    ([{"link": ["a1", "a1"], "at_s": 2}], "faults[0].link: two different nodes"),
    ([{"link": ["a1", "zz"], "at_s": 2}], "faults[0].link: no node 'zz'"),
    ([{"link": ["a1", "a2"], "at_s": 2}], "faults[0].link: a1 and a2 are not linked"),
    ([{"switch": "h1", "at_s": 2}], "faults[0].switch: no switch 'h1'"),
    ([{"switch": "c1", "at_s": 11}], "faults[0].at_s: 11 s is not within the phase's 11 s"),
    ([{"switch": "c1", "at_s": -1}], "faults[0].at_s: out of range"),
    ([{"switch": "c1", "at_s": 1, "for_s": 0}], "faults[0].for_s: must be > 0"),
    ([{"switch": "c1"}], "faults[0].at_s: required"),
    ([{"switch": "c1", "at_s": 1, "when": 3}], "faults[0].when: unknown key"),
])
def test_bad_faults_name_the_field(faults, message):
    with pytest.raises(SpecError) as err:
        loads(spec(faults=faults))
    assert message in str(err.value)


def test_faults_with_finite_flows_or_odd_intervals_are_refused():
    with pytest.raises(SpecError, match="faults: not with flow_bytes"):
        loads(spec(faults=[{"switch": "c1", "at_s": 1}], flow_bytes=10000))
    with pytest.raises(SpecError, match="interval_s: must be in 0.1..10"):
        loads(spec(interval_s=0.01))


def test_timeline_orders_downs_and_ups_and_names_switch_ports():
    topo = fattree(4)
    link = FabricFault(link=["a1", "c1"], at_s=2, for_s=3)
    edge_link = FabricFault(link=["h1", "e1"], at_s=2)
    core = FabricFault(switch="c1", at_s=1, for_s=1)
    assert fault_ports(link, topo) == (("a1", 3), ("c1", 1))
    assert fault_ports(edge_link, topo) == (("e1", 1),)  # a host's end is not set down
    assert len(fault_ports(core, topo)) == 4
    steps = timeline([link, edge_link, core], topo)
    assert [(s.t_s, s.action, s.fault) for s in steps] == [
        (1, "down", 2), (2, "down", 0), (2, "down", 1), (2, "up", 2), (5, "up", 0)]


def test_outage_counts_the_intervals_a_flow_carried_nothing():
    rates = [9.5] * 20 + [0.0] * 3 + [0.2] + [9.4] * 10
    assert outage(rates, 0.1) == {"blackholed_s": 0.4, "longest_s": 0.4, "resumed": True}
    assert outage([9.5] * 5 + [0.0] * 5, 0.1)["resumed"] is False
    assert outage([9.5] * 5, 0.1) == {"blackholed_s": 0.0, "longest_s": 0.0, "resumed": True}
    assert outage([], 0.1)["blackholed_s"] is None


def test_receiver_intervals_come_from_the_server_output():
    text = json.dumps({"end": {"sum_received": {"bits_per_second": 9e6}},
                       "server_output_json": {"intervals": [
                           {"sum": {"seconds": 0.1, "bits_per_second": 9.5e6}},
                           {"sum": {"seconds": 0.1, "bits_per_second": 0.0}},
                           {"sum": {"seconds": 0.04, "bits_per_second": 9.0e6}}]}})
    r = parse_iperf3("h1", "h9", text)
    assert r.interval_s == 0.1 and r.intervals_mbps == (9.5, 0.0, 9.0)
