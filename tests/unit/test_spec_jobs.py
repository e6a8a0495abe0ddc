"""Jobs sharing a fabric: bad specs refused before anything starts, naming the
field; the cross-job placement; the experiment's pure model and analysis."""
import pytest

from controllers.jobpolicy import JobInfo
from testbed.config.replies import PfcRecord
from testbed.experiments.jobs.model import (
    aligned,
    expected,
    job_class,
    job_flows,
    job_links,
    job_pauses,
    job_row,
    jobs_qos,
    link_time,
    overlaps,
    periods,
    port_flows,
    recovered,
    settled_after,
    shared_class,
    shared_iterations,
    shared_ports,
    sharing_groups,
)
from testbed.experiments.jobs.run import carriers_of
from testbed.experiments.jobs.spec import JOB_CLASSES, placements
from testbed.spec import SpecError, loads
from testbed.workloads.model.interference import Iteration
from topologies import build

TWO = [{"name": "a", "dp": 2}, {"name": "b", "dp": 2}]


def spec(**jobs):
    return {"name": "j", "topology": {"kind": "fattree", "params": {"k": 4}},
            "experiments": [{"type": "jobs", **({"jobs": TWO} | jobs)}]}


BAD_JOBS = [
    ({"jobs": []}, "experiments[0].jobs: at least one job"),
    ({"jobs": [{"name": "a"}, {"name": "a"}]}, "experiments[0].jobs: job names must differ"),
    ({"jobs": [{"pp": 2, "schedule": "pipemare"}, {"dp": 2}]},
     "experiments[0].jobs[0].schedule: pipemare runs in the parallel experiment only"),
    ({"jobs": [{"dp": 2, "hosts": ["h1", "h2"]}, {"dp": 2, "hosts": ["h2", "h3"]}]},
     "experiments[0].jobs: hosts ['h2'] are in more than one job"),
    ({"jobs": [{"dp": 8}, {"dp": 8}, {"dp": 2}]},
     "experiments[0].jobs: 18 hosts to fill from 16 free hosts"),
    ({"jobs": [{"dp": 2, "hosts": ["h1", "h99"]}]}, "experiments[0].jobs[0].hosts: no host 'h99'"),
    ({"jobs": [{"dp": 2, "hosts": ["h1"]}]},
     "experiments[0].jobs[0].hosts: 1 hosts; the job takes 2"),
    ({"policies": ["fifo"]}, "experiments[0].policies[0]: unknown 'fifo'"),
    ({"policies": []}, "experiments[0].policies: at least one"),
    ({"policies": ["missing.py:Mine"]}, "experiments[0].policies[0]: file missing.py does not"),
    ({"placements": ["tight"]}, "experiments[0].placements[0]: unknown 'tight'"),
    ({"jobs": [{"dp": 2}] * 8, "policies": ["priority"]},
     f"experiments[0].policies[0]: priority gives each job a traffic class; the dataplane has "
     f"{JOB_CLASSES}"),
    ({"jobs": [{"dp": 2, "offset_s": -1}]}, "experiments[0].jobs[0].offset_s: must be >= 0"),
    ({"jobs": [{"dp": 2, "weight": 0}]}, "experiments[0].jobs[0].weight: must be > 0"),
    ({"jobs": [{"dp": 2, "tp": 3}]}, "experiments[0].jobs[0].tp: 3 must divide hidden"),
    ({"jobs": [{"dp": 2, "model": "gpt5"}]}, "experiments[0].jobs[0].model: unknown 'gpt5'"),
    ({"jobs": [{"dp": 2, "layer_fwd_s": 0.1}]}, "experiments[0].jobs[0].layer_fwd_s: give both"),
    ({"warmup_iters": 20}, "experiments[0].warmup_iters: must be in 0..iters-1"),
    ({"period_ms": 0}, "experiments[0].period_ms: must be > 0"),
    ({"background": [{"kind": "iperf", "hosts": ["h1", "h5"], "dscp": 10}]},
     "experiments[0].background: DSCP [10] is a job's own"),
    ({"time_shift": {"lead": 0}}, "experiments[0].time_shift: slack >= 0, margin >= 0 and lead >= 1"),
    ({"mltcp": {"levels": 0}}, "experiments[0].mltcp: gain >= 0 and levels >= 1"),
    ({"jobs": [{"dp": 2, "fault": {"rank": 2}}]}, "experiments[0].jobs[0].fault.rank: a rank"),
    ({"jobs": [{"dp": 2, "fault": {"at_iter": 99}}]},
     "experiments[0].jobs[0].fault.at_iter: must be in"),
    ({"topology": {"kind": "bcube", "params": {"n": 4, "k": 1}}, "policies": ["mltcp"]},
     "experiments[0].policies: per-job classes need a switched fabric"),
    ({"jobs": [{"training": {"sync": "gossip"}}]}, "experiments[0].jobs[0].training.sync: unknown"),
    ({"jobs": [{"training": {"sync": "ring", "priority": "p3"}}]},
     "experiments[0].jobs[0].training.priority: layer-wise priorities mark"),
    ({"jobs": [{"training": {"model": "resnet"}}]},
     "experiments[0].jobs[0].training.model: unknown 'resnet'"),
    ({"jobs": [{"training": {"compute_ms": -1}}]},
     "experiments[0].jobs[0].training.compute_ms: must be >= 0"),
    ({"jobs": [{"training": {"sync": "ps", "ps_shards": 16}}]},
     "experiments[0].jobs[0].training.ps_shards: 16 dedicated servers leave no host"),
    ({"jobs": [{"dp": 4, "training": {}}]},
     "experiments[0].jobs[0].dp: a field of a parallel job; this job is a training job"),
    ({"jobs": [{"training": {"sync": "ps", "workers": 2}, "fault": {"rank": 0}}]},
     "experiments[0].jobs[0].fault.rank: rank 0 is a parameter server"),
    ({"jobs": [{"training": {"workers": 2}, "fault": {"kind": "hang"}}]},
     "experiments[0].jobs[0].fault.kind: unknown 'hang'"),
    ({"jobs": [{"training": {"sync": "ps", "workers": 3}, "hosts": ["h1", "h2", "h3"]}]},
     "experiments[0].jobs[0].hosts: 3 hosts; the job takes 4"),
]


