"""The path-aware iteration model (workloads/model/parallel/fluid.py) and the shares it
rests on (topologies/fairshare.py): values worked out by hand, the analytical model where
nothing contends, and contention where paths meet."""
from __future__ import annotations

import random

import pytest

from controllers.routing import plan as routing_plan
from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network, predict, sent_bytes
from testbed.workloads.model.parallel.desc import load_models
from testbed.workloads.model.parallel.fluid import (
    ALL_TO_ALL,
    RING_ALLREDUCE,
    Collective,
    Replay,
    flops_time,
    program,
    programs,
    replay,
)
from testbed.workloads.model.parallel.layout import Layout, place
from testbed.workloads.model.parallel.schedule import simulate
from topologies import build
from topologies.fairshare import class_maxmin, weighted_maxmin

GB = 1e9


def test_weighted_shares_by_hand():
    """A sprayed flow puts half its rate on each of two links; a ring of two members
    crossing one link counts twice there; a flow on no link is not limited."""
    cap = {"a": 1.0, "b": 1.0}
    assert weighted_maxmin(cap, [{"a": 1}, {"a": 0.5, "b": 0.5}]) == pytest.approx([2 / 3] * 2)
    assert weighted_maxmin(cap, [{"a": 2}, {"a": 1}]) == pytest.approx([1 / 3] * 2)
    assert weighted_maxmin(cap, [{"a": 1}, {"b": 1}, {}]) == [1.0, 1.0, float("inf")]


@pytest.mark.parametrize("seed", range(4))
def test_weighted_shares_are_max_min_fair(seed):
    """On random links and flows: the rates fit every link, and every flow has a
    bottleneck, a full link on which no flow gets more than it (what max-min means)."""
    rng = random.Random(seed)
    for _ in range(200):
        cap = {e: rng.choice([1.0, 2.0, rng.uniform(0.5, 10)]) for e in range(rng.randint(1, 20))}
        usage = [{e: rng.choice([1.0, 2.0, 0.5, rng.uniform(0.01, 3)])
                  for e in rng.sample(sorted(cap), rng.randint(1, min(4, len(cap))))}
                 for _ in range(rng.randint(1, 30))]
        rates = weighted_maxmin(cap, usage)
        load = {e: sum(r * u.get(e, 0.0) for r, u in zip(rates, usage)) for e in cap}
        assert all(load[e] <= cap[e] * (1 + 1e-9) for e in cap)
        for r, u in zip(rates, usage):
            assert any(load[e] >= cap[e] * (1 - 1e-9) and
                       all(r >= r2 * (1 - 1e-9) for r2, u2 in zip(rates, usage) if e in u2)
                       for e in u), (r, u)


def test_round_robin_classes_by_hand():
    """Two classes on a link get half each, however many flows each has; a class limited
    elsewhere leaves the rest of the link to the other."""
    cap = {"a": 1.0, "b": 0.25}
    three = [{"a": 1.0}] * 3
    got = class_maxmin(cap, [{"a": 1.0}] + three, ["x", "y", "y", "y"])
    assert got == pytest.approx([1 / 2] + [1 / 6] * 3)
    got = class_maxmin(cap, [{"a": 1.0, "b": 1.0}] + three, ["x", "y", "y", "y"])
    assert got == pytest.approx([1 / 4] * 4)
    # one class: per flow, as weighted_maxmin
    assert class_maxmin(cap, three, ["y"] * 3) == pytest.approx([1 / 3] * 3)


def _star(n: int, bps: float) -> dict:
    """n hosts on one switch: each host link its own, both directions."""
    out = {}
    for i in range(n):
        out[(f"h{i}", "s")] = out[("s", f"h{i}")] = bps
    return out


def _via_switch(src: int, dst: int, via: str) -> dict:
    return {(f"h{src}", "s"): 1.0, ("s", f"h{dst}"): 1.0}


