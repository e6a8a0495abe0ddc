"""Per-flow control as a Ryu app: the routing controller plus Hedera's scheduler (routing
``hedera``) and/or a priority policy that re-marks flows' DSCP at their edge.

Thin shell around controllers/flowsched.py (the decisions) and controllers/routing.py (the
entries):

- a copy of a new TCP flow's first packet at its ingress edge switch comes here (the plan's
  detect entries forward the packet and copy it to the controller); the flow gets its own
  entry on that switch with the hash route's action (and the DSCP the priority policy
  gives it), so it keeps its path and its bytes are counted;
- every ``period`` seconds the edge switches' flow entries are read (flow stats) and rates
  computed. Hedera: the scheduler estimates the elephants' natural demands and places new
  elephants with Global First Fit; a placed flow gets an exact entry on every switch of its
  path, installed from the last switch back, each switch confirmed by a barrier before the
  one upstream of it, so packets are never sent towards a switch that does not know the
  flow. Moving a flow can reorder a few of its packets, which TCP absorbs; nothing is
  dropped by the move itself. Priority: the policy sees each flow's bytes and rate, and a
  flow whose DSCP changes (a long flow demoted) has its ingress entry modified;
- decisions are logged with their time in hedera_decisions.jsonl and priority.jsonl, each
  period's summary in hedera_periods.jsonl (TESTBED_HEDERA_DIR).

Configuration (environment, set by the runner): TESTBED_HEDERA_PERIOD_S (default 5, the
paper's), TESTBED_HEDERA_ELEPHANT (fraction of the host NIC, default 0.1),
TESTBED_HEDERA_IDLE_S (idle timeout of the per-flow entries, default 10),
TESTBED_HEDERA_BASE (the routing new flows start on: ecmp, or single),
TESTBED_HEDERA_PLACEMENT (gff, or annealing with TESTBED_HEDERA_SA_ITERATIONS per period and
TESTBED_HEDERA_SA_SEED), TESTBED_HEDERA_DIR (where the logs go), TESTBED_FLOW_PRIORITY (the
policy, JSON; flowsched.make_policy).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from controllers import flowsched, ofmsgs, routing
from controllers.apps.routing_app import FabricRouting
from controllers.compat import (CONFIG_DISPATCHER, MAIN_DISPATCHER, hub, ipv4, ofp_event,
                                packet, set_ev_cls, tcp)
from topologies.graph import shortest_paths


class FlowRouting(FabricRouting):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hedera = self.mode == "hedera"
        self.policy = flowsched.make_policy(
            json.loads(os.environ.get("TESTBED_FLOW_PRIORITY", "{}") or "{}"))
        self.plan = routing.plan(self.topo, self.mode,
                                 base=os.environ.get("TESTBED_HEDERA_BASE", "ecmp"),
                                 track=True)
        self.flow_dscp: dict[tuple, int | None] = {}
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
        self.scheduler = flowsched.HederaScheduler(
            self.paths, nic, fraction, capacity, expire_s=self.idle_s + self.period,
            placement=os.environ.get("TESTBED_HEDERA_PLACEMENT", "gff"),
            iterations=int(os.environ.get("TESTBED_HEDERA_SA_ITERATIONS",
                                          str(flowsched.SA_ITERATIONS))),
            seed=int(os.environ.get("TESTBED_HEDERA_SA_SEED", "0")))
        self.edges = {sw.dpid for sw in self.topo.switches
                      if any(self.topo.is_host(p) for _, p, _ in self.topo.ports_of(sw.name))}
        self.datapaths: dict[int, object] = {}
        self.stats: dict[int, list] = {}
        self.host_of_ip = {h.ip: h.name for h in self.topo.hosts}
        status = Path(os.environ.get("TESTBED_HEDERA_DIR", self.state_path.parent))
        status.mkdir(parents=True, exist_ok=True)
        self.decisions = (status / "hedera_decisions.jsonl").open("a", buffering=1)
        self.priority_log = (status / "priority.jsonl").open("a", buffering=1)
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
        if self.policy is not None and key not in self.flow_dscp:
            src, dst = self.host_of_ip.get(key[0]), self.host_of_ip.get(key[1])
            self._set_dscp(key, self.policy.dscp(flowsched.FlowInfo(key, src, dst)), "new")
        rule = dataclasses.replace(rule, set_dscp=self.flow_dscp.get(key))
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
        counters, ingress = {}, {}
        for dpid, entries in self.stats.items():
            for entry in entries:
                if entry.priority != routing.PRIORITY_FLOW:
                    continue
                m = entry.match
                key = (m["ipv4_src"], m["ipv4_dst"], 6, m["tcp_src"], m["tcp_dst"])
                src, dst = self.host_of_ip.get(key[0]), self.host_of_ip.get(key[1])
                if src and dst:
                    counters[key] = (src, dst, entry.byte_count)
                    ingress[key] = dpid
        now = time.time()
        self.scheduler.observe(now, counters)
        moves = self.scheduler.schedule() if self.hedera else []
        for move in moves:
            self._install(move)
        if self.policy is not None:
            self._reprioritise(counters, ingress)
        elephants = self.scheduler.elephants()
        self.periods.write(json.dumps({
            "t": now, "flows": len(counters), "elephants": len(elephants), "moved": len(moves),
            "stats_switches": len(self.stats_done), "took_s": round(time.time() - t0, 4),
            "placement": self.scheduler.placement,
            **({"exceeded_before": round(self.scheduler.last_energy[0], 4),
                "exceeded_after": round(self.scheduler.last_energy[1], 4)}
               if self.scheduler.last_energy else {}),
            "demands": {"/".join(map(str, k)): round(self.scheduler.flows[k].demand, 4)
                        for k in elephants}}) + "\n")

    def _set_dscp(self, key, dscp, why: str) -> None:
        self.flow_dscp[key] = dscp
        self.priority_log.write(json.dumps({"t": time.time(), "flow": "/".join(map(str, key)),
                                            "dscp": dscp, "why": why}) + "\n")

    def _reprioritise(self, counters, ingress) -> None:
        """The policy sees every flow's bytes and rate; a changed DSCP re-marks the flow by
        modifying its ingress entry (counters kept)."""
        for key, (src, dst, nbytes) in counters.items():
            tracked = self.scheduler.flows.get(key)
            info = flowsched.FlowInfo(key, src, dst, nbytes,
                                      tracked.rate_bps if tracked else 0.0)
            dscp = self.policy.dscp(info)
            if dscp == self.flow_dscp.get(key):
                continue
            self._set_dscp(key, dscp, f"{nbytes} bytes")
            dp = self.datapaths.get(ingress[key])
            rule = routing.flow_entry(self.plan, ingress[key], key, self.idle_s)
            placed = tracked.path if tracked else None
            if placed is not None:  # a placed flow keeps its scheduled output port
                rule = routing.path_rules(self.topo, placed, key, self.idle_s)[-1]
            if dp is not None and rule is not None:
                dp.send_msg(ofmsgs.flow_mod(dp, dataclasses.replace(rule, set_dscp=dscp),
                                            modify=True))

    def _install(self, move: flowsched.Move):
        rules = routing.path_rules(self.topo, move.path, move.flow, self.idle_s)
        # the ingress entry keeps the DSCP the priority policy gave the flow
        rules[-1] = dataclasses.replace(rules[-1], set_dscp=self.flow_dscp.get(move.flow))
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
