"""Hedera in a real fabric: elephants that collide on one path are detected from the edge
switches' flow counters and moved apart, and throughput follows."""
import json

import pytest

from .helpers import rows, run


def test_hedera_moves_colliding_elephants(tmp_path):
    # base routing `single`: every flow starts on the first path, so all of them collide
    # (stride-4 on a k=4 Fat-Tree: every flow leaves its pod through one core switch)
    out, summary = run(tmp_path, {
        "name": "it-hedera", "topology": {"kind": "fattree", "params": {"k": 4}},
        "links": {"rate_mbps": 10, "mtu_bytes": 9000},  # MTU 1500 is CPU-bound here
        "controller": {"hedera": {"period_s": 2, "base": "single"}},
        "experiments": [{"type": "permutation", "patterns": ["stride:4"],
                         "routings": ["single", "hedera"], "duration_s": 20, "omit_s": 6}]})
    assert summary["status"] == "ok", summary
    table = {r["routing"]: r for r in rows(out, "permutation.csv")}
    decisions = [json.loads(line) for f in (out / "hedera").glob("*/hedera_decisions.jsonl")
                 for line in f.read_text().splitlines()]
    # every one of the 16 elephants was placed, and the placements use every core switch
    assert len({d["flow"] for d in decisions}) >= 16, decisions
    assert {d["path"][3] for d in decisions} == {"c1", "c2", "c3", "c4"}, decisions
    assert all(d["demand"] > 0.9 for d in decisions)  # each NIC-limited: a whole link
    single = float(table["single"]["normalised_to_ideal"])
    hedera = float(table["hedera"]["normalised_to_ideal"])
    # one path carries a quarter of the bisection; Hedera spreads the flows over all four
    assert single < 0.35, table
    assert hedera > 2 * single, table
    # first packets go on and only a copy goes to the controller: no packet lost in OVS
    assert int(table["hedera"]["lost_in_switches_pkts"]) == 0, table
    assert table["hedera"]["cpu_bound"] == "False", table  # else the numbers mean little


def test_finite_flows_have_completion_times_and_slowdowns(tmp_path):
    out, summary = run(tmp_path, {
        "name": "it-fct", "topology": {"kind": "fattree", "params": {"k": 4}},
        "links": {"rate_mbps": 10, "mtu_bytes": 9000},
        "experiments": [{"type": "permutation", "patterns": ["stride:8"], "routings": ["ecmp"],
                         "duration_s": 30, "flow_bytes": 2_000_000}]})
    assert summary["status"] == "ok", summary
    flows = rows(out, "permutation_flows.csv")
    assert len(flows) == 16
    ideal = float(flows[0]["ideal_fct_s"])
    # alone on the idle fabric: 2 MB at the 10 Mb/s link's TCP payload rate (~1.6 s), plus
    # the handshake and slow start: within 25% of that
    payload_s = 2_000_000 * 8 / (10e6 * (9000 - 52) / (9000 + 14))
    assert payload_s <= ideal <= 1.25 * payload_s, ideal
    for f in flows:
        fct = float(f["fct_s"])
        assert fct > 0 and float(f["slowdown"]) == pytest.approx(fct / ideal, rel=1e-2)
        assert float(f["slowdown"]) >= 0.9  # no flow beats one alone (10% measurement noise)
    perm = rows(out, "permutation.csv")[0]
    assert float(perm["slowdown_p99"]) >= float(perm["slowdown_p50"]) >= 0.9
