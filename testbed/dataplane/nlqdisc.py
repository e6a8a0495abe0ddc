"""Reads qdisc backlogs with a single raw netlink dump: about a tenth of the cost of a
pyroute2 call, so that the real queue can be read at 1 kHz next to the BPF dataplane's own
count (testbed/measure/queues.py, ClassQueueSampler), some ports' root queues and sent
packets at 1 kHz (QueueSampler, `root_stats`), and every port's root queue a few times a
second by the live view (`root_queues`) without taking a core."""
from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 1, 0x300
NLMSG_DONE, NLMSG_ERROR = 3, 2
TCA_STATS2, TCA_STATS_QUEUE = 7, 3
TCMSG = struct.Struct("BBHiIII")


class QdiscReader:
    def __init__(self, ifindex: int):
        self.ifindex = ifindex
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def backlogs(self) -> dict[int, tuple[int, int]]:
        """{qdisc handle: (backlog bytes, qlen packets)} of every qdisc on the interface."""
        self.seq += 1
        out: dict[int, tuple[int, int]] = {}
        for ifindex, handle, _, data, start, end in _dump(self.sock, self.seq, self.ifindex):
            if ifindex == self.ifindex:
                q = _stats_queue(data, start, end)
                if q is not None:
                    out[handle] = q[:2]
        return out


TC_H_ROOT = 0xFFFFFFFF
TCA_STATS_BASIC = 1


def root_stats(sock: socket.socket, seq: int) -> dict[int, tuple[int, int, int, int]]:
    """{ifindex: (backlog bytes, qlen packets, drops, sent packets)} of every interface's
    root qdisc, from one dump (`sock`: a bound NETLINK_ROUTE socket; `seq`: a new sequence
    number)."""
    out: dict[int, tuple[int, int, int, int]] = {}
    for ifindex, _, parent, data, start, end in _dump(sock, seq):
        if parent == TC_H_ROOT:
            q = _stats(data, start, end)
            if q is not None:
                out[ifindex] = q
    return out


def root_queues(sock: socket.socket, seq: int) -> dict[int, tuple[int, int, int]]:
    """{ifindex: (backlog bytes, qlen packets, drops)} of every interface's root qdisc."""
    return {index: q[:3] for index, q in root_stats(sock, seq).items()}


def _dump(sock: socket.socket, seq: int,
          ifindex: int = 0) -> Iterator[tuple[int, int, int, bytes, int, int]]:
    """One RTM_GETQDISC dump: per qdisc message, its interface, handle and parent, and where
    its attributes lie in the received data (parsed only by the callers that want them)."""
    body = TCMSG.pack(0, 0, 0, ifindex, 0, 0, 0)
    sock.send(struct.pack("IHHII", 16 + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                          seq, 0) + body)
    while True:
        data = sock.recv(65536)
        off = 0
        while off + 16 <= len(data):
            length, mtype, _, msg_seq, _ = struct.unpack_from("IHHII", data, off)
            if length < 16 or mtype in (NLMSG_DONE, NLMSG_ERROR):
                return
            if mtype == RTM_NEWQDISC and msg_seq == seq:
                _, _, _, index, handle, parent, _ = TCMSG.unpack_from(data, off + 16)
                yield index, handle, parent, data, off + 16 + TCMSG.size, off + length
            off += (length + 3) & ~3


def _stats_queue(data: bytes, start: int, end: int) -> tuple[int, int, int] | None:
    """(backlog bytes, qlen packets, drops) of a qdisc message's statistics."""
    q = _stats(data, start, end)
    return q[:3] if q is not None else None


def _stats(data: bytes, start: int, end: int) -> tuple[int, int, int, int] | None:
    """(backlog bytes, qlen packets, drops, sent packets) of a qdisc message's statistics
    (TCA_STATS2: its queue, and its basic counters when they are there, else 0 sent)."""
    off = start
    while off + 4 <= end:
        alen, atype = struct.unpack_from("HH", data, off)
        if alen < 4:
            return None
        if atype & 0x3FFF == TCA_STATS2:
            queue, sent = None, 0
            inner = off + 4
            while inner + 4 <= off + alen:
                ilen, itype = struct.unpack_from("HH", data, inner)
                if ilen < 4:
                    break
                if itype == TCA_STATS_QUEUE:
                    qlen, backlog, dropped = struct.unpack_from("III", data, inner + 4)
                    queue = (backlog, qlen, dropped)
                elif itype == TCA_STATS_BASIC and ilen >= 16:
                    _, sent = struct.unpack_from("QI", data, inner + 4)
                inner += (ilen + 3) & ~3
            return (*queue, sent) if queue is not None else None
        off += (alen + 3) & ~3
    return None