def test_replay_matches_the_analytical_model_where_nothing_contends():
    """One rank per host on a non-blocking switch: data parallel alone, and a two-stage
    pipeline, take what cost.predict says (the same rings, steps and latencies)."""
    m = load_models()["gpt-tiny"]
    bps, lat, spf = 1e6, {"dp": 1e-4, "pp": 2e-4, "tp": 5e-5}, 1e-10
    for lay, micro in ((Layout(dp=4), 1), (Layout(pp=2, dp=2), 4), (Layout(tp=2, dp=2), 2)):
        plan = JobShape(m, lay, micro_batches=micro)
        got = replay(plan, flops_time(spf), _star(lay.world, bps), _via_switch, lat)
        want = predict(plan, Network(dict.fromkeys(KINDS, bps), lat), spf)
        # the replay runs a ring step's latency per layer's allreduce, cost.py one per
        # stage: allow those
        layers = len(plan.stage_work(0))
        slack = 2 * (lay.dp - 1) * lat["dp"] * layers
        assert want["iteration_s"] <= got["iteration_s"] <= want["iteration_s"] + slack, lay
        assert got["sync_s"] == pytest.approx(want["sync_s"], abs=slack), lay


def test_pipeline_alone_is_the_schedule_replayed():
    """Pipeline only (no collectives): the stages' compute and their transfers, one at a
    time on each connection, as schedule.simulate replays them."""
    m = load_models()["gpt-tiny"]
    plan = JobShape(m, Layout(pp=2), micro_batches=4)
    spf, bps = 1e-10, 2e6
    act = plan.stage_work(0)[-1].act_elems * plan.dtype_bytes
    got = replay(plan, flops_time(spf), _star(2, bps), _via_switch, {})
    fwd = [sum(w.fwd_flops for w in plan.stage_work(s)) * spf for s in (0, 1)]
    bwd = [sum(w.bwd_flops for w in plan.stage_work(s)) * spf for s in (0, 1)]
    want = simulate("1f1b", 2, 4, fwd, bwd, act / bps)
    assert got["pipeline_s"] == pytest.approx(want["iteration_s"], rel=1e-9)


def test_rings_that_share_a_link_share_its_rate():
    """Two two-member rings whose flows all cross one link take twice as long as one
    ring alone; a ring runs at its slowest member's rate."""
    cap = {("h0", "x"): 1.0, ("x", "h1"): 1.0, ("h1", "x"): 1.0, ("x", "h0"): 1.0}

    def one_link(src, dst, via):
        return {(f"h{src}", "x"): 1.0, ("x", f"h{dst}"): 1.0}

    def run(groups):
        progs = [[] for _ in range(2)]
        for g in groups:
            for r in (0, 1):
                progs[r] += [("mark", "start"),
                             ("coll", Collective("dp", "dp", g, RING_ALLREDUCE, 2.0)),
                             ("mark", "end")]
        return Replay(progs, cap, one_link, {}).run()
    alone = run([(0, 1)])
    assert alone[0][-1][1] == pytest.approx(2.0)  # 2(n-1)/n S = 2 bytes at 1 byte/s
    progs = [[("coll", Collective("dp", "dp", (0, 1), RING_ALLREDUCE, 2.0)), ("mark", "a")],
             [("coll", Collective("dp", "dp", (0, 1), RING_ALLREDUCE, 2.0)), ("mark", "a")],
             [("coll", Collective("tp", "tp", (2, 3), RING_ALLREDUCE, 2.0)), ("mark", "b")],
             [("coll", Collective("tp", "tp", (2, 3), RING_ALLREDUCE, 2.0)), ("mark", "b")]]

    def shared(src, dst, via):   # ranks 2, 3 on the same hosts as 0, 1
        return one_link(src % 2, dst % 2, via)
    both = Replay(progs, cap, shared, {}).run()
    assert [m[0][1] for m in both] == pytest.approx([4.0] * 4)
    # as two classes served round-robin: the same (each gets half)
    both = Replay(progs, cap, shared, {}, class_of=lambda k: k).run()
    assert [m[0][1] for m in both] == pytest.approx([4.0] * 4)


def test_an_all_to_all_ends_with_its_last_flow():
    """Three members, each sending S/3 to each other; member 0's host link is half as fast:
    its two outgoing flows finish last, and everyone leaves with them (plus one step)."""
    cap = _star(3, 1.0)
    cap[("h0", "s")] = 0.5
    coll = Collective("ep", "ep", (0, 1, 2), ALL_TO_ALL, 3.0)
    progs = [[("coll", coll), ("mark", "end")] for _ in range(3)]
    marks = Replay(progs, cap, _via_switch, {"ep": 0.1}).run()
    # h0's two flows share 0.5: 0.25 each for 1 byte -> 4 s, then the step's latency
    assert [m[0][1] for m in marks] == pytest.approx([4.1] * 3)


