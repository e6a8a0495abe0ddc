"""Measurements taken while a run is live: CPU headroom, queue depth, and the packet
conservation check that proves OVS lost nothing between a switch's ingress and its
egress queues.

Queue depth is read over netlink (pyroute2), never by forking `tc`.
"""
from __future__ import annotations

import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyroute2 import IPRoute

from . import ovs
from .system import run

CLK_TCK = os.sysconf("SC_CLK_TCK")
# A phase is CPU-bound when OVS's forwarding thread has fallen behind so far that it adds
# more than this much queueing delay (median) to every packet -- about what one 20 Mb/s hop
# adds by serialization -- or when the machine has no idle time left for the hosts.
# (The thread's busy share is no verdict: with steady traffic its poll loop never idles,
# keeping up or not; measurements in docs/FIDELITY.md.)
OVS_DELAY_LIMIT_MS = 1.0
MACHINE_IDLE_MEAN_MIN = 0.10


def percentile(values, q: float):
    """Nearest-rank percentile (the smallest value with at least q% of values <= it)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _proc_cpu_seconds(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def ovs_main_thread() -> str | None:
    """/proc path of ovs-vswitchd's main thread, which polls every AF_PACKET port."""
    pid_file = Path("/var/run/openvswitch/ovs-vswitchd.pid")
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    path = f"/proc/{pid}/task/{pid}/stat"
    return path if Path(path).exists() else None


@dataclass
class CpuSample:
    t: float
    machine_busy: float  # fraction of all cores
    ovs_thread: float  # fraction of one core
    ovs_rx_backlog_bytes: int  # waiting in OVS's receive sockets (truesize)


class CpuMonitor(threading.Thread):
    """Samples machine CPU and OVS's forwarding thread once per `period_s`."""

    def __init__(self, period_s: float = 0.5):
        super().__init__(daemon=True)
        self.period_s = period_s
        self.samples: list[CpuSample] = []
        self._halt = threading.Event()
        self.thread_path = ovs_main_thread()
        self.t0 = time.time()
        self.ifaces: set[str] = set()  # switch ports of the fabric that is up, if any

    def watch(self, ifaces: set[str]) -> None:
        """Follow the receive sockets of these switch ports (empty: no fabric is up)."""
        self.ifaces = set(ifaces)

    @staticmethod
    def _machine() -> tuple[int, int]:
        vals = list(map(int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]))
        return sum(vals), vals[3] + vals[4]

    def _ovs_seconds(self) -> float:
        return _proc_cpu_seconds(self.thread_path) if self.thread_path else 0.0

    def run(self) -> None:
        total0, idle0 = self._machine()
        ovs0 = self._ovs_seconds()
        t0 = time.time()
        while not self._halt.wait(self.period_s):
            total1, idle1 = self._machine()
            t1 = time.time()
            try:
                ovs1 = self._ovs_seconds()
            except OSError:  # ovs-vswitchd was restarted (larger send buffer): follow it
                self.thread_path = ovs_main_thread()
                ovs0 = ovs1 = self._ovs_seconds()
            busy = 1 - (idle1 - idle0) / max(1, total1 - total0)
            self.samples.append(CpuSample(t=t1 - self.t0, machine_busy=busy,
                                          ovs_thread=(ovs1 - ovs0) / max(1e-6, t1 - t0),
                                          ovs_rx_backlog_bytes=ovs.rx_backlog_bytes(self.ifaces)))
            total0, idle0, ovs0, t0 = total1, idle1, ovs1, t1

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def window(self, start: float, end: float) -> dict:
        """Summary over samples taken between `start` and `end` (seconds since t0)."""
        sel = [s for s in self.samples if start <= s.t <= end + self.period_s]
        if not sel:  # too short to have been sampled: say so rather than borrow other samples
            return {"ovs_rx_backlog_p50_bytes": None, "ovs_rx_backlog_p90_bytes": None,
                    "machine_idle_min": None, "machine_idle_mean": None,
                    "ovs_thread_p90": None, "ovs_thread_mean": None}
        idle = [1 - s.machine_busy for s in sel]
        ovs_load = [s.ovs_thread for s in sel]
        backlog = [s.ovs_rx_backlog_bytes for s in sel]
        return {"ovs_rx_backlog_p50_bytes": percentile(backlog, 50),
                "ovs_rx_backlog_p90_bytes": percentile(backlog, 90),
                "machine_idle_min": round(min(idle), 3),
                "machine_idle_mean": round(sum(idle) / len(idle), 3),
                "ovs_thread_p90": round(percentile(ovs_load, 90), 3),
                "ovs_thread_mean": round(sum(ovs_load) / len(ovs_load), 3)}


def forwarding_verdict(cpu: dict, packets_in: int, seconds: float, mtu_bytes: int) -> dict:
    """`cpu` (a CpuMonitor window) plus the queueing delay OVS added, estimated as the
    packets waiting in its receive sockets over the rate at which switches took packets in
    during the phase, and the verdict `cpu_bound`."""
    out = dict(cpu)
    pps = packets_in / max(seconds, 1e-6)
    truesize = ovs.frame_truesize(mtu_bytes)  # waiting bytes are counted in truesize
    for q in ("p50", "p90"):
        backlog = cpu.get(f"ovs_rx_backlog_{q}_bytes")
        out[f"ovs_added_delay_{q}_ms"] = (round(1000 * backlog / truesize / pps, 3)
                                          if backlog is not None and pps > 0 else None)
    delay = out["ovs_added_delay_p50_ms"]
    idle = cpu.get("machine_idle_mean")
    out["cpu_bound"] = bool((delay is not None and delay > OVS_DELAY_LIMIT_MS)
                            or (idle is not None and idle < MACHINE_IDLE_MEAN_MIN))
    return out


