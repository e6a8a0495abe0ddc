"""Large-model parallelism: layout and placement, pipeline schedules, the model
descriptions, the analytical model, and real jobs on loopback."""
from __future__ import annotations

import json

import pytest

from testbed.workloads.model.parallel.cost import KINDS, JobShape, Network, predict, sent_bytes
from testbed.workloads.model.parallel.desc import ModelDesc, layer_work, load_models, stage_layers
from testbed.workloads.model.parallel.job import JobConfig, RealModel
from testbed.workloads.model.parallel.layout import Layout, place
from testbed.workloads.model.parallel.schedule import (
    actions,
    bubble_fraction,
    peak_in_flight,
    simulate,
)
from topologies import build


def test_rank_coordinates_and_groups():
    lay = Layout(dp=4, tp=2, pp=2)
    assert lay.world == 16
    assert [lay.coords(r) for r in (0, 1, 2, 3, 4)] == [(0, 0, 0), (0, 0, 1), (0, 1, 0),
                                                         (0, 1, 1), (1, 0, 0)]
    assert lay.groups("tp")[0] == [0, 1]
    assert lay.groups("pp")[0] == [0, 2]
    assert lay.groups("dp")[0] == [0, 4, 8, 12]
    for kind in ("tp", "pp", "dp"):  # every rank in exactly one group of each kind
        ranks = sorted(r for g in lay.groups(kind) for r in g)
        assert ranks == list(range(16))
    ep = Layout(dp=4, ep=2)
    assert ep.groups("ep") == [[0, 1], [2, 3]]
    assert ep.groups("edp") == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="ep"):
        Layout(dp=3, ep=2).check()


def test_packed_placement_keeps_tp_in_an_edge_and_dp_across_pods():
    topo = build("fattree", k=4)
    lay = Layout(dp=4, tp=2, pp=2)
    hosts = place(topo, lay.world, "packed")
    edge = {h.name: topo.ports_of(h.name)[0][1] for h in topo.hosts}
    pod = {h.name: h.label("pod") for h in topo.hosts}
    for g in lay.groups("tp"):
        assert len({edge[hosts[r]] for r in g}) == 1
    for g in lay.groups("pp"):
        assert len({pod[hosts[r]] for r in g}) == 1
    for g in lay.groups("dp"):
        assert len({pod[hosts[r]] for r in g}) == 4
    spread = place(topo, lay.world, "spread")
    for g in lay.groups("tp"):
        assert len({pod[spread[r]] for r in g}) == 2
    assert sorted(spread) == sorted(hosts)
    rnd = place(topo, 8, "random", seed=1)
    assert rnd == place(topo, 8, "random", seed=1) and len(set(rnd)) == 8
    assert place(topo, 2, ["h3", "h1"]) == ["h3", "h1"]
    for bad, msg in ((["h1", "h1"], "twice"), (["h1", "zz"], "no host"), (["h1"], "ranks")):
        with pytest.raises(ValueError, match=msg):
            place(topo, 2, bad)
    with pytest.raises(ValueError, match="hosts"):
        place(topo, 17, "packed")


def test_schedules_bubble_and_memory():
    for p, m in ((1, 4), (2, 4), (4, 4), (4, 8), (4, 16)):
        for sched in ("gpipe", "1f1b"):
            r = simulate(sched, p, m, 1.0, 2.0)
            assert r["bubble"] == pytest.approx(bubble_fraction(p, m))
            assert r["iteration_s"] == pytest.approx((m + p - 1) * 3.0)
            for s in range(p):
                acts = actions(sched, s, p, m)
                assert sorted(acts) == sorted([("F", i) for i in range(m)]
                                              + [("B", i) for i in range(m)])
        # 1F1B holds at most p micro-batches' activations (stage 0), GPipe all m
        assert max(peak_in_flight(actions("1f1b", s, p, m)) for s in range(p)) == min(p, m)
        assert peak_in_flight(actions("gpipe", 0, p, m)) == m
    assert simulate("gpipe", 4, 4, 1.0, 2.0, transfer_s=0.5)["iteration_s"] > 21.0