ROCE = {"transport": "roce"}
BAD_ROCE = [
    ({"transport": "rdma"}, "experiments[0].transport: unknown 'rdma'"),
    (ROCE | {"jobs": [{"training": {"sync": "ring"}}]},
     "experiments[0].jobs[0]: a training-worker job exchanges its tensors over Gloo"),
    (ROCE | {"jobs": [{"dp": 2, "compute": "real"}]},
     "experiments[0].transport: roce carries emulated compute's collectives"),
    (ROCE | {"ecn": {"k": 5}}, "experiments[0].ecn: over RoCE the scheme marks"),
    (ROCE | {"roce": {"ctrl_dscp": 10}}, "experiments[0].roce.ctrl_dscp: 10 is a job's"),
    (ROCE | {"roce": {"schemes": ["tcp-cubic"]}},
     "experiments[0].roce.schemes[0]: 'tcp-cubic' is TCP"),
    (ROCE | {"roce": {"flows": [{"src": "h1", "dst": "h2", "size_bytes": 1}]}},
     "experiments[0].roce: the transport's settings only"),
    (ROCE | {"jobs": [{"dp": 2}] * 7, "policies": ["priority"]},
     "experiments[0].policies[0]: priority gives each job a traffic class; the dataplane "
     "has 6 besides best effort and RoCE control"),
]

