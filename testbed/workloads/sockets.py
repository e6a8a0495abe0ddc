"""A worker's own TCP sockets, which Gloo opens and offers no option for: found by diffing
the process's descriptors around a process group's creation, marked with a DSCP so that
switches can tell a job's (or a collective type's) traffic apart, and counted from
TCP_INFO. No torch here."""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import termios


def socket_fds() -> set[int]:
    """This process's socket file descriptors."""
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                fds.add(int(name))
        except OSError:
            pass
    return fds


def tcp_sockets(fds: set[int]):
    """This process's IPv4 TCP sockets among these descriptors, each borrowed for the body
    of the loop (the descriptor stays its owner's, Gloo's)."""
    for fd in fds:
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            continue
        try:
            if s.family == socket.AF_INET and s.type == socket.SOCK_STREAM:
                yield s
        finally:
            s.detach()


def mark_sockets(fds: set[int], dscp: int) -> int:
    """Set the DSCP of these (this process's, TCP over IPv4) sockets; returns how many.
    Gloo offers no option for it, so the new group's connections are found by diffing the
    process's descriptors around the group's creation."""
    marked = 0
    for s in tcp_sockets(fds):
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
        marked += 1
    return marked


def tcp_infos(fds: set[int]):
    """TCP_INFO of each of these TCP sockets (the bytes of struct tcp_info)."""
    for s in tcp_sockets(fds):
        try:
            yield s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        except OSError:
            continue


def tcp_sent(fds: set[int]) -> tuple[int, int]:
    """(payload bytes acknowledged, segments sent) over these TCP sockets, from TCP_INFO
    (tcpi_bytes_acked at offset 120, tcpi_segs_out at 136)."""
    payload = segs = 0
    for info in tcp_infos(fds):
        payload += struct.unpack_from("Q", info, 120)[0]
        segs += struct.unpack_from("I", info, 136)[0]
    return payload, segs


def tcp_written(fds: set[int]) -> tuple[int, int]:
    """(payload bytes this process has handed to these TCP sockets, segments sent): the
    acknowledged bytes plus those still in the send queue, sent or not (SIOCOUTQ). Counted
    at an iteration's end it is exactly that iteration's payload, while the acknowledged
    bytes alone lag by what is still in flight: the tail of a collective whose ACKs come
    after it returned, up to a ring step's whole chunk."""
    acked, segs = tcp_sent(fds)
    queued = 0
    buf = bytearray(4)
    for s in tcp_sockets(fds):
        try:
            fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, buf)  # SIOCOUTQ: unacknowledged bytes
            queued += struct.unpack("i", buf)[0]
        except OSError:  # a listening socket has no send queue
            pass
    return acked + queued, segs


INFINITE_SSTHRESH = 0x7FFFFFFF  # TCP_INFINITE_SSTHRESH: no loss or mark seen yet


def tcp_window(fds: set[int]) -> tuple[int, int | None]:
    """(congestion window, slow-start threshold) in segments of the connection among these
    that has sent the most (tcpi_snd_cwnd at offset 80, tcpi_snd_ssthresh at 76); the
    threshold None until a loss or an ECN mark has set it. (0, None) without one."""
    best = (-1, 0, None)
    for info in tcp_infos(fds):
        acked = struct.unpack_from("Q", info, 120)[0]
        if acked > best[0]:
            ssthresh, cwnd = struct.unpack_from("II", info, 76)
            best = (acked, cwnd, None if ssthresh >= INFINITE_SSTHRESH else ssthresh)
    return best[1], best[2]
