"""The RoCEv2 engine (engine.c): built once per source version, configured per host, its
results read back.

This kernel has no RDMA (no rxe), so a host's RDMA NIC is a small C process that speaks
RoCEv2's packet format over UDP port 4791 (engine.c says what it does). Python writes its
config (`Engine`), starts it in the host like any workload process, and reads the JSON it
leaves (`Result`).

    eng = Engine(bind="10.0.0.1", mtu=1024)
    eng.qp(1, peer="10.0.0.2", peer_qpn=1, line_mbps=100)
    eng.write(1, start_us=0, nbytes=1_000_000)
    argv = [str(build()), str(eng.save(path)), str(out)]
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.system import TestbedError, run
from testbed.dataplane.qosplane import BUILD_DIR
from testbed.workloads.model.rdma import (
    IRN_WIN,
    MAX_SPRAY_ENTROPIES,
    ROCE_MTUS,
    WIRE_OVERHEAD,
    Dcqcn,
    DcqcnPlus,
    Hpcc,
    Irn,
    Nscc,
    Timely,
    UserCc,
    bdp_packets,
    dcqcn_line,
    hpcc_line,
    nscc_line,
    spray_reorder,
    timely_line,
)

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("engine.c", "roce_wire.h", "dcqcn.h", "dcqcn_plus.h", "timely.h", "hpcc.h",
           "nscc.h", "user_cc_api.h", "../../dataplane/bpf/int_wire.h")
ROCE_PORT = 4791


def build(user_cc: str | Path | None = None) -> Path:
    """The engine's binary, compiled (clang-14 from the bootstrap) once per content of its
    sources into the build cache; with `user_cc`, a user's congestion control (a header
    implementing user_cc_api.h) compiled in."""
    cc = shutil.which("clang-14") or shutil.which("clang") or shutil.which("cc")
    if cc is None:
        raise TestbedError("a C compiler is missing (the RoCE engine needs clang); run "
                           "scripts/bootstrap.sh")
    user = Path(user_cc).resolve() if user_cc is not None else None
    digest = hashlib.sha1(b"".join((SOURCE_DIR / s).read_bytes() for s in SOURCES)
                          + (user.read_bytes() if user else b""))
    binary = BUILD_DIR / f"tbroce-{'user-' if user else ''}{digest.hexdigest()[:12]}"
    if not binary.exists():
        BUILD_DIR.mkdir(exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        define = [f'-DUSER_CC_H="{user}"'] if user else []
        proc = run([cc, "-O2", "-Wall", "-Werror", *define, "-o", str(tmp),
                    str(SOURCE_DIR / "engine.c"), "-lm"], check=False, timeout=120)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            what = f" with the congestion control {user}" if user else ""
            raise TestbedError(f"the RoCE engine does not compile{what}:\n"
                               f"{proc.stderr[-2000:]}")
        tmp.replace(binary)
    return binary


def qp_source_port(qpn: int, peer_qpn: int) -> int:
    """The UDP source port a RoCEv2 NIC sends a connection's packets from, as Linux derives
    it from the two QP numbers (rdma_calc_flow_label, rdma_flow_label_to_udp_sport): the
    same at both ends, in 0xC000..0xFFFF, different for most pairs, so ECMP can hash a host
    pair's queue pairs onto different paths."""
    v = qpn * peer_qpn
    v ^= v >> 20
    v ^= v >> 40
    label = v & 0xFFFFF
    return ((label & 0x3FFF) ^ (label >> 14)) | 0xC000


