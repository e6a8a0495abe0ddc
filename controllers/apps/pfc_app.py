"""Priority flow control: thresholds per switch ingress port and lossless class, and the
executor of pauses. The BPF dataplane detects XOFF/XON per packet (as a switch ASIC would)
and posts events on a ring buffer; this app pauses or resumes the upstream transmitter of
that class (a switch egress class or a host NIC) through the dataplane API, and logs every
event with its reaction time:

    pfc.txt         time_ns node port class pause|resume|overflow   (like the HPCC simulator's)
    pfc_events.csv  the same plus the upstream port, the time from the threshold crossing to
                    the pause being applied, and the bytes that still arrived after XOFF
"""
from __future__ import annotations

import os
import time

from controllers import qos_policy
from controllers.apps.compat import BackgroundWriter, wait_readable
from controllers.apps.qos_base import QosApp


class PfcApp(QosApp):
    NAME = "pfc"

    def configure(self, dp, cfg):
        lossless = 0
        dp.set_lossless([c.lossless and cfg.pfc is not None for c in cfg.classes])
        for port, cls, thresholds in qos_policy.pfc_settings(cfg, dp.ports):
            dp.set_pfc(port, cls, thresholds)
            lossless += thresholds is not None
        lossless_classes = [i for i, c in enumerate(cfg.classes) if c.lossless]
        dp.prepare(lossless_classes)
        # after a restart, pauses its predecessor applied may still be in force: each
        # transmitter is paused or resumed as its partner's ingress asks now
        start = qos_policy.reconcile_pauses(
            dp.ports, lossless_classes if cfg.pfc is not None else [],
            lambda rx, cls: bool(dp.ingress(rx, cls).paused))
        for action in start:
            (dp.pause if action.verb == "pause" else dp.resume)(action.port, action.cls)
        self.events = dp.events()
        self.log_txt = open(self.status_dir / "pfc.txt", "a")
        self.log_csv = open(self.status_dir / "pfc_events.csv", "a")
        self.writer = BackgroundWriter()
        if self.log_csv.tell() == 0:
            self.log_txt.write("# time_ns node port class event\n")
            self.log_txt.flush()
            self.log_csv.write("time_ns,node,port,class,event,upstream_port,bytes_held,"
                               "xoff_to_applied_us,xoff_to_last_arrival_us,"
                               "bytes_after_xoff\n")
            self.log_csv.flush()
        realtime = self._realtime()
        return {"lossless_ingress_queues": lossless, "realtime_priority": realtime,
                "pauses_at_start": sum(1 for a in start if a.verb == "pause"),
                "pfc": None if cfg.pfc is None else vars(cfg.pfc)}

    WATCHDOG_S = 0.005
    RT_PRIORITY = 10

    def _realtime(self) -> bool:
        """The pause executor must not wait behind OVS and the hosts for a core: the time
        from XOFF to the pause taking effect decides how much headroom a lossless class
        needs. With SCHED_FIFO the controller process (idle but for events) runs first."""
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.RT_PRIORITY))
            return True
        except (OSError, AttributeError) as exc:
            self.logger.warning("PFC executor without real-time priority: %s", exc)
            return False

    def serve(self, dp, cfg):
        """One green thread does everything that touches the dataplane (events and the
        watchdog), so that netlink requests and their acks never interleave."""
        self.watchdog_resumes = 0
        next_check = time.monotonic() + self.WATCHDOG_S
        while True:
            wait_readable(self.events.fd, max(0.0, next_check - time.monotonic()))
            while True:  # until empty: events posted while handling may not wake us
                events = [dp.decode(r) for r in self.events.drain()]
                if not events:
                    break
                self.handle_batch(dp, events)
            if time.monotonic() >= next_check:
                self._watchdog(dp, cfg)
                next_check = time.monotonic() + self.WATCHDOG_S

    def _watchdog(self, dp, cfg):
        """Resumes the pauses qos_policy.expired_pauses says have expired."""
        def ingress(rx, cls):
            st = dp.ingress(rx, cls)
            return bool(st.paused), st.bytes
        for action in qos_policy.expired_pauses(dp.paused, dp.ports, ingress,
                                                cfg.pfc.xon_bytes):
            rx = dp.ports[action.port]["peer"]
            held = dp.ingress(rx, action.cls).bytes
            dp.clear_pause(rx, action.cls)
            dp.resume(action.port, action.cls)
            self.watchdog_resumes += 1
            now = time.monotonic_ns()
            node = dp.ports[rx]
            self.writer.write(self.log_txt,
                              f"{now} {node['node']} {node['ifname']} {action.cls} resume\n")
            self.writer.write(self.log_csv,
                              f"{now},{node['node']},{node['ifname']},{action.cls},"
                              f"resume-timeout,{dp.ports[action.port]['ifname']},{held},,,\n")

    def handle_batch(self, dp, events) -> None:
        t_start = time.monotonic_ns()
        applied: dict[tuple[int, int], int] = {}
        for action in qos_policy.plan_batch([(e.kind, e.rx_port, e.cls) for e in events],
                                            dp.ports):
            already = (action.port, action.cls) in dp.paused
            try:
                if action.verb == "pause" and not already:
                    applied[(action.port, action.cls)] = dp.pause(action.port, action.cls)
                elif action.verb == "resume" and already:
                    applied[(action.port, action.cls)] = dp.resume(action.port, action.cls)
            except OSError as exc:
                self.logger.error("PFC %s of %s class %d failed: %s", action.verb,
                                  dp.ports[action.port]["ifname"], action.cls, exc)
        t_acted = time.monotonic_ns()
        for ev in events:
            self._log(dp, ev, applied, t_acted)
        worst = t_acted - min(e.ns for e in events)
        if worst > 3_000_000:
            self.logger.warning("SLOW batch of %d events: oldest queued %.1f ms, acting "
                                "took %.1f ms", len(events), (t_start - min(e.ns for e in events)) / 1e6,
                                (t_acted - t_start) / 1e6)

    def _log(self, dp, ev, applied: dict, t_acted: int) -> None:
        rx = dp.ports[ev.rx_port]
        upstream = rx["peer"]
        # a pause whose link was still paused (its resume in the same batch) is in effect
        # once the batch is done
        done = applied.get((upstream, ev.cls)) or (
            t_acted if (upstream, ev.cls) in dp.paused else None)
        applied_us = round((done - ev.ns) / 1000, 1) if done and ev.kind == 1 else ""
        self.writer.write(self.log_txt, f"{ev.ns} {rx['node']} {rx['ifname']} {ev.cls} {ev.name}\n")
        last = (round((ev.last_arrival_ns - ev.xoff_ns) / 1000, 1)
                if ev.kind == 2 and ev.last_arrival_ns >= ev.xoff_ns else "")
        self.writer.write(self.log_csv, f"{ev.ns},{rx['node']},{rx['ifname']},{ev.cls},{ev.name},"
                           f"{dp.ports[upstream]['ifname']},{ev.bytes},{applied_us},{last},"
                           f"{ev.bytes_after_xoff if ev.kind == 2 else ''}\n")
