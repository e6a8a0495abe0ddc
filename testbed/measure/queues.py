"""Queue depth while a run is live: the root qdisc of switch ports over netlink (pyroute2,
never by forking `tc`), and the per-class queues of the BPF dataplane from its counters in
shared memory."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from pyroute2 import IPRoute

from testbed.config.units import class_minor
from testbed.net.nlqdisc import QdiscReader


@dataclass
class QueueSample:
    t: float
    ifname: str
    qlen_pkts: int
    backlog_bytes: int
    drops: int
    sent_pkts: int


def qdisc_stats(ipr: IPRoute, index: int) -> dict | None:
    """Stats of the root qdisc (HTB) of an interface: its queue length counts every packet
    in its classes, and it counts the drops of its leaves."""
    for msg in ipr.get_qdiscs(index=index):
        if msg["parent"] != 0xFFFFFFFF:
            continue
        stats2 = msg.get_attr("TCA_STATS2")
        queue = stats2.get_attr("TCA_STATS_QUEUE") if stats2 else None
        basic = stats2.get_attr("TCA_STATS_BASIC") if stats2 else None
        if queue is None or basic is None:
            return None
        return {"qlen": queue["qlen"], "backlog": queue["backlog"], "drops": queue["drops"],
                "packets": basic["packets"], "bytes": basic["bytes"]}
    return None


class QueueSampler(threading.Thread):
    """Samples the egress queue of some interfaces at `rate_hz` over netlink."""

    def __init__(self, ifnames: list[str], rate_hz: float = 200.0):
        super().__init__(daemon=True)
        self.ifnames = ifnames
        self.period = 1.0 / rate_hz
        self.samples: list[QueueSample] = []
        self._halt = threading.Event()
        self.t0 = time.time()

    def run(self) -> None:
        with IPRoute() as ipr:
            index = {name: ipr.link_lookup(ifname=name)[0] for name in self.ifnames}
            next_t = time.time()
            while not self._halt.is_set():
                now = time.time()
                for name, idx in index.items():
                    st = qdisc_stats(ipr, idx)
                    if st:
                        self.samples.append(QueueSample(t=now - self.t0, ifname=name,
                                                        qlen_pkts=st["qlen"],
                                                        backlog_bytes=st["backlog"],
                                                        drops=st["drops"],
                                                        sent_pkts=st["packets"]))
                next_t += self.period
                delay = next_t - time.time()
                if delay > 0:
                    self._halt.wait(delay)
                else:
                    next_t = time.time()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def achieved_rate_hz(self) -> float:
        times = sorted({s.t for s in self.samples})
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


# ---- per-class queues of the BPF dataplane ------------------------------------------------

@dataclass
class ClassSample:
    t: float
    port: int
    cls: int
    bytes: int
    pkts: int
    marks: int
    drops: int


class ClassQueueSampler(threading.Thread):
    """Samples the per-class queues of the BPF dataplane (shared memory, no syscall and no
    fork per sample) at `rate_hz`; 1 kHz is cheap. Rows are kept only when something changed,
    so idle queues cost nothing."""

    def __init__(self, dataplane, slots: list[tuple[int, int]], rate_hz: float = 1000.0,
                 paired: tuple[int, int] | None = None):
        """`paired`: one (port, class) of a switch port whose qdisc backlog is also read at
        every tick, between two readings of the BPF count (`pairs`)."""
        super().__init__(daemon=True)
        self.dp = dataplane
        self.slots = slots
        self.paired = paired
        self.pairs: list[tuple] = []  # (t, bpf_bytes_before, qdisc_bytes, bpf_bytes_after, marks_before, marks_after)
        self.period = 1.0 / rate_hz
        self.samples: list[ClassSample] = []
        self.ticks = 0
        self._halt = threading.Event()
        self.t0 = time.time()
        self.t_end = self.t0

    def run(self) -> None:
        last: dict[tuple[int, int], tuple] = {}
        reader = handle = None
        if self.paired is not None:
            port, cls = self.paired
            reader = QdiscReader(self.dp.ports[port]["ifindex"])
            handle = class_minor(cls) << 16
        next_t = time.time()
        while not self._halt.is_set():
            now = time.time()
            self.ticks += 1
            if reader is not None:
                a = self.dp.queue(*self.paired)
                real = reader.backlogs().get(handle, (0, 0))[0]
                b = self.dp.queue(*self.paired)
                self.pairs.append((now - self.t0, a.bytes, real, b.bytes, a.marks, b.marks))
            for port, cls in self.slots:
                q = self.dp.queue(port, cls)
                key = (q.bytes, q.pkts, q.marks, q.drops)
                if last.get((port, cls)) != key:
                    last[(port, cls)] = key
                    self.samples.append(ClassSample(now - self.t0, port, cls, q.bytes, q.pkts,
                                                    q.marks, q.drops))
            next_t += self.period
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.time()
        self.t_end = time.time()
        if reader is not None:
            reader.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def achieved_rate_hz(self) -> float:
        span = self.t_end - self.t0
        return self.ticks / span if span > 0 else 0.0

    def time_weighted(self, port: int, cls: int, t_from: float, t_to: float) -> list[tuple]:
        """(duration_s, pkts, bytes) segments of one queue between two times (held values:
        a row is written only on change)."""
        rows = [s for s in self.samples if (s.port, s.cls) == (port, cls)]
        out = []
        prev = None
        for s in rows + [None]:
            t = s.t if s is not None else t_to
            if prev is not None:
                a, b = max(prev.t, t_from), min(t, t_to)
                if b > a:
                    out.append((b - a, prev.pkts, prev.bytes))
            prev = s
        return out
