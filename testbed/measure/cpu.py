"""CPU headroom while a run is live: the machine's idle share, the share the hypervisor took
(steal), OVS's forwarding thread, and the packets waiting in OVS's receive sockets, from
which the queueing delay OVS adds is estimated (the verdict `cpu_bound`)."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.config.capacity import MACHINE_IDLE_MEAN_MIN, OVS_DELAY_LIMIT_MS
from testbed.dataplane import ovs
from testbed.results.stats import percentile

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu_seconds(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def ovs_main_thread(pid: int | None = None) -> str | None:
    """/proc path of an ovs-vswitchd's main thread, which polls every AF_PACKET port it
    has (`pid`'s, else the machine's own process's)."""
    pid = ovs.vswitchd_pid() if pid is None else pid
    if pid is None:
        return None
    path = f"/proc/{pid}/task/{pid}/stat"
    return path if Path(path).exists() else None


@dataclass
class CpuSample:
    t: float
    machine_busy: float  # fraction of all cores
    # fraction of all cores' time the hypervisor ran something else while this machine had
    # work for them (/proc/stat's steal; 0 on bare metal); it counts as busy
    machine_steal: float
    ovs_thread: float  # fraction of one core (the busiest forwarding process's)
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
        self.extra_threads: list[str] = []  # a split fabric's other forwarding processes'

    def watch(self, ifaces: set[str], pids: list[int] | tuple[int, ...] = ()) -> None:
        """Follow the receive sockets of these switch ports (empty: no fabric is up), and
        the main threads of the fabric's other ovs-vswitchd processes `pids`."""
        self.ifaces = set(ifaces)
        self.extra_threads = [path for pid in pids if (path := ovs_main_thread(pid))]

    @staticmethod
    def _machine() -> tuple[int, int, int]:
        """All cores' ticks, their idle (with I/O wait) and steal ticks."""
        vals = list(map(int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]))
        return sum(vals), vals[3] + vals[4], vals[7] if len(vals) > 7 else 0

    def _ovs_seconds(self) -> dict[str, float]:
        """Each forwarding thread's CPU seconds so far (one that has ended left out)."""
        out = {}
        for path in filter(None, [self.thread_path, *self.extra_threads]):
            try:
                out[path] = _proc_cpu_seconds(path)
            except OSError:
                pass
        return out

    def run(self) -> None:
        total0, idle0, steal0 = self._machine()
        ovs0 = self._ovs_seconds()
        t0 = time.time()
        while not self._halt.wait(self.period_s):
            total1, idle1, steal1 = self._machine()
            t1 = time.time()
            ovs1 = self._ovs_seconds()
            if self.thread_path not in ovs1:  # restarted (larger send buffer): follow it
                self.thread_path = ovs_main_thread()
                ovs1 = self._ovs_seconds()
            busy = 1 - (idle1 - idle0) / max(1, total1 - total0)
            shares = [(ovs1[p] - ovs0[p]) / max(1e-6, t1 - t0) for p in ovs1 if p in ovs0]
            self.samples.append(CpuSample(t=t1 - self.t0, machine_busy=busy,
                                          machine_steal=(steal1 - steal0) / max(1, total1 - total0),
                                          ovs_thread=max(shares, default=0.0),
                                          ovs_rx_backlog_bytes=ovs.rx_backlog_bytes(self.ifaces)))
            total0, idle0, steal0, ovs0, t0 = total1, idle1, steal1, ovs1, t1

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)

    def window(self, start: float, end: float) -> dict:
        """Summary over samples taken between `start` and `end` (seconds since t0)."""
        sel = [s for s in self.samples if start <= s.t <= end + self.period_s]
        if not sel:  # too short to have been sampled: say so rather than borrow other samples
            return {"ovs_rx_backlog_p50_bytes": None, "ovs_rx_backlog_p90_bytes": None,
                    "machine_idle_min": None, "machine_idle_mean": None,
                    "machine_steal_mean": None, "machine_steal_max": None,
                    "ovs_thread_p90": None, "ovs_thread_mean": None}
        idle = [1 - s.machine_busy for s in sel]
        ovs_load = [s.ovs_thread for s in sel]
        backlog = [s.ovs_rx_backlog_bytes for s in sel]
        return {"ovs_rx_backlog_p50_bytes": percentile(backlog, 50),
                "ovs_rx_backlog_p90_bytes": percentile(backlog, 90),
                "machine_idle_min": round(min(idle), 3),
                "machine_idle_mean": round(sum(idle) / len(idle), 3),
                "machine_steal_mean": round(sum(s.machine_steal for s in sel) / len(sel), 3),
                "machine_steal_max": round(max(s.machine_steal for s in sel), 3),
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


def servers_verdict(windows: dict[str, dict], packets_in: dict[str, int], seconds: float,
                    mtu_bytes: int) -> dict:
    """`forwarding_verdict` of each server (its CpuMonitor window, the packets its switches
    took in); one server's is the verdict itself. A fabric split across servers is CPU-bound
    when any server is: the verdict is the worst server's (the one whose OVS added the most
    delay, else the least idle), with every server's under "servers"."""
    per = {name: forwarding_verdict(w, packets_in.get(name, 0), seconds, mtu_bytes)
           for name, w in windows.items()}
    if len(per) == 1:
        return next(iter(per.values()))

    def badness(name: str) -> tuple:
        v = per[name]
        return (v["cpu_bound"], v["ovs_added_delay_p50_ms"] or 0.0,
                -(v["machine_idle_mean"] if v["machine_idle_mean"] is not None else 1.0))

    worst = max(per, key=badness)
    return {**per[worst], "server": worst, "servers": per}


def main() -> int:
    """The CPU monitor of another server of a cluster (started over ssh by the runner while
    a fabric is up; testbed/dataplane/dpapi.py's Agent speaks to it): `{"watch": [switch ports]}`
    first, then `window` calls with two Unix times, answered from this server's samples."""
    from testbed.core.system import hold_wakeup_latency
    from testbed.dataplane.dpapi import serve

    hold_wakeup_latency()   # as the runner does on its own server, while this one lives
    monitor = CpuMonitor()
    monitor.start()

    def handle(request: dict) -> object:
        if "watch" in request:
            monitor.watch(set(request["watch"]))
            return monitor.t0
        start, end = request["args"]
        return monitor.window(start - monitor.t0, end - monitor.t0)

    serve(handle)
    monitor.stop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
