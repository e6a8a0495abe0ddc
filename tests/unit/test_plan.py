"""`testbed plan`: the fluid max-min rates it loads a fabric with, its
verdicts against the reference machine's limits, and its verdict on every shipped spec
against the CPU-bound flags measured for it (docs/BENCHMARKS.md)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from testbed.config.capacity import REFERENCE
from testbed.plan import Load, demand, fluid_rates, plan, render
from testbed.spec import load
from topologies.builders import dumbbell, fattree, nonblocking

ROOT = Path(__file__).resolve().parents[2]

# Whether any phase of each shipped spec was flagged CPU-bound when it was measured on the
# reference machine (docs/BENCHMARKS.md; "Capacity of one machine" lists the evidence).
MEASURED_CPU_BOUND = {
    "reachability": False, "reachability_leafspine": False, "reachability_bcube": False,
    "startup_fattree6": False, "link_calibration": False, "queue_calibration": False,
    "permutation_fattree": False, "permutation_fattree_mtu1500": True,
    "ecn_queue": False, "priority": False, "incast": False, "pfc_victim": False,
    "training_ring_vs_ps": False, "training_link_rate": True, "training_priority": False,
    "training_compression": True, "training_consistency": False, "training_16_cnn": True,
    # measured 2026-11-28 at 50 Mb/s: no job flagged (at 100 Mb/s those at 2048 were)
    "training_large_batch": False,
    # measured 2026-11-28 (10 and 50 Mb/s, and the CNN at 10): no job flagged
    "training_fusion": False,
    # measured 2026-11-28 (20 Mb/s, background): no job flagged
    "training_scheduling": False,
    # hedera_fattree_20mbps: its single-path flags came from a freshly started OVS's malloc
    # (fixed 2026-11-25); re-measured since, none of 40 single-path and 20 non-blocking
    # phases, and its ECMP and Hedera phases were never flagged
    "hedera_fattree": False, "hedera_fattree_20mbps": False,
    "parallel_collectives": False, "parallel_pipeline": False, "parallel_fsdp": True,
    "parallel_moe": False, "parallel_placement": True, "parallel_16": False,
    "fault_link": False, "fault_link_ff": False, "fault_controller": False,
    "fault_training": False, "jobs_two": False, "jobs_unequal": False, "jobs_fattree": False,
    "jobs_roce": False,
    "jobs_training": False, "plugins_fattree": False,
    # measured for this on 2026-11-24: no phase flagged; ranks waited 30% and 12%
    "quickstart": False, "parallel_smoke": True,
    # its base spec (20 Mb/s); none of its three points (10, 20, 40 Mb/s) was CPU-bound
    "sweep_rate": False,
    # measured 2026-11-24 (permutation_survey on its default DCell(4, 1)): no
    # phase flagged
    "permutation_survey": False, "circuits_hybrid": False, "training_survey": False,
    # measured 2026-11-25 on FiConn(4, 1), DCell(4, 1) and MDCube: no phase flagged
    "permutation_relay_fair": False,
    # measured 2026-11-26: neither phase flagged (workers' and engines' CPU 0.2-0.3 s)
    "rdma_dcqcn": False,
    # measured 2026-11-26: no phase flagged (rdma_fct at both loads, rdma_incast's six
    # points, the machine 34-54% busy)
    "rdma_convergence": False, "rdma_incast": False, "rdma_fct": False, "rdma_irn": False,
    # measured 2026-11-26: no phase flagged (the machine 54-62% busy)
    "rdma_pfc_victim": False,
    # measured 2026-11-26 (collectives over the RoCE engine): none of parallel_roce's 20
    # jobs flagged (ranks waited 1-9%); of parallel_roce_ecmp's four, the ring on 4 QPs per
    # connection was (OVS's forwarding queued 1.1 ms, machine idle 29%)
    "parallel_roce": False, "parallel_roce_ecmp": True,
    # measured 2026-11-27: none of the 3D job's eight runs flagged (ranks waited 4-5% of
    # an iteration for a core over Gloo, 5-9% over RoCE; the machine 33-50% idle)
    "parallel_3d": False,
    # measured 2026-11-27: none of its 40 job rows flagged (workers waited 2-8% of an
    # iteration for a core; the engines lost under 0.7% of a round to late wake-ups)
    "jobs_transports": False,
    # measured 2026-11-28: none of its 12 jobs flagged (ranks waited 1-7% of an iteration;
    # at 10 Mb/s one asynchronous real job had been, 12%)
    "parallel_pipemare": False,
}
# where the plan and the measurement part, and why (docs/BENCHMARKS.md)
DISAGREE: dict[str, str] = {}


def test_flows_sharing_a_bottleneck_split_it_and_the_rest_fill_their_links():
    topo = dumbbell(senders=3, receivers=1, access_rate_mbps=100, bottleneck_rate_mbps=30)
    rated = fluid_rates(topo, [("h1", "h4"), ("h2", "h4"), ("h3", "h4")])
    assert [round(r, 6) for r, _ in rated] == [10.0] * 3
    assert {hops for _, hops in rated} == {2.0}
    one = nonblocking(4, 20)
    assert [r for r, _ in fluid_rates(one, [("h1", "h2"), ("h3", "h4")])] == [20.0, 20.0]


def test_ecmp_splits_a_flow_over_its_equal_cost_paths():
    topo = fattree(4, 10)
    (rate, hops), = fluid_rates(topo, [("h1", "h16")])
    assert rate == pytest.approx(10.0) and hops == 5.0
    # sixteen flows across the core: a full-bisection fabric carries every one at line rate
    flows = [(f"h{i + 1}", f"h{(i + 8) % 16 + 1}") for i in range(16)]
    assert all(r == pytest.approx(10.0) for r, _ in fluid_rates(topo, flows))


def test_the_ovs_limits_lie_between_the_measured_mtus():
    fits_1500, bound_1500 = REFERENCE.ovs_pps(1500)
    fits_9000, bound_9000 = REFERENCE.ovs_pps(9000)
    assert (fits_1500, bound_1500) == pytest.approx((REFERENCE.ovs_fits_pps[1500],
                                                     REFERENCE.ovs_bound_pps[1500]))
    mid = REFERENCE.ovs_pps(4000)
    assert fits_1500 < mid[0] < fits_9000 and bound_1500 < mid[1] < bound_9000
    assert REFERENCE.ovs_pps(576) == pytest.approx((fits_1500, bound_1500))


def test_a_continuous_load_is_cpu_bound_past_what_ovs_forwards_and_split_over_servers():
    topo = fattree(4, 20)
    flows = [(f"h{i + 1}", f"h{(i + 8) % 16 + 1}") for i in range(16)]
    jumbo = demand(Load("stride:8", topo, 9000, flows))
    small = demand(Load("stride:8", topo, 1500, flows))
    assert jumbo.verdict == "fits" and jumbo.servers == 1
    assert small.packets_per_s == pytest.approx(6 * jumbo.packets_per_s, abs=1)
    assert small.verdict == "CPU-bound" and small.servers >= 2
    # the fewest servers each of which forwards no more than the reference carried
    fits, _ = REFERENCE.ovs_pps(1500)
    assert small.packets_per_s / small.servers <= fits < small.packets_per_s / (small.servers - 1)


def test_the_roce_engines_cpu_per_packet_is_priced():
    """The same flows carried by the RoCE engine cost its CPU per data packet besides the
    network's: 8 flows of 1068-byte packets at 30 Mb/s through one switch, 28,000 a
    second, which OVS forwards, are 1.3 cores of engines, more than the machine has beside
    the network's; in 4140-byte packets they fit."""
    topo = nonblocking(16, 30)
    flows = [(f"h{i + 1}", f"h{i + 9}") for i in range(8)]
    tcp = demand(Load("tcp", topo, 1068, flows))
    small = demand(Load("roce", topo, 1068, flows, roce=True))
    big = demand(Load("roce", topo, 4140, flows, roce=True))
    engines = 8 * 30e6 / 8 / 1068 * REFERENCE.roce_pkt_s
    assert tcp.verdict == "fits" and small.ovs == "fits"
    assert small.cores == pytest.approx(tcp.cores + engines, abs=0.01)
    assert small.verdict == "CPU-bound" and small.servers == 2
    assert big.verdict == "fits" and big.cores < small.cores


