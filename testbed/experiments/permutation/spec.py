"""The permutation experiment's spec type and its checks, and a traffic pattern's name
checked against the fabric."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from testbed.config.controller import check_routing
from testbed.config.faults import FabricFault, check_faults
from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec
from topologies import patterns
from topologies.kinds import routings
from topologies.model import Topology


@dataclass(frozen=True, kw_only=True)
class Permutation(ExperimentSpec):
    type: Literal["permutation"] = "permutation"
    on_cluster: ClassVar[bool] = True
    patterns: list[str] = field(default_factory=lambda: ["stride:8", "randbij"])
    seed: int = 1  # repeat r of a seeded pattern uses seed + r
    # finite flows of this many bytes instead of long ones: their completion times are
    # measured, against one flow of the same size alone on the idle fabric (slowdown);
    # duration_s is then the budget they must finish within
    flow_bytes: int | None = None
    # the fabric's routings (topologies.kinds.routings; own: its own) and two references:
    # nonblocking, the same hosts and flows on one non-blocking switch (the ideal);
    # hedera_sa, Hedera placing by Simulated Annealing whatever controller.hedera.placement
    # says (to compare both placements in one run)
    routings: list[str] = field(default_factory=lambda: ["single", "ecmp"])
    duration_s: float = 20.0
    omit_s: float = 3.0
    repeats: int = 1
    # links or switches that fail during every phase (not the nonblocking reference's: it
    # has other switches); each flow's goodput is then recorded every `interval_s`, and
    # how long it carried nothing (flow_outages.csv)
    faults: list[FabricFault] = field(default_factory=list)
    interval_s: float = 0.1
    # with faults: a ping every `probe_ms` beside each flow (same hosts): its missing
    # replies time each failure on the network itself, below iperf3's interval and TCP's
    # retransmission timeouts (flow_outages.csv: probe_outage_s)
    probe_ms: float | None = None

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        check_faults(self.faults, path, topo, self.omit_s + self.duration_s)
        if self.faults and self.flow_bytes is not None:
            raise SpecError(f"{path}.faults: not with flow_bytes (finite flows report no "
                            "intervals)")
        if self.probe_ms is not None and not self.faults:
            raise SpecError(f"{path}.probe_ms: probes time failures; give faults too")
        if self.probe_ms is not None and not 2 <= self.probe_ms <= 1000:
            raise SpecError(f"{path}.probe_ms: must be in 2..1000 (got {self.probe_ms:g})")
        if not 0.1 <= self.interval_s <= 10:
            raise SpecError(f"{path}.interval_s: must be in 0.1..10 (iperf3's range; got "
                            f"{self.interval_s:g})")
        if self.repeats < 1:
            raise SpecError(f"{path}.repeats: must be >= 1")
        if not self.routings:
            raise SpecError(f"{path}.routings: at least one routing mode")
        if self.flow_bytes is not None and self.flow_bytes < 1:
            raise SpecError(f"{path}.flow_bytes: must be >= 1 (got {self.flow_bytes})")
        if {"hedera", "hedera_sa"} & set(self.routings) and topo.relays:
            raise SpecError(f"{path}.routings: hedera needs a switched fabric; BCube's servers "
                            "route for themselves")
        for j, routing in enumerate(self.routings):
            check_routing(routing, topo, f"{path}.routings[{j}]",
                          ("nonblocking", "hedera_sa") if "hedera" in routings(topo.kind)
                          else ("nonblocking",))
        for j, pattern in enumerate(self.patterns):
            parse_pattern(pattern, len(topo.hosts), f"{path}.patterns[{j}]")


def parse_pattern(text: str, n_hosts: int, path: str = "pattern") -> patterns.Pattern:
    """A traffic pattern name (topologies/patterns.py), checked against the fabric."""
    if n_hosts < 2:
        raise SpecError(f"{path}: a traffic pattern needs at least 2 hosts")
    try:
        return patterns.parse(text, n_hosts, path)
    except patterns.PatternError as exc:
        raise SpecError(str(exc)) from None
