"""Priority flow control: thresholds per switch ingress port and lossless class, and the
executor of pauses. The BPF dataplane detects XOFF/XON per packet (as a switch ASIC would)
and posts events on a ring buffer; this app pauses or resumes the upstream transmitter of
that class (a switch egress class or a host NIC) through the dataplane API, and logs every
event with its reaction time:

    pfc.txt         time_ns node port class pause|resume|overflow   (like the HPCC simulator's)
    pfc_events.csv  the same plus the upstream port, the time from the threshold crossing to
                    the pause being applied, and the bytes that still arrived after XOFF
                    (its columns: `PFC_COLUMNS`, testbed/config/replies.py)

A thin shell around controllers/pfcctl.py, which decides what to set up, which actions of
a batch to apply and what each record says; this app reads the dataplane and the clock and
applies the result.
"""
from __future__ import annotations

import os
import time

from controllers import pfcctl, qos_policy
from controllers.apps.compat import BackgroundWriter, wait_readable
from controllers.apps.qos_base import QosApp
from testbed.config.replies import PFC_HEADER, PfcRecord, pfc_line


class PfcApp(QosApp):
    NAME = "pfc"

    def configure(self, dp, cfg):
        plan = pfcctl.setup(cfg, dp.ports)
        self.reconciled = plan.reconcile
        dp.set_lossless(plan.lossless)
        for port, cls, thresholds in plan.thresholds:
            dp.set_pfc(port, cls, thresholds)
        dp.prepare(plan.prepare)
        # after a restart, pauses its predecessor applied may still be in force: each
        # transmitter is paused or resumed as its partner's ingress asks now
        start = qos_policy.reconcile_pauses(
            dp.ports, plan.reconcile, lambda rx, cls: bool(dp.ingress(rx, cls).paused))
        for action in start:
            (dp.pause if action.verb == "pause" else dp.resume)(action.port, action.cls)
        self.events = dp.events()
        self.log_txt = open(self.status_dir / "pfc.txt", "a")
        self.log_csv = open(self.status_dir / "pfc_events.csv", "a")
        self.writer = BackgroundWriter()
        if self.log_csv.tell() == 0:
            self.log_txt.write(pfcctl.TXT_HEADER)
            self.log_txt.flush()
            self.log_csv.write(PFC_HEADER)
            self.log_csv.flush()
        return plan.status(self._realtime(), start)

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
        watchdog), so that netlink requests and their acks never interleave. Without PFC
        in the phase's classes there is nothing to execute (and no thresholds to watch)."""
        if cfg.pfc is None:
            return
        self.watchdog_resumes = 0
        self.watchdog_pauses = 0
        next_check = time.monotonic() + pfcctl.WATCHDOG_S
        last = time.monotonic()
        busy_since = None
        busy_logged = False
        while True:
            wait_readable(self.events.fd, max(0.0, next_check - time.monotonic()))
            now = time.monotonic()
            # from the end of one turn to the start of the next: longer than the wait
            # asked means this green thread was not run (the hub was held)
            if now - last > pfcctl.STALL_S:
                self.logger.warning("PFC executor stalled: %.1f ms between two turns",
                                    (now - last) * 1e3)
            if self.events.head_busy():         # a record reserved and not committed
                busy_since = busy_since or now
                if now - busy_since > pfcctl.STALL_S and not busy_logged:
                    self.logger.warning("PFC events held for %.1f ms behind a record the "
                                        "dataplane has not committed",
                                        (now - busy_since) * 1e3)
                    busy_logged = True
            elif busy_since is not None:
                if busy_logged:
                    self.logger.warning("PFC events held for %.1f ms in all",
                                        (now - busy_since) * 1e3)
                busy_since, busy_logged = None, False
            while True:  # until empty: events posted while handling may not wake us
                events = [dp.decode(r) for r in self.events.drain()]
                if not events:
                    break
                self.handle_batch(dp, events)
            if time.monotonic() >= next_check:
                self._watchdog(dp, cfg)
                next_check = time.monotonic() + pfcctl.WATCHDOG_S
            last = time.monotonic()

    def _watchdog(self, dp, cfg):
        """Resumes the pauses qos_policy.expired_pauses says have expired, and applies
        those qos_policy.missed_pauses says an ingress asks for in vain."""
        def ingress(rx, cls):
            st = dp.ingress(rx, cls)
            return bool(st.paused), st.bytes
        for action in qos_policy.missed_pauses(dp.paused, dp.ports, self.reconciled,
                                               ingress, cfg.pfc.xoff_bytes):
            rx = pfcctl.partner(dp.ports, action.port)
            held = dp.ingress(rx, action.cls).bytes
            dp.pause(action.port, action.cls)
            self.watchdog_pauses += 1
            self._log(pfcctl.late_pause_record(time.monotonic_ns(), action, dp.ports, held))
            self.logger.warning("PFC: %s asked for a pause no event brought; paused %s",
                                dp.ports[rx]["ifname"], dp.ports[action.port]["ifname"])
        for action in qos_policy.expired_pauses(dp.paused, dp.ports, ingress,
                                                cfg.pfc.xon_bytes):
            rx = pfcctl.partner(dp.ports, action.port)
            held = dp.ingress(rx, action.cls).bytes
            dp.clear_pause(rx, action.cls)
            dp.resume(action.port, action.cls)
            self.watchdog_resumes += 1
            self._log(pfcctl.timeout_record(time.monotonic_ns(), action, dp.ports, held))

    def handle_batch(self, dp, events) -> None:
        t_start = time.monotonic_ns()
        applied: dict[tuple[int, int], int] = {}
        actions = qos_policy.plan_batch([(e.kind, e.rx_port, e.cls) for e in events], dp.ports)
        for action in pfcctl.to_apply(actions, dp.paused):
            try:
                act = dp.pause if action.verb == "pause" else dp.resume
                applied[(action.port, action.cls)] = act(action.port, action.cls)
            except OSError as exc:
                self.logger.error("PFC %s of %s class %d failed: %s", action.verb,
                                  dp.ports[action.port]["ifname"], action.cls, exc)
        t_acted = time.monotonic_ns()
        for ev in events:
            self._log(pfcctl.event_record(ev, dp.ports, applied, dp.paused, t_acted))
        slow = pfcctl.slow_batch(t_start, t_acted, min(e.ns for e in events))
        if slow is not None:
            self.logger.warning("SLOW batch of %d events: oldest queued %.1f ms, acting "
                                "took %.1f ms", len(events), *slow)

    def _log(self, rec: PfcRecord) -> None:
        self.writer.write(self.log_txt, pfcctl.txt_line(rec))
        self.writer.write(self.log_csv, pfc_line(rec))
