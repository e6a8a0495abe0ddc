"""Parallel jobs' collectives over the RoCE engine (`transport: roce`) on loopback, no root:
each rank's engine in control mode on 127.0.0.1, its own UDP port."""
from __future__ import annotations

import json

import pytest

from testbed.workloads import roce
from testbed.workloads.model.parallel.cost import KINDS, sent_bytes
from testbed.workloads.model.parallel.desc import load_models
from testbed.workloads.model.parallel.job import JobConfig, RoceTransport
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.roce import connections, qpn
from testbed.workloads.model.rdma import WIRE_OVERHEAD
from testbed.workloads.parallel.rocecomm import rank_engines

from ..roce_pair import free_udp_port


def test_session_posts_and_hears_completions(tmp_path):
    """Two control-mode engines: messages posted while they run arrive whole, in order,
    and each side hears its own acknowledged; the result lists every message."""
    binary = roce.build()
    pa, pb = free_udp_port(), free_udp_port()
    a = roce.Engine(bind="127.0.0.1", port=pa, control=True, exit_when_done=False)
    a.qp(3, peer="127.0.0.1", peer_port=pb, peer_qpn=5, line_mbps=500)
    b = roce.Engine(bind="127.0.0.1", port=pb, control=True, exit_when_done=False)
    b.qp(5, peer="127.0.0.1", peer_port=pa, peer_qpn=3, line_mbps=500)
    sa = roce.Session(binary, a.save(tmp_path / "a.conf"), tmp_path / "a.json", timeout_s=20)
    sb = roce.Session(binary, b.save(tmp_path / "b.conf"), tmp_path / "b.json", timeout_s=20)
    try:
        assert [sa.post(3, n) for n in (100_000, 1, 4096)] == [1, 2, 3]
        sb.wait_recv(5, 3)
        sa.wait_sent(3, 3)
        assert sb.post(5, 2500) == 1
        sa.wait_recv(3, 1)
        sb.wait_sent(5, 1)
        with pytest.raises(TimeoutError, match="message 2"):
            sa.timeout_s = 0.2
            sa.wait_recv(3, 2)
    finally:
        ra, rb = sa.close(), sb.close()
    assert [m.nbytes for m in ra.messages] == [100_000, 1, 4096]
    assert all(m.end_us is not None for m in ra.messages + rb.messages)
    assert rb.qps[5]["rx_bytes"] == 104_097 and ra.qps[3]["rx_bytes"] == 2500
    assert ra.qps[3]["retx_pkts"] == rb.qps[5]["retx_pkts"] == 0
    with pytest.raises(ValueError, match="control"):
        bad = roce.Engine(bind="127.0.0.1", control=True, exit_when_done=False)
        bad.qp(1, peer="127.0.0.1", peer_qpn=1, line_mbps=1)
        bad.write(1, 0, 10)
        bad.text()


def test_queue_pairs_agree_at_both_ends():
    """Every queue pair names its peer's, which names it back; no number twice."""
    lay = Layout(dp=2, tp=2, pp=2)
    for r in range(lay.world):
        for kind, p in connections(lay, r):
            assert (kind, r) in set(connections(lay, p))
    where = [(f"10.0.0.{r + 1}", 4791) for r in range(lay.world)]
    engines = rank_engines(lay, where, [roce.Engine(bind="", link_mbps=10.0)] * lay.world,
                           channels=2, per_qp_ports=True, experts=False)
    by_ip = {ip: e for (ip, _), e in zip(where, engines)}
    for eng in engines:
        assert len(eng.qps) == 2 * 3   # tp, pp and dp peers (no experts: no edp)
        for qpn_, peer, _, peer_qpn, mbps, sport, _ in eng.qps:
            back = [q for q in by_ip[peer].qps if q[0] == peer_qpn]
            assert len(back) == 1 and back[0][3] == qpn_ and back[0][1] == eng.bind
            assert back[0][5] == sport and mbps == 10.0
    numbers = [qpn(k, p, c, 8, 2) for r in range(8) for k, p in connections(lay, r)
               for c in range(2)]
    assert len(set(numbers)) == len(set((k, p, c) for r in range(8)
                                        for k, p in connections(lay, r) for c in range(2)))


