"""c-Through's circuit scheduler as a Ryu app: the routing controller of a hybrid fabric
(routing ``cthrough``) plus the loop that moves its optical circuits.

A thin shell around controllers/circuits.py: every period it reads the ToRs' route
counters (one entry per destination host), hands the bytes between racks to `choose`, and
carries out `transition`'s steps: each is the plan `fabric_routing.circuit_plan` gives for
the circuits lit from then on, sent as the difference from what is installed
(controllers/recovery.py orders it: cross-connects before the ToRs steer onto them), with a
barrier per switch. Between the dark and the light step it sleeps the dark time. Every
period and step goes to the phase's `circuits_log` with the time it was carried out (the
experiment measures the dark gap on the optical switch's ports against it).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from controllers import circuits, ofmsgs, recovery, routing
from controllers.apps.routing_app import FabricRouting
from controllers.compat import MAIN_DISPATCHER, hub, ofp_event, set_ev_cls
from controllers.fabric_routing import circuit_plan


class CircuitRouting(FabricRouting):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec = self.config.circuits
        self.installed: tuple[circuits.Circuit, ...] = ()
        self.before: circuits.Counters = {}
        self.stats: dict[int, list] = {}
        self.stats_done: set[int] = set()
        self.tors = [s.dpid for s in self.topo.switches if s.role == "tor"]
        log = Path(self.config.circuits_log or self.state_path.with_name("circuits.jsonl"))
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("a", buffering=1)
        hub.spawn(self._loop)

    def _loop(self):
        while True:
            hub.sleep(self.spec.period_s)
            try:
                self._period()
            except Exception:  # keep scheduling; the log has the trace
                self.logger.exception("circuit period failed")

    def _period(self):
        t0 = time.time()
        after = self._read_counters()
        demand = circuits.rack_demand(self.topo, self.before, after)
        self.before = after
        wanted = circuits.choose(demand, self.topo.param("racks"), self.topo.param("circuits"),
                                 self.installed, self.spec.hold)
        steps = circuits.transition(time.time(), self.installed, wanted,
                                    self.spec.dark_ms / 1000)
        self._write({"time": t0, "period": True, "read_s": round(time.time() - t0, 4),
                     "demand": [[a, b, n] for (a, b), n in sorted(demand.items())],
                     "installed": self.installed, "wanted": wanted})
        for step in steps:
            hub.sleep(max(0.0, step.at - time.time()))
            started = time.time()
            sent = self._apply(step.circuits)
            self._write({"time": started, "step": step.kind, "planned": step.at,
                         "circuits": step.circuits, "changes": sent,
                         "sent_s": round(time.time() - started, 4)})
        self.installed = wanted

    def _read_counters(self) -> circuits.Counters:
        """Bytes of each of the ToRs' IPv4 route entries (packet fabric and circuit)."""
        self.stats, self.stats_done = {}, set()
        tors = [dpid for dpid in self.tors if dpid in self.datapaths]
        for dpid in tors:
            dp = self.datapaths[dpid]
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(parser.OFPFlowStatsRequest(
                dp, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                cookie=ofmsgs.COOKIE, cookie_mask=0xFFFFFFFFFFFFFFFF,
                match=parser.OFPMatch(eth_type=routing.ETH_TYPE_IP)))
        deadline = time.time() + min(1.0, self.spec.period_s / 2)
        while len(self.stats_done) < len(tors) and time.time() < deadline:
            hub.sleep(0.005)
        out: circuits.Counters = {}
        for dpid, entries in self.stats.items():
            for e in entries:
                ip = dict(e.match.items()).get("ipv4_dst")
                if ip is not None:
                    out[(dpid, ip, e.priority)] = e.byte_count
        return out

    def _apply(self, lit: tuple[circuits.Circuit, ...]) -> int:
        """Install the plan with circuits `lit`: the difference, then a barrier per switch."""
        new = circuit_plan(self.topo, lit)
        todo = recovery.changes(self.plan, new, self.topo)
        for change in todo:
            dp = self.datapaths.get(change.dpid)
            if dp is not None:
                dp.send_msg(ofmsgs.change(dp, change))
        for dpid in sorted({c.dpid for c in todo}):
            dp = self.datapaths.get(dpid)
            if dp is not None:
                dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        self.set_plan(new)
        return len(todo)

    def replan(self, mode: str) -> tuple[list, int]:
        """A port went down or up: the hybrid fabric is not replanned around failures (its
        circuits stay as they are); recorded, nothing sent."""
        self.logger.warning("cthrough: ports down %s; circuits not replanned", sorted(self.down))
        return [], 0

    def _write(self, record: dict) -> None:
        self.log.write(json.dumps(record) + "\n")

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats(self, ev):
        msg = ev.msg
        if self.is_resync_reply(msg):
            return
        self.stats.setdefault(msg.datapath.id, []).extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            self.stats_done.add(msg.datapath.id)
