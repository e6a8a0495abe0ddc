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

from controllers import circuits, routing
from controllers.apps.compat import hub
from controllers.apps.routing_app import FabricRouting
from controllers.fabric_routing import circuit_plan


class CircuitRouting(FabricRouting):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec = self.config.circuits
        self.installed: tuple[circuits.Circuit, ...] = ()
        self.before: circuits.Counters = {}
        self.tors = [s.dpid for s in self.topo.switches if s.role == "tor"]
        log = Path(self.config.circuits_log or self.state_path.with_name("circuits.jsonl"))
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("a", buffering=1)
        self.every(self.spec.period_s, self._period, "circuit period")

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
        self.read_flow_stats(self.tors, min(1.0, self.spec.period_s / 2),
                             eth_type=routing.ETH_TYPE_IP)
        out: circuits.Counters = {}
        for dpid, entries in self.stats.items():
            for e in entries:
                ip = dict(e.match.items()).get("ipv4_dst")
                if ip is not None:
                    out[(dpid, ip, e.priority)] = e.byte_count
        return out

    def _apply(self, lit: tuple[circuits.Circuit, ...]) -> int:
        """Install the plan with circuits `lit` (the difference, then a barrier per switch)."""
        todo, _ = self.install(circuit_plan(self.topo, lit), self.topo)
        return len(todo)

    def replan(self, mode: str) -> tuple[list, int]:
        """A port went down or up: the hybrid fabric is not replanned around failures (its
        circuits stay as they are); recorded, nothing sent."""
        self.logger.warning("cthrough: ports down %s; circuits not replanned", sorted(self.down))
        return [], 0

    def _write(self, record: dict) -> None:
        self.log.write(json.dumps(record) + "\n")
