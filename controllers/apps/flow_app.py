"""Per-flow control as a Ryu app: the routing controller plus Hedera's scheduler (routing
``hedera``) and/or a priority policy that re-marks flows' DSCP at their edge.

A thin shell around controllers/flowctl.py, which decides (what each new flow's entry is,
which flows move where each period, which are re-marked) given the time and the
switches' counters; this app reads the clock and the switches, sends what it returns (a
moved flow's entries from the last switch back, each confirmed by a barrier before the one
upstream of it, so packets are never sent towards a switch that does not know the flow)
and writes its records: hedera_decisions.jsonl (moves, and placed flows sent back to their
hash route when a failure cuts their path), priority.jsonl and each period's summary
in hedera_periods.jsonl, in the phase's `hedera_dir` (its configuration file,
config/controller.py).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from controllers import recovery, routing
from controllers.apps import ofmsgs
from controllers.apps.compat import (
    MAIN_DISPATCHER,
    hub,
    ipv4,
    ofp_event,
    packet,
    set_ev_cls,
    tcp,
)
from controllers.apps.routing_app import FabricRouting
from controllers.flowctl import FlowControl, FlowMod, FlowStat


class FlowRouting(FabricRouting):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.control = FlowControl(self.topo, self.config)
        self.plan = self.control.plan
        status = Path(self.config.hedera_dir or self.state_path.parent)
        status.mkdir(parents=True, exist_ok=True)
        self.decisions = (status / "hedera_decisions.jsonl").open("a", buffering=1)
        self.priority_log = (status / "priority.jsonl").open("a", buffering=1)
        self.periods = (status / "hedera_periods.jsonl").open("a", buffering=1)
        self.pending_barriers: dict[int, object] = {}
        self.every(self.control.period_s, self._period, "flow control period")

    def set_plan(self, new: routing.RoutePlan) -> None:
        """After a replan: new flows' entries copy the replanned routes, and flows Hedera
        placed across a failed link go back to their hash route (flowctl.fabric_changed),
        their entries sent in order, each confirmed before the next, in a greenlet of their
        own (a handler cannot wait for a barrier reply)."""
        super().set_plan(new)
        self.control.plan = new
        mods, records = self.control.fabric_changed(time.time(),
                                                    recovery.degraded(self.topo, self.down))
        self._write(self.decisions, records)
        if mods:
            hub.spawn(self._install, mods)

    # ---- new flows -------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        ip, seg = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(tcp.tcp)
        if ip is None or seg is None:
            return super().packet_in(ev)  # ARP
        self._count(dp.id, "packet_in")
        key = (ip.src, ip.dst, 6, seg.src_port, seg.dst_port)
        mod, records = self.control.new_flow(time.time(), dp.id, key)
        self._write(self.priority_log, records)
        if mod is None:
            self._count(dp.id, "unroutable")
            return
        self._send(dp, mod)  # the packet itself went on: a copy came

    # ---- the scheduling loop ----------------------------------------------------
    def _period(self):
        t0 = time.time()
        self.read_flow_stats(self.control.edges, min(2.0, self.control.period_s / 2),
                             eth_type=routing.ETH_TYPE_IP, ip_proto=routing.IP_PROTO_TCP)
        stats = [FlowStat(dpid, e.priority, dict(e.match.items()), e.byte_count)
                 for dpid, entries in self.stats.items() for e in entries]
        result = self.control.period(time.time(), stats)
        for planned in result.moves:
            if self._install(planned.mods):
                self._write(self.decisions, [planned.record])
        for mod in result.remarks:
            dp = self.datapaths.get(mod.rule.dpid)
            if dp is not None:
                self._send(dp, mod)
        self._write(self.priority_log, result.priorities)
        self._write(self.periods, [{**result.period, "stats_switches": len(self.stats_done),
                                    "took_s": round(time.time() - t0, 4)}])

    def _install(self, mods: list[FlowMod]) -> bool:
        """A moved flow's entries, last switch first, each confirmed before the next."""
        for mod in mods:
            dp = self.datapaths.get(mod.rule.dpid)
            if dp is None:
                return False
            self._send(dp, mod)
            self._barrier(dp)
        return True

    @staticmethod
    def _send(dp, mod: FlowMod) -> None:
        dp.send_msg(ofmsgs.flow_delete(dp, mod.rule) if mod.delete
                    else ofmsgs.flow_mod(dp, mod.rule, modify=mod.modify))

    @staticmethod
    def _write(log, records: list[dict]) -> None:
        for record in records:
            log.write(json.dumps(record) + "\n")

    def _barrier(self, dp, timeout: float = 1.0):
        ev = hub.Event()
        self.pending_barriers[dp.id] = ev
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        ev.wait(timeout)
        self.pending_barriers.pop(dp.id, None)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        waiter = self.pending_barriers.get(ev.msg.datapath.id)
        if waiter is not None:
            waiter.set()
            return
        super().barrier_reply(ev)
