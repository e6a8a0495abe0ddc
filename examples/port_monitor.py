"""A monitoring plugin: every switch port's transmit rate, once a second, into
`plugins/port_rates-<phase>.csv` of the run's results directory. Load it with

    controller:
      plugins: [examples/port_monitor.py]

It only asks the switches for their port counters (OpenFlow port statistics), so the plugin
guard changes nothing it sends; a plugin that floods or installs entries gets the guard's
rewrites and a warning (README, "Writing a controller plugin").
tests/integration/test_plugins.py loads it beside Ryu's example apps.
"""
from __future__ import annotations

import time
from pathlib import Path

from controllers.apps.compat import MAIN_DISPATCHER, OFP_VERSION, RyuApp, hub, ofp_event, set_ev_cls
from testbed.config.controller import phase_config

PERIOD_S = 1.0
HEADER = "t_s,dpid,port,tx_mbps,rx_mbps,tx_dropped\n"


def rate_mbps(bytes_now: int, bytes_before: int, dt_s: float) -> float:
    """The rate between two byte counters `dt_s` apart (0 before the first interval)."""
    return round(max(0, bytes_now - bytes_before) * 8 / dt_s / 1e6, 4) if dt_s > 0 else 0.0


class PortMonitor(RyuApp):
    OFP_VERSIONS = [OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = phase_config()
        out = Path(cfg.results_dir) / "plugins"
        out.mkdir(parents=True, exist_ok=True)
        phase = Path(cfg.topology_json).stem  # topologies/<phase>.json
        self.csv = open(out / f"port_rates-{phase}.csv", "a", buffering=1)
        self.csv.write(HEADER)
        self.t0 = time.time()
        self.datapaths: dict[int, object] = {}
        self.last: dict[tuple[int, int], tuple[float, int, int]] = {}
        hub.spawn(self._poll)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER])
    def state_change(self, ev):
        self.datapaths[ev.datapath.id] = ev.datapath

    def _poll(self):
        while True:
            for dp in list(self.datapaths.values()):
                parser, ofp = dp.ofproto_parser, dp.ofproto
                dp.send_msg(parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY))
            hub.sleep(PERIOD_S)

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def port_stats(self, ev):
        now = time.time()
        dpid = ev.msg.datapath.id
        for stat in ev.msg.body:
            if stat.port_no > 0xFFFFFF00:  # the LOCAL port
                continue
            key = (dpid, stat.port_no)
            before = self.last.get(key)
            self.last[key] = (now, stat.tx_bytes, stat.rx_bytes)
            if before is None:
                continue
            dt = now - before[0]
            self.csv.write(f"{now - self.t0:.3f},{dpid},{stat.port_no},"
                           f"{rate_mbps(stat.tx_bytes, before[1], dt)},"
                           f"{rate_mbps(stat.rx_bytes, before[2], dt)},{stat.tx_dropped}\n")
