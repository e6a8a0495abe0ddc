"""Synchronized-read incast (Phanishayee et al. 2008; Vasudevan et al. 2009), run inside the
emulated hosts:

    python -m testbed.workloads.incast serve --port P [--dscp D]
    python -m testbed.workloads.incast read --servers IP:P,... --block-bytes B --rounds R [--dscp D]

The reader (the aggregator) asks every server for block/N bytes at once over persistent TCP
connections and starts the next round only when all N parts have arrived, so one server's
timeout stalls the round. It prints one JSON object: the duration of every round.
"""
from __future__ import annotations

import argparse
import json
import selectors
import socket
import struct
import sys
import time

REQUEST = struct.Struct("!Q")


def _tos(sock: socket.socket, dscp: int) -> None:
    if dscp:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


def serve(port: int, dscp: int) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(4)
    payload = b"\0" * (1 << 20)
    while True:
        conn, _ = listener.accept()
        _tos(conn, dscp)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                head = conn.recv(REQUEST.size, socket.MSG_WAITALL)
                if len(head) < REQUEST.size:
                    break
                left = REQUEST.unpack(head)[0]
                while left:
                    chunk = min(left, len(payload))
                    conn.sendall(memoryview(payload)[:chunk])
                    left -= chunk


def read(servers: list[tuple[str, int]], block_bytes: int, rounds: int, dscp: int,
         timeout_s: float) -> dict:
    part = block_bytes // len(servers)
    socks = []
    for host, port in servers:
        s = socket.create_connection((host, port), timeout=timeout_s)
        _tos(s, dscp)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks.append(s)
    sel = selectors.DefaultSelector()
    buf = bytearray(1 << 20)
    durations = []
    for _ in range(rounds):
        left = {s: part for s in socks}
        t0 = time.monotonic()
        for s in socks:
            s.setblocking(True)
            s.sendall(REQUEST.pack(part))
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while left:
            events = sel.select(timeout=timeout_s)
            if not events:
                raise TimeoutError(f"no data for {timeout_s} s with {len(left)} parts missing")
            for key, _ in events:
                s = key.fileobj
                n = s.recv_into(buf, min(len(buf), left[s]))
                if n == 0:
                    raise ConnectionError("a server closed its connection")
                left[s] -= n
                if left[s] == 0:
                    sel.unregister(s)
                    del left[s]
        durations.append(time.monotonic() - t0)
    for s in socks:
        s.close()
    return {"servers": len(servers), "part_bytes": part, "block_bytes": part * len(servers),
            "round_s": durations}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="incast")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--dscp", type=int, default=0)
    r = sub.add_parser("read")
    r.add_argument("--servers", required=True)
    r.add_argument("--block-bytes", type=int, required=True)
    r.add_argument("--rounds", type=int, required=True)
    r.add_argument("--dscp", type=int, default=0)
    r.add_argument("--timeout-s", type=float, default=20.0)
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        serve(args.port, args.dscp)
        return 0
    servers = [(h, int(p)) for h, p in (x.rsplit(":", 1) for x in args.servers.split(","))]
    json.dump(read(servers, args.block_bytes, args.rounds, args.dscp, args.timeout_s), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
