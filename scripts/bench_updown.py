"""A fabric up and down: the testbed beside plain Mininet, in the same run, on a quiet
machine. Plain Mininet is what `sudo mn --custom testbed/mntopo.py --topo fattree,K
--switch ovs,datapath=user,protocols=OpenFlow13 --controller none` builds (the same
topology, userspace OVS, no controller, no queues, nothing routed; `mn` starts the switches
one at a time, and Mininet's `OVSSwitch(batch=True)` with one ovs-vsctl call is measured
too); the testbed builds the same fabric with its controller, every path installed and
acknowledged, hosts set up and queues on every port (`testbed up`'s fabric, through
testbed.api).

    sudo .venv/bin/python scripts/bench_updown.py [--runs 3] [--k 4 8] [--out DIR]

Prints a Markdown table (docs/BENCHMARKS.md, "Up and down") with min / median / max of
each, and checks that nothing of either was left: no bridge, no interface of the fabric.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from functools import partial
from pathlib import Path


def leftovers() -> list[str]:
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True,
                             check=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    return bridges + [line.split(":")[1].strip() for line in links.splitlines()
                      if "-eth" in line]


def plain_mininet(k: int, batch: bool) -> tuple[float, float]:
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    from testbed.mntopo import TestbedTopo
    setLogLevel("warning")
    t0 = time.time()
    net = Mininet(topo=TestbedTopo("fattree", k), controller=None, autoSetMacs=False,
                  switch=partial(OVSSwitch, datapath="user", protocols="OpenFlow13",
                                 batch=batch))
    net.start()
    up = time.time() - t0
    t0 = time.time()
    net.stop()
    return up, time.time() - t0


def testbed(k: int, out: Path) -> tuple[float, float]:
    from testbed.api import Testbed
    spec = {"name": f"updown-k{k}", "topology": {"kind": "fattree", "params": {"k": k}}}
    with Testbed(spec, out=out) as tb:
        t0 = time.time()
        fab = tb.fabric()
        up = time.time() - t0
        t0 = time.time()
        fab.close()
        return up, time.time() - t0


def spread(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in (min(values), statistics.median(values),
                                           max(values)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="updown-"))
    rows = []
    for k in args.k:
        times: dict[str, list[tuple[float, float]]] = {
            "plain Mininet": [], "plain Mininet, batch=True": [], "testbed": []}
        for run in range(args.runs):
            times["plain Mininet"].append(plain_mininet(k, batch=False))
            assert not leftovers(), leftovers()
            times["plain Mininet, batch=True"].append(plain_mininet(k, batch=True))
            assert not leftovers(), leftovers()
            times["testbed"].append(testbed(k, out / f"k{k}-{run}"))
            assert not leftovers(), leftovers()
        for what, pairs in times.items():
            rows.append(f"| Fat-Tree k={k} | {what} | {spread([p[0] for p in pairs])} s | "
                        f"{spread([p[1] for p in pairs])} s |")
            print(rows[-1], flush=True)
    print(f"\n{args.runs} runs each, min / median / max; nothing left after any\n")
    print("| fabric | built by | up | down |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