BAD_TCP = [
    (ROCE | {"congestion_controls": ["dctcp"]},
     "experiments[0].congestion_controls: TCP's congestion controls; over roce the scheme "
     "is roce.schemes"),
    ({"congestion_controls": ["cubic", "cubic"]},
     "experiments[0].congestion_controls: distinct names"),
    ({"congestion_controls": ["tcp cubic"]},
     "experiments[0].congestion_controls: not an algorithm name ('tcp cubic')"),
    ({"congestion_controls": ["cubic", "dctcp"]},
     "experiments[0].congestion_controls: dctcp reacts to ECN marks; set `ecn`"),
]


@pytest.mark.parametrize("fields,field", BAD_JOBS + BAD_ROCE + BAD_TCP)
def test_bad_jobs_specs_name_the_field(fields, field):
    with pytest.raises(SpecError) as err:
        loads(spec(**fields))
    assert str(err.value).startswith(field), str(err.value)


def test_good_jobs_spec_and_shared_hosts_when_allowed():
    loads(spec(policies=["none", "priority", "time_shift", "mltcp"],
               placements=["packed", "spread", "random"]))
    loads(spec(jobs=[{"dp": 2, "hosts": ["h1", "h2"]}, {"dp": 2, "hosts": ["h2", "h3"]}],
               allow_shared_hosts=True))


def test_one_fabric_per_scheme_or_tcp_congestion_control():
    def carriers(**fields):
        s, _ = loads(spec(**fields))
        return carriers_of(s.experiments[0])
    assert carriers() == [(None, None)]  # the spec's hosts' algorithm
    assert carriers(congestion_controls=["cubic", "dctcp"], ecn={"k": 5}) == \
        [(None, "cubic"), (None, "dctcp")]
    assert carriers(transport="roce", roce={"schemes": ["dcqcn", "hpcc"]}) == \
        [("dcqcn", None), ("hpcc", None)]


def test_training_jobs_take_their_servers_hosts():
    """A training-worker job beside a parallel one: a dedicated parameter server takes a
    host of its own, a colocated one shares its workers'."""
    s, _ = loads(spec(jobs=[{"name": "ps", "training": {"sync": "ps", "workers": 3}},
                         {"name": "co", "training": {"sync": "ps", "workers": 3,
                                                     "ps_placement": "colocated"}},
                         {"name": "p", "dp": 2}]))
    exp = s.experiments[0]
    assert [j.host_count for j in exp.jobs] == [4, 3, 2]
    assert [j.ranks for j in exp.jobs] == [4, 4, 2]
    assert [j.worker_count for j in exp.jobs] == [3, 3, 2]
    hosts = placements(exp, build("fattree", k=4), "packed")
    assert [len(h) for h in hosts] == [4, 3, 2]
    assert len({h for hs in hosts for h in hs}) == 9


def test_placement_packed_fills_edges_and_spread_deals_them_out():
    s, _ = loads(spec(jobs=[{"dp": 4}, {"dp": 2}, {"dp": 2, "hosts": ["h1", "h16"]}]))
    exp = s.experiments[0]
    topo = build("fattree", k=4)
    packed = placements(exp, topo, "packed")
    assert packed == [["h2", "h3", "h4", "h5"], ["h6", "h7"], ["h1", "h16"]]
    spread = placements(exp, topo, "spread")
    assert len({topo.ports_of(h)[0][1] for h in spread[0]}) == 4  # four edge switches
    assert not set(spread[0]) & set(spread[1]) and "h1" not in spread[0] + spread[1]
    r1, r2 = placements(exp, topo, "random"), placements(exp, topo, "random")
    assert r1 == r2  # seeded


def test_jobs_crossing_one_uplink_share_its_ports():
    topo = build("leafspine", spines=1, leaves=2, hosts_per_leaf=2)
    exp = loads(spec(jobs=[{"dp": 2, "hosts": ["h1", "h3"]},
                           {"dp": 2, "hosts": ["h2", "h4"]}]))[0].experiments[0]
    links = [job_links(topo, j, j.hosts) for j in exp.jobs]
    assert shared_ports(topo, links) == ["l1-eth3", "l2-eth3", "sp1-eth1", "sp1-eth2"]
    assert sharing_groups(links) == [[0, 1]]
    apart = [job_links(topo, exp.jobs[0], ["h1", "h2"]),
             job_links(topo, exp.jobs[0], ["h3", "h4"])]
    assert shared_ports(topo, apart) == [] and sharing_groups(apart) == [[0], [1]]


