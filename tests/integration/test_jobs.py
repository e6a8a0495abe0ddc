"""Training jobs sharing a fabric, measured: two identical jobs whose rings cross
one leaf->spine uplink, alone, with fair sharing and with MLTCP-like weights; and one job
failing stops every job. Short jobs; tolerances are stated per assertion."""
import json

import pytest

from testbed.core.system import TestbedError

from .helpers import not_cpu_bound, rows, run

LEAFSPINE = {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2,
                                             "host_rate": 20, "uplink_rate": 20}}
# compute 0.39 s, a 2-rank ring allreduce of ~0.6 MB: about 40% communication alone
JOB = {"dp": 2, "scale": 0.1, "layer_fwd_s": 0.325, "layer_bwd_s": 0.65}


def spec(name, policies, iters, **b):
    return {"name": name, "topology": LEAFSPINE, "links": {"mtu_bytes": 9000},
            "experiments": [{"type": "jobs", "iters": iters, "warmup_iters": 2,
                             "policies": policies, "job_timeout_s": 300, "timeout_s": 20,
                             "jobs": [{"name": "a", "hosts": ["h1", "h3"], **JOB},
                                      {"name": "b", "hosts": ["h2", "h4"], **JOB, **b}]}]}


def test_two_jobs_on_one_uplink_fair_and_mltcp_like(tmp_path):
    out, summary = run(tmp_path, spec("it-jobs", ["none", "mltcp"], 16))
    assert summary["status"] == "ok", summary
    by = {(r["policy"], r["job"]): r for r in rows(out, "jobs.csv")}
    phases = {(r["policy"], r["job"], r["iteration"]): r for r in rows(out, "jobs_phases.csv")}
    not_cpu_bound(list(by.values()), summary)
    for job in "ab":
        alone, none, mltcp = by[("alone", job)], by[("none", job)], by[("mltcp", job)]
        # communication is 30-50% of an iteration alone
        assert 0.3 <= float(alone["alone_comm_share"]) <= 0.5, alone
        # released together, their first phases overlap; the slowdown is the model's +-15%
        # (fair sharing replayed at the alignment the jobs had: they may drift apart)
        first = phases[("none", job, "0")]
        assert float(first["overlap"]) >= 0.8, first
        model = float(none["model_policy_s"]) / float(none["alone_iter_s"])
        assert abs(float(none["slowdown"]) / model - 1) <= 0.15, (none, model)
        # MLTCP-like weights pull the phases apart: below 20% overlap within 10 iterations
        # (released aligned, they took 4-6 here and 7-8 once in CI), and the job back
        # within 10% of alone, over its steady iterations and from the settled one on
        assert mltcp["overlap_settled_after"] not in ("", "None"), mltcp
        assert int(mltcp["overlap_settled_after"]) <= 10, mltcp
        assert float(mltcp["slowdown"]) <= 1.1, mltcp
        assert float(mltcp["slowdown_settled"]) <= 1.1, mltcp
    # the switches count each job's DSCP apart: each job's bytes on the shared uplink are
    # its rank 0's payload plus headers (jumbo frames: 0-10% more)
    links = {(r["policy"], r["job"], r["link"]): r for r in rows(out, "jobs_links.csv")}
    for job in "ab":
        on_uplink = float(links[("none", job, "l1-eth3")]["bytes_per_iter"])
        payload = float(by[("none", job)]["bytes_per_iter"])
        assert 1.0 <= on_uplink / payload <= 1.1, (job, on_uplink, payload)
    steps = [d for d in rows(out, "jobs_decisions.csv")
             if d["policy"] == "mltcp" and d["when"] == "step"]
    assert len(steps) >= 10 and all("weights" in json.loads(d["decision"]) for d in steps)
    assert (out / "plots" / "jobs_phases.png").exists()


def test_time_shift_on_unequal_jobs_holds_its_period(tmp_path):
    """Job b computes 0.18 s and communicates 0.37 s alone (a: 0.39 s and 0.25 s): their link
    times fill 98% of a's alone iteration. The gates' period grows to the link times plus
    10%, each job released by its own compute, so both run at the period with their phases
    apart (measured here: slowdown 1.09 / 1.27 against fair sharing's 1.32 / 1.17 and
    1.29 / 1.32)."""
    out, summary = run(tmp_path, spec("it-jobs-unequal", ["none", "time_shift"], 12,
                                      scale=0.15, layer_fwd_s=0.1, layer_bwd_s=0.2))
    assert summary["status"] == "ok", summary
    by = {(r["policy"], r["job"]): r for r in rows(out, "jobs.csv")}
    not_cpu_bound(list(by.values()), summary)
    gated = [by[("time_shift", j)] for j in "ab"]
    for r in gated:
        # the phases apart within 4 iterations; the iteration the plan's period, +-3%
        assert r["overlap_settled_after"] not in ("", "None"), r
        assert int(r["overlap_settled_after"]) <= 4, r
        assert abs(float(r["iter_s_median"]) / float(r["model_policy_s"]) - 1) <= 0.03, r
    # not both jobs slower than under fair sharing, and the pair faster on average (b, held
    # to a's longer period, may lose: it did once, 1.27 against 1.17 while a won 1.09 / 1.32)
    fair = [by[("none", j)] for j in "ab"]
    slower = [float(g["slowdown"]) > float(f["slowdown"]) for g, f in zip(gated, fair)]
    assert not all(slower), (gated, fair)
    assert sum(float(g["slowdown"]) for g in gated) < sum(float(f["slowdown"]) for f in fair)


