"""Idle per-crossing delay of a Fat-Tree with its switches in one ovs-vswitchd, then in N:
a measurement of the lever, not the feature (the testbed builds every switch in the one
ovs-vswitchd; docs/FIDELITY.md, "Latency that grows with the fabric").

For each K and N: the testbed's fabric (`testbed up`'s, MTU 9000, no traffic), the idle
round trip of its farthest pair (the minimum of 25 pings 0.2 s apart, as the reachability
experiment probes it), then N-1 more ovs-vswitchd processes started (each with its own
ovsdb-server, database and run directory under /run/testbed-partitions, the malloc
thresholds of the testbed's OVS, and `--enable-dummy`: OVS's "dummy" datapath type is the
userspace datapath with in-memory internal ports, where a second "netdev" datapath in the
same network namespace fails to create its `ovs-netdev` tap device), every N-th switch
moved into each (its bridge deleted in the first and made again in its process with the
same datapath ID, OpenFlow port numbers, fail mode and controller; the controller installs
its paths when the switch reconnects), and the same probe. Per crossing: (RTT - the
physical floor) / 10, a farthest pair's round trip crossing 5 switches each way.

    sudo .venv/bin/python scripts/bench_partitions.py [--k 4 8] [--n 2 8 16] [--runs 1]
        [--out DIR] [--perf]

`--perf` also records the first ovs-vswitchd for 5 s idle and 4 s under 200 pings a second
(perf-*.txt in DIR). Prints a Markdown table (docs/BENCHMARKS.md, "Latency and the
forwarding process"). Every process it starts is stopped, and its directories removed, on
the way out.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from testbed.api import LiveFabric, Testbed
from testbed.dataplane.ovs import MALLOC_TUNABLES
from testbed.experiments.reachability import farthest_pair, rtt_floor_ms

RUN = Path("/run/testbed-partitions")
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"
PING_FRAME = 98  # ping's 56 bytes of data in ICMP, IP and Ethernet
CROSSINGS = 10   # a Fat-Tree's farthest pair: 5 switches there, 5 back


def sh(argv: list[str], env: dict | None = None, check: bool = True) -> str:
    if argv[0] == "ovs-vsctl":  # never wait for a daemon that is gone
        argv = [argv[0], "--timeout=20", *argv[1:]]
    return subprocess.run(argv, env=env, check=check, capture_output=True, text=True,
                          timeout=60).stdout


def env_of(p: int) -> dict:
    """The OVS tools' environment for process `p` (0: the system's)."""
    env = dict(os.environ)
    if p:
        for var in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR"):
            env[var] = str(RUN / str(p))
    return env


def start_instance(p: int) -> None:
    d = RUN / str(p)
    d.mkdir(parents=True)
    sh(["ovsdb-tool", "create", str(d / "conf.db"), SCHEMA])
    env = env_of(p)
    sh(["ovsdb-server", str(d / "conf.db"), f"--remote=punix:{d}/db.sock",
        f"--pidfile={d}/ovsdb-server.pid", f"--unixctl={d}/ovsdb-server.ctl", "--detach",
        f"--log-file={d}/ovsdb-server.log"], env=env)
    sh(["ovs-vsctl", "--no-wait", "init"], env=env)
    sh(["ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid",
        f"--unixctl={d}/ovs-vswitchd.ctl", "--enable-dummy", "--detach",
        f"--log-file={d}/ovs-vswitchd.log"], env={**env, "GLIBC_TUNABLES": MALLOC_TUNABLES})


def instance_pids(d: Path) -> list[int]:
    """The daemons of instance directory `d` still running (a PID whose command line names
    the directory: not a reused one)."""
    pids = []
    for name in ("ovs-vswitchd.pid", "ovsdb-server.pid"):
        try:
            pid = int((d / name).read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if f"{d}/".encode() in cmdline:
            pids.append(pid)
    return pids


def stop_instances() -> None:
    for d in sorted(RUN.glob("*")) if RUN.exists() else []:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in instance_pids(d):
                os.kill(pid, sig)
            deadline = time.time() + 5
            while instance_pids(d) and time.time() < deadline:
                time.sleep(0.1)
        if instance_pids(d):
            raise RuntimeError(f"could not stop {instance_pids(d)} of {d}")
        subprocess.run(["rm", "-rf", str(d)], check=False)


def move(bridge: str, p: int) -> None:
    """A bridge from the system's ovs-vswitchd into process `p`, as it was."""
    def get(table: str, record: str, column: str) -> str:
        return sh(["ovs-vsctl", "get", table, record, column]).strip()
    ports = [(port, get("Interface", port, "ofport"))
             for port in sh(["ovs-vsctl", "list-ports", bridge]).split()]
    dpid = get("Bridge", bridge, "other_config:datapath-id")
    protocols = get("Bridge", bridge, "protocols")
    controllers = sh(["ovs-vsctl", "get-controller", bridge]).split()
    sh(["ovs-vsctl", "del-br", bridge])
    argv = ["ovs-vsctl", "add-br", bridge, "--", "set", "Bridge", bridge,
            "datapath_type=dummy", f"other_config:datapath-id={dpid}",
            f"protocols={protocols}", "fail_mode=secure"]
    for port, ofport in ports:
        argv += ["--", "add-port", bridge, port, "--", "set", "Interface", port,
                 f"ofport_request={ofport}"]
    sh(argv + ["--", "set-controller", bridge, *controllers], env=env_of(p))


