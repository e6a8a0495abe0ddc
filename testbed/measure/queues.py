"""Queue depth while a run is live: the root qdisc of switch ports over netlink (never by
forking `tc`), and the per-class queues of the BPF dataplane from its counters in shared
memory."""
from __future__ import annotations

import csv
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute

from testbed.config.units import class_minor
from testbed.dataplane.nlqdisc import QdiscReader, root_stats


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
    """Samples the egress queue of some interfaces at `rate_hz` over netlink: one raw dump
    of every root qdisc per sample, all interfaces stamped with the dump's time. (One
    pyroute2 request per interface took about 1.3 ms each: six interfaces were sampled at
    120 Hz instead of 1000, with gaps up to 90 ms, and each read later than its stamp.)"""

    def __init__(self, ifnames: list[str], rate_hz: float = 200.0):
        super().__init__(daemon=True)
        self.ifnames = ifnames
        self.period = 1.0 / rate_hz
        self.samples: list[QueueSample] = []
        self._halt = threading.Event()
        self.t0 = time.time()

    def run(self) -> None:
        index = {socket.if_nametoindex(name): name for name in self.ifnames}
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as sock:
            sock.bind((0, 0))
            seq = 0
            next_t = time.time()
            while not self._halt.is_set():
                seq += 1
                before = time.time()
                stats = root_stats(sock, seq)
                now = (before + time.time()) / 2 - self.t0
                for idx, name in index.items():
                    if idx in stats:
                        backlog, qlen, drops, sent = stats[idx]
                        self.samples.append(QueueSample(t=now, ifname=name, qlen_pkts=qlen,
                                                        backlog_bytes=backlog, drops=drops,
                                                        sent_pkts=sent))
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


LOAD_PERIOD_S = 0.02  # how often the bytes each class has enqueued are read (link load)
TIMELINE_BIN_S = 0.01  # the timeline keeps a queue's deepest sample per 10 ms
TIMELINE_QUEUES = ["t_unix_s", "port", "class", "qlen_bytes_max", "qlen_pkts", "marks_cum_pkts",
                   "drops_cum_pkts"]
TIMELINE_LOADS = ["t_unix_s", "port", "class", "enq_cum_bytes"]


def timeline_queue_rows(t0: float, samples: list[ClassSample], names: dict[int, str],
                        bin_s: float = TIMELINE_BIN_S) -> list[list]:
    """Per queue and `bin_s` bin: its deepest backlog in the bin, with the packets and the
    cumulative marks and drops of the bin's last sample (times on the Unix clock). A sample
    is a change, so a bin without one holds the last value and gets no row."""
    rows: dict[tuple[int, int, int], list] = {}
    for s in samples:
        key = (s.port, s.cls, int(s.t // bin_s))
        row = rows.get(key)
        if row is None:
            rows[key] = [round(t0 + s.t, 6), names.get(s.port, str(s.port)), s.cls, s.bytes,
                         s.pkts, s.marks, s.drops]
        else:
            row[3] = max(row[3], s.bytes)
            row[4:7] = [s.pkts, s.marks, s.drops]
    return sorted(rows.values(), key=lambda r: (r[0], r[1], r[2]))


def write_timeline(record: Path, t0: float, samples: list[ClassSample],
                   loads: list[tuple[float, int, int, int]], names: dict[int, str]) -> None:
    """`record`-queues.csv and `record`-loads.csv: what the run's timeline draws of a
    sampled phase (results/timeline.py)."""
    record.parent.mkdir(parents=True, exist_ok=True)
    for suffix, header, rows in (
            ("queues", TIMELINE_QUEUES, timeline_queue_rows(t0, samples, names)),
            ("loads", TIMELINE_LOADS, [[round(t0 + t, 6), names.get(p, str(p)), c, b]
                                       for t, p, c, b in loads])):
        with open(record.with_name(f"{record.name}-{suffix}.csv"), "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(header)
            out.writerows(rows)


class ClassQueueSampler(threading.Thread):
    """Samples the per-class queues of the BPF dataplane (shared memory, no syscall and no
    fork per sample) at `rate_hz`; 1 kHz is cheap. Rows are kept only when something changed,
    so idle queues cost nothing. On a fabric split across servers, each other server's
    queues are sampled there by its dataplane agent, and its rows join these at the stop
    (their times from that server's clock)."""

    def __init__(self, dataplane, slots: list[tuple[int, int]], rate_hz: float = 1000.0,
                 paired: tuple[int, int] | None = None, record: Path | None = None):
        """`paired`: one (port, class) of a switch port whose qdisc backlog is also read at
        every tick, between two readings of the BPF count (`pairs`). `record`: where `stop`
        writes the samples for the run's timeline (`write_timeline`)."""
        super().__init__(daemon=True)
        self.dp = dataplane
        self.slots: list[tuple[int, int]] = []  # this server's
        self.away: dict[str, list[tuple[int, int]]] = {}  # another server -> its slots
        for port, cls in slots:
            if dataplane.is_here(port):
                self.slots.append((port, cls))
            else:
                self.away.setdefault(dataplane.server_of(port), []).append((port, cls))
        self.rate_hz = rate_hz
        self.away_rates: list[float] = []
        self.paired = paired
        self.record = record
        self.pairs: list[tuple] = []  # (t, bpf_bytes_before, qdisc_bytes, bpf_bytes_after, marks_before, marks_after)
        self.period = 1.0 / rate_hz
        self.samples: list[ClassSample] = []
        # (t, port, class, bytes enqueued so far) every LOAD_PERIOD_S, where it changed
        self.loads: list[tuple[float, int, int, int]] = []
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
        next_load = next_t
        enqueued: dict[tuple[int, int], int] = {}
        while not self._halt.is_set():
            now = time.time()
            self.ticks += 1
            load_tick = now >= next_load
            if load_tick:
                next_load = now + LOAD_PERIOD_S
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
                if load_tick and enqueued.get((port, cls)) != q.enq_bytes:
                    enqueued[(port, cls)] = q.enq_bytes
                    self.loads.append((now - self.t0, port, cls, q.enq_bytes))
            next_t += self.period
            delay = next_t - time.time()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.time()
        self.t_end = time.time()
        if reader is not None:
            reader.close()

    def start(self) -> None:
        for server, slots in self.away.items():
            self.dp.agent(server).call("sample_start", slots, self.rate_hz)
        super().start()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)
        for server in self.away:
            got = self.dp.agent(server).call("sample_stop")
            shift = got["t0"] - self.t0
            self.samples += [ClassSample(t + shift, *rest) for t, *rest in got["samples"]]
            self.loads += [(t + shift, *rest) for t, *rest in got["loads"]]
            span = got["t_end"] - got["t0"]
            self.away_rates.append(got["ticks"] / span if span > 0 else 0.0)
        if self.away:
            self.samples.sort(key=lambda x: x.t)
            self.loads.sort(key=lambda x: x[0])
        if self.record is not None:
            names = {p["id"]: p["ifname"] for p in self.dp.ports}
            write_timeline(self.record, self.t0, self.samples, self.loads, names)


    def achieved_rate_hz(self) -> float:
        """The lowest rate any server's sampler achieved."""
        span = self.t_end - self.t0
        return min([self.ticks / span if span > 0 else 0.0, *self.away_rates])

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
