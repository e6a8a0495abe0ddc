"""The survey's fabrics under load: a permutation under each fabric's own
routing against the max-min model of the paths that routing gives, and c-Through moving
an optical circuit, with a 10% tolerance and the dark time measured
on the optical switch's ports."""
from .helpers import leftovers, not_cpu_bound, rows, run

LINKS = {"buffer_pkts": 100, "mtu_bytes": 9000}  # off the CPU limit (permutation_survey.yaml)


def test_own_routings_carry_a_permutation_as_their_max_min_model_says(tmp_path):
    """Dimension order on a 4x4 torus and DCellRouting on DCell(4, 1), at 20 Mb/s: both
    deterministic, so the model is the max-min shares of the very paths the flows take.
    On the torus, the port toward h1 is captured meanwhile (CPU verdict and all)."""
    for kind, params in (("torus", {"sides": "4x4", "rate_mbps": 20}),
                         ("dcell", {"n": 4, "k": 1, "rate_mbps": 20})):
        capture = {"capture": {"ports": ["t1-eth1"], "filter": "tcp"}} if kind == "torus" else {}
        out, summary = run(tmp_path / kind, {
            "name": f"it-survey-{kind}", "topology": {"kind": kind, "params": params},
            "links": LINKS, **capture,
            "experiments": [{"type": "permutation", "patterns": ["stride:4"],
                             "routings": ["own"], "duration_s": 10, "omit_s": 2}]})
        assert summary["status"] == "ok"
        (row,) = rows(out, "permutation.csv")
        not_cpu_bound(row, summary)
        measured, model = float(row["normalised_to_ideal"]), float(row["routed_model"])
        assert abs(measured / model - 1) <= 0.10, (kind, measured, model)
        assert int(row["lost_in_switches_pkts"]) == 0
        if capture:
            assert_captured_both_flows_of_h1(out)


def assert_captured_both_flows_of_h1(out):
    """The pcap of the port toward h1 (read back by tcpdump) holds the permutation's two
    flows through it, h1 -> h5 and h13 -> h1 (stride 4 of 16), each at about its share:
    20 Mb/s for 10 s of 9000-byte frames is ~2,700 packets a flow."""
    import json
    import subprocess
    (pcap,) = (out / "capture").glob("*/t1-eth1.pcap")
    (stats,) = json.loads((pcap.parent / "capture.json").read_text())
    assert stats["dropped_by_kernel"] == 0 and not stats["capped"], stats
    text = subprocess.run(["tcpdump", "-r", str(pcap), "-nn", "-q"], capture_output=True,
                          text=True, check=True).stdout
    data = {}
    for line in text.splitlines():  # "hh:mm:ss.us IP 10.0.0.1.40000 > 10.0.0.5.5201: tcp 8948"
        words = line.split()
        if len(words) >= 7 and words[1] == "IP" and int(words[-1]) > 1000:
            src, dst = (".".join(w.rstrip(":").split(".")[:4]) for w in (words[2], words[4]))
            data[(src, dst)] = data.get((src, dst), 0) + 1
    assert stats["packets"] == len(text.splitlines()), stats
    for pair in (("10.0.0.1", "10.0.0.5"), ("10.0.0.13", "10.0.0.1")):
        assert data.get(pair, 0) >= 2000, data


def test_cthrough_lights_the_busy_pair_after_the_dark_time(tmp_path):
    out, summary = run(tmp_path, {
        "name": "it-circuits",
        "topology": {"kind": "hybrid", "params": {"racks": 3, "hosts_per_rack": 2,
                                                  "host_rate": 20, "packet_rate": 10,
                                                  "circuit_rate": 30}},
        "links": LINKS, "controller": {"routing": "cthrough"},
        "experiments": [{"type": "circuits", "pairs": [[0, 1], [0, 2]], "turn_s": 6,
                         "settings": [{"period_s": 1.0, "dark_ms": 50}]}]})
    assert summary["status"] == "ok"
    table = rows(out, "circuits.csv")
    assert [(r["src_rack"], r["dst_rack"]) for r in table] == [("0", "1"), ("0", "2")]
    for r in table:
        not_cpu_bound(r, summary)
        # lit within a period (to see the demand) and the dark time of the turn's start
        assert float(r["lit_after_s"]) <= 1.0 + 0.05 + 0.1, r
        # the circuit carries its rate (TCP payload), the packet fabric a third of it
        assert abs(float(r["circuit_over_rate"]) - 1) <= 0.10, r
        # the controller keeps the configured dark time between its two steps
        assert 50 <= float(r["dark_applied_ms"]) <= 50 + 10, r
    # on the optical switch's port: dark for those 50 ms, plus Open vSwitch taking the new
    # entries into its datapath (3-13 ms measured, docs/BENCHMARKS.md) and the sampling
    # (measured when the pair's traffic was already waiting on the packet fabric)
    darks = [(float(r["dark_measured_ms"]), float(r["dark_resolution_ms"]))
             for r in table if r["dark_measured_ms"]]
    assert darks and all(50 <= d <= 50 + 50 for d, _ in darks), darks
    assert leftovers(["e1", "e2", "e3", "c1", "o1"]) == []