def test_training_jobs_flows_ring_and_parameter_server():
    exp = loads(spec(jobs=[{"training": {"workers": 3}},
                           {"training": {"sync": "ps", "workers": 2, "ps_shards": 2}},
                           {"training": {"sync": "ps", "workers": 2,
                                         "ps_placement": "colocated"}}]))[0].experiments[0]
    ring, ps, co = exp.jobs
    assert job_flows(ring, ["h1", "h2", "h3"]) == [("h1", "h2", 1.0), ("h2", "h3", 1.0),
                                                   ("h3", "h1", 1.0)]
    # servers every (n + S) / S slots: h1 and h3; each worker to both and back, half each
    assert sorted(job_flows(ps, ["h1", "h2", "h3", "h4"])) == sorted(
        (a, b, 0.5) for w in ("h2", "h4") for s in ("h1", "h3") for a, b in ((w, s), (s, w)))
    # a colocated server on h1 takes nothing off the wire from its own host's worker
    assert sorted(job_flows(co, ["h1", "h2"])) == [("h1", "h2", 1.0), ("h2", "h1", 1.0)]


def test_shared_iterations_end_with_the_groups_first_finisher():
    def rows(period, n):
        return [{"t_sync_end": (k + 1) * period} for k in range(n)]
    rank0 = {"fast": rows(0.5, 10), "slow": rows(0.8, 10), "apart": rows(0.1, 10)}
    n = shared_iterations(rank0, [["fast", "slow"], ["apart"]])
    # fast ends at 5.0 s: slow had ended 6 iterations by then; a job alone keeps all
    assert n == {"fast": 10, "slow": 6, "apart": 10}


def test_port_flows_count_a_jobs_connections_per_port():
    topo = build("leafspine", spines=1, leaves=2, hosts_per_leaf=3)
    exp = loads(spec(jobs=[{"training": {"sync": "ps", "workers": 2}, "hosts": ["h1", "h4", "h5"]},
                           {"training": {"workers": 2}, "hosts": ["h2", "h6"]}]))[0].experiments[0]
    ps, ring = (port_flows(topo, j, j.hosts) for j in exp.jobs)
    # both workers push through leaf 2's uplink and the spine's port to leaf 1
    assert ps["l2-eth4"] == pytest.approx(2) and ps["sp1-eth1"] == pytest.approx(2)
    assert ring["l2-eth4"] == pytest.approx(1)


def test_aligned_shares_a_link_per_connection():
    """A job with two connections on the shared port takes two thirds of it."""
    rows = [{"t_start": 0.0, "t_sync_start": 0.6, "t_sync_end": 1.4, "sync_s": 0.8}]
    a, b = job("a"), job("b")
    at = aligned([a, b], {"a": rows, "b": rows}, {"a": {"p": 0.4}, "b": {"p": 0.4}},
                 {"a": {"p": 2.0}})
    # a: 0.4 s of link at 2/3 -> 0.6 s; b: 0.2 s done by then, 0.2 s left alone -> 0.8 s
    assert at["a"][0] == pytest.approx(0.6 + 0.6) and at["b"][0] == pytest.approx(0.6 + 0.8)


def test_job_row_reads_either_worker():
    parallel = {"pipeline_s": 0.3, "sync_s": 0.2, "tp_bytes": 0, "pp_bytes": 5,
                "dp_bytes": 100, "ep_bytes": 0, "fsdp_bytes": 0}
    assert job_row(parallel)["bytes"] == 105
    training = {"t_start": 1.0, "t_sync_start": 1.25, "t_sync_end": 1.5, "sent_bytes": 42,
                "compute_s": 0.3, "comm_s": 0.2}
    r = job_row(training)
    assert (r["pipeline_s"], r["sync_s"], r["bytes"]) == (0.25, 0.25, 42)


