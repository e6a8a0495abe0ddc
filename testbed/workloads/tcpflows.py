"""Finite TCP flows at scheduled times, one process per host, for comparing the kernel's
TCP (DCTCP, cubic, a BPF algorithm) with the RoCE engine on the very same flows:

    python -m testbed.workloads.tcpflows CONFIG.json RESULT.json

The process listens on `bind`:`port` and, before `start_at_unix`, opens one connection per
flow it sends (a RoCE queue pair is connected before its WRITE too, so neither counts a
handshake). At each flow's start it writes a 16-byte header (flow id, size) and the size in
bytes; the receiving host's process reads them and answers with one byte. A flow's
completion is from its first byte written to that answer: its bytes and one round trip,
as the RoCE engine's is from the WRITE posted to its last packet acknowledged.

It prints "done" once every flow it sends has completed, serves on until SIGTERM, then
writes RESULT.json: per flow sent its completion and the connection's own counters from
TCP_INFO (segments, retransmissions, CE-echoed deliveries, least RTT, algorithm); per flow
received its bytes.

CONFIG.json: {"bind", "port", "start_at_unix", "dscp", "ack_dscp", "mss" (payload bytes
per segment, or 0 for the path's), "pace_mbps" (0: none), "flows": [{"id", "dst", "port",
"size", "start_us"}]}.

With `pace_mbps`, each connection is paced by the kernel at no more than that rate
(SO_MAX_PACING_RATE, which turns on TCP's own pacing where no fq qdisc paces): its packets
leave spread over its round trip, interleaved with the host's other flows, as a NIC's
per-queue-pair scheduler sends RoCE packets, instead of a window's burst ahead of them in
the host's FIFO.
"""
from __future__ import annotations

import json
import resource
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HEADER = struct.Struct("!QQ")       # flow id, bytes that follow
ANSWER = b"\x01"
CONNECT_S = 20.0                    # for a peer's listener to appear
TIMESTAMP_OPTION = 12               # bytes of every segment's TCP options (timestamps)
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)   # asm-generic/socket.h
# struct tcp_info (linux/tcp.h): byte offsets of the fields read
TCPI_TOTAL_RETRANS = 8 + 23 * 4
TCPI_DATA_SEGS_OUT = 156
TCPI_MIN_RTT = 148
TCPI_DELIVERED_CE = 196
TCPI_LEN = 200
ZEROS = memoryview(bytes(1 << 20))


@dataclass
class Outgoing:
    id: int
    size: int
    at: float                   # unix time it is due
    sock: socket.socket
    sent: int = 0               # of HEADER + size
    header: bytes = b""
    t_start: float = 0.0
    fct_us: float | None = None
    info: dict | None = None
    error: str | None = None    # the connection failed: the flow did not complete

    @property
    def over(self) -> bool:
        return self.fct_us is not None or self.error is not None


@dataclass
class Incoming:
    sock: socket.socket
    head: bytes = b""
    id: int = -1
    left: int = 0
    got: int = 0


def tcp_info(sock: socket.socket) -> dict:
    """The connection's own counters (zeros where the kernel's struct is shorter)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCPI_LEN).ljust(TCPI_LEN, b"\0")

    def u32(off: int) -> int:
        return int(struct.unpack_from("I", raw, off)[0])

    return {"retx": u32(TCPI_TOTAL_RETRANS), "segs_out": u32(TCPI_DATA_SEGS_OUT),
            "delivered_ce": u32(TCPI_DELIVERED_CE), "min_rtt_us": u32(TCPI_MIN_RTT),
            "cc": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            .rstrip(b"\0").decode()}


def _tos(sock: socket.socket, dscp: int) -> None:
    if dscp:        # the kernel keeps the ECN bits of a TCP socket's TOS its own
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


def connect(dst: str, port: int, dscp: int, mss: int, pace_mbps: float,
            deadline: float) -> socket.socket:
    """A connection to a peer's process, retried while its listener is not up yet."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _tos(s, dscp)
        if pace_mbps:
            s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, round(pace_mbps * 1e6 / 8))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if mss:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss + TIMESTAMP_OPTION)
        try:
            s.connect((dst, port))
        except OSError:         # refused (not listening yet), unreachable (ARP): again
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(0.02)
            continue
        s.setblocking(False)
        return s