def test_one_failing_job_stops_every_job(tmp_path):
    with pytest.raises(TestbedError) as err:
        run(tmp_path, spec("it-jobs-fault", ["none"], 10,
                           fault={"rank": 1, "at_iter": 2, "kind": "crash"}))
    text = str(err.value)
    assert "job b rank 1 in h4 failed" in text and "injected fault at iteration 2" in text, text
    assert "every job was stopped" in text
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed"
    # job a was stopped mid-run: its rank 0 logged fewer than its 10 iterations
    shared = next((tmp_path / "run" / "jobs").glob("0-02-*"))
    assert len((shared / "a" / "rank0.jsonl").read_text().splitlines()) < 10


def test_training_worker_jobs_share_an_uplink(tmp_path):
    """A parameter-server job (BSP, a dedicated server on h1, workers on h4 and h5) and a
    data-parallel ring job (h2, h6), both of the training worker, whose pushes, pulls and
    ring cross the one spine: each job's bytes are its gradient, the switches count each
    job's DSCP on the shared uplink, and fair sharing slows them as the model says."""
    from testbed.workloads.models import build, param_bytes
    topo = {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 3,
                                            "host_rate": 20, "uplink_rate": 20}}
    jobs = [{"name": "ps", "hosts": ["h1", "h4", "h5"],
             "training": {"sync": "ps", "workers": 2, "width": 128, "compute_ms": 250}},
            {"name": "ring", "hosts": ["h2", "h6"],
             "training": {"sync": "ring", "workers": 2, "width": 256, "compute_ms": 200}}]
    out, summary = run(tmp_path, {
        "name": "it-jobs-training", "topology": topo, "links": {"mtu_bytes": 9000},
        "experiments": [{"type": "jobs", "iters": 12, "warmup_iters": 2, "policies": ["none"],
                         "job_timeout_s": 300, "timeout_s": 20, "jobs": jobs}]})
    assert summary["status"] == "ok", summary
    by = {(r["policy"], r["job"]): r for r in rows(out, "jobs.csv")}
    not_cpu_bound(list(by.values()), summary)
    grad = {"ps": param_bytes(build("mlp", 128)), "ring": param_bytes(build("mlp", 256))}
    links = {(r["policy"], r["job"], r["link"]): r for r in rows(out, "jobs_links.csv")}
    for job, crossing in (("ps", 2), ("ring", 1)):
        alone, none = by[("alone", job)], by[("none", job)]
        # a worker pushes its gradient (ps) or sends a 2-rank ring allreduce's worth of it
        # (ring), with a few hundred bytes of Gloo framing: within 1%
        assert abs(float(alone["bytes_per_iter"]) / grad[job] - 1) <= 0.01, (alone, grad)
        # leaf 2's uplink carries both ps workers' pushes (h4, h5 -> h1) and one direction
        # of the ring (h6 -> h2), counted by the job's DSCP: payload plus headers (0-10%).
        # The payload is the gradient: bytes_per_iter is what rank 0 wrote per iteration,
        # while the ring's bytes on this uplink are rank 1's.
        on_uplink = float(links[("none", job, "l2-eth4")]["bytes_per_iter"])
        payload = crossing * grad[job]
        assert 1.0 <= on_uplink / payload <= 1.1, (job, on_uplink, payload)
        # communication is a third or more of an iteration alone; sharing the uplink slows
        # both, within 15% of the model at the alignment they had (per-connection shares)
        assert float(alone["alone_comm_share"]) >= 0.3, alone
        assert float(none["slowdown"]) >= 1.05, none
        model = float(none["model_policy_s"]) / float(none["alone_iter_s"])
        assert abs(float(none["slowdown"]) / model - 1) <= 0.15, (none, model)


def test_two_jobs_over_roce_priority_and_the_pauses_each_met(tmp_path):
    """The two jobs with their collectives as RoCE WRITEs under DCQCN, each job's in a
    lossless class: strict priority for job a keeps it within 10% of alone (measured
    1.02), while job b's class, starved on the shared uplink, is paused by PFC, which the
    job's row reports and job a's does not; each job's bytes on the uplink are its
    payload plus RoCE's headers."""
    data = spec("it-jobs-roce", ["priority"], 6)
    data["experiments"][0] |= {"transport": "roce", "roce": {"schemes": ["dcqcn"]}}
    out, summary = run(tmp_path, data)
    assert summary["status"] == "ok", summary
    by = {(r["policy"], r["job"]): r for r in rows(out, "jobs.csv")}
    for key, r in by.items():
        not_cpu_bound(r, summary)
        assert r["transport"] == "roce dcqcn" and int(r["roce_tx_pkts"]) > 0, (key, r)
        assert int(r["roce_timeouts"]) == 0, (key, r)
    a, b = by[("priority", "a")], by[("priority", "b")]
    assert float(a["slowdown"]) <= 1.1, a
    assert int(a["pfc_pauses"]) == 0 and float(a["pfc_paused_ms"]) == 0, a
    assert int(b["pfc_pauses"]) > 0 and float(b["pfc_paused_ms"]) > 0, b
    # payload plus 58 bytes of headers per 1024-byte packet, within 1% (measured exactly)
    links = {(r["policy"], r["job"], r["link"]): r for r in rows(out, "jobs_links.csv")}
    for job in "ab":
        on_uplink = float(links[("priority", job, "l1-eth3")]["bytes_per_iter"])
        payload = float(by[("priority", job)]["bytes_per_iter"])
        assert abs(on_uplink / payload / (1082 / 1024) - 1) <= 0.01, (job, on_uplink, payload)
