"""What a plugin may do to the fabric's switches: it sees every event and may add
behaviour of its own, but it cannot by accident flood a looped fabric, shadow the built-in
router or take the fabric's ports and switch settings from it.

A user's plugin is an ordinary Ryu app, and users start from Ryu's own examples: loaded on a
Fat-Tree k=4, `ryu.app.simple_monitor_13` (an L2 learning switch underneath) flooded every
ARP request around the fabric's loops (30% of pings lost), and `ryu.app.simple_switch_stp_13`
blocked the ports its spanning tree left out with port-mods (94.6% of pings lost, the
permutation beside it carried 0 Mb/s). So every OpenFlow message a plugin sends passes
`Guard.check` first, and each kind of message is confined, passed or refused (`refusal`):

- **floods** (`FLOOD`, `ALL`, `NORMAL` outputs, in a packet-out or an entry) are confined to
  a loop-free tree of the fabric: the tree's switch-to-switch ports and every host port, so
  a flood reaches each host once and never comes back (`flood_ports`); a packet-out to one
  port (a BPDU, an LLDP probe) or to `TABLE` (through the router's entries) is left as it is;
- **entries**, in any table, sit below the router's: a plugin's priority p is installed as
  p + 1, capped at 99 (the router forwards at 100 and above and drops what nothing matches
  at 0, all in table 0), with the plugin's cookie band in the top 16 bits of the cookie and
  of the cookie mask, so a plugin's deletes and modifies, even with mask 0 or in every
  table, reach its own entries only (`plugin_priority`, `plugin_cookie`); an entry or
  packet-out with a vendor action is refused (a Nicira `learn` adds entries of its own);
- **port-mods** that stop a port (down, no receive, no forwarding, no packet-ins) or set it
  up (a link fault's port is down on purpose) are refused (`port_mod_refusal`);
- **group, meter and table changes, switch and async configuration, role changes** are
  refused: the connection, its settings and the switch's tables are shared with the router;
- **reading** (statistics and descriptions, barriers, echoes, features, configuration, role
  and async queries) passes;
- **any other message** is refused as of an unknown kind: the guard passes only what it knows.

A refused message is dropped: `Datapath.send_msg` returns False, as Ryu's does for a switch
that has gone, and the plugin carries on. This module imports no Ryu until `install`, so its
decisions are tested without it.

Each kind of change is logged once per plugin, as a warning naming the plugin, and counted
(`Guard.report`, in the router's state file and the run's summary). Who sent a message is
read from the call stack at `Datapath.send_msg`: the innermost frame of code that is neither
Ryu's framework, eventlet nor the standard library decides; the testbed's own modules
(`controllers.`, `testbed.`) are the router and its apps, anything else (Ryu's example apps in
`ryu.app`, `ryu.topology`, `ryu.services`, Ryu's library apps such as `ryu.lib.stplib`, which
send from threads of their own, a user's module or file) is a plugin.
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from controllers.routing import PRIORITY_ROUTE
from testbed.config.replies import GuardReport
from topologies.model import Topology

COOKIE_BAND = 0xFFFF << 48         # the top 16 bits: zero for the router's entries
PLUGIN_COOKIE = 0x5E5E << 48      # the top 16 bits of every plugin entry's cookie
COOKIE_LOW = (1 << 48) - 1         # what is left of a plugin's own cookie
PLUGIN_MAX_PRIORITY = PRIORITY_ROUTE - 1

# OpenFlow 1.3's port config bits (ofproto_v1_3.OFPPC_*): the only ones an OpenFlow 1.1+
# switch reads of a port-mod (OVS masks the rest off)
OFPPC_PORT_DOWN = 1 << 0
OFPPC_NO_RECV = 1 << 2
OFPPC_NO_FWD = 1 << 5
OFPPC_NO_PACKET_IN = 1 << 6
PORT_STOPS = OFPPC_PORT_DOWN | OFPPC_NO_RECV | OFPPC_NO_FWD | OFPPC_NO_PACKET_IN
OFPCR_ROLE_NOCHANGE = 0  # a role request that only asks
OFPAT_EXPERIMENTER = OFPIT_EXPERIMENTER = 0xFFFF  # a vendor's (Nicira's) action, instruction

# What the guard does with each message class of the switches' parser (OpenFlow 1.3's),
# by name; a class that is in none of these is refused as of an unknown kind.
PASSED = frozenset({  # reading, and keeping the connection alive
    "OFPEchoRequest", "OFPEchoReply", "OFPFeaturesRequest", "OFPGetConfigRequest",
    "OFPBarrierRequest", "OFPQueueGetConfigRequest", "OFPGetAsyncRequest",
    "OFPDescStatsRequest", "OFPFlowStatsRequest", "OFPAggregateStatsRequest",
    "OFPTableStatsRequest", "OFPPortStatsRequest", "OFPQueueStatsRequest",
    "OFPGroupStatsRequest", "OFPGroupDescStatsRequest", "OFPGroupFeaturesStatsRequest",
    "OFPMeterStatsRequest", "OFPMeterConfigStatsRequest", "OFPMeterFeaturesStatsRequest",
    "OFPPortDescStatsRequest"})
CONFINED = frozenset({"OFPFlowMod", "OFPPacketOut"})  # rewritten by `Guard.check`
REFUSED = {"OFPGroupMod": "group_refused", "OFPTableMod": "table_mod_refused",
           "OFPMeterMod": "meter_mod_refused", "OFPSetConfig": "set_config_refused",
           "OFPSetAsync": "set_async_refused"}
# Decided by what they carry (`refusal`): OFPPortMod (`port_mod_refusal`), OFPRoleRequest
# (a query passes), OFPTableFeaturesStatsRequest (with a body, it rebuilds the tables).

# What each refusal says in the log and the run's warnings ("<count> <what>"), beside the
# changes of GUARD_CHANGES (group_refused among them); UNKNOWN + a class name: a message of
# a kind the guard does not know
# what the guard changes of a plugin's messages, as the run's warnings and its log name it
GUARD_CHANGES = {"flood_confined": "floods confined to the fabric's loop-free tree",
                 "priority_capped": "entries capped below the router's priorities",
                 "group_refused": "group changes refused (the router owns the groups)"}
REFUSALS = {
    "port_stop_refused": "port-mods refused (would stop a port forwarding, receiving or "
                         "sending the router its packet-ins)",
    "port_up_refused": "port-mods refused (would set a port up, undoing a link fault)",
    "table_mod_refused": "table-mods refused (the router owns the tables' settings)",
    "table_features_refused": "table-features changes refused (would rebuild the tables "
                              "under the router)",
    "meter_mod_refused": "meter-mods refused (meters have no plugin band)",
    "set_config_refused": "switch-config changes refused (would change how the switch "
                          "handles IP fragments or cuts the router's packet-ins)",
    "set_async_refused": "async-config changes refused (would stop packet-ins or port "
                         "events the router needs on the connection it shares)",
    "role_refused": "role changes refused (a slave connection would have the router's "
                    "messages refused too)",
    "experimenter_refused": "entries or packet-outs with experimenter actions refused (a "
                            "Nicira learn action adds entries outside the plugin band)"}
UNKNOWN = "unknown:"

_BUILTIN = ("controllers", "testbed")
_PLUGIN_RYU = ("ryu.app.", "ryu.topology.", "ryu.services.")
# Ryu's library apps: a plugin loads them as contexts (`_CONTEXTS`), and they send from
# threads and handlers of their own, with no plugin frame on the stack
_PLUGIN_RYU_LIBS = frozenset({"ryu.lib.stplib", "ryu.lib.igmplib", "ryu.lib.lacplib",
                              "ryu.lib.bfdlib", "ryu.lib.snortlib"})
_FRAMEWORK = frozenset({"ryu", "eventlet", "greenlet", "__main__", "webob", "routes",
                        "oslo_config", "msgpack", "netaddr", "tinyrpc"})


def plugin_priority(priority: int) -> tuple[int, bool]:
    """The priority a plugin's entry is installed at, and whether it was capped."""
    want = priority + 1
    return min(want, PLUGIN_MAX_PRIORITY), want > PLUGIN_MAX_PRIORITY