def test_jobs_qos_has_a_class_per_job_beside_best_effort():
    exp = loads(spec(background=[{"kind": "iperf", "hosts": ["h1", "h5"], "dscp": 46}],
                     ecn={"k": 20}))[0].experiments[0]
    q = jobs_qos(exp, 100)
    assert [c.name for c in q.classes] == ["best-effort", "job-class-1", "job-class-2"]
    assert q.classes[0].dscp == [0, 46] and q.scheduler == "wrr" and q.ecn_enabled


def test_link_time_is_the_busiest_ports_bytes_at_its_rate():
    topo = build("leafspine", spines=1, leaves=2, hosts_per_leaf=2, uplink_rate=20)
    assert link_time(topo, {"l1-eth3": (2_500_000 * 10, 0, 0), "l1-eth1": (10, 0, 0)},
                     10) == pytest.approx(1.0)
    assert link_time(topo, {}, 10) == 0.0


def job(name, period=1.0, link=0.4):
    return JobInfo(name, 10, period - link, link, period, 1000, link_s=link)


def test_expected_gives_the_closed_forms():
    (e,) = expected([job("a")], [0.0])
    assert e.shared_s == pytest.approx(1.0) and e.overlapped_s == pytest.approx(1.0)
    a, b = expected([job("a"), job("b")], [0.0, 0.0])
    assert a.shared_s == pytest.approx(1.4) and a.overlapped_s == pytest.approx(1.4)
    assert a.interleaved_s == pytest.approx(1.0)  # C >= M: they fit in each other's compute


def test_overlap_settling_and_recovery():
    a = [Iteration(k, k + 0.6, k + 1.0) for k in range(6)]
    b = [Iteration(k, k + 0.6 + min(0.4, 0.1 * k), k + 1.0 + min(0.4, 0.1 * k))
         for k in range(6)]
    per = overlaps([a, b])
    assert per[0][0] == pytest.approx(1.0) and per[0][5] == pytest.approx(0.0)
    assert settled_after(per[0]) == 4 and settled_after([0.5, 0.5]) is None
    assert recovered(1.0, 1.4, 1.04) == pytest.approx(0.9)
    assert recovered(1.0, 0.9, 0.9) is None


def test_periods_count_a_gate_wait_but_not_the_start():
    rows = [{"t_start": 1.0, "t_sync_start": 1.5, "t_sync_end": 2.0, "gate_wait_s": 0.5},
            {"t_start": 2.2, "t_sync_start": 2.7, "t_sync_end": 3.1}]
    assert periods(rows) == pytest.approx([1.0, 1.1])


def test_aligned_replays_the_measured_phases():
    """Two jobs whose phases were measured in step: the model at that alignment gives each
    the closed form's C + 2M; measured half a link time apart, less."""
    def rows(offset, n=4, period=1.4):
        return [{"t_start": offset + k * period, "t_sync_start": offset + k * period + 0.6,
                 "t_sync_end": offset + (k + 1) * period, "sync_s": 0.8}
                for k in range(n)]
    a, b = job("a"), job("b")
    at = aligned([a, b], {"a": rows(0.0), "b": rows(0.0)})
    assert at["a"][1:] == pytest.approx([1.4] * 3) and at["b"][1:] == pytest.approx([1.4] * 3)
    at = aligned([a, b], {"a": rows(0.0), "b": rows(0.2)})
    # a: alone 0.2 s, then shared (0.2 s of work left at half rate): 0.6 + 0.6 = 1.2
    assert at["a"][1] == pytest.approx(1.2)


