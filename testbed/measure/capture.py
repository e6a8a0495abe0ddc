"""Packet capture into the results: one tcpdump per interface, switch ports from the root
namespace and hosts' NICs from their own, each PID in the run record (teardown and `testbed
clean` stop it). A capture waits until every tcpdump listens before it returns, and its
stop reads what each saw and what the kernel dropped for it (a pcap missing packets says
so in the run's warnings)."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.config.capture import CaptureSpec
from testbed.core.errors import TestbedError

LISTEN_TIMEOUT_S = 10.0


@dataclass
class CaptureFile:
    iface: str
    host: str | None            # the host whose NIC it is; None: a switch port
    pcap: Path
    log: Path
    proc: subprocess.Popen
    packets: int | None = None  # written to the file
    dropped: int | None = None  # by the kernel: the socket's buffer was full


class Capture:
    """tcpdumps on a running fabric's interfaces (`spec.interfaces(topo)`), their files in
    `out_dir`."""

    def __init__(self, fab, spec: CaptureSpec, out_dir: Path):
        self.fab, self.spec, self.out_dir = fab, spec, out_dir
        self.files: list[CaptureFile] = []

    def start(self) -> Capture:
        ports, hosts = self.spec.interfaces(self.fab.topo)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            for iface, host in [(p, None) for p in ports] + \
                    [(i, h) for h, ifaces in hosts.items() for i in ifaces]:
                self.files.append(self._start_one(iface, host))
            self._wait_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_one(self, iface: str, host: str | None) -> CaptureFile:
        pcap, log = self.out_dir / f"{iface}.pcap", self.out_dir / f"{iface}.log"
        argv = self.spec.tcpdump_argv(iface, str(pcap))
        if host is not None:
            proc = self.fab.start_process(host, argv, f"tcpdump on {iface}", log)
        else:
            with open(log, "wb") as out:
                proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
            self.fab.record.add_pid(proc.pid, f"tcpdump on {iface}")
        return CaptureFile(iface, host, pcap, log, proc)

    def _wait_listening(self) -> None:
        """Until each tcpdump says it listens (its socket is open: nothing after this is
        missed), or one has ended (a bad filter: its own message)."""
        deadline = time.time() + LISTEN_TIMEOUT_S
        pending = list(self.files)
        while pending:
            for f in list(pending):
                text = f.log.read_text(errors="replace")
                if "listening on" in text:
                    pending.remove(f)
                elif f.proc.poll() is not None:
                    raise TestbedError(f"capture on {f.iface}: tcpdump ended: "
                                       f"{text.strip()[-300:]}")
            if pending and time.time() > deadline:
                raise TestbedError(f"capture: tcpdump on {pending[0].iface} did not start "
                                   f"listening within {LISTEN_TIMEOUT_S:g} s")
            time.sleep(0.02)

    def stop(self) -> list[dict]:
        """Stop every tcpdump (SIGINT: it writes what it holds and its counts) and read its
        counts: what each file holds, as plain data, also in capture.json beside the files.
        Stopping a stopped capture reads them again."""
        for f in self.files:
            if f.proc.poll() is None:
                f.proc.send_signal(signal.SIGINT)
        for f in self.files:
            try:
                f.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                f.proc.kill()
                f.proc.wait()
            f.packets, f.dropped = counts(f.log.read_text(errors="replace"))
        report = self.report()
        if self.files:
            (self.out_dir / "capture.json").write_text(json.dumps(report, indent=1))
        return report

    def report(self) -> list[dict]:
        return [{"iface": f.iface, "host": f.host, "pcap": f.pcap.name,
                 "bytes": f.pcap.stat().st_size if f.pcap.exists() else 0,
                 "packets": f.packets, "dropped_by_kernel": f.dropped,
                 "capped": f.packets is not None and f.packets >= self.spec.max_packets()}
                for f in self.files]


def counts(text: str) -> tuple[int | None, int | None]:
    """tcpdump's closing counts: packets captured (written), and dropped by the kernel."""
    captured = re.search(r"(\d+) packets? captured", text)
    dropped = re.search(r"(\d+) packets? dropped by kernel", text)
    return (int(captured[1]) if captured else None, int(dropped[1]) if dropped else None)


def warnings(label: str, report: list[dict]) -> list[str]:
    """What a capture's report must tell the run: packets the kernel dropped for it (the
    pcap misses them) and files stopped at their cap."""
    out = []
    for r in report:
        if r["dropped_by_kernel"]:
            out.append(f"capture {label} {r['iface']}: the kernel dropped "
                       f"{r['dropped_by_kernel']} packets for tcpdump; the pcap misses them")
        if r["capped"]:
            out.append(f"capture {label} {r['iface']}: stopped at its cap ({r['packets']} "
                       "packets, capture.max_mb); later packets are not in the pcap")
    return out
