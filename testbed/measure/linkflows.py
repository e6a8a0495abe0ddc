"""Which TCP connections cross a link: the headers of the packets on its switch ports, read
for a moment from raw packet sockets (both directions: a connection whose ACKs cross the link
is cut by its failure as surely as one whose data does). The runner looks just before a
fault, so that the flows a failure cut are known rather than guessed from their goodput."""
from __future__ import annotations

import select
import socket
import struct
import time

from testbed.workloads.model.flows import Conn

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_HEADER = 14


def parse_frame(frame: bytes) -> Conn | None:
    """The TCP connection an Ethernet frame belongs to (None if it is not IPv4 TCP)."""
    if len(frame) < ETH_HEADER + 20 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IP:
        return None
    ip = frame[ETH_HEADER:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or len(ip) < ihl + 4:
        return None
    sport, dport = struct.unpack("!HH", ip[ihl:ihl + 4])
    return (socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20]), sport, dport)


def connections_on(ifnames: list[str], seconds: float) -> set[Conn]:
    """Every TCP connection seen on these interfaces (root namespace) for `seconds`."""
    socks = []
    try:
        for name in ifnames:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((name, 0))
            s.setblocking(False)
            socks.append(s)
        seen: set[Conn] = set()
        deadline = time.time() + seconds
        while (left := deadline - time.time()) > 0:
            ready, _, _ = select.select(socks, [], [], left)
            for s in ready:
                while True:
                    try:
                        frame = s.recv(128)  # the headers are enough
                    except BlockingIOError:
                        break
                    conn = parse_frame(frame)
                    if conn:
                        seen.add(conn)
        return seen
    finally:
        for s in socks:
            s.close()