def roce_job(tmp_path, layout, channels=1, **fields):
    """A loopback job over RoCE; every rank's rows."""
    from testbed.workloads.parallel.worker import local_job
    binary = roce.build()
    world = layout.world
    where = [("127.0.0.1", free_udp_port()) for _ in range(world)]
    conf = tmp_path / "roce"
    conf.mkdir()
    template = roce.Engine(bind="", rto_us=200_000, sample_us=100_000, link_mbps=2000.0)
    for r, eng in enumerate(rank_engines(layout, where, [template] * world, channels)):
        eng.save(conf / f"rank{r}.conf")
    cfg = JobConfig(layout=layout, compute="emulated", roce=RoceTransport(
        binary=str(binary), config_dir=str(conf), channels=channels), **fields)
    return cfg, local_job(cfg, tmp_path / "job", timeout_s=120)


@pytest.mark.parametrize("name,layout,extra,channels", [
    ("pp-dp", Layout(dp=2, pp=2), dict(micro_batches=2), 1),
    ("tp-zero3", Layout(dp=2, tp=2), dict(zero=3), 2),
    ("ep", Layout(dp=2, ep=2), dict(model="moe-tiny"), 1),
])
def test_emulated_job_over_roce_sends_the_models_bytes(tmp_path, name, layout, extra,
                                                       channels):
    """Every collective type's payload, as the ranks posted it, is the model's; the engines
    carried it all without a resend, and every rank's summary names the transport."""
    model = load_models()[extra.pop("model", "gpt-tiny")]
    cfg, rows = roce_job(tmp_path, layout, channels, model=model, scale=1e-3,
                         s_per_flop=1e-12, iters=2, timeout_s=30, **extra)
    world = layout.world
    plan = cfg.plan()
    for r in range(world):
        want = sent_bytes(plan, r)
        for row in rows[r]:
            for k in KINDS:
                assert row[f"{k}_bytes"] == pytest.approx(want[k], rel=0.01, abs=16), (r, k)
                pkts = (row[f"{k}_wire_bytes"] - row[f"{k}_bytes"]) / WIRE_OVERHEAD
                assert pkts >= row[f"{k}_bytes"] / 1024
        summary = json.loads((tmp_path / "job" / f"rank{r}.summary.json").read_text())
        assert summary["transport"] == "roce"
        assert summary["roce"]["retx_pkts"] == 0 and summary["roce"]["timeouts"] == 0
        assert summary["roce"]["tx_bytes"] == pytest.approx(
            sum(row[f"{k}_bytes"] for row in rows[r] for k in KINDS), abs=16)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_over_roce_keeps_its_schedule(tmp_path, schedule):
    """A stage's messages arrive in its neighbour's sending order, which is not the order
    of the micro-batches (GPipe's backward runs the last one first): each receive waits
    for its own micro-batch, so the iteration is the schedule's (within 15% of the
    model's replay, whose transfers are negligible here), not the wait for a later one."""
    from testbed.workloads.model.parallel.cost import Network, predict
    cfg, rows = roce_job(tmp_path, Layout(pp=2), model=load_models()["gpt-tiny"],
                         scale=1e-3, s_per_flop=6e-8, iters=3, timeout_s=30,
                         schedule=schedule, micro_batches=3)
    pred = predict(cfg.plan(), Network(dict.fromkeys(KINDS, 1e12)), cfg.s_per_flop)
    for it in (1, 2):
        iteration = max(rows[r][it]["iter_s"] for r in rows)
        assert iteration == pytest.approx(pred["iteration_s"], rel=0.15), (it, pred)


def test_pauses_per_job_and_iteration():
    from testbed.experiments.parallel.run import pause_counts
    pfc = {"pauses": 6, "paused_ms": {"s1-eth1->s2-eth3": 1.5, "s2-eth1->s3-eth2": 3.0}}
    assert pause_counts(pfc, 3) == {"pfc_pauses": 6, "pfc_paused_ms": 4.5,
                                    "pfc_pauses_per_iter": 2.0, "pfc_paused_ms_per_iter": 1.5}
    assert pause_counts({"pauses": 0}, 4)["pfc_paused_ms"] == 0
