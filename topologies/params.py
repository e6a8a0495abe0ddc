"""What every builder checks its parameters with: integers and rates in range, and an
instance's size before a node of it is built. Errors name the parameter."""
from __future__ import annotations

from typing import Any

from .model import TopologyError

DEFAULT_RATE_MBPS = 100.0
MAX_RATE_MBPS = 100_000.0  # 100 Gb/s: the fastest link a spec may name
MAX_HOSTS = 4096  # far beyond one machine; stops a typo from building millions of nodes


def int_param(kind: str, name: str, value: Any, minimum: int, even: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{kind}: {name} must be an integer (got {value!r})")
    if not minimum <= value <= MAX_HOSTS or (even and value % 2):
        need = f"an even integer in {minimum}..{MAX_HOSTS}" if even else \
            f"an integer in {minimum}..{MAX_HOSTS}"
        raise TopologyError(f"{kind}: {name} must be {need} (got {value})")
    return value


def check_size(kind: str, formula: str, hosts: int) -> None:
    if hosts > MAX_HOSTS:
        raise TopologyError(f"{kind}: {formula} = {hosts} hosts is more than {MAX_HOSTS}")


def rate_param(kind: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_RATE_MBPS:
        raise TopologyError(f"{kind}: {name} must be a rate in Mb/s in (0, {MAX_RATE_MBPS:g}] "
                            f"(got {value!r})")
    return float(value)
