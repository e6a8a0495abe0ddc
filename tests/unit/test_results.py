"""Result files never overwrite each other: two experiments of one run that write the same
table keep all their rows."""
from __future__ import annotations

from types import SimpleNamespace

from testbed.experiments.qos_common import CLASS_QUEUES, CLASS_QUEUES_HEADER, class_queue_rows
from testbed.results.files import append_csv, read_rows
from testbed.runner import RunContext
from testbed.spec import loads


class RecordedDataplane:
    """The parts of a dataplane the analysis reads: its ports."""

    def __init__(self, names: list[str]):
        self.ports = [{"id": i, "ifname": n, "is_host": False} for i, n in enumerate(names)]


def samples(n: int, port: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(t=i * 0.001, port=port, cls=0, pkts=i, bytes=1514 * i, marks=0,
                            drops=0) for i in range(n)]


def test_incast_and_pfc_victim_in_one_spec_keep_both_queue_traces(tmp_path):
    spec, topo = loads({"name": "both", "topology": {"kind": "dumbbell"},
                        "experiments": [{"type": "incast", "senders": [1, 2]},
                                        {"type": "pfc_victim"}]})
    ctx = RunContext(spec=spec, topo=topo, out_dir=tmp_path, record=None, log=print, cpu=None)
    incast_dp = RecordedDataplane(["s1-eth1", "s1-eth2"])
    victim_dp = RecordedDataplane(["l1-eth1", "sp1-eth1"])
    ctx.write_csv(CLASS_QUEUES, CLASS_QUEUES_HEADER,
                  class_queue_rows(incast_dp, samples(5, 1), "incast lossy"))
    ctx.write_csv(CLASS_QUEUES, CLASS_QUEUES_HEADER,
                  class_queue_rows(victim_dp, samples(3, 0), "pfc victim pfc"))
    rows = read_rows(tmp_path / "metrics" / CLASS_QUEUES)
    assert [r["phase"] for r in rows] == ["incast lossy"] * 5 + ["pfc victim pfc"] * 3
    assert {r["port"] for r in rows} == {"s1-eth2", "l1-eth1"}


def test_a_second_writer_with_more_columns_keeps_the_first_rows(tmp_path):
    path = tmp_path / "training.csv"
    append_csv(path, ["job", "iter_s"], [["a", 0.5], ["b", 0.6]])
    append_csv(path, ["job", "iter_s", "staleness"], [["c", 0.7, 2]])
    append_csv(path, ["job", "iter_s", "staleness"], [["d", 0.8, 0]])
    rows = read_rows(path)
    assert [r["job"] for r in rows] == ["a", "b", "c", "d"]
    assert rows[0]["staleness"] == "" and rows[2]["staleness"] == "2"


def test_the_experiments_analyses_run_on_recorded_rows():
    """Each experiment's headline is a pure function of the rows it wrote."""
    from testbed.experiments import incast, pfc_victim
    from testbed.experiments.permutation.analysis import headline as permutation_headline
    from testbed.spec import Incast, Permutation
    perm = Permutation(patterns=["stride:8", "randbij"], routings=["single", "ecmp"])
    rows = [["single", "stride:8", 0, 80.0, 0.25, 0.1, 0.5, 0.4, False, 0, None, None, None,
             None, 0.99, 0.248, 0.248, 0.248, 0.25],
            ["ecmp", "stride:8", 0, 200.0, 0.625, 0.1, 0.5, 0.4, False, 0, None, None, None,
             None, 0.99, 0.62, 0.49, 0.75, 0.64],
            ["single", "randbij", 0, 100.0, 0.3125, 0.1, 0.5, 0.4, True, 0, None, None, None,
             None, 0.9, 0.3, 0.3, 0.3, 0.31],
            ["ecmp", "randbij", 0, 150.0, 0.46875, 0.1, 0.5, 0.4, False, 0, None, None, None,
             None, 0.9, None, None, None, None]]
    h = permutation_headline(rows, perm, ["single", "ecmp"], 320.0, {})
    assert h["stride:8_ecmp_over_single"] == 2.5 and h["randbij_maxmin_model"] == 0.9
    assert h["stride:8_ecmp_model"] == 0.62 and "randbij_ecmp_model" not in h
    assert h["stride:8_ecmp_model_pf"] == 0.64 and "randbij_ecmp_model_pf" not in h
    assert h["mean_single_normalised"] == 0.25 and h["cpu_bound_phases_single"] == 1
    inc = Incast(senders=[1, 4], variants=["lossy", "pfc"])
    rows = [{"variant": v, "senders": n, "goodput_mbps": g, "switch_drops": d,
             "tcp_timeouts": t, "lossless_overflow": 0}
            for v, n, g, d, t in (("lossy", 1, 90.0, 0, 0), ("lossy", 4, 45.0, 30, 7),
                                  ("pfc", 1, 90.0, 0, 0), ("pfc", 4, 92.0, 0, 0))]
    h, warnings = incast.analyse(rows, inc, {}, 95.6)
    assert h["lossy"]["collapse_from_best"] == 0.5 and h["pfc"]["drops_at_max_n"] == 0
    assert warnings == []
    h, warnings = pfc_victim.analyse(
        [{"phase": "lossy", "victim_mbps": 90.0, "paused_links": "", "switch_drops": 5},
         {"phase": "pfc", "victim_mbps": 30.0, "paused_links": "a b", "switch_drops": 1}],
        "h8->h9", "['h5']->h1")
    assert h["victim_mbps_pfc"] == 30.0 and h["paused_links_pfc"] == "a b"
    assert warnings == ["pfc victim: the fabric dropped packets with PFC on"]


def test_reachability_reports_the_idle_path_beside_its_floor_and_flags_cpu_bound():
    from testbed.experiments.reachability import (
        analyse,
        farthest_pair,
        ping_frame_bytes,
        rtt_floor_ms,
    )
    from topologies import fattree
    topo = fattree(4, rate_mbps=20)
    assert farthest_pair(topo) == ("h1", "h9")  # another pod: 6 links
    assert ping_frame_bytes() == 98
    # 6 links of 98 B at 20 Mb/s each way, no configured delay: 2 * 6 * 39.2 us
    assert rtt_floor_ms(topo, "h1", "h9", 98, 0) == 0.4704
    # 100 us at each of the 5 switches each way; a rate override replaces the topology's
    assert rtt_floor_ms(topo, "h1", "h9", 98, 100, rate_mbps=10) == round(2 * (6 * 0.0784 + 0.5), 4)
    rows = [["h1", "h9", 3, 3, 0.0, 5.0, 6.0, 4.0]]
    quiet = analyse(rows, None, False, ("h1", "h9", 0.6, 0.4704))
    assert quiet.headline["emulator_added_ms"] == 0.13 and quiet.warnings == []
    busy = analyse(rows, None, True, ("h1", "h9", 47.0, 0.4704))
    assert busy.headline["cpu_bound"] is True
    assert any("CPU-bound" in w for w in busy.warnings)
    assert any("above its physical floor" in w for w in busy.warnings)