def test_trainers_wait_for_cores_when_more_want_one_than_there_are():
    topo = nonblocking(16, 1000)
    hosts = [f"h{i + 1}" for i in range(16)]
    ring = list(zip(hosts, hosts[1:] + hosts[:1]))
    few = demand(Load("4", topo, 9000, ring[:1], trainers=1, step_s=0.005, comm_s=0.01,
                      sent_mb=0.5, steps=6))
    many = demand(Load("16", topo, 9000, ring, trainers=16, step_s=0.005, comm_s=0.01,
                       sent_mb=0.5, steps=30))
    assert few.wait_share == 0 and few.verdict == "fits"
    assert many.wait_share > 0.1 and many.verdict == "CPU-bound" and many.servers > 1
    # the same trainers on twice the cores per server wait less
    big = dataclasses.replace(REFERENCE, cores=4, compute_cores=2 * REFERENCE.compute_cores)
    assert demand(Load("16", topo, 9000, ring, trainers=16, step_s=0.005, comm_s=0.01,
                       sent_mb=0.5, steps=30), big).servers < many.servers


@pytest.mark.parametrize("name", sorted(MEASURED_CPU_BOUND))
def test_the_plan_agrees_with_what_was_measured(name):
    spec, topo = load(ROOT / "experiments" / f"{name}.yaml")
    p = plan(spec, topo)
    assert render(p).splitlines()[0].startswith(spec.name)
    # "marginal" says a phase sits in the band where runs went either way: it agrees with
    # both; "fits" must not have been flagged, "CPU-bound" must have been
    agrees = p.verdict == "marginal" or (p.verdict == "CPU-bound") == MEASURED_CPU_BOUND[name]
    assert agrees != (name in DISAGREE), (name, DISAGREE.get(name), render(p))


