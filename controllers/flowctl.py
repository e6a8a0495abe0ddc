"""Per-flow control, pure: what controllers/apps/flow_app.py decides, without Ryu or a
clock. The app hands in what the switches said (a new flow's first packet, the edge
switches' flow counters) and the time `now`; this returns the flow entries to send, in the
order to send them, and the records to log.

- A new TCP flow's first packet at its ingress edge switch (copied to the controller by
  the plan's detect entries) gives the flow its own entry on that switch with the hash
  route's action and the DSCP the priority policy gives it, so that it keeps its path and
  its bytes are counted.
- Every period the edge switches' per-flow entries give each flow's bytes. Hedera: the
  scheduler estimates the elephants' natural demands and places them (Global First Fit or
  Simulated Annealing); a placed flow gets an exact entry on every switch of its path,
  listed from the last switch back (the app confirms each with a barrier before sending the
  next), and its ingress entry is modified in place, which keeps its byte counter.
  Priority: the policy sees each flow's bytes and rate; a flow whose DSCP changes has its
  ingress entry modified (a placed flow keeps its scheduled output port).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from testbed.config.controller import ControllerConfig
from topologies.graph import shortest_paths
from topologies.model import Topology

from . import failover, routing
from .flowsched import HederaScheduler, Move
from .priority import FlowInfo, PriorityPolicy, make_policy
from .routing import FlowKey


@dataclass(frozen=True)
class FlowMod:
    """One flow entry to send: added, modifying the entry with the same match, or deleting
    it."""
    rule: routing.Rule
    modify: bool = False
    delete: bool = False


@dataclass(frozen=True)
class FlowStat:
    """One per-flow entry as a switch reported it (OpenFlow flow stats)."""
    dpid: int
    priority: int
    match: dict[str, object]
    byte_count: int


@dataclass(frozen=True)
class PlannedMove:
    """A flow Hedera moves: its entries (send in order, a barrier after each) and the
    record to log once they are in place (hedera_decisions.jsonl)."""
    move: Move
    mods: list[FlowMod]
    record: dict


@dataclass
class PeriodResult:
    """What one scheduling period decided: the moves, the ingress entries to re-mark, and
    the records for the logs."""
    moves: list[PlannedMove] = field(default_factory=list)
    remarks: list[FlowMod] = field(default_factory=list)
    priorities: list[dict] = field(default_factory=list)  # priority.jsonl
    period: dict = field(default_factory=dict)            # hedera_periods.jsonl


def nic_rates_bps(topo: Topology) -> dict[str, float]:
    """Each host's NIC rate in bit/s (its link's rate)."""
    nic = {}
    for link in topo.links:
        for a in (link.a, link.b):
            if topo.is_host(a):
                nic[a] = link.rate_mbps * 1e6
    return nic


def link_capacities(topo: Topology, nic_bps: dict[str, float]) -> dict[tuple[str, str], float]:
    """Every directed link's capacity in NIC fractions (the slowest NIC = 1.0), the unit of
    Hedera's demands."""
    ref = min(nic_bps.values())
    capacity = {}
    for link in topo.links:
        capacity[(link.a, link.b)] = capacity[(link.b, link.a)] = link.rate_mbps * 1e6 / ref
    return capacity


def flow_key(match: dict[str, object]) -> FlowKey:
    """The 5-tuple of a per-flow entry's match."""
    return (match["ipv4_src"], match["ipv4_dst"], 6, match["tcp_src"], match["tcp_dst"])


