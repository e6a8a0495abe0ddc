"""Flows as the datacenter simulators generate them (the HPCC code's traffic_gen.py):
sizes drawn from a flow-size CDF, Poisson arrivals at every host at a target share of its
link, and optional Poisson incasts. Pure and seeded: the same spec gives the same flows.

A CDF file has one line per point, `bytes percent` (percent of flows at most that large),
from `0 0` to `... 100`, both columns non-decreasing; sizes are linear between points
(as the HPCC code's custom_rand.py draws them). `#` starts a comment. Two ship with the
testbed (`websearch`, `fb_hadoop`, the HPCC paper's); any other is a path.
"""
from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from pathlib import Path

CDF_DIR = Path(__file__).resolve().parent.parent / "cdf"
SHIPPED_CDFS = ("websearch", "fb_hadoop")


@dataclass(frozen=True)
class Cdf:
    points: tuple[tuple[float, float], ...]   # (bytes, percent)

    @property
    def mean(self) -> float:
        """The mean size: each segment's midpoint times its share (trapezoids)."""
        return sum((x0 + x1) / 2 * (y1 - y0) for (x0, y0), (x1, y1)
                   in zip(self.points, self.points[1:])) / 100

    def size_at(self, percent: float) -> float:
        """The size at `percent` (0..100), linear between points."""
        ys = [y for _, y in self.points]
        i = max(1, bisect.bisect_left(ys, percent))
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return x0 if y1 == y0 else x0 + (x1 - x0) * (percent - y0) / (y1 - y0)

    def draw(self, rng: random.Random) -> float:
        return self.size_at(rng.random() * 100)


def parse_cdf(text: str, where: str = "cdf") -> Cdf:
    """A CDF from its text; ValueError naming `where` and the line when it is not one."""
    points: list[tuple[float, float]] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            x, y = (float(v) for v in line.split())
        except ValueError:
            raise ValueError(f"{where}: line {n}: two numbers, bytes and percent "
                             f"(got {line!r})") from None
        if points and (x < points[-1][0] or y < points[-1][1]):
            raise ValueError(f"{where}: line {n}: not monotone ({x:g} {y:g} after "
                             f"{points[-1][0]:g} {points[-1][1]:g})")
        points.append((x, y))
    if len(points) < 2 or points[0][1] != 0 or points[-1][1] != 100 or points[0][0] < 0:
        raise ValueError(f"{where}: from a point at 0 percent to one at 100, sizes >= 0")
    return Cdf(tuple(points))


def load_cdf(name: str, where: str = "cdf") -> Cdf:
    """A shipped CDF by name, or a file."""
    path = CDF_DIR / f"{name}.txt" if name in SHIPPED_CDFS else Path(name)
    if not path.is_file():
        raise ValueError(f"{where}: one of {', '.join(SHIPPED_CDFS)} or a file (no {name!r})")
    return parse_cdf(path.read_text(), where)


@dataclass(frozen=True)
class GenFlow:
    src: str
    dst: str
    size_bytes: int
    start_ms: float
    incast: bool = False


def poisson_flows(hosts: list[str], rate_mbps: dict[str, float], cdf: Cdf, load: float,
                  duration_ms: float, seed: int, size_scale: float = 1.0,
                  dst_of: dict[str, list[str]] | None = None, in_turn: bool = False,
                  incast_senders: int = 0, incast_bytes: int = 0,
                  incast_share: float = 0.0) -> list[GenFlow]:
    """Every host starts flows at Poisson times for `duration_ms`, their sizes from `cdf`
    (times `size_scale`), so that on average it sends `load` of its link's rate; each goes
    to a host drawn from `dst_of[src]` (default: every other host, as the HPCC code does;
    a host `dst_of` gives no peer starts none), or, `in_turn`, to each of them in turn.
    With `incast_share` > 0 that share of the load comes instead as incasts, at Poisson
    times: `incast_senders` hosts at once, each `incast_bytes`, to one receiver drawn
    among the rest. Sorted by start."""
    rng = random.Random(f"rdma-workload/{seed}")
    mean = cdf.mean * size_scale
    flows: list[GenFlow] = []
    background = load * (1 - incast_share)
    for src in hosts:
        targets = [h for h in hosts if h != src] if dst_of is None else dst_of.get(src, [])
        if not targets:
            continue                    # a pattern that gives this host no peer
        gap_ms = mean * 8 / (rate_mbps[src] * 1e3 * background) if background > 0 else 0
        t = rng.expovariate(1 / gap_ms) if gap_ms else duration_ms
        turn = 0
        while t < duration_ms:
            size = max(1, round(cdf.draw(rng) * size_scale))
            dst = targets[turn % len(targets)] if in_turn else rng.choice(targets)
            flows.append(GenFlow(src, dst, size, round(t, 3)))
            turn += 1
            t += rng.expovariate(1 / gap_ms)
    if incast_share > 0 and incast_senders > 0 and incast_bytes > 0:
        total_bytes_ms = sum(load * rate_mbps[h] * 1e3 / 8 for h in hosts)
        event_gap_ms = incast_senders * incast_bytes / (incast_share * total_bytes_ms)
        t = rng.expovariate(1 / event_gap_ms)
        while t < duration_ms:
            dst = rng.choice(hosts)
            for src in rng.sample([h for h in hosts if h != dst], incast_senders):
                flows.append(GenFlow(src, dst, incast_bytes, round(t, 3), incast=True))
            t += rng.expovariate(1 / event_gap_ms)
    flows.sort(key=lambda f: (f.start_ms, f.src, f.dst))
    return flows


def offered_load(flows: list[GenFlow], rate_mbps: dict[str, float],
                 duration_ms: float) -> float:
    """What `flows` ask of the senders' links over `duration_ms`, as a share of them."""
    if duration_ms <= 0:
        return math.nan
    capacity = sum(rate_mbps.values()) * 1e3 / 8 * duration_ms
    return sum(f.size_bytes for f in flows) / capacity