@dataclass
class Engine:
    """One host's engine: its address, the queue pairs it holds and the WRITEs it posts.
    A QP number is the host's own; a connection is a QP here and one at the peer, each
    naming the other."""
    bind: str
    port: int = ROCE_PORT
    mtu: int = 1024
    dscp: int = 26              # data: the lossless class, ECN-capable
    ctrl_dscp: int = 48         # ACKs, NAKs, CNPs
    ack_every: int = 1          # an ACK per this many in-order packets, and at a message's end
    rto_us: int = 4000
    cnp_interval_us: int = 50
    sample_us: int = 1000
    linger_ms: int = 200
    end_after_ms: int = 0       # 0: when every WRITE is acknowledged
    start_at_unix: float = 0.0  # engines on many hosts start together (0: at once)
    exit_when_done: bool = True  # False: print "done" and serve on until SIGTERM
    # WRITEs posted on stdin while it runs, completions told on stdout (`Session`): no
    # `write`s, and it runs until told
    control: bool = False
    drop_every: int = 0         # tests: the receiver discards every Nth data packet
    ce_every: int = 0           # tests: the receiver takes every Nth as CE-marked
    # one congestion control on every requester QP, scaled to link_mbps
    # (workloads/model/rdma.py); none: every QP at its line rate. DCQCN also sets the
    # receiver's CNP interval (else cnp_interval_us)
    dcqcn: Dcqcn | None = None
    timely: Timely | None = None
    hpcc: Hpcc | None = None
    nscc: Nscc | None = None    # a UEC-like window from every ACK's mark and delay
    dcqcn_plus: DcqcnPlus | None = None
    user_cc: UserCc | None = None   # a user's: the binary must be built with it (build())
    link_mbps: float = 0.0
    base_rtt_us: float = 0.0    # the longest base round trip: HPCC's T, the window's BDP
    window: bool = False        # at most one BDP (base_rtt_us at link_mbps) in flight per QP
    int_rates: list[float] = field(default_factory=list)  # HPCC: the records' rate table
    # IRN's selective recovery (both ends), its in-flight cap one BDP (base_rtt_us at
    # link_mbps); None: go-back-N
    irn: Irn | None = None
    # packet spraying (with IRN, and QPs with their own source ports): each data packet
    # from one of `spray_entropies` source ports of its QP in turn; a hole is lost once
    # `reorder_pkts` beyond it are acknowledged (before, it may be on a slower path)
    spray_entropies: int = 0
    reorder_pkts: int = 0
    # (qpn, peer, peer's port, peer's qpn, line Mb/s, source port: 0 the bound one,
    # data DSCP: None the engine's)
    qps: list[tuple[int, str, int, int, float, int, int | None]] = field(default_factory=list)
    writes: list[tuple[int, int, int]] = field(default_factory=list)

    def qp(self, qpn: int, peer: str, peer_qpn: int, line_mbps: float,
           peer_port: int = ROCE_PORT, sport: int = 0, dscp: int | None = None) -> None:
        """A queue pair; `sport` the UDP source port it sends from (0: the bound port;
        any other sends through a raw socket, so the engine needs root); `dscp` its data's
        (None: the engine's `dscp`)."""
        if any(q[0] == qpn for q in self.qps):
            raise ValueError(f"queue pair {qpn} twice")
        if not 0 <= sport <= 65535:
            raise ValueError(f"queue pair {qpn}: source port {sport} is not a port")
        if dscp is not None and not 0 <= dscp <= 63:
            raise ValueError(f"queue pair {qpn}: DSCP {dscp} is not in 0..63")
        self.qps.append((qpn, peer, peer_port, peer_qpn, line_mbps, sport, dscp))

    def write(self, qpn: int, start_us: int, nbytes: int) -> None:
        """An RDMA WRITE of `nbytes` on `qpn`, posted `start_us` after the engine starts;
        a QP's WRITEs go in the order given."""
        if not any(q[0] == qpn for q in self.qps):
            raise ValueError(f"no queue pair {qpn}")
        self.writes.append((qpn, start_us, nbytes))

    def text(self) -> str:
        if self.mtu not in ROCE_MTUS:
            raise ValueError(f"mtu: a RoCE MTU ({', '.join(map(str, ROCE_MTUS))}), "
                             f"got {self.mtu}")
        values = {key: getattr(self, key) for key in (
            "mtu", "dscp", "ctrl_dscp", "ack_every", "rto_us", "cnp_interval_us",
            "sample_us", "linger_ms", "end_after_ms", "drop_every", "ce_every")}
        if self.start_at_unix:
            values["start_at_unix"] = f"{self.start_at_unix:.6f}"
        values["exit_when_done"] = int(self.exit_when_done)
        if self.control:
            if self.writes or self.exit_when_done:
                raise ValueError("control: WRITEs come while it runs (no writes), and it "
                                 "runs until told (exit_when_done False)")
            values["control"] = 1
        lines = [f"bind {self.bind} {self.port}"]
        ccs = [cc for cc in (self.dcqcn, self.timely, self.hpcc, self.nscc, self.dcqcn_plus,
                             self.user_cc) if cc is not None]
        if len(ccs) > 1:
            raise ValueError("one of dcqcn, dcqcn_plus, timely, hpcc, nscc and user_cc at "
                             "most")
        if (ccs or self.window) and self.link_mbps <= 0:
            raise ValueError("a congestion control or window needs the host's link_mbps")
        if (self.hpcc is not None or self.nscc is not None or self.window
                or self.irn is not None or self.user_cc is not None) and (
                self.base_rtt_us <= 0 or self.link_mbps <= 0):
            raise ValueError("hpcc, nscc, user_cc, window and irn need base_rtt_us and "
                             "link_mbps")
        if self.nscc is not None and self.window:
            raise ValueError("nscc has its own window")
        if self.dcqcn is not None:
            self.dcqcn.check()
            scaled = self.dcqcn.scaled(self.link_mbps)
            values["cnp_interval_us"] = scaled["cnp_interval_us"]
            lines.append(dcqcn_line(scaled))
        if self.dcqcn_plus is not None:
            self.dcqcn_plus.check()
            lines.append(self.dcqcn_plus.line(self.link_mbps))
        if self.timely is not None:
            self.timely.check()
            lines.append(timely_line(self.timely.scaled(self.link_mbps)))
        if self.hpcc is not None:
            self.hpcc.check()
            if not 1 <= len(self.int_rates) <= 8:
                raise ValueError("hpcc: int_rates names the fabric's 1..8 link rates")
            lines.append(hpcc_line(self.hpcc.scaled(self.link_mbps),
                                   round(self.base_rtt_us * 1000)))
            lines.append("int_rates " + " ".join(f"{r!r}" for r in self.int_rates))
        if self.nscc is not None:
            self.nscc.check()
            lines.append(nscc_line(self.nscc.scaled(self.link_mbps),
                                   round(self.base_rtt_us * 1000)))
        if self.user_cc is not None:
            lines.append(self.user_cc.line(self.base_rtt_us))
            if self.user_cc.telemetry:
                if not 1 <= len(self.int_rates) <= 8:
                    raise ValueError("user_cc telemetry: int_rates names the fabric's 1..8 "
                                     "link rates")
                lines.append("int_rates " + " ".join(f"{r!r}" for r in self.int_rates))
        if self.window:
            lines.append(f"window_bytes {round(self.base_rtt_us * self.link_mbps / 8)}")
        # IRN's in-flight cap, and below it a sprayed QP's reorder threshold
        bdp = bdp_packets(self.base_rtt_us, self.link_mbps, self.mtu + WIRE_OVERHEAD)
        if self.irn is not None:
            self.irn.check()
            s = self.irn.scaled(self.link_mbps)
            lines.append(f"irn {s['rto_low_us']} {s['rto_high_us']} {s['n']} {bdp}")
        if self.spray_entropies:
            if self.irn is None or not all(q[5] for q in self.qps):
                raise ValueError("spraying needs irn and every queue pair's own source port")
            if (not 1 <= self.spray_entropies <= MAX_SPRAY_ENTROPIES
                    or not 0 <= self.reorder_pkts < IRN_WIN):
                raise ValueError(f"spray_entropies in 1..{MAX_SPRAY_ENTROPIES}, reorder_pkts "
                                 f"in 0..{IRN_WIN - 1}")
            lines.append(f"spray {self.spray_entropies} "
                         f"{spray_reorder(self.reorder_pkts, bdp)}")
        lines += [f"{key} {value}" for key, value in values.items()]
        lines += [f"qp {qpn} {peer} {port} {pq} {mbps} {sport}"
                  + ("" if dscp is None else f" {dscp}")
                  for qpn, peer, port, pq, mbps, sport, dscp in self.qps]
        # a QP's WRITEs consecutive, in the order given
        order = {qpn: i for i, (qpn, *_) in enumerate(self.qps)}
        for qpn, start, nbytes in sorted(self.writes, key=lambda w: order[w[0]]):
            lines.append(f"msg {qpn} {start} {nbytes}")
        return "\n".join(lines) + "\n"

    def save(self, path: Path) -> Path:
        path.write_text(self.text())
        return path


