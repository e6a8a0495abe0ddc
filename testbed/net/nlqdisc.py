"""Reads qdisc backlogs with a single raw netlink dump: about a tenth of the cost of a
pyroute2 call, so that the real queue can be read at 1 kHz next to the BPF dataplane's own
count (testbed/measure/queues.py, ClassQueueSampler), and every port's root queue a few
times a second by the live view (`root_queues`) without taking a core."""
from __future__ import annotations

import socket
import struct

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
        body = TCMSG.pack(0, 0, 0, self.ifindex, 0, 0, 0)
        self.sock.send(struct.pack("IHHII", 16 + len(body), RTM_GETQDISC,
                                   NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) + body)
        out: dict[int, tuple[int, int]] = {}
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _, seq, _ = struct.unpack_from("IHHII", data, off)
                if length < 16:
                    return out
                if mtype in (NLMSG_DONE, NLMSG_ERROR):
                    return out
                if mtype == RTM_NEWQDISC and seq == self.seq:
                    _, _, _, ifindex, handle, _, _ = TCMSG.unpack_from(data, off + 16)
                    if ifindex == self.ifindex:
                        q = _stats_queue(data, off + 16 + TCMSG.size, off + length)
                        if q is not None:
                            out[handle] = q[:2]
                off += (length + 3) & ~3


TC_H_ROOT = 0xFFFFFFFF


def root_queues(sock: socket.socket, seq: int) -> dict[int, tuple[int, int, int]]:
    """{ifindex: (backlog bytes, qlen packets, drops)} of every interface's root qdisc, from
    one dump (`sock`: a bound NETLINK_ROUTE socket; `seq`: a new sequence number)."""
    body = TCMSG.pack(0, 0, 0, 0, 0, 0, 0)
    sock.send(struct.pack("IHHII", 16 + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP,
                          seq, 0) + body)
    out: dict[int, tuple[int, int, int]] = {}
    while True:
        data = sock.recv(1 << 20)
        off = 0
        while off + 16 <= len(data):
            length, mtype, _, msg_seq, _ = struct.unpack_from("IHHII", data, off)
            if length < 16 or mtype in (NLMSG_DONE, NLMSG_ERROR):
                return out
            if mtype == RTM_NEWQDISC and msg_seq == seq:
                _, _, _, ifindex, _, parent, _ = TCMSG.unpack_from(data, off + 16)
                if parent == TC_H_ROOT:
                    q = _stats_queue(data, off + 16 + TCMSG.size, off + length)
                    if q is not None:
                        out[ifindex] = q
            off += (length + 3) & ~3


def _stats_queue(data: bytes, start: int, end: int) -> tuple[int, int, int] | None:
    """(backlog bytes, qlen packets, drops) of a qdisc message's statistics."""
    off = start
    while off + 4 <= end:
        alen, atype = struct.unpack_from("HH", data, off)
        if alen < 4:
            return None
        if atype & 0x3FFF == TCA_STATS2:
            inner = off + 4
            while inner + 4 <= off + alen:
                ilen, itype = struct.unpack_from("HH", data, inner)
                if ilen < 4:
                    break
                if itype == TCA_STATS_QUEUE:
                    qlen, backlog, dropped = struct.unpack_from("III", data, inner + 4)
                    return backlog, qlen, dropped
                inner += (ilen + 3) & ~3
        off += (alen + 3) & ~3
    return None
