"""The routing controller: a thin Ryu shell around `controllers.routing`.

On each switch connection it installs that switch's part of the routing plan (groups, then
flows, then a barrier); it answers ARP requests itself from the topology (proxy ARP, so
nothing is ever flooded in a looped fabric). When a switch reports a port down or up, it
replans on the fabric without the ports that are down and sends the difference
(controllers/recovery.py decides both; every reroute is in the state file). Restarted
(`resync` in its configuration), it reads each switch's tables instead of clearing them and
sends only what differs from its plan, so the traffic they carry keeps flowing. It writes its
state (connected and ready switches, packet-in/out counters, reroutes) to the phase's
`state_json` (`ControllerState`, config/replies.py) so the runner knows when every path is
installed and can account for packets the controller injected; it carries out the commands
the runner appends to the phase's `commands_jsonl` and answers there. Its configuration is
the phase's file (config/controller.py, `phase_config()`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from controllers import failover, recovery, routing
from controllers.apps import guard, ofmsgs
from controllers.apps.compat import (
    CONFIG_DISPATCHER,
    MAIN_DISPATCHER,
    OFP_VERSION,
    BackgroundWriter,
    RyuApp,
    arp,
    hub,
    ofp_event,
    packet,
    set_ev_cls,
)
from testbed.config.controller import phase_config
from testbed.config.replies import (
    CommandReply,
    ControllerCommand,
    ControllerState,
    Reroute,
    Resync,
    read_command,
    refusal,
    write_state,
)
from topologies.model import Topology, ifname

# Entries a restarted controller leaves as it finds them: per-flow entries a scheduler placed
KEEP_ON_RESYNC = frozenset({routing.PRIORITY_FLOW, routing.PRIORITY_PLACED})


class FabricRouting(RyuApp):
    OFP_VERSIONS = [OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = phase_config()
        self.topo = self.config.topology()
        self.mode = self.config.routing
        self.plan_args = self.config.plan_args  # what else routing.plan is given
        self.plan = failover.plan(self.topo, self.mode, **self.plan_args)
        self.datapaths: dict[int, Any] = {}  # Ryu datapaths
        self.down: set[tuple[str, int]] = set()
        self.reroutes: list[Reroute] = []
        self.syncing: dict[int, dict] = {}  # a restart: switches whose tables are being read
        self.resyncs: list[Resync] = []
        self.state_path = Path(self.config.state_json)
        self.connected: dict[int, float] = {}
        self.ready: dict[int, float] = {}
        self.counters: dict[int, dict[str, int]] = {}
        self.started = time.time()
        self.commands: list[CommandReply] = []  # the runner's commands carried out (or refused)
        self.stats: dict[int, list] = {}  # read_flow_stats: the replies, by dpid
        self.stats_done: set[int] = set()
        self.state_writer = BackgroundWriter()
        self._state_pending = False
        self._write_state()
        hub.spawn(self._state_writer)
        if self.config.commands_jsonl:
            hub.spawn(self._command_reader, Path(self.config.commands_jsonl))

    # ---- switch setup ---------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        if self.topo.switch_by_dpid(dp.id) is None:
            self.logger.warning("dpid %s is not in the topology; ignoring it", dp.id)
            return
        self.connected[dp.id] = time.time()
        self.ready.pop(dp.id, None)
        if self.config.resync:  # a restart: read the switch's tables once it is up (below)
            self.syncing[dp.id] = {"t0": time.time(), "rules": [], "groups": [],
                                   "xids": set()}
            return
        self.datapaths[dp.id] = dp
        groups, rules = self.plan.for_switch(dp.id)
        for msg in ofmsgs.clear_all(dp):
            dp.send_msg(msg)
        for group in groups:
            dp.send_msg(ofmsgs.group_mod(dp, group))
        for rule in rules:
            dp.send_msg(ofmsgs.flow_mod(dp, rule))
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))

    # ---- a restarted controller: resynchronise with the tables the switches kept ------
    @set_ev_cls(ofp_event.EventOFPStateChange, MAIN_DISPATCHER)
    def switch_up(self, ev):
        """Ryu has the switch's ports now: ask for its (testbed) flow entries and groups."""
        dp = ev.datapath
        sync = self.syncing.get(dp.id)
        if sync is None:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for req in (parser.OFPFlowStatsRequest(
                        dp, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                        out_group=ofp.OFPG_ANY, cookie=ofmsgs.COOKIE,
                        cookie_mask=0xFFFFFFFFFFFFFFFF),
                    parser.OFPGroupDescStatsRequest(dp)):
            dp.set_xid(req)
            sync["xids"].add(req.xid)
            dp.send_msg(req)

    def every(self, period_s: float, step, what: str):
        """Run `step()` every `period_s` for good, in a greenlet of its own (a scheduler's
        period); an exception is logged as `what` and the next period runs all the same."""
        def loop():
            while True:
                hub.sleep(period_s)
                try:
                    step()
                except Exception:  # keep scheduling; the log has the trace
                    self.logger.exception("%s failed", what)
        return hub.spawn(loop)

    def read_flow_stats(self, dpids: list[int], timeout: float, **match: Any) -> dict[int, list]:
        """The testbed's entries matching `match` on each connected switch of `dpids`
        (flow-stats replies), gathered until every switch asked has answered or `timeout`
        passes; the switches that answered are in `stats_done`."""
        self.stats, self.stats_done = {}, set()
        asked = [dpid for dpid in dpids if dpid in self.datapaths]
        for dpid in asked:
            dp = self.datapaths[dpid]
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(parser.OFPFlowStatsRequest(
                dp, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                cookie=ofmsgs.COOKIE, cookie_mask=0xFFFFFFFFFFFFFFFF,
                match=parser.OFPMatch(**match)))
        deadline = time.time() + timeout
        while len(self.stats_done) < len(asked) and time.time() < deadline:
            hub.sleep(0.005)
        return self.stats

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def flow_stats(self, ev):
        msg = ev.msg
        if self.is_resync_reply(msg):
            return  # a restart's read of a switch's tables (resync_flows)
        self.stats.setdefault(msg.datapath.id, []).extend(msg.body)
        if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
            self.stats_done.add(msg.datapath.id)

    def is_resync_reply(self, msg) -> bool:
        """A reply to one of the resync's requests (the flow app's own polls are not)."""
        sync = self.syncing.get(msg.datapath.id)
        return sync is not None and msg.xid in sync["xids"]

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def resync_flows(self, ev):
        if self.is_resync_reply(ev.msg):
            self._resync_part(ev.msg, "rules", ofmsgs.read_rule)

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def resync_groups(self, ev):
        if self.is_resync_reply(ev.msg):
            self._resync_part(ev.msg, "groups", ofmsgs.read_group)

    def _resync_part(self, msg, key: str, read) -> None:
        dp = msg.datapath
        sync = self.syncing[dp.id]
        sync[key] += [read(dp, entry) for entry in msg.body]
        if not msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            sync["xids"].discard(msg.xid)
        if not sync["xids"]:
            self._resync(dp, self.syncing.pop(dp.id))

    def _resync(self, dp, sync: dict) -> None:
        """The ports that are down on this switch join the replan (as if reported now);
        then the switch gets only what differs from its part of the plan
        (`recovery.resync`). Per-flow entries Hedera or a priority policy placed are kept:
        the flows they carry keep going, and their scheduler starts afresh."""
        name = self.topo.switch_by_dpid(dp.id).name
        for port_no, desc in sorted(dp.ports.items()):
            if port_no <= dp.ofproto.OFPP_MAX and ofmsgs.port_is_down(dp, desc):
                self.port_changed(name, port_no, True)
        todo = recovery.resync(self.plan, dp.id, sync["groups"], sync["rules"],
                               keep_priorities=KEEP_ON_RESYNC)
        for change in todo:
            dp.send_msg(ofmsgs.change(dp, change))
        dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
        self.datapaths[dp.id] = dp
        ops: dict[str, int] = {}
        for change in todo:
            what = f"{change.op}_{'group' if isinstance(change.item, routing.Group) else 'rule'}"
            ops[what] = ops.get(what, 0) + 1
        self.resyncs.append(Resync(time=time.time(), switch=name, rules_read=len(sync["rules"]),
                                   groups_read=len(sync["groups"]),
                                   kept=sum(1 for r in sync["rules"]
                                            if r.priority in KEEP_ON_RESYNC),
                                   changes=len(todo), ops=ops,
                                   took_s=round(time.time() - sync["t0"], 4)))
        self.logger.info("resync %s: %d entries and %d groups read, %d changes", name,
                         len(sync["rules"]), len(sync["groups"]), len(todo))

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
        is_down = msg.reason == ofp.OFPPR_DELETE or ofmsgs.port_is_down(dp, desc)
        self.port_changed(sw.name, desc.port_no, is_down)

    def port_changed(self, node: str, port: int, is_down: bool) -> None:
        """Replan when the set of ports that are down changes; send the difference."""
        t0 = time.time()
        was = (node, port) in self.down
        if was == is_down:
            return
        (self.down.add if is_down else self.down.discard)((node, port))
        todo, unsent = self.replan(self.mode)
        self.reroutes.append(Reroute(time=t0, port=ifname(node, port), down=is_down,
                                     ports_down=len(self.down), changes=len(todo),
                                     switches=len({c.dpid for c in todo}), unsent=unsent,
                                     decided_s=round(time.time() - t0, 4)))
        self.logger.info("port %s %s: %d changes on %d switches", ifname(node, port),
                         "down" if is_down else "up", len(todo), len({c.dpid for c in todo}))
        self._write_state()

    def replan(self, mode: str) -> tuple[list, int]:
        """RoutePlan `mode` on the fabric as it is (without the ports that are down), send the
        difference from the installed plan (`recovery.changes`: in an order that never
        loops a packet) with a barrier per switch, and install it; the changes and how many
        could not be sent (a switch not connected)."""
        new = recovery.replan(self.topo, mode, self.down, self.plan, **self.plan_args)
        return self.install(new, recovery.degraded(self.topo, self.down))

    def install(self, new: routing.RoutePlan, live: Topology) -> tuple[list, int]:
        """Send the difference from the installed plan to `new` (`recovery.changes` on
        `live`, the fabric as it is now: in an order that never loops a packet) with a
        barrier per switch, and install it; the changes and how many could not be sent."""
        todo = recovery.changes(self.plan, new, live)
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
        return todo, unsent

    # ---- the runner's commands -------------------------------------------------------
    def _command_reader(self, path: Path):
        offset, partial = 0, ""
        while True:
            hub.sleep(0.1)
            try:
                with open(path) as fh:
                    fh.seek(offset)
                    text = fh.read()
                    offset = fh.tell()
            except OSError:
                continue  # nothing asked yet
            lines = (partial + text).split("\n")
            partial = lines.pop()
            for line in lines:
                if line.strip():
                    try:
                        cmd = read_command(line)
                    except ValueError as exc:  # not JSON, or not the runner's: answered
                        self.logger.error("not a command: %s (%s)", line.strip(), exc)
                        self.commands.append(refusal(line, str(exc), time.time()))
                        self._write_state()
                        continue
                    self.command(cmd)

    def command(self, cmd: ControllerCommand) -> None:
        """Carry out one of the runner's commands (recovery.command_error says which it may
        not) and answer in the state file."""
        t0 = time.time()
        relay = self.topo.relays
        error = recovery.command_error(cmd, self.mode, relay)
        if error is not None or cmd.mode is None:
            done = CommandReply(id=cmd.id, time=t0, op=cmd.op, mode=cmd.mode, error=error)
        else:
            before = self.mode
            todo, unsent = self.replan(cmd.mode)
            self.mode = cmd.mode
            done = CommandReply(id=cmd.id, time=t0, op=cmd.op, mode=cmd.mode,
                                changes=len(todo), switches=len({c.dpid for c in todo}),
                                unsent=unsent, decided_s=round(time.time() - t0, 4))
            self.reroutes.append(Reroute(time=t0, routing=f"{before} -> {self.mode}",
                                         changes=len(todo), unsent=unsent))
            self.logger.info("routing %s -> %s: %d changes", before, self.mode, len(todo))
        self.commands.append(done)
        self._write_state()

    def set_plan(self, new: routing.RoutePlan) -> None:
        """The plan now installed, replanned after the ports in `down` changed (a subclass
        that derives entries from it follows)."""
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

    def _state(self) -> ControllerState:
        """A snapshot of the app's state (copies: it is written from another thread)."""
        return ControllerState(
            pid=os.getpid(), mode=self.mode, started=self.started, time=time.time(),
            switches=len(self.topo.switches),
            connected={str(k): v for k, v in sorted(self.connected.items())},
            ready={str(k): v for k, v in sorted(self.ready.items())},
            counters={str(k): dict(v) for k, v in sorted(self.counters.items())},
            ports_down=sorted(ifname(n, p) for n, p in self.down),
            reroutes=list(self.reroutes), resync=self.config.resync,
            resyncs=list(self.resyncs), plugin_guard=guard.report(),
            commands=list(self.commands))

    def _write_state(self) -> None:
        """The state file, written from a real thread: a write the disk stalls (a busy
        run's writeback) must not stall the green threads, the PFC executor's among them.
        While a write is pending, a newer state replaces the one it will write."""
        self._latest_state = self._state()
        if not self._state_pending:
            self._state_pending = True
            self.state_writer.call(self._flush_state)

    def _flush_state(self) -> None:
        """In the writer's thread: the newest state the app has made."""
        self._state_pending = False
        write_state(self._latest_state, self.state_path)
