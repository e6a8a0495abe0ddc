"""The circuits experiment's arithmetic: the rates a rack pair gets on each fabric, a
turn's row from the circuit app's steps, the optical switch's counters and the flows."""
from types import SimpleNamespace

import pytest

from testbed.config.units import tcp_payload_fraction
from testbed.experiments.circuits import (
    TURN_HEADER,
    CircuitSetting,
    first_packets,
    headline,
    rates,
    turn_row,
)
from testbed.measure.queues import QueueSample
from testbed.spec import SpecError, loads
from topologies import hybrid


def test_rates_on_the_packet_fabric_and_the_circuit():
    topo = hybrid(4, 4, host_rate=20, packet_rate=20, circuit_rate=40)
    packet, circuit = rates(topo, 0, 1, 9000)
    f = tcp_payload_fraction(9000)
    assert packet == pytest.approx(20 * f)  # the ToR's one uplink
    assert circuit == pytest.approx(40 * f)  # the circuit, below the 4 x 20 of the NICs


def flow(intervals):
    return SimpleNamespace(intervals_mbps=tuple(intervals), retransmits=1,
                           goodput_mbps=sum(intervals) / len(intervals))


def test_a_turn_row():
    steps = [{"step": "dark", "time": 101.0, "circuits": []},
             {"step": "light", "time": 101.01, "circuits": [[0, 2, 0]]}]
    # two flows, 0.1 s intervals, 2 s turn: 10 Mb/s each on the packet fabric until 1.0 s
    # after the start, then 19 each on the circuit
    one = [10.0] * 10 + [19.0] * 10
    row = dict(zip(TURN_HEADER, turn_row(CircuitSetting(period_s=1, dark_ms=10), 1, [0, 2],
                                         100.0, 102.0, steps, {2: (101.013, 101.011)},
                                         [flow(one), flow(one)], 0.1, 0.5, 20.0, 40.0, False,
                                         100.05)))
    assert row["lit_after_s"] == pytest.approx(1.01)
    assert row["dark_measured_ms"] == pytest.approx(13.0)
    assert row["dark_resolution_ms"] == pytest.approx(2.0)  # left after the sample at 11 ms
    assert row["dark_applied_ms"] == pytest.approx(10.0)
    assert row["circuit_mbps"] == pytest.approx(38.0)  # from 1.51 s on
    assert row["circuit_over_rate"] == pytest.approx(0.95)
    # the model: 20 until 1.01 s, 40 after: (20 x 1.01 + 40 x 0.99) / 2
    assert row["model_mbps"] == pytest.approx((20 * 1.01 + 40 * 0.99) / 2, abs=1e-3)
    assert row["lost_mb"] == pytest.approx(20 * 1.01 / 8, abs=1e-3)
    late = turn_row(CircuitSetting(), 1, [0, 2], 100.0, 102.0, steps, {2: (101.013, 101.0)},
                    [flow(one)], 0.1, 0.5, 20.0, 40.0, False, 101.005)
    assert dict(zip(TURN_HEADER, late))["dark_measured_ms"] is None  # no traffic waited yet
    # the sample before the packet was taken before the light step: nothing left before it
    coarse = turn_row(CircuitSetting(), 1, [0, 2], 100.0, 102.0, steps, {2: (101.013, 101.0)},
                      [flow(one)], 0.1, 0.5, 20.0, 40.0, False, 100.05)
    assert dict(zip(TURN_HEADER, coarse))["dark_resolution_ms"] == pytest.approx(3.0)
    h = headline([list(row.values())])
    assert h["1s_10ms_circuit_over_rate"] == 0.95 and h["1s_10ms_cpu_bound_turns"] == 0


def test_first_packet_after_a_light_step():
    s = [QueueSample(t=t, ifname="o1-eth3", qlen_pkts=0, backlog_bytes=0, drops=0,
                     sent_pkts=n) for t, n in ((0.0, 5), (1.0, 5), (1.5, 5), (1.6, 7))]
    # sent between the samples at 1.5 and 1.6 s
    assert first_packets(s, 100.0, [101.2], {"o1-eth3": 2}) == {2: (101.6, 101.5)}
    assert first_packets(s, 100.0, [101.7], {"o1-eth3": 2}) == {}


def test_the_experiment_needs_a_hybrid_fabric_and_valid_pairs():
    base = {"name": "c", "topology": {"kind": "hybrid", "params": {}},
            "controller": {"routing": "cthrough"}}
    loads({**base, "experiments": [{"type": "circuits"}]})
    with pytest.raises(SpecError, match="circuits needs a hybrid topology"):
        loads({**base, "topology": {"kind": "fattree", "params": {}}, "controller": {},
               "experiments": [{"type": "circuits"}]})
    with pytest.raises(SpecError, match=r"pairs\[0\]: two different racks in 0..3"):
        loads({**base, "experiments": [{"type": "circuits", "pairs": [[1, 1]]}]})
    with pytest.raises(SpecError, match=r"settings\[0\]: period_s > 0 and 0 <= dark_ms"):
        loads({**base, "experiments": [{"type": "circuits",
                                         "settings": [{"period_s": 0.1, "dark_ms": 100}]}]})
