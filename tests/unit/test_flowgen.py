"""Generated RDMA workloads (testbed/workloads/model/flowgen.py): the CDFs as the HPCC code
reads them, Poisson arrivals that offer the asked load, incasts at their share, and the
rdma experiment's use of them."""
from __future__ import annotations

import random

import pytest

from testbed.experiments import rdma
from testbed.plan import fluid_rates
from testbed.spec import SpecError, loads
from testbed.workloads.model.flowgen import (
    load_cdf,
    offered_load,
    parse_cdf,
    poisson_flows,
)
from topologies import leafspine


def test_shipped_cdfs_have_the_hpcc_codes_means():
    """The means custom_rand.py's getAvg computes (trapezoids, worked out by hand): 1.71 MB
    for web search, 0.12 MB for Hadoop; a draw at a percentile is linear between points."""
    ws, fb = load_cdf("websearch"), load_cdf("fb_hadoop")
    # web search: (0+10k)/2*15 + (10k+20k)/2*5 + ... + (10M+30M)/2*3, over 100
    assert ws.mean == pytest.approx(171_125_000 / 100, rel=1e-9)
    assert fb.mean == pytest.approx(120_420.75, rel=1e-9)
    assert ws.size_at(15) == 10_000 and ws.size_at(17.5) == 15_000
    assert ws.size_at(100) == 30_000_000 and ws.size_at(0) == 0
    rng = random.Random(3)
    draws = [ws.draw(rng) for _ in range(40_000)]
    assert sum(draws) / len(draws) == pytest.approx(ws.mean, rel=0.05)


@pytest.mark.parametrize("text,message", [
    ("0 0\n100 50\n50 100\n", "line 3: not monotone"),
    ("0 0\n100 60\n200 50\n", "line 3: not monotone"),
    ("0 0\n100 90\n", "from a point at 0 percent to one at 100"),
    ("0 0\nabc 100\n", "line 2: two numbers"),
])
def test_bad_cdfs_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_cdf(text, "w.cdf")


def test_poisson_arrivals_offer_the_load_and_incasts_their_share():
    hosts = [f"h{i}" for i in range(8)]
    rates = dict.fromkeys(hosts, 100.0)
    cdf = load_cdf("fb_hadoop")
    flows = poisson_flows(hosts, rates, cdf, 0.3, 60_000, seed=1)
    assert offered_load(flows, rates, 60_000) == pytest.approx(0.3, rel=0.1)
    assert all(f.src != f.dst and 0 <= f.start_ms < 60_000 for f in flows)
    assert flows == poisson_flows(hosts, rates, cdf, 0.3, 60_000, seed=1)   # seeded
    assert flows != poisson_flows(hosts, rates, cdf, 0.3, 60_000, seed=2)
    mixed = poisson_flows(hosts, rates, cdf, 0.3, 60_000, seed=1, incast_senders=4,
                          incast_bytes=20_000, incast_share=0.1)
    inc = [f for f in mixed if f.incast]
    assert offered_load(mixed, rates, 60_000) == pytest.approx(0.3, rel=0.1)
    assert offered_load(inc, rates, 60_000) == pytest.approx(0.03, rel=0.2)
    events = {}
    for f in inc:
        events.setdefault(f.start_ms, set()).add((f.src, f.dst))
    assert all(len(e) == 4 and len({d for _, d in e}) == 1 for e in events.values())
    scaled = poisson_flows(hosts, rates, cdf, 0.3, 60_000, seed=1, size_scale=0.1)
    assert len(scaled) == pytest.approx(10 * len(flows), rel=0.1)   # 10x smaller, 10x more


def spec(**workload):
    return {"name": "w", "topology": {"kind": "leafspine", "params": {
        "spines": 1, "leaves": 2, "hosts_per_leaf": 2, "host_rate": 100, "uplink_rate": 100}},
        "links": {"mtu_bytes": 9000},
        "experiments": [{"type": "rdma", "schemes": ["dcqcn"],
                         "workload": {"cdf": "fb_hadoop", "duration_ms": 500, **workload}}]}


def test_a_workload_becomes_the_experiments_flows():
    exp = loads(spec(pattern="stride:2"))[0].experiments[0]
    topo = leafspine(spines=1, leaves=2, hosts_per_leaf=2, host_rate=100,
                           uplink_rate=100)
    flows = exp.all_flows(topo)
    assert flows and all(f.dst == {"h1": "h3", "h2": "h4", "h3": "h1", "h4": "h2"}[f.src]
                         for f in flows)
    turn = loads(spec(pattern="all_to_all"))[0].experiments[0].all_flows(topo)
    firsts = [f.dst for f in turn if f.src == "h1"][:3]
    assert firsts == ["h2", "h3", "h4"]


BAD_WORKLOADS = [
    ({"load": 1.0}, "experiments[0].workload.load: a share of the host links in (0, 1)"),
    ({"cdf": "nowhere.txt"}, "experiments[0].workload.cdf: one of websearch, fb_hadoop"),
    ({"pattern": "zigzag"}, "experiments[0].workload.pattern: unknown pattern 'zigzag'"),
    ({"incast": {"senders": 4, "size_bytes": 1000}},
     "experiments[0].workload.incast.senders: 1..3"),
    ({"duration_ms": 0}, "experiments[0].workload: duration_ms and size_scale"),
]


@pytest.mark.parametrize("fields,message", BAD_WORKLOADS)
def test_bad_workloads_name_the_field(fields, message):
    with pytest.raises(SpecError) as err:
        loads(spec(**fields))
    assert message in str(err.value)


def test_a_cdf_file_that_is_not_monotone_names_its_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("0 0\n500 40\n400 100\n")
    with pytest.raises(SpecError, match=r"workload.cdf: line 3: not monotone"):
        loads(spec(cdf=str(bad)))


def test_the_plan_caps_a_flow_at_its_offered_rate():
    """Demand-capped max-min: two flows share a 100 Mb/s uplink; one offers 20 Mb/s and
    gets it, the other takes the rest."""
    topo = leafspine(spines=1, leaves=2, hosts_per_leaf=2, host_rate=100,
                           uplink_rate=100)
    flows = [("h1", "h3"), ("h2", "h4")]
    (a, _), (b, _) = fluid_rates(topo, flows, [20.0, float("inf")])
    assert a == pytest.approx(20.0) and b == pytest.approx(80.0)
    (a, _), (b, _) = fluid_rates(topo, flows)
    assert a == pytest.approx(50.0) and b == pytest.approx(50.0)
    exp = loads(spec(load=0.3))[0].experiments[0]
    (load,) = rdma.loads(loads(spec(load=0.3))[0], topo, exp, None)
    assert len(load.flows) == 12 and sum(load.demands_mbps) == pytest.approx(4 * 30.0)