@dataclass
class QueueSample:
    t: float
    ifname: str
    qlen_pkts: int
    backlog_bytes: int
    drops: int
    sent_pkts: int


def _qdisc_stats(ipr: IPRoute, index: int) -> dict | None:
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
                    st = _qdisc_stats(ipr, idx)
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


# ---- packet conservation ---------------------------------------------------------------

@dataclass
class SwitchCounters:
    rx: int = 0  # packets the switch's ports received
    enqueued: int = 0  # packets that reached an egress qdisc (sent + dropped + queued)
    qdisc_drops: int = 0
    to_controller: int = 0  # flow entries that send to the controller
    table_drops: int = 0  # explicit drop entries (unroutable packets)
    socket_drops: int = 0  # OVS receive-socket overflow


@dataclass
class ConservationSnapshot:
    t: float
    switches: dict[str, SwitchCounters] = field(default_factory=dict)
    packet_out: dict[str, int] = field(default_factory=dict)


_FLOW_RE = re.compile(r"n_packets=(\d+).*actions=(\S+)")


def conservation_snapshot(fabric) -> ConservationSnapshot:
    topo = fabric.topo
    ctrl_state = _controller_state_since(fabric, time.time())
    # OpenFlow rule counters lag the datapath until a revalidator round pulls them in;
    # kernel counters do not. Wait for a full round so both describe the same packets.
    run(["ovs-appctl", "revalidator/wait"], check=False, timeout=10)
    snap = ConservationSnapshot(t=time.time())
    socket_drops = ovs.port_socket_drops(set(fabric.switch_ifaces()))
    bpf = _bpf_port_counters(fabric)
    with IPRoute() as ipr:
        for sw in topo.switches:
            c = SwitchCounters()
            for port, _, _ in topo.ports_of(sw.name):
                name = f"{sw.name}-eth{port}"
                c.rx += int(Path(f"/sys/class/net/{name}/statistics/rx_packets").read_text())
                st = _qdisc_stats(ipr, ipr.link_lookup(ifname=name)[0]) or {}
                c.enqueued += st.get("packets", 0) + st.get("drops", 0) + st.get("qlen", 0)
                c.qdisc_drops += st.get("drops", 0)
                c.socket_drops += socket_drops.get(name, 0)
                if name in bpf:
                    # The BPF dataplane drops before the qdisc (counted here, not by it,
                    # headroom overflows included); its resume kicks pass the qdisc, and at
                    # the far switch OVS drops them by a counted table-miss entry.
                    b = bpf[name]
                    c.enqueued += b["drops"] - b["kicks_sent"]
                    c.qdisc_drops += b["drops"]
            flows = run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", sw.name], check=False).stdout
            for m in _FLOW_RE.finditer(flows):
                if m.group(2).startswith("CONTROLLER"):
                    if "," in m.group(2):
                        continue  # forwarded, with a copy to the controller (hedera)
                    c.to_controller += int(m.group(1))
                elif m.group(2) == "drop":
                    c.table_drops += int(m.group(1))
            snap.switches[sw.name] = c
            counters = ctrl_state.get("counters", {}).get(str(sw.dpid), {})
            snap.packet_out[sw.name] = int(counters.get("packet_out", 0))
    return snap


def _bpf_port_counters(fabric) -> dict[str, dict[str, int]]:
    plane = getattr(fabric, "qos_plane", None)
    if plane is None:
        return {}
    from .dpapi import Dataplane
    dp = Dataplane(plane.description)
    try:
        ncls = len(dp.classes)
        kicks = {p["id"]: dp.queue(p["id"], 0).kicks for p in dp.ports}
        return {p["ifname"]: {
            "drops": sum(dp.queue(p["id"], c).drops for c in range(ncls)),
            "kicks_sent": kicks[p["id"]]}
            for p in dp.ports}
    finally:
        dp.close()


def _controller_state_since(fabric, t: float, timeout: float = 2.0) -> dict:
    """The controller's state as written at or after `t`, so that every packet-out it sent
    before `t` is counted (it writes on each packet-out and every 0.5 s)."""
    deadline = time.time() + timeout
    state = fabric.controller.state()
    while state.get("time", 0) < t and time.time() < deadline:
        time.sleep(0.05)
        state = fabric.controller.state()
    return state


def conservation_report(before: ConservationSnapshot, after: ConservationSnapshot) -> dict:
    """Per switch: packets in (ports + controller packet-outs) minus packets accounted for
    (egress qdiscs + to controller + dropped by the flow table). Anything left was lost
    inside OVS without being counted: the silent loss of an undersized send buffer."""
    per_switch = {}
    total_lost = 0
    total_in = 0
    for name, a in after.switches.items():
        b = before.switches[name]
        pin = (a.rx - b.rx) + (after.packet_out[name] - before.packet_out[name])
        accounted = ((a.enqueued - b.enqueued) + (a.to_controller - b.to_controller)
                     + (a.table_drops - b.table_drops))
        lost = pin - accounted
        per_switch[name] = {"in": pin, "accounted": accounted, "lost": lost,
                            "qdisc_drops": a.qdisc_drops - b.qdisc_drops,
                            "socket_drops": a.socket_drops - b.socket_drops}
        total_lost += lost
        total_in += pin
    return {"packets_in": total_in, "lost_in_switches": total_lost,
            "qdisc_drops": sum(v["qdisc_drops"] for v in per_switch.values()),
            "socket_drops": sum(v["socket_drops"] for v in per_switch.values()),
            "per_switch": per_switch}


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
            from .nlqdisc import QdiscReader
            port, cls = self.paired
            reader = QdiscReader(self.dp.ports[port]["ifindex"])
            handle = (0x10 + cls) << 16
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
