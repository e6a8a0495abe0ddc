"""Faults a spec can inject into a traffic phase: a link or a whole switch going down (and
optionally coming back), or the controller killed, at a time after the phase's traffic
starts or (training) when a job reaches an iteration (a killed controller can be restarted
after a while). What happens when is a pure
timeline (`timeline`); the runner only executes it and records each step."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from topologies.model import Topology

from .loader import SpecError


@dataclass(frozen=True, kw_only=True)
class FabricFault:
    link: list[str] | None = None  # the link between these two nodes, e.g. [a1, c1]
    switch: str | None = None      # or every link of this switch
    controller: bool = False       # or the controller, killed (SIGKILL)
    at_s: float | None = None      # seconds after the phase's traffic starts
    at_iter: int | None = None     # or (training) when the first worker finishes this iteration
    # back up after this long (None: down to the phase's end); the controller is restarted
    # and resynchronises with the tables the switches kept
    for_s: float | None = None

    def target(self) -> str:
        if self.controller:
            return "controller"
        return f"link {self.link[0]}-{self.link[1]}" if self.link else f"switch {self.switch}"

    def check(self, path: str, topo: Topology, phase_s: float | None = None,
              iters: int | None = None) -> None:
        """`phase_s`: how long the phase's traffic runs (None: not known in advance);
        `iters`: a training job's iterations (None: not a training phase, no `at_iter`)."""
        if [self.link is not None, self.switch is not None, self.controller].count(True) != 1:
            raise SpecError(f"{path}: give exactly one of link, switch and controller")
        if (self.at_s is None) == (self.at_iter is None):
            raise SpecError(f"{path}: give exactly one of at_s and at_iter")
        if self.at_iter is not None:
            if iters is None:
                raise SpecError(f"{path}.at_iter: only a training job has iterations "
                                "(use at_s)")
            if not 0 <= self.at_iter < iters:
                raise SpecError(f"{path}.at_iter: must be in 0..{iters - 1} "
                                f"(got {self.at_iter})")
        nodes = {h.name for h in topo.hosts} | {s.name for s in topo.switches}
        if self.link is not None:
            if len(self.link) != 2 or self.link[0] == self.link[1]:
                raise SpecError(f"{path}.link: two different nodes (got {self.link})")
            for name in self.link:
                if name not in nodes:
                    raise SpecError(f"{path}.link: no node {name!r}")
            if topo.link_between(*self.link) is None:
                raise SpecError(f"{path}.link: {self.link[0]} and {self.link[1]} are not linked")
        if self.switch is not None and self.switch not in {s.name for s in topo.switches}:
            raise SpecError(f"{path}.switch: no switch {self.switch!r}")
        if self.for_s is not None and self.for_s <= 0:
            raise SpecError(f"{path}.for_s: must be > 0 (got {self.for_s})")
        if phase_s is not None and self.at_s is not None and self.at_s >= phase_s:
            raise SpecError(f"{path}.at_s: {self.at_s:g} s is not within the phase's "
                            f"{phase_s:g} s of traffic")


def check_faults(faults: list[FabricFault], path: str, topo: Topology,
                 phase_s: float | None = None, iters: int | None = None) -> None:
    """An experiment's `faults` list, each against the fabric it will run on."""
    for j, fault in enumerate(faults):
        fault.check(f"{path}.faults[{j}]", topo, phase_s, iters)


def describe_steps(steps: list[dict], sep: str = "; ") -> str:
    """The executed steps of a phase (net/faults.py records) in words: "link a1-c1 down at
    5.02 s; link a1-c1 up at 10.00 s"."""
    return sep.join(f"{s['fault']} {s['action']} at {s['at_s']:.2f} s" for s in steps)


Action = Literal["down", "up"]


@dataclass(frozen=True)
class Step:
    t_s: float        # after the phase's traffic starts
    action: Action
    fault: int        # index in the spec's list
    ports: tuple[tuple[str, int], ...]  # the switch ports (node, port) it sets down or up


def fault_ports(fault: FabricFault, topo: Topology) -> tuple[tuple[str, int], ...]:
    """The switch ends of the fault's links: what the runner sets down (a host's end loses
    its carrier with them); none for the controller."""
    if fault.controller:
        return ()
    if fault.switch is not None:
        return tuple((fault.switch, port) for port, _, _ in topo.ports_of(fault.switch))
    assert fault.link is not None
    link = topo.link_between(*fault.link)
    if link is None:
        raise KeyError(fault.link)
    return tuple(end for end in link.ends() if not topo.is_host(end[0]))


def timeline(faults: list[FabricFault], topo: Topology,
             triggered: dict[int, float] | None = None) -> list[Step]:
    """Every down and up in time order (a down before an up at the same instant): the faults
    with a time, and those with an iteration once it has been reached (`triggered`: fault
    index -> the phase time it was reached at)."""
    steps = []
    for i, f in enumerate(faults):
        at = f.at_s if f.at_s is not None else (triggered or {}).get(i)
        if at is None:
            continue
        ports = fault_ports(f, topo)
        steps.append(Step(at, "down", i, ports))
        if f.for_s is not None:
            steps.append(Step(at + f.for_s, "up", i, ports))
    return sorted(steps, key=lambda s: (s.t_s, s.action != "down", s.fault))