def test_every_shipped_spec_has_its_measured_flag_and_few_are_marginal():
    shipped = {p.stem for p in (ROOT / "experiments").glob("*.yaml")}
    assert shipped == set(MEASURED_CPU_BOUND)
    marginal = [n for n in sorted(shipped)
                if plan(*load(ROOT / "experiments" / f"{n}.yaml")).verdict == "marginal"]
    # parallel_roce: its ranks waited up to 9% for a core (the band is 5-10%)
    assert marginal == ["parallel_3d", "parallel_collectives", "parallel_fsdp", "parallel_placement",
                        "parallel_roce", "parallel_roce_ecmp"]


def test_a_spec_with_a_cluster_is_told_whether_its_servers_suffice():
    from testbed.spec import loads
    data = {"name": "two", "topology": {"kind": "fattree", "params": {"k": 4, "rate_mbps": 20}},
            "links": {"mtu_bytes": 1500},
            "experiments": [{"type": "permutation", "patterns": ["stride:8"],
                             "routings": ["ecmp"]}],
            "cluster": {"servers": [{"name": "a", "address": "localhost"},
                                    {"name": "b", "address": "10.0.0.2"}]}}
    p = plan(*loads(data))
    assert p.cluster_servers == 2 and p.servers > 2
    assert render(p).endswith(f"the spec's cluster has 2 servers: {p.servers - 2} short (if "
                              "they are like the reference machine)")
    data["links"] = {"mtu_bytes": 9000}
    assert render(plan(*loads(data))).endswith("the spec's cluster has 2 servers: enough")


