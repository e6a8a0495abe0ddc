"""The routing controller: a thin Ryu shell around `controllers.routing`.

On each switch connection it installs that switch's part of the routing plan (groups, then
flows, then a barrier); it answers ARP requests itself from the topology (proxy ARP, so
nothing is ever flooded in a looped fabric). When a switch reports a port down or up, it
replans on the fabric without the ports that are down and sends the difference
(controllers/recovery.py decides both; every reroute is in the state file). It writes its
state (connected and ready switches, packet-in/out counters, reroutes) to the phase's
`state_json` so the runner knows when every path is installed and can account for packets
the controller injected. Its
configuration is the phase's file (config/controller.py, `phase_config()`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from controllers import ofmsgs, recovery, routing
from controllers.compat import (
    CONFIG_DISPATCHER,
    MAIN_DISPATCHER,
    OFP_VERSION,
    RyuApp,
    arp,
    hub,
    ofp_event,
    packet,
    set_ev_cls,
)
from testbed.config.controller import phase_config


class FabricRouting(RyuApp):
    OFP_VERSIONS = [OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = phase_config()
        self.topo = self.config.topology()
        self.mode = self.config.routing
        self.plan = routing.plan(self.topo, self.mode)
        self.plan_args: dict = {}  # what else routing.plan was given (a subclass's base, track)
        self.datapaths: dict[int, Any] = {}  # Ryu datapaths
        self.down: set[tuple[str, int]] = set()
        self.reroutes: list[dict] = []
        self.state_path = Path(self.config.state_json)
        self.connected: dict[int, float] = {}
        self.ready: dict[int, float] = {}
        self.counters: dict[int, dict[str, int]] = {}
        self.started = time.time()
        self._write_state()
        hub.spawn(self._state_writer)

    # ---- switch setup ---------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        if self.topo.switch_by_dpid(dp.id) is None:
            self.logger.warning("dpid %s is not in the topology; ignoring it", dp.id)
            return
        self.connected[dp.id] = time.time()
        self.datapaths[dp.id] = dp
        self.ready.pop(dp.id, None)
        groups, rules = self.plan.for_switch(dp.id)
        for msg in ofmsgs.clear_all(dp):
            dp.send_msg(msg)
        for group in groups:
            dp.send_msg(ofmsgs.group_mod(dp, group))
        for rule in rules:
            dp.send_msg(ofmsgs.flow_mod(dp, rule))
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        self.ready[ev.msg.datapath.id] = time.time()
        self._write_state()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def error(self, ev):
        msg = ev.msg
        self.logger.error("switch %s rejected a message: type=%s code=%s",
                          msg.datapath.id, msg.type, msg.code)
        self._count(msg.datapath.id, "errors")

    # ---- failures ------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def port_status(self, ev):
        msg = ev.msg
        dp, desc = msg.datapath, msg.desc
        ofp = dp.ofproto
        sw = self.topo.switch_by_dpid(dp.id)
        if sw is None or desc.port_no > ofp.OFPP_MAX:
            return
        is_down = (msg.reason == ofp.OFPPR_DELETE or bool(desc.state & ofp.OFPPS_LINK_DOWN)
                   or bool(desc.config & ofp.OFPPC_PORT_DOWN))
        self.port_changed(sw.name, desc.port_no, is_down)

    def port_changed(self, node: str, port: int, is_down: bool) -> None:
        """Replan when the set of ports that are down changes; send the difference."""
        t0 = time.time()
        was = (node, port) in self.down
        if was == is_down:
            return
        (self.down.add if is_down else self.down.discard)((node, port))
        new = recovery.replan(self.topo, self.mode, self.down, self.plan, **self.plan_args)
        todo = recovery.changes(self.plan, new, recovery.degraded(self.topo, self.down))
        unsent = 0
        for change in todo:
            dp = self.datapaths.get(change.dpid)
            if dp is None:
                unsent += 1
                continue
            dp.send_msg(ofmsgs.change(dp, change))
        for dpid in sorted({c.dpid for c in todo}):
            dp = self.datapaths.get(dpid)
            if dp is not None:
                dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        self.set_plan(new)
        self.reroutes.append({"time": t0, "port": f"{node}-eth{port}", "down": is_down,
                              "ports_down": len(self.down), "changes": len(todo),
                              "switches": len({c.dpid for c in todo}), "unsent": unsent,
                              "decided_s": round(time.time() - t0, 4)})
        self.logger.info("port %s-eth%s %s: %d changes on %d switches", node, port,
                         "down" if is_down else "up", len(todo), len({c.dpid for c in todo}))
        self._write_state()

    def set_plan(self, new: routing.Plan) -> None:
        """The plan now installed (a subclass that derives entries from it follows)."""
        self.plan = new

    # ---- proxy ARP -------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        self._count(dp.id, "packet_in")
        req = packet.Packet(msg.data).get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        in_port = msg.match["in_port"]
        mac = routing.arp_reply(self.topo, dp.id, in_port, req.dst_ip)
        if mac is None:
            self._count(dp.id, "arp_unanswered")
            return
        dp.send_msg(ofmsgs.packet_out(dp, in_port, ofmsgs.arp_reply_frame(req, mac)))
        self._count(dp.id, "packet_out")
        # Written at once: the runner's packet accounting adds packet-outs to what the
        # switch received, so the count must not lag the packets it describes.
        self._write_state()

    # ---- state for the runner ---------------------------------------------------
    def _count(self, dpid: int, key: str) -> None:
        c = self.counters.setdefault(dpid, {})
        c[key] = c.get(key, 0) + 1

    def _state_writer(self):
        while True:
            hub.sleep(0.5)
            self._write_state()

    def _write_state(self) -> None:
        state = {"pid": os.getpid(), "mode": self.mode, "started": self.started,
                 "time": time.time(),
                 "switches": len(self.topo.switches),
                 "connected": {str(k): v for k, v in sorted(self.connected.items())},
                 "ready": {str(k): v for k, v in sorted(self.ready.items())},
                 "counters": {str(k): v for k, v in sorted(self.counters.items())},
                 "ports_down": sorted(f"{n}-eth{p}" for n, p in self.down),
                 "reroutes": self.reroutes}
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.state_path)
