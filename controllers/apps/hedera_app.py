"""Hedera as a Ryu app: the routing controller in mode ``hedera`` plus the scheduling loop.

Thin shell around controllers/flowsched.py (the decisions) and controllers/routing.py (the
entries):

- a copy of a new TCP flow's first packet at its ingress edge switch comes here (the plan's
  detect entries forward the packet and copy it to the controller); the flow gets its own
  entry on that switch with the hash route's action, so it keeps its ECMP path and its
  bytes are counted;
- every ``period`` seconds the edge switches' flow entries are read (flow stats), rates are
  computed, and the scheduler estimates the elephants' natural demands and places new
  elephants with Global First Fit; a placed flow gets an exact entry on every switch of its
  path, installed from the last switch back, each switch confirmed by a barrier before the
  one upstream of it, so packets are never sent towards a switch that does not know the flow.
  Moving a flow can reorder a few of its packets (the new path may be shorter in queueing),
  which TCP absorbs with a duplicate ACK or two; nothing is dropped by the move itself;
- every decision is logged with its time in hedera_decisions.jsonl and
  each period's summary in hedera_periods.jsonl (TESTBED_HEDERA_DIR).

Configuration (environment, set by the runner): TESTBED_HEDERA_PERIOD_S (default 5, the
paper's), TESTBED_HEDERA_ELEPHANT (fraction of the host NIC, default 0.1),
TESTBED_HEDERA_IDLE_S (idle timeout of the per-flow entries, default 10),
TESTBED_HEDERA_BASE (the routing new flows start on: ecmp, or single), TESTBED_HEDERA_DIR
(where the logs go).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from controllers import flowsched, ofmsgs, routing
from controllers.apps.routing_app import FabricRouting
from controllers.compat import (CONFIG_DISPATCHER, MAIN_DISPATCHER, hub, ipv4, ofp_event,
                                packet, set_ev_cls, tcp)
from topologies.graph import shortest_paths


class HederaRouting(FabricRouting):
    def __init__(self, *args, **kwargs):
        os.environ["TESTBED_ROUTING"] = "hedera"
        super().__init__(*args, **kwargs)
        self.plan = routing.plan(self.topo, "hedera",
                                 base=os.environ.get("TESTBED_HEDERA_BASE", "ecmp"))
        self.period = float(os.environ.get("TESTBED_HEDERA_PERIOD_S", "5"))
        fraction = float(os.environ.get("TESTBED_HEDERA_ELEPHANT",
                                        str(flowsched.ELEPHANT_FRACTION)))
        self.idle_s = int(float(os.environ.get("TESTBED_HEDERA_IDLE_S", "10")))
        nic = {}
        capacity = {}
        for link in self.topo.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if self.topo.is_host(a):
                    nic[a] = link.rate_mbps * 1e6
        ref = min(nic.values())
        for link in self.topo.links:  # reservations in NIC fractions
            capacity[(link.a, link.b)] = capacity[(link.b, link.a)] = link.rate_mbps * 1e6 / ref
        self._paths: dict[tuple[str, str], list] = {}
        self.scheduler = flowsched.HederaScheduler(self.paths, nic, fraction, capacity,
                                                   expire_s=self.idle_s + self.period)
        self.edges = {sw.dpid for sw in self.topo.switches
                      if any(self.topo.is_host(p) for _, p, _ in self.topo.ports_of(sw.name))}
        self.datapaths: dict[int, object] = {}
        self.stats: dict[int, list] = {}
        self.host_of_ip = {h.ip: h.name for h in self.topo.hosts}
        status = Path(os.environ.get("TESTBED_HEDERA_DIR", self.state_path.parent))
        status.mkdir(parents=True, exist_ok=True)
        self.decisions = (status / "hedera_decisions.jsonl").open("a", buffering=1)
        self.periods = (status / "hedera_periods.jsonl").open("a", buffering=1)
        self.pending_barriers: dict[int, object] = {}
        self.stats_done: set[int] = set()
        hub.spawn(self._loop)

    def paths(self, src: str, dst: str) -> list:
        if (src, dst) not in self._paths:
            self._paths[(src, dst)] = shortest_paths(self.topo, src, dst)
        return self._paths[(src, dst)]

    # ---- new flows -------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        self.datapaths[dp.id] = dp
        pkt = packet.Packet(msg.data)
        ip, seg = pkt.get_protocol(ipv4.ipv4), pkt.get_protocol(tcp.tcp)
        if ip is None or seg is None:
            return super().packet_in(ev)  # ARP
        self._count(dp.id, "packet_in")
        key = (ip.src, ip.dst, 6, seg.src_port, seg.dst_port)
        rule = routing.flow_entry(self.plan, dp.id, key, self.idle_s)
        if rule is None:
            self._count(dp.id, "unroutable")
            return
        dp.send_msg(ofmsgs.flow_mod(dp, rule))  # the packet itself went on: a copy came

    # ---- the scheduling loop ----------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        self.datapaths[ev.msg.datapath.id] = ev.msg.datapath
        super().switch_features(ev)

    def _loop(self):
        while True:
            hub.sleep(self.period)
            try:
                self._period()
            except Exception:  # keep scheduling; the log has the trace
                self.logger.exception("hedera period failed")

    def _period(self):
        t0 = time.time()
        self.stats, self.stats_done = {}, set()
        for dpid in sorted(self.edges):
            dp = self.datapaths.get(dpid)
            if dp is None:
                continue
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(parser.OFPFlowStatsRequest(
                dp, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                cookie=ofmsgs.COOKIE, cookie_mask=0xFFFFFFFFFFFFFFFF,
                match=parser.OFPMatch(eth_type=routing.ETH_TYPE_IP,
                                      ip_proto=routing.IP_PROTO_TCP)))
        deadline = time.time() + min(2.0, self.period / 2)
        while len(self.stats_done) < len(self.edges) and time.time() < deadline:
            hub.sleep(0.01)
        counters = {}
        for dpid, entries in self.stats.items():
            for entry in entries:
                if entry.priority != routing.PRIORITY_FLOW:
                    continue
                m = entry.match
                key = (m["ipv4_src"], m["ipv4_dst"], 6, m["tcp_src"], m["tcp_dst"])
                src, dst = self.host_of_ip.get(key[0]), self.host_of_ip.get(key[1])
                if src and dst:
                    counters[key] = (src, dst, entry.byte_count)
        now = time.time()
        self.scheduler.observe(now, counters)
        moves = self.scheduler.schedule()
        for move in moves:
            self._install(move)
        elephants = self.scheduler.elephants()
        self.periods.write(json.dumps({
            "t": now, "flows": len(counters), "elephants": len(elephants), "moved": len(moves),
            "stats_switches": len(self.stats_done), "took_s": round(time.time() - t0, 4),
            "demands": {"/".join(map(str, k)): round(self.scheduler.flows[k].demand, 4)
                        for k in elephants}}) + "\n")

    def _install(self, move: flowsched.Move):
        rules = routing.path_rules(self.topo, move.path, move.flow, self.idle_s)
        for rule in rules:  # last switch first, each confirmed before the next upstream
            dp = self.datapaths.get(rule.dpid)
            if dp is None:
                return
            # the ingress switch's own entry of the flow is modified in place, which keeps
            # its byte counter (the scheduler keeps measuring the flow there)
            dp.send_msg(ofmsgs.flow_mod(dp, rule, modify=rule.priority == routing.PRIORITY_FLOW))
            self._barrier(dp)
        self.decisions.write(json.dumps({
            "t": time.time(), "flow": "/".join(map(str, move.flow)), "src": move.src,
            "dst": move.dst, "rate_mbps": round(move.rate_bps / 1e6, 3),
            "demand": round(move.demand, 4), "path": list(move.path)}) + "\n")

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

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats(self, ev):
        msg = ev.msg
        self.stats.setdefault(msg.datapath.id, []).extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            self.stats_done.add(msg.datapath.id)
