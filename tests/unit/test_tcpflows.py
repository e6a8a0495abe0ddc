"""The finite-flow TCP workload on loopback (no root): two processes on 127.0.0.1 send each
other flows at scheduled times; every byte arrives, each flow's completion and its
connection's counters come back, and a flow starts no earlier than scheduled."""
import json
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flows_complete_on_schedule_and_every_byte_arrives(tmp_path):
    ports = [free_port(), free_port()]
    start = time.time() + 1.0
    sizes = {1: 1, 2: 70_000, 3: 3_000_000, 4: 200_000}
    flows = {0: [(1, 0), (2, 50_000), (3, 100_000)], 1: [(4, 20_000)]}
    procs = []
    for me in (0, 1):
        peer = 1 - me
        cfg = {"bind": "127.0.0.1", "port": ports[me], "start_at_unix": start, "dscp": 26,
               "ack_dscp": 48, "mss": 1024,
               "flows": [{"id": i, "dst": "127.0.0.1", "port": ports[peer], "size": sizes[i],
                          "start_us": at} for i, at in flows[me]]}
        (tmp_path / f"{me}.json").write_text(json.dumps(cfg))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "testbed.workloads.tcpflows", str(tmp_path / f"{me}.json"),
             str(tmp_path / f"r{me}.json")], stdout=subprocess.PIPE, text=True))
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "done"
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=10) == 0
    res = [json.loads((tmp_path / f"r{me}.json").read_text()) for me in (0, 1)]
    sent = {f["id"]: f for r in res for f in r["sent"]}
    received = {k: v for r in res for k, v in r["received"]}
    assert received == sizes                       # every byte, each flow its own
    for i, f in sent.items():
        assert f["fct_us"] > 0 and 0 <= f["late_us"] < 50_000
        assert f["segs_out"] >= sizes[i] // 1024 and f["min_rtt_us"] > 0 and f["cc"]
    # 3 MB in segments of at most 1024 bytes: the MSS asked for
    assert sent[3]["segs_out"] >= 3_000_000 // 1024