def plugin_cookie(cookie: int, mask: int) -> tuple[int, int]:
    """A plugin's cookie and cookie mask, moved into the plugin band: an entry it adds
    carries the band, and a delete or modify it sends matches the band only."""
    return PLUGIN_COOKIE | (cookie & COOKIE_LOW), COOKIE_BAND | (mask & COOKIE_LOW)


def port_mod_refusal(config: int, mask: int) -> str | None:
    """Why a plugin may not change a port's config this way (a kind of REFUSALS), or None.

    Setting any of PORT_STOPS stops the fabric: a port down or not receiving or forwarding
    cuts the router's paths through it (stplib blocks every link its tree leaves out), and
    without packet-ins the router no longer hears ARP or new flows on it. Clearing
    PORT_DOWN sets the port up, and the only ports that are down were set down by the
    spec's link faults (OVS turns the interface up). Clearing the other three passes (no
    one else sets them, so it changes nothing), as does a change of `advertise` only."""
    if config & mask & PORT_STOPS:
        return "port_stop_refused"
    if mask & OFPPC_PORT_DOWN:
        return "port_up_refused"
    return None


def message_class(msg: Any, parser: str) -> str:
    """The name of `msg`'s class, with its module if it is not of the switches' parser."""
    cls = type(msg)
    return cls.__name__ if cls.__module__ == parser else f"{cls.__module__}.{cls.__name__}"


