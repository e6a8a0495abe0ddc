"""Idle per-crossing delay of a Fat-Tree forwarded by N ovs-vswitchd processes
(`forwarding.processes`; docs/FIDELITY.md, "Latency that grows with the fabric").

For each K, each N and each run: the testbed's fabric (`testbed up`'s, MTU 9000, no
traffic) with `forwarding: {processes: N}`, how long it took to come up and to go down,
the machine's idle CPU over 5 s and the busiest forwarding thread's share of a core, then
the idle round trip of its farthest pair (the minimum of 25 pings 0.2 s apart, as the
reachability experiment probes it). Per crossing: (RTT - the physical floor) / 10, a
farthest pair's round trip crossing 5 switches each way. The plan's prediction is beside it.

    sudo .venv/bin/python scripts/bench_partitions.py [--k 4 8] [--n 1 2 8 16] [--runs 3]
        [--out DIR]

Prints one JSON line per run, then a Markdown table of the medians (docs/BENCHMARKS.md,
"Latency and the forwarding process").
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from testbed.api import LiveFabric, Testbed
from testbed.config.capacity import REFERENCE
from testbed.config.forwarding import partition, switch_port_count
from testbed.experiments.reachability import farthest_pair, rtt_floor_ms
from testbed.measure.cpu import CpuMonitor

PING_FRAME = 98  # ping's 56 bytes of data in ICMP, IP and Ethernet
CROSSINGS = 10   # a Fat-Tree's farthest pair: 5 switches there, 5 back


def idle_rtt_ms(fab: LiveFabric, src: str, dst: str) -> float:
    out = fab.host(src).run(["ping", "-n", "-q", "-c", "25", "-i", "0.2", "-W", "2",
                             fab.topo.host(dst).ip], timeout=60).stdout
    found = re.search(r"= ([\d.]+)/", out)
    if not found:
        raise RuntimeError(f"{src}->{dst}: no answer\n{out}")
    return float(found.group(1))


def measure(k: int, n: int, out: Path) -> dict:
    spec = {"name": f"partitions-k{k}", "topology": {"kind": "fattree", "params": {"k": k}},
            "links": {"mtu_bytes": 9000}, "forwarding": {"processes": n}}
    row: dict = {"k": k, "n": n}
    t0 = time.time()
    with Testbed(spec, out=out) as tb:
        fab = tb.fabric()
        row["up_s"] = round(time.time() - t0, 2)
        topo = fab.topo
        groups = partition(topo, n)
        row["ports_per_process"] = max(sum(1 for link in topo.links for node in (link.a, link.b)
                                           if node in set(g)) for g in groups)
        src, dst = farthest_pair(topo)
        row["floor_ms"] = rtt_floor_ms(topo, src, dst, PING_FRAME, 0)
        monitor = CpuMonitor()
        monitor.watch(set(), fab.fabric.forwarder_pids())
        monitor.start()
        time.sleep(5)
        monitor.stop()
        window = monitor.window(0, 5)
        row["machine_idle_mean"] = window["machine_idle_mean"]
        row["ovs_thread_mean"] = window["ovs_thread_mean"]
        row["rtt_ms"] = idle_rtt_ms(fab, src, dst)
        t1 = time.time()
    row["down_s"] = round(time.time() - t1, 2)
    row["per_crossing_ms"] = round((row["rtt_ms"] - row["floor_ms"]) / CROSSINGS, 3)
    row["plan_ms"] = round(REFERENCE.crossing_s(-(-switch_port_count(topo) // n)) * 1e3, 3)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 2, 8, 16])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="partitions-"))
    rows = []
    for k in args.k:
        for n in args.n:
            if n > k * k // 2:  # more processes than edge switches
                continue
            for run in range(args.runs):
                rows.append(measure(k, n, out / f"k{k}-n{n}-{run}"))
                print(json.dumps(rows[-1]), flush=True)
    print("\n| fabric | processes | ports per process | up / down | machine idle | busiest "
          "forwarding thread | per crossing, median (runs) | plan |\n|---|---|---|---|---|---|---|---|")
    for k in args.k:
        for n in args.n:
            sel = [r for r in rows if (r["k"], r["n"]) == (k, n)]
            if not sel:
                continue
            med = {key: statistics.median(r[key] for r in sel) for key in
                   ("up_s", "down_s", "machine_idle_mean", "ovs_thread_mean", "per_crossing_ms")}
            runs = ", ".join(f"{r['per_crossing_ms']:.3f}" for r in sel)
            print(f"| Fat-Tree k={k} | {n} | {sel[0]['ports_per_process']} | {med['up_s']:.1f} / "
                  f"{med['down_s']:.1f} s | {med['machine_idle_mean']:.0%} | "
                  f"{med['ovs_thread_mean']:.0%} | {med['per_crossing_ms']:.3f} ms ({runs}) | "
                  f"{sel[0]['plan_ms']:.3f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