def test_aligned_on_the_links_each_job_used():
    """In step but on different links the jobs do not meet; on a link they both used they
    do, for the time their bytes took there."""
    def rows(n=3, period=1.4):
        return [{"t_start": k * period, "t_sync_start": k * period + 0.6,
                 "t_sync_end": (k + 1) * period, "sync_s": 0.8} for k in range(n)]
    a, b = job("a"), job("b")
    apart = aligned([a, b], {"a": rows(), "b": rows()},
                    {"a": {"p1": 0.4, "p2": 0.4}, "b": {"p3": 0.4, "p4": 0.001}})
    assert apart["a"] == pytest.approx([1.0] * 3) and apart["b"] == pytest.approx([1.0] * 3)
    meet = aligned([a, b], {"a": rows(), "b": rows()}, {"a": {"p1": 0.4}, "b": {"p1": 0.2}})
    # on p1: both at half rate until b's 0.2 s are done (0.4 s), then a alone: 0.6 s
    assert meet["a"] == pytest.approx([1.2] * 3) and meet["b"] == pytest.approx([1.0] * 3)


def test_roce_jobs_share_a_lossless_class_with_their_control_above():
    """Over RoCE every job's DSCP starts in the first jobs' class, lossless and marked as
    the scheme says; the background stays in best effort, lossy and unmarked; the engines'
    ACKs, NAKs and CNPs have the last class, which a policy's schedule never reaches."""
    exp = loads(spec(**ROCE, background=[{"kind": "iperf", "hosts": ["h1", "h5"],
                                           "dscp": 46}]))[0].experiments[0]
    q = jobs_qos(exp, 100, "dcqcn")
    assert [c.name for c in q.classes] == ["best-effort", "job-class-1", "job-class-2",
                                           "roce-control"]
    be, one, two, ctrl = q.classes
    assert be.dscp == [0, 46] and not be.lossless and be.ecn is None
    assert one.dscp == [10, 12] and two.dscp == [] and one.lossless and two.lossless
    assert one.ecn is not None and one.ecn.unit == "bytes" and q.pfc is not None
    assert ctrl.dscp == [48] and q.scheduler == "wrr"
    assert not jobs_qos(exp, 100, "none").classes[1].ecn     # no marks for no control
    assert jobs_qos(exp, 100, "dcqcn+irn+lossy").pfc is None
    pexp, _ = exp.jobs[1].as_parallel(exp, 12)
    assert pexp.transport == "roce" and pexp.roce.dscp == 12 and pexp.dscp["dp"] == 12
    # the class a job ran in: its policy's start decision's, else the shared one
    made = [{"when": "met"}, {"when": "start", "classes": {"a": 2, "b": 1}}]
    assert job_class(made, "a", "dcqcn") == 2 and job_class(made, "c", "dcqcn") == 1
    assert job_class([], "a", None) == shared_class(None) == 0


def pfc(t_ms, event, upstream, cls=1):
    return PfcRecord(time_ns=int(t_ms * 1e6), node="l1", port="l1-eth1", cls=cls,
                     event=event, upstream_port=upstream, bytes_held=0)


def test_a_job_meets_the_pauses_of_its_class_on_the_links_it_sent_by():
    events = [pfc(1, "pause", "s1-eth2"), pfc(3, "resume", "s1-eth2"),
              pfc(4, "pause", "s1-eth2", cls=2), pfc(9, "resume", "s1-eth2", cls=2),
              pfc(5, "pause", "h1-eth0"), pfc(5.5, "resume-timeout", "h1-eth0"),
              pfc(6, "pause", "s9-eth1"), pfc(8, "resume", "s9-eth1"),
              pfc(50, "pause", "s1-eth2"), pfc(51, "resume", "s1-eth2")]
    got = job_pauses(events, 0, int(20e6), 1, {"s1-eth2", "h1-eth0"})
    assert got == {"pfc_pauses": 2, "pfc_paused_ms": 2.5}
    assert job_pauses(events, 0, int(20e6), 2, {"s1-eth2"}) == {"pfc_pauses": 1,
                                                                "pfc_paused_ms": 5.0}
    assert job_pauses(events, 0, int(20e6), 1, set()) == {"pfc_pauses": 0,
                                                           "pfc_paused_ms": 0.0}