def refusal(msg: Any, parser: str) -> str | None:
    """Why a plugin may not send `msg` (a kind of REFUSALS or GUARD_CHANGES, or UNKNOWN and
    its class), or None: it passes, confined by `Guard.check` if it is a flow-mod or a
    packet-out. `parser`: the module of the switches' message classes (OpenFlow 1.3's)."""
    name = message_class(msg, parser)
    if name in CONFINED:
        return "experimenter_refused" if _experimenter(msg) else None
    if name in PASSED:
        return None
    if name in REFUSED:
        return REFUSED[name]
    if name == "OFPPortMod":
        return port_mod_refusal(msg.config, msg.mask)
    if name == "OFPRoleRequest":
        return None if msg.role == OFPCR_ROLE_NOCHANGE else "role_refused"
    if name == "OFPTableFeaturesStatsRequest":
        return "table_features_refused" if msg.body else None
    return UNKNOWN + name


def _experimenter(msg: Any) -> bool:
    """Whether a flow-mod or packet-out has a vendor action or instruction: the guard cannot
    confine what it does not know (`NXActionLearn` installs entries of its own)."""
    instructions = list(getattr(msg, "instructions", None) or [])
    actions = list(getattr(msg, "actions", None) or [])
    for inst in instructions:
        actions += getattr(inst, "actions", None) or []
    return (any(getattr(i, "type", None) == OFPIT_EXPERIMENTER for i in instructions)
            or any(getattr(a, "type", None) == OFPAT_EXPERIMENTER for a in actions))


def describe(kind: str) -> str | None:
    """What a counted kind says in the log and the run's warnings (None: only counted)."""
    if kind.startswith(UNKNOWN):
        name = kind[len(UNKNOWN):]
        return f"{name} messages refused (unknown message kind {name})"
    return GUARD_CHANGES.get(kind) or REFUSALS.get(kind)


def changes(counts: dict[str, int]) -> list[str]:
    """`counts`' changes and refusals as "<count> <what>", confinements first, then the
    refusals, then messages of unknown kinds by class."""
    order = [*GUARD_CHANGES, *REFUSALS,
             *sorted(k for k in counts if k.startswith(UNKNOWN))]
    return [f"{counts[k]} {describe(k)}" for k in order if counts.get(k)]


def flood_ports(topo: Topology) -> dict[int, tuple[int, ...]]:
    """Per switch (dpid), the ports a flood may leave by: its host ports and its links on a
    breadth-first spanning tree of the switches (from the best-connected switch, names
    breaking ties), so that no flood can come back to a switch it has left."""
    tree: dict[str, set[int]] = {}
    adj: dict[str, list[tuple[str, int, int]]] = {}  # switch -> (peer switch, port, its port)
    for sw in topo.switches:
        ports = topo.ports_of(sw.name)
        tree[sw.name] = {port for port, peer, _ in ports if topo.is_host(peer)}
        adj[sw.name] = sorted((peer, port, peer_port) for port, peer, peer_port in ports
                              if not topo.is_host(peer))
    seen: set[str] = set()
    for root in sorted(adj, key=lambda n: (-len(adj[n]), n)):
        if root in seen:
            continue  # a fabric whose switches are not all connected (BCube): one tree each
        seen.add(root)
        todo = deque([root])
        while todo:
            node = todo.popleft()
            for peer, port, peer_port in adj[node]:
                if peer in seen:
                    continue
                seen.add(peer)
                tree[node].add(port)
                tree[peer].add(peer_port)
                todo.append(peer)
    return {s.dpid: tuple(sorted(tree[s.name])) for s in topo.switches}