def idle_rtt_ms(fab: LiveFabric, src: str, dst: str) -> float:
    out = fab.host(src).run(["ping", "-n", "-q", "-c", "25", "-i", "0.2", "-W", "2",
                             fab.topo.host(dst).ip], timeout=60).stdout
    found = re.search(r"= ([\d.]+)/", out)
    if not found:
        raise RuntimeError(f"{src}->{dst}: no answer\n{out}")
    return float(found.group(1))


def vswitchd_pid() -> int:
    return int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text())


def profile(out: Path, tag: str, seconds: float) -> None:
    data = out / f"perf-{tag}.data"
    subprocess.run(["perf", "record", "-F", "499", "-g", "-p", str(vswitchd_pid()), "-o",
                    str(data), "--", "sleep", str(seconds)], capture_output=True, check=False)
    for sort in ("dso", "sym"):
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio",
                                 "--sort", sort, "-g", "none", "--percent-limit", "1"],
                                capture_output=True, text=True, check=False).stdout
        (out / f"perf-{tag}-{sort}.txt").write_text(report)


def measure(k: int, n: int, out: Path, perf: bool) -> dict:
    spec = {"name": f"partitions-k{k}", "topology": {"kind": "fattree", "params": {"k": k}},
            "links": {"mtu_bytes": 9000}}
    row: dict = {"k": k, "n": n}
    with Testbed(spec, out=out / "run") as tb:
        fab = tb.fabric()
        src, dst = farthest_pair(fab.topo)
        row["floor_ms"] = rtt_floor_ms(fab.topo, src, dst, PING_FRAME, 0)
        time.sleep(2)
        row["one_ms"] = idle_rtt_ms(fab, src, dst)
        if perf:
            profile(out, f"k{k}-idle", 5)
            ping = fab.host(src).start(["ping", "-n", "-q", "-c", "800", "-i", "0.005",
                                        fab.topo.host(dst).ip])
            profile(out, f"k{k}-ping200", 4)
            ping.wait()
        switches = [s.name for s in fab.topo.switches]
        moved = {p: switches[p::n] for p in range(1, n)}
        try:
            for p, bridges in moved.items():
                start_instance(p)
                for bridge in bridges:
                    move(bridge, p)
            time.sleep(5)  # every moved switch reconnected and reinstalled
            row["split_ms"] = idle_rtt_ms(fab, src, dst)
        finally:
            for p, bridges in moved.items():
                for bridge in bridges:
                    sh(["ovs-vsctl", "--no-wait", "--if-exists", "del-br", bridge],
                       env=env_of(p), check=False)
            stop_instances()
    for key in ("one", "split"):
        row[f"{key}_per_crossing_ms"] = round((row[f"{key}_ms"] - row["floor_ms"]) / CROSSINGS,
                                              3)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--n", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--perf", action="store_true")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="partitions-"))
    stop_instances()  # an interrupted run's
    rows = []
    for k in args.k:
        for n in args.n:
            if n > 5 * k * k // 4:  # more processes than switches
                continue
            for run in range(args.runs):
                rows.append(measure(k, n, out / f"k{k}-n{n}-{run}", args.perf and n == args.n[0] and run == 0))
                print(json.dumps(rows[-1]), flush=True)
    print("\n| fabric | processes | idle RTT, one / split | per crossing, one / split |\n"
          "|---|---|---|---|")
    for r in rows:
        print(f"| Fat-Tree k={r['k']} | 1 / {r['n']} | {r['one_ms']:.2f} / {r['split_ms']:.2f} ms"
              f" | {r['one_per_crossing_ms']:.3f} / {r['split_per_crossing_ms']:.3f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