class FlowControl:
    """Hedera and/or a priority policy for one phase's fabric."""

    def __init__(self, topo: Topology, cfg: ControllerConfig,
                 policy: PriorityPolicy | None = None):
        self.topo = topo
        self.live = topo  # the fabric without what has failed (fabric_changed)
        self.hedera = cfg.routing == "hedera"
        self.policy = policy if policy is not None else make_policy(cfg.flow_priority)
        self.plan = failover.plan(topo, cfg.routing, **cfg.plan_args)
        self.period_s = cfg.period_s
        self.idle_s = cfg.hedera.idle_timeout_s
        nic = nic_rates_bps(topo)
        self._paths: dict[tuple[str, str], list] = {}
        self.scheduler = HederaScheduler(
            self.paths, nic, cfg.hedera.elephant_fraction, link_capacities(topo, nic),
            expire_s=self.idle_s + self.period_s, placement=cfg.hedera.placement,
            iterations=cfg.hedera.annealing_iterations, seed=cfg.hedera.annealing_seed)
        self.edges = sorted(sw.dpid for sw in topo.switches
                            if any(topo.is_host(p) for _, p, _ in topo.ports_of(sw.name)))
        self.host_of_ip = {h.ip: h.name for h in topo.hosts}
        self.flow_dscp: dict[FlowKey, int | None] = {}

    def paths(self, src: str, dst: str) -> list:
        """The equal-cost paths between two hosts on the fabric as it is now (`live`), in
        a fixed order (cached)."""
        if (src, dst) not in self._paths:
            self._paths[(src, dst)] = shortest_paths(self.live, src, dst)
        return self._paths[(src, dst)]

    def fabric_changed(self, now: float, live: Topology) -> tuple[list[FlowMod], list[dict]]:
        """A link or switch failed or came back; `live` is the fabric without what is down
        (and `plan` is already the replanned one). Paths are taken on `live` from now on,
        and every flow Hedera placed on a path that crosses a link `live` lacks goes back
        to its hash route: its exact entries beyond its ingress switch are deleted (the
        switches then route it as any other flow), then its ingress entry follows the
        replanned route. Returns those entries in order, and the records to log."""
        self.live = live
        self._paths.clear()
        alive = {end for link in live.links for end in ((link.a, link.b), (link.b, link.a))}
        mods: list[FlowMod] = []
        records = []
        for key, path in self.scheduler.unplace(
                lambda p: any(hop not in alive for hop in zip(p, p[1:]))):
            rules = routing.path_rules(self.topo, path, key, self.idle_s)
            mods += [FlowMod(r, delete=True) for r in rules[:-1]]  # last switch first
            back = routing.flow_entry(self.plan, rules[-1].dpid, key, self.idle_s)
            if back is not None:
                mods.append(FlowMod(dataclasses.replace(back, set_dscp=self.flow_dscp.get(key)),
                                    modify=True))
            records.append({"t": now, "flow": "/".join(map(str, key)), "unplaced": True,
                            "why": "its path crosses a failed link", "path": list(path)})
        return mods, records

    def new_flow(self, now: float, dpid: int, key: FlowKey) -> tuple[FlowMod | None, list[dict]]:
        """A new TCP flow seen at its ingress switch: its counting entry (None when the
        switch has no route to its destination) and the priority records to log."""
        rule = routing.flow_entry(self.plan, dpid, key, self.idle_s)
        if rule is None:
            return None, []
        records = []
        if self.policy is not None and key not in self.flow_dscp:
            src, dst = self.host_of_ip.get(key[0]), self.host_of_ip.get(key[1])
            records.append(self._set_dscp(now, key, self.policy.dscp(FlowInfo(key, src, dst)),
                                          "new"))
        return FlowMod(dataclasses.replace(rule, set_dscp=self.flow_dscp.get(key))), records

    def period(self, now: float, stats: list[FlowStat]) -> PeriodResult:
        """One scheduling period over the edge switches' per-flow entries read at `now`."""
        counters: dict[FlowKey, tuple[str, str, int]] = {}
        ingress: dict[FlowKey, int] = {}
        for entry in stats:
            if entry.priority != routing.PRIORITY_FLOW:
                continue
            key = flow_key(entry.match)
            src, dst = self.host_of_ip.get(key[0]), self.host_of_ip.get(key[1])
            if src and dst:
                counters[key] = (src, dst, entry.byte_count)
                ingress[key] = entry.dpid
        self.scheduler.observe(now, counters)
        result = PeriodResult()
        moves = self.scheduler.schedule() if self.hedera else []
        for move in moves:
            result.moves.append(PlannedMove(move, self._install(move), {
                "t": now, "flow": "/".join(map(str, move.flow)), "src": move.src,
                "dst": move.dst, "rate_mbps": round(move.rate_bps / 1e6, 3),
                "demand": round(move.demand, 4), "path": list(move.path)}))
        if self.policy is not None:
            self._reprioritise(now, counters, ingress, result)
        sched = self.scheduler
        elephants = sched.elephants()
        result.period = {
            "t": now, "flows": len(counters), "elephants": len(elephants), "moved": len(moves),
            "placement": sched.placement,
            **({"exceeded_before": round(sched.last_energy[0], 4),
                "exceeded_after": round(sched.last_energy[1], 4)} if sched.last_energy else {}),
            "demands": {"/".join(map(str, k)): round(sched.flows[k].demand, 4)
                        for k in elephants}}
        return result

    def _set_dscp(self, now: float, key: FlowKey, dscp: int | None, why: str) -> dict:
        self.flow_dscp[key] = dscp
        return {"t": now, "flow": "/".join(map(str, key)), "dscp": dscp, "why": why}

    def _install(self, move: Move) -> list[FlowMod]:
        rules = routing.path_rules(self.topo, move.path, move.flow, self.idle_s)
        # the ingress entry keeps the DSCP the priority policy gave the flow
        rules[-1] = dataclasses.replace(rules[-1], set_dscp=self.flow_dscp.get(move.flow))
        # the ingress switch's own entry of the flow is modified in place, which keeps its
        # byte counter (the scheduler keeps measuring the flow there)
        return [FlowMod(r, modify=r.priority == routing.PRIORITY_FLOW) for r in rules]

    def _reprioritise(self, now: float, counters: dict[FlowKey, tuple[str, str, int]],
                      ingress: dict[FlowKey, int], result: PeriodResult) -> None:
        assert self.policy is not None
        for key, (src, dst, nbytes) in counters.items():
            tracked = self.scheduler.flows.get(key)
            info = FlowInfo(key, src, dst, nbytes, tracked.rate_bps if tracked else 0.0)
            dscp = self.policy.dscp(info)
            if dscp == self.flow_dscp.get(key):
                continue
            result.priorities.append(self._set_dscp(now, key, dscp, f"{nbytes} bytes"))
            rule = routing.flow_entry(self.plan, ingress[key], key, self.idle_s)
            placed = tracked.path if tracked else None
            if placed is not None:  # a placed flow keeps its scheduled output port
                rule = routing.path_rules(self.topo, placed, key, self.idle_s)[-1]
            if rule is not None:
                result.remarks.append(FlowMod(dataclasses.replace(rule, set_dscp=dscp),
                                              modify=True))