@dataclass(frozen=True)
class Message:
    qpn: int
    nbytes: int
    start_us: float             # posted, from the engine's start
    end_us: float | None        # its last packet acknowledged (None: never)

    @property
    def fct_us(self) -> float | None:
        return None if self.end_us is None else self.end_us - self.start_us


@dataclass(frozen=True)
class Result:
    t0_unix: float
    mtu: int
    cpu_s: float
    eagain: int                 # sends the host's queue refused (retried later)
    qps: dict[int, dict]        # qpn -> counters
    messages: list[Message]
    samples: list[tuple[int, float, float, float]]  # (qpn, t_us, rate_mbps, tx_mbps)


def read_result(path: Path) -> Result:
    d = json.loads(path.read_text())
    return Result(
        t0_unix=d["t0_unix"], mtu=d["mtu"], cpu_s=d["cpu_s"], eagain=d["eagain"],
        qps={q["qpn"]: q for q in d["qps"]},
        messages=[Message(int(q), int(b), s, None if e < 0 else e) for q, b, s, e
                  in d["msgs"]],
        samples=[(int(q), t, r, x) for q, t, r, x in d["samples"]])


class Session:
    """A control-mode engine (`Engine.control`) as a child process: WRITEs posted while it
    runs, and their completions awaited. `post` returns the message's number on its QP
    (1, 2, ...); `wait_sent(qpn, n)` returns once the QP's n-th message is acknowledged,
    `wait_recv(qpn, n)` once the n-th message from the peer has arrived whole. A QP's
    messages arrive in the order posted, so two ranks that post the same sequence agree on
    the numbers. The engine ends, writing its result, on `close` (or with this process:
    its stdin closes)."""

    def __init__(self, binary: Path, config: Path, out: Path, timeout_s: float = 120.0):
        import subprocess
        import threading
        self.out, self.timeout_s = out, timeout_s
        self.proc = subprocess.Popen([str(binary), str(config), str(out)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        if self.proc.stdout.readline().strip() != "ready":
            self._end()
            raise TestbedError(f"the RoCE engine did not start (exit {self.proc.returncode})")
        self.sent: dict[int, int] = {}
        self.recv: dict[int, int] = {}
        self.posted: dict[int, int] = {}
        self.cond = threading.Condition()
        self.ended = False                  # its output closed: it will tell no more
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _end(self, timeout_s: float = 30.0) -> None:
        """Waits for the engine to end; kills it if it does not."""
        import subprocess
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                what, *rest = line.split()
                if what in ("sent", "recv") and len(rest) == 2:   # else: not the engine's
                    with self.cond:
                        (self.sent if what == "sent" else self.recv)[int(rest[0])] = \
                            int(rest[1])
                        self.cond.notify_all()
        finally:
            with self.cond:
                self.ended = True
                self.cond.notify_all()

    def post(self, qpn: int, nbytes: int) -> int:
        self.stdin.write(f"post {qpn} {nbytes}\n")
        self.stdin.flush()
        self.posted[qpn] = n = self.posted.get(qpn, 0) + 1
        return n

    def _wait(self, counts: dict[int, int], qpn: int, n: int, what: str) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: counts.get(qpn, 0) >= n or self.ended,
                                      self.timeout_s):
                raise TimeoutError(f"queue pair {qpn}: message {n} not {what} within "
                                   f"{self.timeout_s:g} s")
            if counts.get(qpn, 0) < n:
                raise TestbedError(f"the RoCE engine ended (exit {self.proc.poll()}) before "
                                   f"message {n} of queue pair {qpn} was {what}")

    def wait_sent(self, qpn: int, n: int) -> None:
        self._wait(self.sent, qpn, n, "acknowledged")

    def wait_recv(self, qpn: int, n: int) -> None:
        self._wait(self.recv, qpn, n, "received")

    def close(self) -> Result:
        """Ends the engine; its result."""
        if self.proc.poll() is None:
            try:
                self.stdin.write("end\n")
                self.stdin.close()
            except BrokenPipeError:
                pass
            self._end()
        self.reader.join(timeout=10)
        if self.proc.returncode != 0:
            raise TestbedError(f"the RoCE engine failed (exit {self.proc.returncode})")
        return read_result(self.out)
