"""Processes in the emulated hosts: iperf3 flows, workloads, servers.

Every process is started from an argv list inside its host's network namespace; its PID is
recorded in the run record so that teardown and `testbed clean` stop exactly those.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from testbed.core.system import REPO_ROOT, TestbedError, run
from testbed.workloads.model.flows import BASE_PORT, Flow, FlowResult, parse_finite, parse_iperf3


def host_env() -> dict[str, str]:
    """Explicit environment of the processes the testbed starts (workloads in hosts, the
    controller): PATH, and the repository on PYTHONPATH so that `python -m ...` works."""
    return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "PYTHONPATH": str(REPO_ROOT)}


def start_in_host(fabric, host: str, argv: list[str], what: str, log: Path) -> subprocess.Popen:
    """Start a process in a host's namespace (PYTHONPATH set so that `python -m testbed...`
    works there), its PID recorded in the run record."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "wb")
    proc = subprocess.Popen(fabric.host_argv(host, argv, hangup=True), stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=host_env())
    out.close()
    fabric.record.add_pid(proc.pid, what)
    return proc


def run_in_host(fabric, host: str, argv: list[str], timeout: float) -> str:
    """Run a process in a host's namespace to completion; returns its stdout."""
    proc = subprocess.Popen(fabric.host_argv(host, argv), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=host_env(),
                            text=True)
    fabric.record.add_pid(proc.pid, f"workload in {host}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_and_reap([proc])
        raise TestbedError(f"{argv[2:4]} in {host} did not finish within {timeout:.0f} s") from None
    finally:
        stop_and_reap([proc])
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(argv[2:4])} in {host} failed: {err.strip()[-400:]}")
    return out


def wait_listening(fabric, endpoints: list[tuple[str, int]], timeout: float = 10.0) -> None:
    """Until every (host, TCP port) has a listening socket."""
    pending = set(endpoints)
    deadline = time.time() + timeout
    while pending and time.time() < deadline:
        for host, port in list(pending):
            out = run(fabric.host_argv(host, ["ss", "-ltnH", f"sport = :{port}"]),
                      check=False).stdout
            if out.strip():
                pending.discard((host, port))
        if pending:
            time.sleep(0.05)
    if pending:
        raise TestbedError(f"servers did not start listening: {sorted(pending)[:3]}")


class FlowRunner:
    """Runs a set of iperf3 flows at the same time and returns their results."""

    def __init__(self, fabric, log_dir: Path):
        self.fabric = fabric
        self.log_dir = log_dir

    def _spawn(self, host: str, argv: list[str], what: str, log: Path) -> subprocess.Popen:
        return start_in_host(self.fabric, host, argv, what, log)

    def run(self, flows: list[Flow], tag: str) -> list[FlowResult]:
        if flows and all(f.nbytes for f in flows):
            return self.run_finite(flows, tag)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        topo = self.fabric.topo
        procs: list[subprocess.Popen] = []
        try:
            for i, f in enumerate(flows):
                procs.append(self._spawn(f.dst, ["iperf3", "-s", "-1", "-p", str(f.port),
                                                     *f.server_args()],
                                         f"iperf3 server {f.dst}:{f.port}",
                                         self.log_dir / f"{tag}-{i}-server.log"))
            wait_listening(self.fabric, [(f.dst, f.port) for f in flows])
            clients, started = [], []
            for i, f in enumerate(flows):
                argv = ["iperf3", "-c", topo.host(f.dst).ip, "-p", str(f.port), "-J",
                        *f.client_args()]
                started.append(time.time())
                clients.append(self._spawn(f.src, argv, f"iperf3 client {f.src}->{f.dst}",
                                           self.log_dir / f"{tag}-{i}-client.json"))
                procs.append(clients[-1])
            deadline = time.time() + max(f.duration_s + f.omit_s for f in flows) + 30
            results = []
            for i, (f, proc) in enumerate(zip(flows, clients)):
                try:
                    proc.wait(timeout=max(1.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass  # stopped below; its output says what it got
                text = (self.log_dir / f"{tag}-{i}-client.json").read_text(errors="replace")
                results.append(replace(parse_iperf3(f.src, f.dst, text), started=started[i]))
            return results
        finally:
            stop_and_reap(procs)


    def run_finite(self, flows: list[Flow], tag: str) -> list[FlowResult]:
        """Finite flows, timed where they end: the destination asks the source for
        `nbytes` over an open connection (testbed/workloads/incast.py, one part) and
        measures from its request to the last byte. iperf3 -n cannot be used for this: its
        receiver stops counting when the sender has written its last block, before that
        block has arrived (measured: 1.72 of 2 MB counted)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        topo = self.fabric.topo
        py = [sys.executable, "-m", "testbed.workloads.incast"]
        procs: list[subprocess.Popen] = []
        ports: dict[str, int] = {}
        placed = []
        try:
            for i, f in enumerate(flows):  # the data source serves; one port per flow there
                port = BASE_PORT + ports.get(f.src, 0)
                ports[f.src] = ports.get(f.src, 0) + 1
                placed.append(port)
                procs.append(self._spawn(f.src, [*py, "serve", "--port", str(port),
                                                 "--dscp", str(f.dscp)],
                                         f"flow server {f.src}:{port}",
                                         self.log_dir / f"{tag}-{i}-server.log"))
            wait_listening(self.fabric, [(f.src, port) for f, port in zip(flows, placed)])
            readers = []
            for i, (f, port) in enumerate(zip(flows, placed)):
                readers.append(self._spawn(
                    f.dst, [*py, "read", "--servers", f"{topo.host(f.src).ip}:{port}",
                            "--block-bytes", str(f.nbytes), "--rounds", "1",
                            "--dscp", str(f.dscp), "--timeout-s", f"{f.duration_s:g}"],
                    f"flow reader {f.dst}<-{f.src}", self.log_dir / f"{tag}-{i}-reader.json"))
                procs.append(readers[-1])
            deadline = time.time() + max(f.duration_s for f in flows) + 30
            results = []
            for i, (f, proc) in enumerate(zip(flows, readers)):
                try:
                    proc.wait(timeout=max(1.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass
                text = (self.log_dir / f"{tag}-{i}-reader.json").read_text(errors="replace")
                results.append(parse_finite(f, text))
            return results
        finally:
            stop_and_reap(procs)


def stop_and_reap(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """Stop whatever is still running (servers after their test, everything when a run is
    interrupted) and collect every exit status, so no process of ours lingers as a zombie."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.time() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
