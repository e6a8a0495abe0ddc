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

import time

from controllers import qos_policy
from controllers.apps.qos_base import QosApp
from controllers.compat import wait_readable


class PfcApp(QosApp):
    NAME = "pfc"

    def configure(self, dp, cfg):
        lossless = 0
        for port, cls, thresholds in qos_policy.pfc_settings(cfg, dp.ports):
            dp.set_pfc(port, cls, thresholds)
            lossless += thresholds is not None
        self.events = dp.events()
        self.log_txt = open(self.status_dir / "pfc.txt", "a", buffering=1)
        self.log_csv = open(self.status_dir / "pfc_events.csv", "a", buffering=1)
        if self.log_csv.tell() == 0:
            self.log_txt.write("# time_ns node port class event\n")
            self.log_csv.write("time_ns,node,port,class,event,upstream_port,bytes_held,"
                               "xoff_to_applied_us,xoff_to_last_arrival_us,"
                               "bytes_after_xoff\n")
        return {"lossless_ingress_queues": lossless,
                "pfc": None if cfg.pfc is None else vars(cfg.pfc)}

    def serve(self, dp, cfg):
        while True:
            wait_readable(self.events.fd)
            for record in self.events.drain():
                self.handle(dp, dp.decode(record))

    def handle(self, dp, ev) -> None:
        action = qos_policy.on_event(ev.kind, ev.rx_port, ev.tx_port, ev.cls)
        applied_us = ""
        try:
            if action.verb == "pause":
                applied_us = round((dp.pause(action.port, action.cls) - ev.ns) / 1000, 1)
            elif action.verb == "resume":
                applied_us = round((dp.resume(action.port, action.cls) - ev.ns) / 1000, 1)
        except OSError as exc:
            self.logger.error("PFC %s of %s class %d failed: %s", action.verb,
                              dp.ports[action.port]["ifname"], action.cls, exc)
        rx = dp.ports[ev.rx_port]
        up = dp.ports[ev.tx_port]["ifname"]
        self.log_txt.write(f"{ev.ns} {rx['node']} {rx['ifname']} {ev.cls} {ev.name}\n")
        last = (round((ev.last_arrival_ns - ev.xoff_ns) / 1000, 1)
                if ev.kind == 2 and ev.last_arrival_ns >= ev.xoff_ns else "")
        self.log_csv.write(f"{ev.ns},{rx['node']},{rx['ifname']},{ev.cls},{ev.name},{up},"
                           f"{ev.bytes},{applied_us if ev.kind == 1 else ''},{last},"
                           f"{ev.bytes_after_xoff if ev.kind == 2 else ''}\n")
        self.last_event = time.time()