def test_the_plan_shows_what_the_models_expect_of_a_parallel_job():
    """Before a run: each job's iteration by the analytical model and on the paths its
    routing gives it, by transport, exactly as the runner's model computes it."""
    from testbed.experiments.parallel.expect import expected
    from testbed.experiments.parallel.model import parallel_qos
    from testbed.experiments.parallel.spec import job_hosts
    from testbed.spec import loads
    ring = {"type": "parallel", "model": "gpt2-small", "scale": 0.02, "device_tflops": 150,
            "reference_link_gbps": 100, "iters": 2, "warmup_iters": 1,
            "jobs": [{"name": "spread", "dp": 8, "placement": "spread"},
                     {"name": "packed", "dp": 8, "placement": "packed"}]}
    sprayed = {"transport": "roce", "roce": {"schemes": ["dcqcn+irn"], "source_port": "per_qp",
                                             "spray_entropies": 16}}
    data = {"name": "models", "topology": {"kind": "fattree",
                                           "params": {"k": 4, "rate_mbps": 5}},
            "links": {"mtu_bytes": 9000},
            "experiments": [ring, ring | sprayed,
                            {"type": "permutation", "patterns": ["stride:8"]}]}
    spec, topo = loads(data)
    assert plan(spec, topo).expected == []  # only when asked: they take seconds per job
    p = plan(spec, topo, models=True)
    assert [name for name, _ in p.expected] == ["0:parallel", "1:parallel"]  # no models: none
    (_, gloo), (_, roce) = p.expected
    assert [(e.label, e.transport) for e in gloo + roce] == [
        ("fattree spread", "gloo cubic"), ("fattree packed", "gloo cubic"),
        ("fattree spread", "roce dcqcn+irn"), ("fattree packed", "roce dcqcn+irn")]
    for e in gloo + roce:
        assert e.model_s > 0 and e.paths_p10_s <= e.paths_s <= e.paths_p90_s, e
    # spread over the pods, the ring's hashed connections collide in the core (packed,
    # in two pods, they meet less); sprayed, every packet takes any path: no collision
    assert gloo[0].paths_p90_s > 1.2 * gloo[0].model_s and gloo[1].paths_s < gloo[0].paths_s
    assert roce[0].paths_s == pytest.approx(roce[0].model_s, rel=0.05)
    # the runner's own model, with the reference machine's latency for every round trip
    exp, job = spec.experiments[0], spec.experiments[0].jobs[0]
    want = expected(exp, job, topo, job_hosts(job, topo), 5, 9000,
                    dict.fromkeys(("tp", "pp", "dp", "ep", "fsdp"), 2 * REFERENCE.latency_s),
                    "ecmp", parallel_qos(exp, None, spec.links.buffer_pkts),
                    spec.links.burst_us, None)
    assert (gloo[0].model_s, gloo[0].paths_s) == (want.pred["iteration_s"],
                                                  want.paths["iteration_s"])
    shown = render(p)
    assert "what the models expect of an iteration" in shown
    assert "1:parallel fattree packed" in shown and "roce dcqcn+irn" in shown


def test_the_idle_latency_follows_the_ports_one_process_reads():
    # measured in one ovs-vswitchd (docs/BENCHMARKS.md, "Latency and the forwarding
    # process"): 0.21-0.35 ms per crossing at k=4 (80 switch ports), 1.4-4.1 ms at k=8 (640)
    from testbed.config.forwarding import switch_port_count as switch_ports
    from testbed.plan import CapacityPlan, longest_switches
    for k, ports, measured in ((4, 80, (0.21e-3, 0.35e-3)), (8, 640, (1.4e-3, 4.1e-3))):
        topo = fattree(k, 20)
        assert switch_ports(topo) == ports and longest_switches(topo) == 5
        assert measured[0] <= REFERENCE.crossing_s(ports) <= measured[1]
    k8 = fattree(8, 20)
    p = CapacityPlan("k8", REFERENCE, [], None, [], switch_ports(k8), longest_switches(k8))
    assert p.idle_added_rtt_s == pytest.approx(10 * REFERENCE.crossing_s(640))
    assert "more than 1 ms" in render(p)
    # a cluster's servers each read their share of the ports
    split = dataclasses.replace(p, cluster_servers=8)
    assert split.ports_per_process == 80
    assert split.idle_added_rtt_s == pytest.approx(10 * REFERENCE.crossing_s(80))
