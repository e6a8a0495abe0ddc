"""Every topology kind by name, its parameters from a spec or a command line, and the
routings a fabric of that kind can run (controllers/routing.py and fabric_routing.py plan
them)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .builders import bcube, dumbbell, fattree, leafspine, nonblocking
from .model import Topology, TopologyError
from .survey import dcell, ficonn, hybrid, mdcube, rail, torus, vl2

KINDS: dict[str, Callable[..., Topology]] = {
    "fattree": fattree,
    "leafspine": leafspine,
    "bcube": bcube,
    "nonblocking": nonblocking,
    "dumbbell": dumbbell,
    "dcell": dcell,
    "ficonn": ficonn,
    "mdcube": mdcube,
    "vl2": vl2,
    "torus": torus,
    "rail": rail,
    "hybrid": hybrid,
}

# A fabric's own routing, as its paper describes it (controllers/fabric_routing.py), beside
# the ecmp and single every fabric has; "own" names the first in a spec.
OWN_ROUTINGS: dict[str, tuple[str, ...]] = {
    "dcell": ("dcell",), "ficonn": ("ficonn",), "mdcube": ("mdcube",), "vl2": ("vlb",),
    "torus": ("dor",), "rail": ("rail", "nic"), "hybrid": ("cthrough",),
}
RELAY_KINDS = ("bcube", "dcell", "ficonn", "mdcube")  # servers forward for each other


def routings(kind: str) -> tuple[str, ...]:
    """The routing modes a fabric of `kind` can be run with: ecmp and single, Hedera's
    scheduler on a switched fabric of packet switches, and its own."""
    hedera = () if kind in RELAY_KINDS or kind == "hybrid" else ("hedera",)
    return ("ecmp", "single", *hedera, *OWN_ROUTINGS.get(kind, ()))


def own_routing(kind: str, mode: str) -> str:
    """`mode`, with "own" as the fabric's own routing (ecmp for a fabric without one)."""
    return OWN_ROUTINGS.get(kind, ("ecmp",))[0] if mode == "own" else mode


def build(kind: str, **params: Any) -> Topology:
    """Build a topology by kind name; unknown kinds and parameters are errors."""
    if kind not in KINDS:
        raise TopologyError(f"unknown topology kind {kind!r}; choose one of {', '.join(KINDS)}")
    fn = KINDS[kind]
    allowed = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    for name in params:
        if name not in allowed:
            raise TopologyError(f"{kind}: unknown parameter {name!r}; "
                                f"parameters are {', '.join(allowed)}")
    return fn(**params)


def parse_params(kind: str, args: list[str]) -> dict[str, Any]:
    """CLI parameters: positional values in signature order or name=value pairs."""
    if kind not in KINDS:
        raise TopologyError(f"unknown topology kind {kind!r}; choose one of {', '.join(KINDS)}")
    fn = KINDS[kind]
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    out: dict[str, Any] = {}
    for i, arg in enumerate(args):
        if "=" in arg:
            key, value = arg.split("=", 1)
        else:
            if i >= len(names):
                raise TopologyError(f"{kind}: too many parameters ({len(args)} > {len(names)})")
            key, value = names[i], arg
        if key in out:
            raise TopologyError(f"{kind}: parameter {key!r} given twice")
        out[key] = _number(value)
    return out


def _number(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text