def test_model_descriptions_and_bad_input():
    models = load_models()
    assert {"gpt2-small", "gpt3-1.3b", "moe-gpt2-8e"} <= set(models)
    g = models["gpt3-1.3b"]
    total = sum(w.params for w in layer_work(g, Layout()))
    assert total == pytest.approx(12 * 24 * 2048**2)  # 12 h^2 per layer
    assert stage_layers(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    ok = Layout(tp=2)
    g.check(ok)
    for lay, msg in ((Layout(tp=3), "tp"), (Layout(pp=25), "pp"), (Layout(dp=2, ep=2), "ep")):
        with pytest.raises(ValueError, match=msg):
            g.check(lay)
    with pytest.raises(ValueError, match="heads"):
        ModelDesc(layers=2, hidden=10, heads=3, seq=4).check(Layout())


def test_volumes_per_collective_type():
    m = load_models()["gpt-tiny"]
    dp = sent_bytes(JobShape(m, Layout(dp=4)), 0)
    fsdp = sent_bytes(JobShape(m, Layout(dp=4), zero=3), 0)
    p = sum(w.params for w in layer_work(m, Layout())) * m.dtype_bytes
    assert dp["dp"] == pytest.approx(2 * 3 / 4 * p)
    assert fsdp["fsdp"] == pytest.approx(1.5 * dp["dp"])  # FSDP: 1.5x data parallel
    tp = sent_bytes(JobShape(m, Layout(tp=2), micro_batches=2), 0)
    act = m.micro_batch * m.seq * m.hidden * m.dtype_bytes
    assert tp["tp"] == pytest.approx(m.layers * 2 * 2 * 2 * act * 2 * 1 / 2)
    pp = JobShape(m, Layout(pp=2), micro_batches=3)
    assert sent_bytes(pp, 0)["pp"] == sent_bytes(pp, 1)["pp"] == 3 * act
    moe = load_models()["moe-tiny"]
    ep = sent_bytes(JobShape(moe, Layout(dp=4, ep=4)), 0)
    assert ep["ep"] == pytest.approx(2 * 4 * 3 / 4 * act)  # 2 MoE layers, 4 all-to-alls
    r = predict(JobShape(m, Layout(pp=4), "gpipe", 4), Network(dict.fromkeys(KINDS, 1e12)), 1e-9)
    assert r["bubble"] == pytest.approx(bubble_fraction(4, 4), rel=0.01)


def _losses(rows: dict, layout: Layout) -> dict[int, list[float]]:
    """Each data-parallel replica's losses (from its last stage)."""
    out = {}
    for r, rs in rows.items():
        d, s, _ = layout.coords(r)
        if s == layout.pp - 1:
            out[d] = [row["loss"] for row in rs]
    return out


def test_real_compute_tp_pp_fsdp_match_data_parallel(tmp_path):
    """The same data and seed: the Megatron-sliced, pipelined and sharded jobs follow the
    data-parallel job's loss curve (the training experiment's DDP worker)."""
    import subprocess
    import sys

    from testbed.workloads.launch import REPO_ROOT
    from testbed.workloads.parallel.worker import local_job
    iters, width, depth = 6, 64, 3
    ddp = tmp_path / "ddp"
    subprocess.run([sys.executable, "-m", "testbed.workloads.launch", "--world", "2",
                    "--out", str(ddp), "--", "--sync", "ring", "--model", "mlp", "--width",
                    str(width), "--depth", str(depth), "--iters", str(iters), "--batch", "32",
                    "--eval-every", "0"], cwd=REPO_ROOT, check=True, capture_output=True)
    reference = {r: [json.loads(line)["loss"] for line in
                     (ddp / f"rank{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    real = RealModel(width=width, depth=depth, batch=32)
    for name, lay, extra in (("tp", Layout(dp=2, tp=2), {}),
                             ("pp-gpipe", Layout(dp=2, pp=2), dict(micro_batches=4,
                                                                  schedule="gpipe")),
                             ("fsdp", Layout(dp=2), dict(zero=3))):
        cfg = JobConfig(layout=lay, compute="real", iters=iters, real=real, **extra)
        got = _losses(local_job(cfg, tmp_path / name), lay)
        for d in (0, 1):
            assert got[d] == pytest.approx(reference[d], rel=1e-5, abs=1e-5), name


def test_experiment_model_on_a_fabric():
    """Per-type loads and core bytes for packed and spread placements (pure)."""
    from testbed.experiments.parallel.model import core_bytes, kind_flows, network, unanswered
    topo = build("leafspine", spines=2, leaves=4, hosts_per_leaf=4, host_rate=20,
                 uplink_rate=20)  # 2:1 oversubscribed
    lay = Layout(dp=4, tp=2, pp=2)
    plan = JobShape(load_models()["gpt-tiny"], lay, micro_batches=2)
    packed, spread = place(topo, 16, "packed"), place(topo, 16, "spread")
    _, lp = network(topo, lay, packed, 20, 9000, {})
    _, ls = network(topo, lay, spread, 20, 9000, {})
    assert lp["tp"] == 1.0 and ls["tp"] == 2.0  # spread TP rings cross the 2:1 uplinks
    cp, cs = core_bytes(plan, topo, packed), core_bytes(plan, topo, spread)
    assert cp["tp"] == 0 and cs["tp"] == pytest.approx(
        sum(sent_bytes(plan, r)["tp"] for r in range(16)))
    assert cp["dp"] == pytest.approx(sum(sent_bytes(plan, r)["dp"] for r in range(16)))
    assert len(kind_flows(lay, packed, "pp")) == 2 * len(kind_flows(lay, packed, "pp",
                                                                     forward_only=True))
    errors = {0: "RuntimeError: Timed out (during tp allreduce with ranks [0, 1])",
              2: "RuntimeError: Timed out (during pp recv with ranks [0])"}
    assert unanswered(errors) == [1]


def test_layer_profile_on_this_machine():
    from testbed.workloads.parallel.profile import profile
    f, b = profile(load_models()["gpt-tiny"], repeat=1)
    assert 0 < f < 5 and 0 < b < 10
