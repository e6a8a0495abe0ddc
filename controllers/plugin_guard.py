"""What a plugin may do to the fabric's switches (issue 15): it sees every event and may add
behaviour of its own, but it cannot by accident flood a looped fabric or shadow the built-in
router.

A user's plugin is an ordinary Ryu app, and users start from Ryu's own examples: loaded on a
Fat-Tree k=4, `ryu.app.simple_monitor_13` (an L2 learning switch underneath) flooded every
ARP request around the fabric's loops; 30% of pings were lost and the permutation beside it
was CPU-bound. So every OpenFlow message a plugin sends passes through `Guard.check` first:

- **floods** (`FLOOD`, `ALL`, `NORMAL` outputs, in a packet-out or an entry) are confined to
  a loop-free tree of the fabric: the tree's switch-to-switch ports and every host port, so
  a flood reaches each host once and never comes back (`flood_ports`);
- **entries** sit below the router's: a plugin's priority p is installed as p + 1, capped
  at 99 (the router forwards at 100 and above and drops what nothing matches at 0), with
  the plugin's cookie band in the top 16 bits, so a plugin's deletes and modifies reach its
  own entries only (`plugin_priority`, `plugin_cookie`);
- **group changes** are refused (the router owns every group id);
- everything else (statistics requests, barriers, port changes, role requests) passes.

This module imports no Ryu until `install`, so its decisions are tested without it.

Each kind of change is logged once per plugin, as a warning naming the plugin, and counted
(`Guard.report`, in the router's state file and the run's summary). Who sent a message is
read from the call stack at `Datapath.send_msg`: the innermost frame of code that is neither
Ryu's framework, eventlet nor the standard library decides; the testbed's own modules
(`controllers.`, `testbed.`) are the router and its apps, anything else (Ryu's example apps in
`ryu.app`, `ryu.topology`, `ryu.services`, a user's module or file) is a plugin.
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from controllers.routing import PRIORITY_ROUTE
from testbed.config.controller import GUARD_CHANGES
from topologies.model import Topology

COOKIE_BAND = 0xFFFF << 48         # the top 16 bits: zero for the router's entries
PLUGIN_COOKIE = 0x5E5E << 48      # the top 16 bits of every plugin entry's cookie
COOKIE_LOW = (1 << 48) - 1         # what is left of a plugin's own cookie
PLUGIN_MAX_PRIORITY = PRIORITY_ROUTE - 1

_BUILTIN = ("controllers", "testbed")
_PLUGIN_RYU = ("ryu.app.", "ryu.topology.", "ryu.services.")
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
    if module.startswith(_PLUGIN_RYU):
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
        if (who, kind) not in self.warned and kind in GUARD_CHANGES:
            self.warned.add((who, kind))
            if self.warn is not None:
                self.warn("plugin %s: %s (logged once; counted in the run's summary)",
                          who, GUARD_CHANGES[kind])

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
        kind = getattr(msg, "cls_msg_type", None)
        self._note(who, "messages")
        if kind == ofp.OFPT_GROUP_MOD:
            self._note(who, "group_refused")
            return None
        if kind == ofp.OFPT_PACKET_OUT:
            in_port = msg.in_port if msg.in_port not in (None, ofp.OFPP_CONTROLLER,
                                                         ofp.OFPP_ANY) else None
            msg.actions = self._outputs(ofp, parser, list(msg.actions or []), dp.id, in_port,
                                        who)
            copies = sum(1 for a in msg.actions if getattr(a, "type", None) == ofp.OFPAT_OUTPUT)
            self.packet_outs[dp.id] = self.packet_outs.get(dp.id, 0) + copies
            self._note(who, "packet_outs")
            return msg
        if kind == ofp.OFPT_FLOW_MOD:
            msg.cookie, msg.cookie_mask = plugin_cookie(msg.cookie, msg.cookie_mask)
            if msg.command != ofp.OFPFC_DELETE:  # non-strict deletes ignore the priority
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

    def report(self) -> dict:
        """What the guard saw and changed, per plugin, and the copies plugins' packet-outs
        put into each switch (for the runner's packet accounting)."""
        return {"plugins": {who: dict(sorted(c.items())) for who, c in sorted(self.counts.items())},
                "packet_outs": {str(k): v for k, v in sorted(self.packet_outs.items())}}


_GUARD: Guard | None = None


def install(topo: Topology, warn: Callable[..., None]) -> Guard:
    """Puts the guard in front of every `Datapath.send_msg` of this controller process."""
    global _GUARD
    from controllers.compat import Datapath

    guard = _GUARD = Guard(ports=flood_ports(topo), warn=warn)
    original = Datapath.send_msg

    def send_msg(self: Any, msg: Any, close_socket: bool = False) -> Any:
        who = sender(sys._getframe(1))
        if who is not None:
            msg = guard.check(self, msg, who)
            if msg is None:
                return False
        return original(self, msg, close_socket=close_socket)

    Datapath.send_msg = send_msg
    return guard


def report() -> dict:
    """The installed guard's report (empty without one)."""
    return _GUARD.report() if _GUARD is not None else {"plugins": {}, "packet_outs": {}}