class Flows:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _tos(self.listener, cfg.get("ack_dscp", 0))    # accepted sockets inherit it
        self.listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.listener.bind((cfg["bind"], cfg["port"]))
        self.listener.listen(4096)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.out: list[Outgoing] = []
        self.received: dict[int, int] = {}
        self.buf = bytearray(1 << 16)
        self.stop = False

    def open(self) -> None:
        start = self.cfg["start_at_unix"]
        deadline = time.time() + CONNECT_S
        for f in sorted(self.cfg["flows"], key=lambda f: f["start_us"]):
            sock = connect(f["dst"], f["port"], self.cfg.get("dscp", 0),
                           self.cfg.get("mss", 0), self.cfg.get("pace_mbps", 0), deadline)
            self.out.append(Outgoing(id=f["id"], size=f["size"],
                                     at=start + f["start_us"] / 1e6, sock=sock,
                                     header=HEADER.pack(f["id"], f["size"])))
            self.accept()       # the peers' connections to us meanwhile

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            conn.setblocking(False)
            self.sel.register(conn, selectors.EVENT_READ, Incoming(conn))

    def send(self, f: Outgoing) -> None:
        total = len(f.header) + f.size
        while f.sent < total:
            if f.sent < len(f.header):
                chunk = bytes(f.header[f.sent:]) + bytes(ZEROS[:min(f.size, 1 << 16)])
            else:
                chunk = ZEROS[:min(total - f.sent, len(ZEROS))]
            try:
                n = f.sock.send(chunk)
            except BlockingIOError:
                return
            except OSError as exc:          # reset: this flow failed, the others go on
                self.fail(f, exc)
                return
            f.sent += n
        self.sel.modify(f.sock, selectors.EVENT_READ, f)   # now for the answer

    def fail(self, f: Outgoing, exc: OSError | str) -> None:
        f.error = str(exc)
        self.sel.unregister(f.sock)
        f.sock.close()

    def readable(self, key: selectors.SelectorKey) -> None:
        obj = key.data
        if obj is None:
            self.accept()
            return
        if isinstance(obj, Outgoing):
            try:
                answer = obj.sock.recv(1)
            except OSError as exc:
                self.fail(obj, exc)
                return
            if answer != ANSWER:
                self.fail(obj, "closed by the receiver without an answer")
                return
            obj.fct_us = (time.time() - obj.t_start) * 1e6
            obj.info = tcp_info(obj.sock)
            self.sel.unregister(obj.sock)
            obj.sock.close()
            return
        try:
            n = obj.sock.recv_into(self.buf)
        except OSError:
            n = 0                   # reset by the sender: what arrived is counted
        if n == 0:
            self.sel.unregister(obj.sock)
            obj.sock.close()
            return
        data = memoryview(self.buf)[:n]
        if obj.id < 0:
            need = HEADER.size - len(obj.head)
            obj.head += bytes(data[:need])
            data = data[need:]
            if len(obj.head) < HEADER.size:
                return
            obj.id, obj.left = HEADER.unpack(obj.head)
        obj.got += len(data)
        obj.left -= len(data)
        self.received[obj.id] = obj.got
        if obj.left == 0:
            try:
                obj.sock.send(ANSWER)
            except OSError:
                pass                # the sender is gone: its flow records the failure

    def serve(self) -> None:
        due = sorted(self.out, key=lambda f: f.at)
        i = 0
        done_said = False
        while not self.stop:
            now = time.time()
            while i < len(due) and due[i].at <= now:
                f = due[i]
                f.t_start = time.time()     # its own: an earlier flow's send took time
                self.sel.register(f.sock, selectors.EVENT_WRITE, f)
                self.send(f)
                i += 1
            wait = min(0.05, max(0.0, due[i].at - now)) if i < len(due) else 0.05
            for key, events in self.sel.select(wait):
                if events & selectors.EVENT_WRITE and isinstance(key.data, Outgoing):
                    self.send(key.data)
                elif events & selectors.EVENT_READ:
                    self.readable(key)
            if not done_said and i == len(due) and all(f.over for f in due):
                print("done", flush=True)
                done_said = True

    def result(self, t0: float) -> dict:
        return {"t0_unix": t0, "cpu_s": time.process_time(),
                "sent": [{"id": f.id, "size": f.size, "late_us": round((f.t_start - f.at) * 1e6)
                          if f.t_start else None,
                          "fct_us": None if f.fct_us is None else round(f.fct_us, 1),
                          "error": f.error, **(f.info or {})} for f in self.out],
                "received": [[k, v] for k, v in sorted(self.received.items())]}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m testbed.workloads.tcpflows CONFIG.json RESULT.json",
              file=sys.stderr)
        return 2
    cfg = json.loads(Path(args[0]).read_text())
    t0 = time.time()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)   # a connection per flow
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    flows = Flows(cfg)

    def stop(*_: object) -> None:
        flows.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        flows.open()
        late = time.time() - cfg["start_at_unix"]
        if late > 0:
            print(f"connections open {late:.3f} s after the start", flush=True)
        flows.serve()
    finally:
        Path(args[1]).write_text(json.dumps(flows.result(t0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
