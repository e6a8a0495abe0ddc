"""Adding an experiment type is one module and one registration (docs/ARCHITECTURE.md,
"Adding an experiment"): a type written that way, and registered the way
testbed/experiments/__init__.py registers the shipped ones, is loaded and checked by the
spec loader and priced by `testbed plan`, with nothing else told about it."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pytest

from testbed import plan as capacity_plan
from testbed.config.capacity import Capacity
from testbed.config.loader import SpecError
from testbed.experiments import EXPERIMENTS
from testbed.experiments.base import Context, Experiment, ExperimentSpec, Outcome, register
from testbed.experiments.load import Load, rated
from testbed.spec import Spec, load
from topologies.model import Topology


@dataclass(frozen=True, kw_only=True)
class Toy(ExperimentSpec):
    """Every host sends to the next one at once."""
    type: Literal["toy_ring"] = "toy_ring"
    hosts: int = 4

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if not 2 <= self.hosts <= len(topo.hosts):
            raise SpecError(f"{path}.hosts: 2..{len(topo.hosts)} (got {self.hosts})")


def run(ctx: Context, exp: Toy) -> Outcome:
    raise AssertionError("no fabric is built in a unit test")


def toy_loads(spec: Spec, topo: Topology, exp: Toy, cap: Capacity) -> Iterator[Load]:
    hosts = [h.name for h in topo.hosts[:exp.hosts]]
    yield Load("ring", rated(spec, topo), spec.links.mtu_bytes,
               [(a, b) for a, b in zip(hosts, hosts[1:] + hosts[:1])])


SPEC = """
name: toy
topology: {kind: fattree, params: {k: 4}}
links: {rate_mbps: 10}
experiments:
  - {type: toy_ring, hosts: %d}
"""


@pytest.fixture
def toy_registered(monkeypatch):
    """The one registration, undone after the test (no other test sees the type)."""
    monkeypatch.setattr(ExperimentSpec, "registry", dict(ExperimentSpec.registry))
    monkeypatch.setitem(EXPERIMENTS, "toy_ring", register(
        Experiment(spec=Toy, run=run, load=toy_loads))["toy_ring"])


def test_a_new_type_is_loaded_checked_and_planned(toy_registered, tmp_path):
    (tmp_path / "toy.yaml").write_text(SPEC % 4)
    spec, topo = load(tmp_path / "toy.yaml")  # what `testbed validate` does
    (exp,) = spec.experiments
    assert isinstance(exp, Toy) and exp.hosts == 4
    text = capacity_plan.render(capacity_plan.plan(spec, topo))
    row = next(line for line in text.splitlines() if line.startswith("0:toy_ring ring"))
    assert row.split()[2:4] == ["4", "40.0"]  # four flows at 10 Mb/s each, priced
    (tmp_path / "bad.yaml").write_text(SPEC % 99)
    with pytest.raises(SpecError, match=r"experiments\[0\]\.hosts"):
        load(tmp_path / "bad.yaml")
