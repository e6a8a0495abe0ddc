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
import threading
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
    ended_early: bool | None = None  # it had ended when the capture was stopped
    messages: str = ""               # what it said (also in `log`)
    reader: threading.Thread | None = None

    def keep_messages(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log, "a") as out:
            for line in iter(self.proc.stdout.readline, b""):
                text = line.decode(errors="replace")
                self.messages += text
                out.write(text)
                out.flush()


class Capture:
    """tcpdumps on a running fabric's interfaces (`spec.interfaces(topo)`), their files in
    `out_dir`."""

    def __init__(self, fab, spec: CaptureSpec, out_dir: Path):
        self.fab, self.spec, self.out_dir = fab, spec, out_dir
        self.files: list[CaptureFile] = []

    def start(self) -> Capture:
        ports, hosts = self.spec.interfaces(self.fab.topo)
        if self.out_dir.exists() and any(self.out_dir.iterdir()):
            raise TestbedError(f"capture: {self.out_dir} holds an earlier capture's files")
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
        """A tcpdump in a session of its own (a Ctrl-C at `testbed up`'s prompt does not
        end it), in the host's namespace for a host's NIC."""
        pcap, log = self.out_dir / f"{iface}.pcap", self.out_dir / f"{iface}.log"
        argv = self.spec.tcpdump_argv(iface, str(pcap))
        if host is not None:
            argv = self.fab.host_argv(host, argv)
        # its messages through a pipe, not an inherited file: an AppArmor profile for
        # tcpdump (Ubuntu's) would take away a file it may not write
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.fab.record.add_pid(proc.pid, f"tcpdump on {iface}")
        f = CaptureFile(iface, host, pcap, log, proc)
        f.reader = threading.Thread(target=f.keep_messages, daemon=True)
        f.reader.start()
        return f

    def _wait_listening(self) -> None:
        """Until each tcpdump says it listens (its socket is open: nothing after this is
        missed), or one has ended (a bad filter: its own message)."""
        deadline = time.time() + LISTEN_TIMEOUT_S
        pending = list(self.files)
        while pending:
            for f in list(pending):
                if "listening on" in f.messages:
                    pending.remove(f)
                elif f.proc.poll() is not None:
                    if f.reader is not None:
                        f.reader.join(timeout=2)
                    said = f.messages.strip()[-300:]
                    hint = (" (an AppArmor profile for tcpdump may forbid writing there: "
                            "/etc/apparmor.d/usr.bin.tcpdump)"
                            if "Permission denied" in said else "")
                    raise TestbedError(f"capture on {f.iface}: tcpdump ended: {said}{hint}")
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
            elif f.ended_early is None:
                f.ended_early = True  # before its stop: its own cap, or something ended it
        for f in self.files:
            try:
                f.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                f.proc.kill()
                f.proc.wait()
            if f.reader is not None:
                f.reader.join(timeout=2)
            f.packets, f.dropped = counts(f.messages)
        report = self.report()
        if self.files:
            (self.out_dir / "capture.json").write_text(json.dumps(report, indent=1))
        return report

    def report(self) -> list[dict]:
        out = []
        for f in self.files:
            capped = f.packets is not None and f.packets >= self.spec.max_packets()
            out.append({"iface": f.iface, "host": f.host, "pcap": f.pcap.name,
                        "bytes": f.pcap.stat().st_size if f.pcap.exists() else 0,
                        "packets": f.packets, "dropped_by_kernel": f.dropped,
                        "capped": capped, "ended_early": bool(f.ended_early and not capped)})
        return out


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
        if r.get("ended_early"):
            out.append(f"capture {label} {r['iface']}: tcpdump ended before the capture "
                       "was stopped; later packets are not in the pcap")
    return out
