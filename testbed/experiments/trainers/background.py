"""The background traffic a trainer experiment runs beside a job (the training spec's
`background`, also the jobs experiment's): iperf3 flows between hosts, or an incast of the
incast workload, each marked with its DSCP, running until stopped."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.workloads.model.flows import assign_ports, sent_mbps

from ..base import Phase

# the spec type, for annotations only: importing the training package at run time would run
# its runner, which imports this module
if TYPE_CHECKING:
    from ..training.spec import BackgroundTraffic

CLIENT_GRACE_S = 5.0  # for a background iperf3 client to end after its server


class Background:
    """The experiment's background traffic, running until stopped."""

    def __init__(self, fab: Phase, specs: list[BackgroundTraffic], log_dir: Path,
                 seconds: float):
        self.fab, self.specs, self.log_dir, self.seconds = fab, specs, log_dir, seconds
        self.procs: list[subprocess.Popen] = []
        self.servers: list[subprocess.Popen] = []  # iperf3 servers, stopped first
        self.clients: list[tuple[Path, str, subprocess.Popen]] = []
        self.lost: list[str] = []  # flows whose client left no report

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        topo = self.fab.topo
        port = 5301
        for b, bg in enumerate(self.specs):
            if bg.kind == "incast":
                reader, servers = bg.hosts[0], bg.hosts[1:]
                for s in servers:
                    self.procs.append(self.fab.start_process(
                        s, [sys.executable, "-m", "testbed.workloads.incast", "serve",
                                      "--port", str(port), "--dscp", str(bg.dscp)],
                        f"background incast server {s}", self.log_dir / f"bg{b}-{s}.log"))
                self.fab.wait_listening([(s, port) for s in servers])
                addrs = ",".join(f"{topo.host(s).ip}:{port}" for s in servers)
                self.procs.append(self.fab.start_process(
                    reader, [sys.executable, "-m", "testbed.workloads.incast", "read",
                                       "--servers", addrs, "--block-bytes", str(bg.block_bytes),
                                       "--rounds", "1000000", "--dscp", str(bg.dscp)],
                    f"background incast reader {reader}", self.log_dir / f"bg{b}-reader.log"))
                port += 1
                continue
            pairs = [tuple(bg.hosts)] if bg.kind == "iperf" else \
                [(a, c) for a in bg.hosts for c in bg.hosts if a != c]
            flows = [dataclasses.replace(f, port=f.port + port - 5201, dscp=bg.dscp,
                                         udp_mbps=bg.udp_mbps, omit_s=0)
                     for f in assign_ports(pairs, self.seconds, 0)]
            port = max(f.port for f in flows) + 1
            for i, f in enumerate(flows):
                self.servers.append(self.fab.start_process(
                    f.dst, ["iperf3", "-s", "-1", "-p", str(f.port)],
                    f"background iperf3 server {f.dst}", self.log_dir / f"bg{b}-{i}-server.log"))
                self.procs.append(self.servers[-1])
            self.fab.wait_listening([(f.dst, f.port) for f in flows])
            for i, f in enumerate(flows):
                log = self.log_dir / f"bg{b}-{i}-client.json"
                self.procs.append(self.fab.start_process(
                    f.src, ["iperf3", "-c", topo.host(f.dst).ip, "-p", str(f.port),
                                      "-J", *f.client_args()],
                    f"background iperf3 {f.src}->{f.dst}", log))
                self.clients.append((log, f"{f.src}->{f.dst}", self.procs[-1]))

    def stop(self) -> float | None:
        """Stops everything; returns the background flows' total sending rate (Mb/s, over
        their whole life), None without flows or when a client left no report (`lost`).

        The iperf3 servers go first: a server stopped by SIGTERM tells its client over the
        control connection, and the client ends by itself with its report. The client is
        not signalled unless it outlives CLIENT_GRACE_S: iperf3 (3.12) leaves its SIGTERM
        handler by longjmp and then builds its JSON with malloc, so a signal that lands
        inside malloc corrupts the heap and glibc aborts before the report is written (1 in
        150 signalled clients on loopback; a CI run lost its background rate to it)."""
        self.fab.stop_processes(self.servers)
        deadline = time.time() + CLIENT_GRACE_S
        for _, _, proc in self.clients:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass  # signalled below
        self.fab.stop_processes(self.procs)
        if not self.clients:
            return None
        rates = {}
        for log, flow, _ in self.clients:
            try:
                rates[flow] = sent_mbps(log.read_text(errors="replace"))
            except OSError:
                rates[flow] = None
        self.lost = [flow for flow, rate in rates.items() if rate is None]
        if self.lost:
            return None
        return round(sum(r for r in rates.values() if r is not None), 3)
