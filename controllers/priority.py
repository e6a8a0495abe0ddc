"""Priority flow scheduling, pure: a policy gives each TCP flow a DSCP, which the flow
control core (controllers/flowctl.py) sets at the flow's ingress edge switch when the flow
is first seen and re-marks when the policy changes its mind (a long flow demoted)."""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from testbed.config.controller import FlowPriority

from .routing import FlowKey


@dataclass(frozen=True)
class FlowInfo:
    """What a priority policy sees of a flow: its key (ip_src, ip_dst, 6, src_port,
    dst_port), its hosts, the bytes it has sent so far and its current rate."""
    key: FlowKey
    src: str | None  # None: an address that is no host of the fabric
    dst: str | None
    bytes: int = 0
    rate_bps: float = 0.0

    @property
    def ports(self) -> tuple[int, int]:
        return self.key[3], self.key[4]


class PriorityPolicy:
    """Decides a flow's DSCP (0-63), or None to leave what the host marked. Called when
    the flow is first seen (bytes 0) and every period after; a change re-marks the flow at
    its ingress edge switch. Subclass it in a plugin file to supply your own."""

    def dscp(self, flow: FlowInfo) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class ByPort(PriorityPolicy):
    """A DSCP per TCP port (either end), e.g. a service's port over everything else."""
    ports: dict[int, int]
    default: int | None = None

    def dscp(self, flow: FlowInfo) -> int | None:
        src_port, dst_port = flow.ports
        return self.ports.get(dst_port, self.ports.get(src_port, self.default))


@dataclass(frozen=True)
class ByHosts(PriorityPolicy):
    """Flows between two hosts of a set (a training job's hosts) get `dscp`, the rest
    `default` (background traffic; None leaves what the host marked)."""
    hosts: frozenset[str]
    dscp_in: int
    default: int | None = None

    def dscp(self, flow: FlowInfo) -> int | None:
        inside = flow.src in self.hosts and flow.dst in self.hosts
        return self.dscp_in if inside else self.default


@dataclass(frozen=True)
class SmallFlowsFirst(PriorityPolicy):
    """PIAS-style demotion without knowing flow sizes: a flow is high priority until it has
    sent `threshold_bytes`, then low, so short flows finish ahead of long ones."""
    threshold_bytes: int
    high: int
    low: int = 0

    def dscp(self, flow: FlowInfo) -> int | None:
        return self.high if flow.bytes < self.threshold_bytes else self.low


def make_policy(fp: FlowPriority) -> PriorityPolicy | None:
    """The policy the spec's controller.flow_priority describes (its defaults are the
    spec type's, config/controller.py); policy none -> None."""
    if fp.policy == "none":
        return None
    if fp.policy == "by_port":
        return ByPort(dict(fp.ports), fp.default)
    if fp.policy == "by_hosts":
        return ByHosts(frozenset(fp.hosts), fp.dscp, fp.default)
    if fp.policy == "small_first":
        return SmallFlowsFirst(fp.threshold_bytes, fp.high, fp.low)
    if fp.policy == "plugin":
        cls = load_class(fp.plugin)
        policy = cls(**fp.args)
        if not hasattr(policy, "dscp"):
            raise TypeError(f"{fp.plugin} has no dscp(flow) method")
        return policy
    raise ValueError(f"unknown flow priority policy {fp.policy!r}")


def load_class(ref: str) -> Any:
    where, _, name = ref.rpartition(":")
    if where.endswith(".py"):
        found = importlib.util.spec_from_file_location("testbed_priority_plugin", where)
        if found is None or found.loader is None:
            raise ImportError(f"cannot load {where}")
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)
