"""Traffic patterns as data: who sends to whom, seeded so that a run can be replayed.

The families are those of the Hedera evaluation (Al-Fares et al., NSDI 2010, section 6) and
its Mininet-HiFi reproduction:

- ``stride:i``        host x sends to host (x + i) mod N;
- ``random``          every host sends to a host chosen uniformly among the others (a
                      receiver may be picked by several senders);
- ``randbij``         a random permutation without fixed points: every host sends to one
                      host and receives from one (``random:SEED`` in specs before the
                      pattern families, which is ``randbij`` with that seed);
- ``stag:pe:pp``      staggered: with probability pe to a host under the same edge switch,
                      with probability pp to a host in the same pod (another edge switch),
                      otherwise to a host in another pod;
- ``hotspot:h``       h hosts are hot receivers; every other host sends to one of them
                      (uniformly), the hot hosts send to random non-hot hosts;
- ``randx:n``         every host sends n flows, each to a host chosen uniformly among the
                      others.

"Same edge" and "same pod" come from hop distances (2 and 4 hops between hosts), so the
staggered family works on any two- or three-tier tree, not only on a Fat-Tree's names.
A pattern is a list of (src, dst) host names; flows may repeat a pair (random, randx).
A name may end in ``@SEED`` to fix its seed (``stag:0.2:0.3@1`` is Hedera's "stag1(0.2,0.3)");
without it the experiment's seed is used.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from .graph import distances_to
from .model import Topology

FAMILIES = ("stride", "random", "randbij", "stag", "hotspot", "randx")

Flow = tuple[str, str]


class PatternError(ValueError):
    """A pattern name or parameter that cannot work; the message starts with the field."""


@dataclass(frozen=True)
class Pattern:
    """A parsed pattern name: family and parameters (``stag:0.2:0.3`` -> stag, (0.2, 0.3))."""
    family: str
    params: tuple[float, ...] = ()
    seed: int | None = None  # fixed by the name (@SEED), else the experiment's

    @property
    def name(self) -> str:
        base = ":".join([self.family] + [f"{p:g}" for p in self.params])
        return base if self.seed is None else f"{base}@{self.seed}"


def parse(text: str, n_hosts: int, field: str = "pattern") -> Pattern:
    """Parse and check a pattern name against a fabric of `n_hosts` hosts."""
    text, _, seed_text = str(text).partition("@")
    seed = None
    if seed_text:
        if not seed_text.isdigit():
            raise PatternError(f"{field}: the seed after @ must be a non-negative integer "
                               f"(got {seed_text!r})")
        seed = int(seed_text)
    family, *args = text.split(":")
    if family not in FAMILIES:
        raise PatternError(f"{field}: unknown pattern {family!r}; one of {', '.join(FAMILIES)}")
    try:
        params = tuple(float(a) for a in args)
    except ValueError:
        raise PatternError(f"{field}: parameters of {text!r} must be numbers") from None
    arity = {"stride": 1, "random": 0, "randbij": 0, "stag": 2, "hotspot": 1, "randx": 1}
    if len(params) != arity[family]:
        raise PatternError(f"{field}: {family} takes {arity[family]} parameter(s) "
                           f"(got {text!r})")
    if family == "stride":
        if params[0] != int(params[0]) or not 0 < params[0] < n_hosts:
            raise PatternError(f"{field}: stride must be in 1..{n_hosts - 1} (an integer) for "
                               f"{n_hosts} hosts (got {params[0]:g})")
    if family == "stag":
        pe, pp = params
        for name, p in (("edge probability", pe), ("pod probability", pp)):
            if not 0 <= p <= 1:
                raise PatternError(f"{field}: stag {name} must be in [0, 1] (got {p:g})")
        if pe + pp > 1:
            raise PatternError(f"{field}: stag probabilities add up to more than 1 "
                               f"({pe:g} + {pp:g})")
    if family == "hotspot" and (params[0] != int(params[0]) or not 1 <= params[0] < n_hosts):
        raise PatternError(f"{field}: hotspot count must be an integer in 1..{n_hosts - 1} "
                           f"(got {params[0]:g})")
    if family == "randx" and (params[0] != int(params[0]) or params[0] < 1):
        raise PatternError(f"{field}: randx flows per host must be an integer >= 1 "
                           f"(got {params[0]:g})")
    return Pattern(family, params, seed)


def generate(pattern: Pattern | str, topo: Topology, seed: int) -> list[Flow]:
    """The flows of `pattern` on `topo`'s hosts (in the topology's order), seeded."""
    hosts = [h.name for h in topo.hosts]
    if isinstance(pattern, str):
        pattern = parse(pattern, len(hosts))
    if pattern.seed is not None:
        seed = pattern.seed
    rng = random.Random(f"{dataclasses.replace(pattern, seed=None).name}/{seed}")
    f, p = pattern.family, pattern.params
    if f == "stride":
        return stride(hosts, int(p[0]))
    if f == "random":
        return [(h, rng.choice([d for d in hosts if d != h])) for h in hosts]
    if f == "randbij":  # seeded by the seed alone: the same permutations as before patterns
        return random_bijection(hosts, seed)
    if f == "stag":
        return staggered(topo, p[0], p[1], rng)
    if f == "hotspot":
        hot = rng.sample(hosts, int(p[0]))
        cold = [h for h in hosts if h not in hot]
        return [(h, rng.choice(hot)) if h in cold else (h, rng.choice(cold)) for h in hosts]
    return [(h, rng.choice([d for d in hosts if d != h])) for h in hosts for _ in range(int(p[0]))]


def stride(hosts: list[str], step: int) -> list[Flow]:
    """Host i sends to host (i + step) mod N."""
    n = len(hosts)
    if not 0 < step < n:
        raise ValueError(f"stride must be in 1..{n - 1} (got {step})")
    return [(hosts[i], hosts[(i + step) % n]) for i in range(n)]


def random_bijection(hosts: list[str], seed: int | random.Random) -> list[Flow]:
    """A random permutation with no host sending to itself (a derangement), seeded."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    while True:
        perm = hosts[:]
        rng.shuffle(perm)
        if all(a != b for a, b in zip(hosts, perm)):
            return list(zip(hosts, perm))


def tiers(topo: Topology, host: str) -> tuple[list[str], list[str], list[str]]:
    """The other hosts by distance from `host`: under its edge switch (2 hops), in its pod
    (4 hops), and further away."""
    dist = distances_to(topo, host)
    others = [h.name for h in topo.hosts if h.name != host]
    edge = [h for h in others if dist.get(h) == 2]
    pod = [h for h in others if dist.get(h) == 4]
    rest = [h for h in others if h not in edge and h not in pod]
    return edge, pod, rest


def staggered(topo: Topology, p_edge: float, p_pod: float, rng: random.Random) -> list[Flow]:
    """Staggered(p_edge, p_pod): each host's destination is under its own edge switch with
    probability p_edge, elsewhere in its pod with p_pod, in another pod otherwise. A tier
    with no host (a one-host edge switch) passes its probability to the next tier out."""
    flows = []
    for h in (x.name for x in topo.hosts):
        edge, pod, rest = tiers(topo, h)
        r = rng.random()
        choices = edge if r < p_edge else pod if r < p_edge + p_pod else rest
        for fallback in (choices, pod, rest, edge):
            if fallback:
                flows.append((h, rng.choice(fallback)))
                break
    return flows