def test_spread_placement_contends_where_packed_does_not():
    """A 3D job on a 2:1 oversubscribed leaf-spine under ECMP: spread across leaves, its
    tensor-parallel rings cross the spines and share the uplinks with the data-parallel
    ones, so the replay's iteration is longer than packed; the spray removes the hash's
    unlucky draws (never slower than the mean draw)."""
    from testbed.experiments.parallel.model import link_capacity, usage_draw
    topo = build("leafspine", spines=2, leaves=4, hosts_per_leaf=4, host_rate=20,
                 uplink_rate=20)
    m = load_models()["gpt-tiny"]
    lay = Layout(dp=2, tp=2, pp=4)
    plan = JobShape(m, lay, micro_batches=4)
    rp = routing_plan(topo, "ecmp")
    cap = link_capacity(topo, 1.0)
    lat = {"tp": 1e-4, "pp": 1e-4, "dp": 1e-4}

    def it(hosts, entropy, seed=0):
        use = usage_draw(topo, rp, hosts, entropy, 1, random.Random(seed))
        return replay(plan, flops_time(1e-11), cap, use, lat)["iteration_s"]
    packed, spread = place(topo, 16, "packed"), place(topo, 16, "spread")
    assert it(spread, "tcp") > 1.2 * it(packed, "tcp")
    draws = [it(spread, "tcp", seed) for seed in range(4)]
    assert it(spread, "spray") <= sum(draws) / len(draws) * 1.0001
    # every rank's program sends what cost.py counts
    for r in range(lay.world):
        sent = sum(c.flows()[0][2] for op in program(plan, r, flops_time(0.0), 1)
                   if op[0] == "coll"
                   for c in [op[1]] if c.pattern != ALL_TO_ALL)
        want = sent_bytes(plan, r)
        assert sent == pytest.approx(want["tp"] + want["dp"]), r
    assert len(programs(plan, flops_time(0.0), 2)) == lay.world


def test_a_banked_link_lets_its_burst_through_then_its_rate():
    """An idle link with a bucket of B bytes: a transfer of S > B takes (S - B)/rate (the
    bucket drains at peak minus rate while it lasts); the next, sent at once, finds the
    bucket empty and takes S/rate; after an idle spell the bucket has refilled."""
    cap = {("h0", "s"): 1.0, ("s", "h1"): 1.0}
    burst = {("h0", "s"): 3.0, ("s", "h1"): 3.0}

    def via(src, dst, kind):
        return {("h0", "s"): 1.0, ("s", "h1"): 1.0}
    sender = [("send", 1, 10.0, "a", 0), ("sends",), ("mark", "a"),
              ("send", 1, 10.0, "b", 0), ("sends",), ("mark", "b"),
              ("compute", 5.0), ("send", 1, 10.0, "c", 0), ("sends",), ("mark", "c")]
    receiver = [("recv", "a"), ("recv", "b"), ("recv", "c")]
    marks = Replay([sender, receiver], cap, via, {}, burst=burst).run()
    t = dict(marks[0])
    assert t["a"] == pytest.approx(7.0)
    assert t["b"] - t["a"] == pytest.approx(10.0)
    assert t["c"] - t["b"] == pytest.approx(5.0 + 7.0)
    # without buckets, every transfer at the rate
    t = dict(Replay([sender, receiver], cap, via, {}).run()[0])
    assert (t["a"], t["b"], t["c"]) == pytest.approx((10.0, 20.0, 35.0))


def test_a_gloo_send_waits_for_the_posted_receive():
    """With posted receives (Gloo), a send of iteration 1 waits until its receiver has
    started iteration 1; without (RoCE WRITEs), it leaves at once."""
    cap = {("h0", "s"): 1.0, ("s", "h1"): 1.0}

    def via(src, dst, kind):
        return {("h0", "s"): 1.0, ("s", "h1"): 1.0}
    sender = [("mark", "start"), ("send", 1, 2.0, "x", 0), ("sends",)]
    receiver = [("compute", 5.0), ("mark", "start"), ("recv", "x"), ("mark", "got")]
    for posted, got in ((True, 7.0), (False, 5.0)):
        marks = Replay([sender, receiver], cap, via, {}, posted_recv=posted).run()
        assert dict(marks[1])["got"] == pytest.approx(got), posted
