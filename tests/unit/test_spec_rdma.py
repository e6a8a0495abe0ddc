"""The rdma experiment's spec, its pure parts (the ideal completion time, DCQCN's scaling,
how flows become queue pairs) and its analysis."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.experiments import rdma
from testbed.spec import SpecError, loads
from testbed.workloads.model.rdma import (
    WIRE_OVERHEAD,
    Dcqcn,
    Hpcc,
    Irn,
    Timely,
    bdp_packets,
    ideal_fct_us,
    spray_reorder,
    wire_bytes,
)
from testbed.workloads.roce import Message
from topologies import leafspine

AIMD = Path(__file__).resolve().parents[2] / "examples" / "roce_cc" / "aimd.h"
FLOWS = [{"src": "h1", "dst": "h3", "size_bytes": 1_000_000},
         {"src": "h2", "dst": "h4", "size_bytes": 500_000, "start_ms": 100}]


def spec(**fields):
    return {"name": "r", "topology": {"kind": "leafspine", "params": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_rate": 100,
        "uplink_rate": 50}}, "links": {"mtu_bytes": 9000},
        "experiments": [{"type": "rdma", **({"flows": FLOWS} | fields)}]}


BAD_RDMA = [
    ({"flows": []}, "experiments[0].flows: at least one flow (or a workload or fan_in)"),
    ({"fan_in": {"senders": 4, "size_bytes": 10}}, "experiments[0].fan_in: senders in 1..3"),
    ({"fan_in": {"senders": 2, "size_bytes": 10, "flows_per_sender": 0}},
     "experiments[0].fan_in: senders in 1..3, size_bytes and flows_per_sender >= 1"),
    ({"fan_in": {"senders": 2, "size_bytes": 10, "receiver": "h7"}},
     "experiments[0].fan_in.receiver: no host 'h7'"),
    ({"flows": [{"src": "h1", "dst": "h9", "size_bytes": 10}]},
     "experiments[0].flows[0].dst: no host 'h9'"),
    ({"flows": [{"src": "h1", "dst": "h1", "size_bytes": 10}]},
     "experiments[0].flows[0]: src and dst are the same host"),
    ({"flows": [{"src": "h1", "dst": "h2", "size_bytes": 0}]},
     "experiments[0].flows[0]: size_bytes >= 1"),
    ({"schemes": ["dcqcn", "swift"]},
     "experiments[0].schemes[1]: a congestion control first, one of none, dcqcn, dcqcn_plus, "
     "timely, hpcc, nscc, user or tcp-<algorithm> (got 'swift')"),
    ({"schemes": ["tcp-dctcp+w"]}, "experiments[0].schemes[0]: tcp-<algorithm> (such as "
     "tcp-dctcp), then at most +lossy (got 'tcp-dctcp+w')"),
    ({"schemes": ["tcp-"]}, "experiments[0].schemes[0]: tcp-<algorithm>"),
    ({"tcp_ecn_k_bytes": 0}, "experiments[0].tcp_ecn_k_bytes: must be > 0"),
    ({"schemes": ["user"]}, "experiments[0].user_cc: the scheme 'user' needs user_cc.source"),
    ({"schemes": ["user"], "user_cc": {"source": "nowhere.h"}},
     "experiments[0].user_cc.source: a C header that exists (got 'nowhere.h'"),
    ({"schemes": ["user"], "user_cc": {"source": str(AIMD), "params": {
        str(i): i for i in range(9)}}}, "experiments[0].user_cc.params: at most 8 (got 9)"),
    ({"queue_sample_hz": 5000}, "experiments[0].queue_sample_hz: 0 (none) to 2000"),
    ({"tcp_initial_window_pkts": 0}, "experiments[0].tcp_initial_window_pkts: must be > 0"),
    ({"schemes": ["dcqcn+x"]}, "experiments[0].schemes[0]: after 'dcqcn', each of w, irn, "
     "lossy at most once (got 'dcqcn+x')"),
    ({"schemes": ["hpcc+w"]}, "experiments[0].schemes[0]: hpcc has its own window"),
    ({"schemes": ["dcqcn", "dcqcn"]}, "experiments[0].schemes[1]: 'dcqcn' twice"),
    ({"timely": {"t_low_us": 900}}, "experiments[0].timely.t_low_us: below t_high_us"),
    ({"timely": {"beta": 0}}, "experiments[0].timely: alpha and beta in (0, 1]"),
    ({"hpcc": {"eta": 1.5}}, "experiments[0].hpcc.eta: in (0, 1]"),
    ({"irn": {"rto_low_us": 500}}, "experiments[0].irn: 0 < rto_low_us <= rto_high_us"),
    ({"ecn_kmax_bytes": 1000}, "experiments[0].ecn_kmax_bytes: above ecn_k_bytes"),
    ({"ecn_pmax": 0}, "experiments[0].ecn_pmax: in (0, 1]"),
    ({"roce_mtu": 1500}, "experiments[0].roce_mtu: a RoCE MTU"),
    ({"dscp": 64}, "experiments[0].dscp: a DSCP in 1..63"),
    ({"ctrl_dscp": 26}, "experiments[0].ctrl_dscp: must differ from dscp"),
    ({"dcqcn": {"g": 2}}, "experiments[0].dcqcn.g: in (0, 1]"),
    ({"dcqcn": {"timer_us": 0}}, "experiments[0].dcqcn.timer_us: must be > 0"),
    ({"dcqcn": {"f": 0}}, "experiments[0].dcqcn: byte_counter_bytes >= 0 and f >= 1"),
    ({"xon_bytes": 50000}, "experiments[0].xon_bytes: must be below xoff_bytes"),
    ({"schemes": []}, "experiments[0].schemes: at least one, such as none, dcqcn"),
    ({"qps_per_flow": 0}, "experiments[0].qps_per_flow: 1..64 (got 0)"),
    ({"qps_per_flow": 2, "schemes": ["dcqcn", "tcp-dctcp"]},
     "experiments[0].qps_per_flow: a TCP scheme (tcp-dctcp) carries each flow on one "
     "connection"),
    ({"qps_per_flow": 64, "fan_in": {"senders": 3, "size_bytes": 10,
                                     "flows_per_sender": 30}},
     "queue pairs (a flow is qps_per_flow at each end); its engine holds 4096"),
    ({"source_port": "random"}, "experiments[0].source_port"),
    ({"spray_entropies": 16, "schemes": ["dcqcn+irn"]},
     "experiments[0].spray_entropies: spraying varies each QP's own source port: set "
     "source_port: per_qp"),
    ({"spray_entropies": 16, "source_port": "per_qp", "schemes": ["dcqcn+irn", "hpcc"]},
     "experiments[0].spray_entropies: sprayed packets arrive out of order, which go-back-N "
     "drops: add +irn to 'hpcc'"),
    ({"spray_entropies": 300}, "experiments[0].spray_entropies: 0 (off) to 256 (got 300)"),
    ({"spray_reorder_pkts": -1}, "experiments[0].spray_reorder_pkts: 0..4095 (got -1)"),
    ({"dcqcn": {"byte_counter_bytes": 10}},
     "experiments[0].dcqcn.byte_counter_bytes: 0 (none) or at least 1024"),
]


@pytest.mark.parametrize("fields,message", BAD_RDMA)
def test_bad_rdma_specs_name_the_field(fields, message):
    with pytest.raises(SpecError) as err:
        loads(spec(**fields))
    assert message in str(err.value)


def test_a_roce_mtu_must_fit_the_links():
    data = spec(roce_mtu=4096, schemes=["dcqcn"])
    data["links"] = {"mtu_bytes": 1500}
    with pytest.raises(SpecError, match=r"roce_mtu: 4096 B of payload and 44 B of headers "
                                        r"do not fit links.mtu_bytes 1500"):
        loads(data)


def test_hpcc_telemetry_must_fit_the_links():
    data = spec(roce_mtu=1024, schemes=["hpcc"])
    data["links"] = {"mtu_bytes": 1100}
    with pytest.raises(SpecError, match=r"roce_mtu: 1024 B of payload and 86 B of headers "
                                        r"\(with HPCC telemetry\) do not fit"):
        loads(data)


def test_schemes_parse_into_their_parts():
    assert rdma.parse_scheme("dcqcn+irn+lossy") == rdma.Scheme("dcqcn", False, True, True)
    assert rdma.parse_scheme("timely+w") == rdma.Scheme("timely", True, False, False)
    assert rdma.parse_scheme("none") == rdma.Scheme("none", False, False, False)
    exp = loads(spec(schemes=["dcqcn+lossy", "hpcc"]))[0].experiments[0]
    lossy, hpcc = rdma.rdma_qos(exp, "dcqcn+lossy"), rdma.rdma_qos(exp, "hpcc")
    assert lossy.pfc is None and not any(c.lossless for c in lossy.classes)
    assert lossy.classes[1].ecn is not None          # DCQCN reacts to marks
    assert hpcc.pfc is not None and hpcc.classes[1].lossless and hpcc.classes[1].ecn is None


def test_tcp_schemes_run_the_hosts_algorithm_with_their_own_marking():
    """tcp-<algorithm>: the hosts' TCP on the same flows, in the same lossless class,
    marked at a step of tcp_ecn_k_bytes (DCTCP's K) when set, else as the RoCE schemes."""
    assert rdma.parse_scheme("tcp-dctcp") == rdma.Scheme("tcp", False, False, False, "dctcp")
    assert rdma.parse_scheme("tcp-cubic+lossy").lossy
    exp = loads(spec(schemes=["dcqcn", "tcp-dctcp"], ecn_k_bytes=5000, ecn_kmax_bytes=200000,
                     ecn_pmax=0.01, tcp_ecn_k_bytes=10000))[0].experiments[0]
    roce, tcp = rdma.rdma_qos(exp, "dcqcn"), rdma.rdma_qos(exp, "tcp-dctcp")
    assert (roce.classes[1].ecn.k, roce.classes[1].ecn.kmax) == (5000, 200000)
    assert (tcp.classes[1].ecn.k, tcp.classes[1].ecn.kmax) == (10000, None)
    assert tcp.classes[1].lossless and tcp.pfc is not None
    same = loads(spec(schemes=["tcp-dctcp"], ecn_k_bytes=7000))[0].experiments[0]
    assert rdma.rdma_qos(same, "tcp-dctcp").classes[1].ecn.k == 7000
    # TCP's segments carry 52 B of headers (timestamps on) in the IP MTU
    data = spec(roce_mtu=4096, schemes=["tcp-dctcp"])
    data["links"] = {"mtu_bytes": 4140}
    with pytest.raises(SpecError, match=r"52 B of headers \(TCP, with timestamps\)"):
        loads(data)


def test_timely_hpcc_irn_scale_by_packet_times():
    """TIMELY's thresholds (at 10 Gb/s) and IRN's timeouts (at 40 Gb/s) become the same
    number of packet times at 100 Mb/s; rate steps keep their share of the line."""
    t = Timely().scaled(100.0)
    assert (t["t_low_ns"], t["t_high_ns"], t["min_rtt_ns"]) == (5_000_000, 50_000_000,
                                                                2_000_000)
    assert t["delta_bps"] == pytest.approx(100e3) and t["hai_n"] == 5
    h = Hpcc().scaled(100.0)
    assert h["rai_bps"] == pytest.approx(40e3) and h["eta"] == 0.95
    assert Irn().scaled(100.0) == {"rto_low_us": 40_000, "rto_high_us": 128_000, "n": 3}
    assert bdp_packets(1000.0, 100.0, 4154) == 4     # 12.5 KB: three and a bit packets
    # a sprayed QP's reorder threshold: below IRN's in-flight cap, or it is never met
    assert spray_reorder(8, 12) == 8 and spray_reorder(8, 4) == 3 and spray_reorder(8, 1) == 0


def test_ideal_fct_is_the_wire_bytes_at_the_bottleneck_and_one_rtt():
    assert WIRE_OVERHEAD == 58
    assert wire_bytes(10_000, 4096) == 10_000 + 3 * 58
    assert ideal_fct_us(10_000, 4096, 100.0, 0.002) == pytest.approx(
        (10_000 + 174) * 8 / 100 + 2000)
    assert ideal_fct_us(4096, 4096, 10.0, None) == pytest.approx((4096 + 58) * 8 / 10)


def test_dcqcn_scales_by_packet_times():
    """At 100 Mb/s a packet takes 400x as long as at the paper's 40 Gb/s: 55 us become
    22 ms, the CNP interval 20 ms; rate steps keep their share of the line; the byte
    counter keeps its bytes. The record holds both."""
    s = Dcqcn().scaled(100.0)
    assert s["timer_ns"] == s["alpha_ns"] == 22_000_000
    assert s["cnp_interval_us"] == 20_000
    assert s["rai_bps"] == pytest.approx(100e3) and s["rhai_bps"] == pytest.approx(500e3)
    assert s["min_bps"] == pytest.approx(250e3)
    assert s["byte_counter"] == 10_000_000 and s["g"] == 1 / 256
    rec = Dcqcn().record(100.0)
    assert rec["paper"]["timer_us"] == 55.0 and rec["scaled"] == s


def test_flows_become_queue_pairs_at_both_ends():
    exp = loads(spec())[0].experiments[0]
    topo = leafspine(spines=1, leaves=2, hosts_per_leaf=2, host_rate=100, uplink_rate=50)
    flows = exp.all_flows(topo)
    engines = rdma.engines_for(exp, flows, topo, "dcqcn", start_at=1234.5)
    assert set(engines) == {"h1", "h2", "h3", "h4"}
    h1, h3 = engines["h1"].text(), engines["h3"].text()
    assert f"qp 1 {topo.host('h3').ip} 4791 1 100.0" in h1
    assert f"qp 1 {topo.host('h1').ip} 4791 1 100.0" in h3
    assert "msg 1 0 1000000" in h1 and "msg" not in h3
    assert "msg 2 100000 500000" in engines["h2"].text()
    assert "start_at_unix 1234.500000" in h1 and "exit_when_done 0" in h1
    assert h1.startswith(f"bind {topo.host('h1').ip} 4791\ndcqcn ")
    assert "dcqcn" not in rdma.engines_for(exp, flows, topo, "none", 0)["h1"].text()
    assert "irn" in rdma.engines_for(exp, flows, topo, "none+irn", 0, 1000.0)["h3"].text()
    with pytest.raises(rdma.TestbedError, match="no base round trip"):
        rdma.engines_for(exp, flows, topo, "hpcc", 0)
    # the path's slowest link: a 50 Mb/s uplink between 100 Mb/s hosts
    assert rdma.bottleneck_mbps(topo, "h1", "h3") == 50
    assert rdma.bottleneck_mbps(topo, "h1", "h2") == 100


def test_per_qp_ports_need_a_routing_that_hashes_udp():
    data = {"name": "t", "topology": {"kind": "vl2", "params": {"da": 4, "di": 4,
                                                                "hosts_per_tor": 2}},
            "controller": {"routing": "vlb"},
            "experiments": [{"type": "rdma", "source_port": "per_qp",
                             "flows": [{"src": "h1", "dst": "h2", "size_bytes": 10}]}]}
    with pytest.raises(SpecError, match=r"experiments\[0\]\.source_port: per_qp has the "
                       r"switches hash UDP ports, which routing ecmp, single and hedera do "
                       r"\(vlb does not\)"):
        loads(data)


def test_a_flow_on_several_queue_pairs_is_one_flow_in_the_results():
    exp = loads(spec(qps_per_flow=3, source_port="per_qp"))[0].experiments[0]
    topo = leafspine(spines=1, leaves=2, hosts_per_leaf=2, host_rate=100, uplink_rate=50)
    flows = exp.all_flows(topo)
    assert list(rdma.flow_qpns(1, 3)) == [4, 5, 6]
    assert rdma.split_bytes(1_000_000, 3) == [333_334, 333_333, 333_333]
    assert rdma.split_bytes(2, 3) == [1, 1, 0]
    h1 = rdma.engines_for(exp, flows, topo, "dcqcn", 0)["h1"].text()
    qps = [line.split() for line in h1.splitlines() if line.startswith("qp ")]
    assert [q[1] for q in qps] == ["1", "2", "3"]                  # flow 0's three
    assert len({q[6] for q in qps}) == 3 and all(int(q[6]) >= 0xC000 for q in qps)
    assert [line for line in h1.splitlines() if line.startswith("msg ")] == [
        "msg 1 0 333334", "msg 2 0 333333", "msg 3 0 333333"]
    # counters summed, round trips over every sample; the flow done with its last QP
    a = {k: 1 for k in rdma.QP_SUMMED} | {"rtt_samples": 1, "rtt_min_us": 100.0,
                                           "rtt_mean_us": 200.0, "rtt_max_us": 300.0,
                                           "int_hops": 0, "reorder_max": 2,
                                           "pace_lost_us": 40.0, "pace_lost_cpu_us": 10.0}
    b = a | {"rtt_samples": 3, "rtt_min_us": 50.0, "rtt_mean_us": 400.0, "rtt_max_us": 900.0,
             "reorder_max": 7, "pace_lost_us": 30.0, "pace_lost_cpu_us": 30.0}
    m = rdma.merged([a, b])
    assert m["tx_pkts"] == 2 and m["rtt_samples"] == 4
    assert m["reordered"] == 2 and m["reorder_max"] == 7
    assert m["pace_lost_us"] == 40.0      # one late wake-up cost both QPs: not summed
    assert m["pace_lost_cpu_us"] == 30.0
    assert (m["rtt_min_us"], m["rtt_mean_us"], m["rtt_max_us"]) == (50.0, 350.0, 900.0)
    assert rdma.merged([a]) is a
    assert rdma.flow_fct_us([Message(1, 10, 100.0, 900.0), Message(2, 10, 100.0, 1500.0)]) \
        == 1400.0
    assert rdma.flow_fct_us([Message(1, 10, 100.0, 900.0), Message(2, 10, 100.0, None)]) \
        is None
    # rates: a flow's queue pairs summed at each sampling time
    samples = [(1, 5000.0, 10.0, 9.0), (2, 5000.0, 20.0, 19.0), (4, 5000.0, 7.0, 7.0),
               (1, 10000.0, 11.0, 10.0)]
    assert rdma.flow_samples(samples, 3) == [(0, 5000.0, 30.0, 28.0), (1, 5000.0, 7.0, 7.0),
                                             (0, 10000.0, 11.0, 10.0)]
    assert rdma.flow_samples(samples, 1)[0] == (0, 5000.0, 10.0, 9.0)


def test_analyse_warns_of_lost_bytes():
    rows = [{"scheme": "dcqcn", "flow": 0, "fct_us": 100.0, "slowdown": 1.2, "rx_bytes": 10,
             "size_bytes": 10, "pauses": 0, "switch_drops": 0},
            {"scheme": "dcqcn", "flow": 1, "fct_us": None, "slowdown": None, "rx_bytes": 5,
             "size_bytes": 10, "pauses": 0, "switch_drops": 0}]
    headline, warnings = rdma.analyse(rows)
    assert headline["dcqcn_complete"] == "1/2" and headline["dcqcn_slowdown_median"] == 1.2
    assert warnings == ["rdma dcqcn: flow 1 received 5 of 10 bytes"]


def test_a_fan_in_is_senders_times_flows_into_one_receiver():
    exp = loads(spec(flows=[], fan_in={"senders": 3, "size_bytes": 1000,
                                       "flows_per_sender": 2}))[0].experiments[0]
    topo = leafspine(spines=1, leaves=2, hosts_per_leaf=2, host_rate=100, uplink_rate=50)
    flows = exp.all_flows(topo)
    assert [(f.src, f.dst) for f in flows] == [("h1", "h4"), ("h1", "h4"), ("h2", "h4"),
                                               ("h2", "h4"), ("h3", "h4"), ("h3", "h4")]
    assert all(f.incast and f.size_bytes == 1000 for f in flows)


def test_ideals_take_the_least_round_trip_of_a_path_length():
    """A path length's base round trip is the least any of its flows' packets took (the
    ping's when none was timed), the same for every scheme."""
    def row(scheme, links, rtt_min, ping, size=4096, headers=44):
        return {"scheme": scheme, "size_bytes": size, "roce_mtu": 4096, "fct_us": 1000.0,
                "headers": headers,
                "bottleneck_mbps": 100.0, "path_links": links, "ping_rtt_us": ping,
                "rtt_min_us": rtt_min}
    rows = [row("a", 4, 420.0, 500), row("b", 4, 400.0, 510), row("a", 2, None, 300),
            row("tcp-dctcp", 4, None, 520, headers=52)]
    rdma.set_ideals(rows)
    assert [r["base_rtt_us"] for r in rows] == [400.0, 400.0, 300, 400.0]
    wire_us = (4096 + 58) * 8 / 100
    assert rows[0]["ideal_fct_us"] == pytest.approx(wire_us + 400, abs=0.1)
    # a TCP flow: the RoCE flows' base round trip, its own headers on the wire
    assert rows[3]["ideal_fct_us"] == pytest.approx((4096 + 66) * 8 / 100 + 400, abs=0.1)
    assert rows[0]["slowdown"] == pytest.approx(1000 / (wire_us + 400), abs=1e-4)


def test_fct_table_buckets_by_size_deciles():
    rows = [{"scheme": s, "size_bytes": n, "slowdown": float(n % 7 + 1)} for s in ("x", "y")
            for n in range(1, 101)]
    table = rdma.fct_table(rows)
    assert len(table) == 20 and table[0][:5] == ["x", 1, 10, 10, 10]
    assert table[9][1:3] == [91, 100]
    assert rdma.percentile([1.0, 2.0, 3.0, 4.0], 95) == 4.0
    assert rdma.percentile([float(i) for i in range(1, 101)], 95) == 95.0
    # a flow that did not complete is the slowest: a percentile on it is not reached
    assert rdma.percentile([None, 1.0, 2.0, 3.0], 75) == 3.0
    assert rdma.percentile([None, 1.0, 2.0, 3.0], 95) is None
    headline, _ = rdma.analyse([dict(r, fct_us=1.0, rx_bytes=r["size_bytes"], pauses=0,
                                      switch_drops=0) for r in rows])
    assert headline["x_slowdown_p95"] == 7.0 and headline["x_short_slowdown_p95"] == 7.0


def test_convergence_and_shares_from_the_rates():
    """Two flows on a 100 Mb/s bottleneck, the second joining at 1 s: their sending rates
    at 58/42 for the first 0.3 s together, then 50/50 until the first ends at 2 s."""
    rows = [{"scheme": "s", "flow": f, "start_ms": start, "fct_us": 2e6 - start * 1e3,
             "bottleneck_mbps": 100.0, "roce_mtu": 4096} for f, start in ((0, 0.0), (1, 1000.0))]
    rates = []
    for k in range(400):                       # every 5 ms
        t = k * 0.005
        if t < 1.0:
            rates.append(["s", 0, t, 100.0, 100.0])
            continue
        a = 58.0 if t < 1.29 else 50.0   # clear of the window edge
        rates += [["s", 0, t, a, a], ["s", 1, t, 100 - a, 100 - a]]
    assert rdma.convergence_s(rates, rows, "s") == 0.3
    assert rdma.convergence_s(rates, rows, "s", tolerance=0.2) == 0.0
    assert rdma.shared_shares(rates, rows, "s") == [pytest.approx(1.046, abs=0.002),
                                                    pytest.approx(0.954, abs=0.002)]
    headline, _ = rdma.analyse([dict(r, slowdown=1.0, rx_bytes=1, size_bytes=1, pauses=0,
                                      switch_drops=0) for r in rows], rates)
    # 0.3 s at 100 Mb/s in packets of 4096 + 58 bytes: 903 packet times
    assert headline["s_converged_s"] == 0.3 and headline["s_converged_pkt_times"] == 903
    # in Mb/s: 0.29 s of 58/42 in the 1 s together, then 50/50; settled, 50/50 only
    assert headline["s_together_mbps"] == [pytest.approx(52.3, abs=0.1),
                                           pytest.approx(47.7, abs=0.1)]
    assert headline["s_together_second_half_mbps"] == [50.0, 50.0]
    assert rdma.convergence_s(rates, rows[:1], "s") is None    # one flow: nothing to share


def test_queue_stats_are_time_weighted_and_binned_in_packets():
    """A queue empty 90% of the time, at 2 packets (1500 B) 8.5% and at 10 packets 1.5%:
    its median is empty, its 95th percentile 1500 B, its 99th and its most 10,000 B."""
    segs = [(0.9, 0, 0), (0.085, 2, 1500), (0.015, 10, 10_000)]
    sampled, mean, p50, p95, p99, most, *shares = rdma.queue_stats(segs)
    assert sampled == 1.0 and mean == round(0.085 * 1500 + 0.015 * 10_000)
    assert (p50, p95, p99, most) == (0, 1500, 10_000, 10_000)
    # bins by the packets held, 0 | 1 | 2-3 | 4-7 | 8-15 | ...
    assert shares == [0.9, 0.0, 0.085, 0.0, 0.015, 0.0, 0.0, 0.0]
    assert len(rdma.QUEUE_HEADER) == 9 + len(shares)
    assert rdma.QUEUE_HEADER[9:11] == ["share_0_pkts", "share_1_pkts"]
    assert rdma.QUEUE_HEADER[-2:] == ["share_32_63_pkts", "share_64_up_pkts"]
    assert rdma.queue_stats([])[0] == 0.0
    rows = [["hpcc", "s1-eth1", 4_000_000, *rdma.queue_stats(segs)],     # bytes sent, queue
            ["hpcc", "s1-eth2", 0, *rdma.queue_stats([(1.0, 0, 0)])]]
    assert rdma.queue_headline(rows) == {"hpcc_queue_p99_bytes": 10_000,
                                         "hpcc_queue_max_bytes": 10_000}


def test_an_engine_that_lost_its_pace_makes_the_phase_cpu_bound():
    """A flow that lost more than 5% of its completion to its engine's late wake-ups is the
    machine's number, not the network's: the worst such flow is named; TCP's rows (no
    engine) and unfinished flows are never the verdict's."""
    rows = [{"src": "h1", "flow": 0, "fct_us": 100_000.0, "pace_lost_us": 4500.0},
            {"src": "h2", "flow": 1, "fct_us": None, "pace_lost_us": 9000.0},
            {"src": "h3", "flow": 2, "fct_us": 50_000.0, "pace_lost_us": None}]
    assert rdma.late_engines(rows) is None
    rows.append({"src": "h4", "flow": 3, "fct_us": 200_000.0, "pace_lost_us": 11000.0})
    rows.append({"src": "h2", "flow": 4, "fct_us": 100_000.0, "pace_lost_us": 8000.0})
    why = rdma.late_engines(rows)
    assert why is not None and "h2" in why and "flow 4" in why and "8.0 ms" in why, why
    assert "8%" in why and "2 flow(s)" in why, why
    # what it says of the cause: the engine's own wait for a core, the hypervisor's steal
    rows[-1]["pace_lost_cpu_us"] = 6000.0
    why = rdma.late_engines(rows, steal=0.012)
    assert why is not None and "6.0 ms of it running or waiting for a core" in why, why
    assert "the hypervisor took 1.2% of the cores" in why, why


def test_nscc_is_a_scheme_with_its_window_from_the_measured_network():
    """NSCC (UEC-like): switches mark its class, it needs the base round trip, has its own
    window, and its constants go to the engine as shares of the BDP and round trip."""
    assert rdma.parse_scheme("nscc+irn") == rdma.Scheme("nscc", False, True, False)
    with pytest.raises(ValueError, match="nscc has its own window"):
        rdma.parse_scheme("nscc+w")
    exp = loads(spec(schemes=["nscc+irn"]))[0].experiments[0]
    assert rdma.reacts_to_ecn(exp, "nscc") and not rdma.telemetry(exp, "nscc")
    assert rdma.rdma_qos(exp, "nscc").classes[1].ecn is not None
    eng = rdma.host_engine(exp, "nscc+irn", "10.0.0.1", 100.0, [100.0], base_rtt_us=800.0)
    line = next(x for x in eng.text().splitlines() if x.startswith("nscc "))
    f = line.split()
    # 5 packets of 4086 bytes in the reference BDP (100 Gb/s x 12 us = 150 kB) ...
    assert float(f[1]) == pytest.approx(5 * 4086 / 150_000)
    assert float(f[8]) == pytest.approx(1 / 12)                 # 1 us of 12
    assert f[10:12] == ["3", "1.5"] and f[-1] == "800000"          # gate, 1.5 BDP, T
    with pytest.raises(rdma.TestbedError, match="no base round trip"):
        rdma.host_engine(exp, "nscc", "10.0.0.1", 100.0, [100.0])


def test_a_job_whose_worst_rank_lost_its_pace_is_cpu_bound():
    """A job's row (parallel or jobs): its worst rank's lost sending against its run, the
    iterations times the median; more than 5% names it, none or less does not."""
    from testbed.results.verdict import late_rank
    assert late_rank({"roce_pace_lost_us": 500_000.0, "iter_s_median": 1.0}, 10) is None
    why = late_rank({"roce_pace_lost_us": 550_000.0, "iter_s_median": 1.0}, 10)
    assert why is not None and "CPU-bound" in why and "550 ms" in why, why
    assert late_rank({"iter_s_median": 1.0}, 10) is None
    why = late_rank({"roce_pace_lost_us": 550_000.0, "roce_pace_lost_cpu_us": 50_000.0,
                     "machine_steal_mean": 0.004, "iter_s_median": 1.0}, 10)
    assert why is not None and why.startswith("CPU-bound"), why
    assert "up to 50 ms running or waiting" in why and "took 0.4% of the cores" in why, why
    assert late_rank({"roce_pace_lost_us": 5.0, "iter_s_median": None}, 10) is None