def _role(module: str) -> str | None:
    """'builtin', 'plugin' or None (framework code: look further out)."""
    top = module.partition(".")[0]
    if module == __name__:
        return None
    if top in _BUILTIN:
        return "builtin"
    if module.startswith(_PLUGIN_RYU) or module in _PLUGIN_RYU_LIBS:
        return "plugin"
    if top in _FRAMEWORK or top in sys.stdlib_module_names:
        return None
    return "plugin"


def sender(frame: FrameType | None) -> str | None:
    """The plugin whose code sent a message (walking out from `frame`), or None for the
    testbed's own apps and Ryu's framework."""
    while frame is not None:
        role = _role(frame.f_globals.get("__name__", ""))
        if role == "builtin":
            return None
        if role == "plugin":
            module = frame.f_globals.get("__name__", "")
            obj = frame.f_locals.get("self")
            if obj is not None and hasattr(obj, "OFP_VERSIONS"):  # a Ryu app
                return f"{type(obj).__name__} ({type(obj).__module__})"
            return module
        frame = frame.f_back
    return None


@dataclass
class Guard:
    """Checks and rewrites the messages plugins send; counts what it changed."""
    ports: dict[int, tuple[int, ...]]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    packet_outs: dict[int, int] = field(default_factory=dict)  # copies injected, per dpid
    warned: set[tuple[str, str]] = field(default_factory=set)
    warn: Callable[..., None] | None = None  # a logger's warning method

    def _note(self, who: str, kind: str) -> None:
        mine = self.counts.setdefault(who, {})
        mine[kind] = mine.get(kind, 0) + 1
        what = describe(kind)
        if (who, kind) not in self.warned and what is not None:
            self.warned.add((who, kind))
            if self.warn is not None:
                self.warn("plugin %s: %s (logged once; counted in the run's summary)",
                          who, what)

    def _outputs(self, ofp: Any, parser: Any, actions: list, dpid: int,
                 in_port: int | None, who: str) -> list:
        flood = {ofp.OFPP_FLOOD, ofp.OFPP_ALL, ofp.OFPP_NORMAL}
        out: list = []
        for action in actions:
            if getattr(action, "type", None) == ofp.OFPAT_OUTPUT and action.port in flood:
                self._note(who, "flood_confined")
                out.extend(parser.OFPActionOutput(p, action.max_len)
                           for p in self.ports.get(dpid, ()) if p != in_port)
            else:
                out.append(action)
        return out

    def check(self, dp: Any, msg: Any, who: str) -> Any:
        """`msg` as it may be sent (rewritten in place), or None to refuse it."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        self._note(who, "messages")
        why = refusal(msg, parser.__name__)
        if why is not None:
            self._note(who, why)
            return None
        kind = message_class(msg, parser.__name__)
        if kind == "OFPPacketOut":
            in_port = msg.in_port if msg.in_port not in (None, ofp.OFPP_CONTROLLER,
                                                         ofp.OFPP_ANY) else None
            msg.actions = self._outputs(ofp, parser, list(msg.actions or []), dp.id, in_port,
                                        who)
            copies = sum(1 for a in msg.actions if getattr(a, "type", None) == ofp.OFPAT_OUTPUT)
            self.packet_outs[dp.id] = self.packet_outs.get(dp.id, 0) + copies
            self._note(who, "packet_outs")
            return msg
        if kind == "OFPFlowMod":
            # in an add, the band marks the entry; in a delete or modify, of any table,
            # the mask always covers the band, so mask 0 no longer means every entry
            msg.cookie, msg.cookie_mask = plugin_cookie(msg.cookie, msg.cookie_mask)
            # non-strict deletes and modifies ignore the priority; strict ones find the
            # plugin's entry at the priority its add was moved to
            if msg.command not in (ofp.OFPFC_DELETE, ofp.OFPFC_MODIFY):
                msg.priority, capped = plugin_priority(msg.priority)
                if capped:
                    self._note(who, "priority_capped")
            in_port = msg.match.get("in_port") if msg.match is not None else None
            for inst in msg.instructions or []:
                if hasattr(inst, "actions"):
                    inst.actions = self._outputs(ofp, parser, list(inst.actions), dp.id,
                                                 in_port, who)
            self._note(who, "flow_mods")
            return msg
        return msg

    def report(self) -> GuardReport:
        """What the guard saw and changed, per plugin, and the copies plugins' packet-outs
        put into each switch (for the runner's packet accounting): in the controller's
        state file."""
        return GuardReport(
            plugins={who: dict(sorted(c.items())) for who, c in sorted(self.counts.items())},
            packet_outs={str(k): v for k, v in sorted(self.packet_outs.items())})

