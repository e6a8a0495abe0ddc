"""Max-min fair shares on fixed paths, and each fabric's permutation model drawn from the
paths its routing gives (controllers/trace.py): known values worked out by hand."""
import pytest

from controllers import trace
from controllers.routing import plan
from topologies import bcube, dcell, dumbbell, fattree, nonblocking, torus, vl2
from topologies.fairshare import maxmin, proportional, sampled_totals
from topologies.patterns import stride


def test_progressive_filling_by_hand():
    """Dumbbell, 3 senders on a 20 Mb/s bottleneck, one of them also limited to 5 Mb/s by
    nothing but its share: 20/3 each; a flow that shares nothing gets its NIC."""
    topo = dumbbell(3, 3, access_rate_mbps=100, bottleneck_rate_mbps=20)
    across = [("h1", "s1", "s2", "h4"), ("h2", "s1", "s2", "h5"), ("h3", "s1", "s2", "h6")]
    assert maxmin(topo, across) == pytest.approx([20 / 3] * 3)
    local = [("h1", "s1", "h2")]
    assert maxmin(topo, across[:2] + local) == pytest.approx([10, 10, 90])
    # two flows into one host: its NIC (100) is their bottleneck, 50 each
    assert maxmin(nonblocking(4), [("h1", "s1", "h3"), ("h2", "s1", "h3")]) == \
        pytest.approx([50, 50])
    assert maxmin(topo, across, rate_of=lambda r: r / 2) == pytest.approx([10 / 3] * 3)


def test_proportional_fairness_by_hand():
    """A parking lot: one flow crosses two busy links, each shared with a flow of its own.
    Max-min gives all three half a link; proportional fairness (max sum of logs) gives the
    long flow a third and the short ones two thirds: more in total, as TCP takes."""
    topo = dumbbell(2, 2, access_rate_mbps=20, bottleneck_rate_mbps=20)
    paths = [("h1", "s1", "s2", "h3"), ("h1", "s1", "h2"), ("h4", "s2", "h3")]
    assert maxmin(topo, paths) == pytest.approx([10, 10, 10])
    assert proportional(topo, paths) == pytest.approx([20 / 3, 40 / 3, 40 / 3], rel=1e-4)
    # nothing shared: each flow its path's narrowest link, as max-min
    assert proportional(topo, paths[1:]) == pytest.approx([20, 20], rel=1e-4)


def test_not_linked_is_an_error():
    with pytest.raises(ValueError, match="h1 and s2 are not linked"):
        maxmin(dumbbell(), [("h1", "s2", "h2")])


def model(topo, mode, step, samples=300):
    p = plan(topo, mode)
    hosts = [h.name for h in topo.hosts]
    choices = [trace.paths(topo, p, a, b) for a, b in stride(hosts, step)]
    totals = sampled_totals(topo, choices, samples, seed=1)
    return sum(totals) / len(totals) / (100 * len(hosts))


def test_known_permutation_models():
    # a spanning tree's k=4 Fat-Tree carries stride-8 through one core link each way
    assert model(fattree(4), "single", 8) == pytest.approx(0.25)
    # ECMP's hash collisions on the same (the measured ~0.60, docs/BENCHMARKS.md)
    assert model(fattree(4), "ecmp", 8) == pytest.approx(0.62, abs=0.03)
    # a 4x4 torus, dimension order, stride 8 (two rows over): each ring link carries two
    # flows one way, so every flow gets half its NIC
    assert model(torus(4, 2), "dor", 8) == 0.5
    # DCell(3, 1): stride-1 pairs in one DCell_0 share nothing but the switch; the last
    # server of each cell sends to the next cell and shares the level-1 link's server
    assert model(dcell(3, 1), "dcell", 1) == pytest.approx(0.75)
    # VL2 (4, 4, 4): a ToR has 2 uplinks for 4 hosts; VLB hashes twice
    vlb = model(vl2(4, 4, 4), "vlb", 8)
    assert 0.25 < vlb <= 0.5


def test_shares_follow_the_buckets():
    topo = fattree(4)
    shares = trace.paths(topo, plan(topo, "ecmp"), "h1", "h16")
    assert len(shares) == 4 and all(v == pytest.approx(0.25) for v in shares.values())
    topo = vl2(4, 4, 4)
    shares = trace.paths(topo, plan(topo, "vlb"), "h1", "h16")
    assert sum(shares.values()) == pytest.approx(1)
    assert len(shares) == 8  # 2 uplinks x 2 intermediates x 2 aggregation switches down


def test_a_dropping_plan_is_reported():
    topo = fattree(4)
    p = plan(topo, "ecmp")
    broken = type(p)(mode="ecmp", groups=p.groups,
                     rules=tuple(r for r in p.rules if r.dpid != topo.switch("e1").dpid
                                 or r.priority != 100))
    with pytest.raises(trace.TraceError, match="e1 drops traffic to h2"):
        trace.paths(topo, broken, "h1", "h2")


def test_a_hashed_ring_shares_links_that_its_fluid_model_does_not():
    """BCube's rings measured about twice their fluid model (docs/FIDELITY.md): each ring
    flow takes one hashed path, and two of them on one relay link is the usual draw."""
    from testbed.experiments.training.model import ring_link_load
    ring = ["h1", "h2", "h3", "h5", "h6", "h7", "h9", "h10", "h11", "h13", "h14", "h15"]
    bcube4 = bcube(4, 1)
    assert ring_link_load(bcube4, ring) == 1.0  # fluid: every flow's links to itself
    assert 1.7 < ring_link_load(bcube4, ring, "ecmp") < 2.0
    assert ring_link_load(fattree(4), ring, "ecmp") == 1.0  # no ring flows collide
    assert ring_link_load(torus(4, 2), ring, "dor") == 1.0  # one path each: one draw


def test_the_permutation_rows_model_each_fabric_as_it_is_routed():
    from testbed.config.units import tcp_payload_fraction
    from testbed.experiments.permutation.model import routed_model
    hosts = [f"h{i + 1}" for i in range(16)]
    one = nonblocking(16)
    mean, low, high, fair = routed_model(one, plan(one, "single"), stride(hosts, 8), 9000, 0)
    assert mean == low == high == pytest.approx(tcp_payload_fraction(9000))
    assert fair == pytest.approx(mean)  # nothing shared: every share is the host's rate
    ft = fattree(4)
    mean, low, high, fair = routed_model(ft, plan(ft, "ecmp"), stride(hosts, 8), 9000, 0)
    assert low < mean < high  # one run is one draw of the hash
    assert fair >= mean - 0.02  # its own 50 draws; at least max-min's total on each
    assert routed_model(ft, None, stride(hosts, 8), 9000, 0) is None  # Hedera: no plan
