"""Build functions for the fabrics the testbed supports.

Each returns a `Topology` whose names, ports, dpids, MACs and IPs depend only on the
parameters. Invalid parameters raise `TopologyError` naming the parameter.
"""
from __future__ import annotations

from .model import Builder, Topology, TopologyError
from .params import (
    DEFAULT_RATE_MBPS,
    check_size,
    int_param,
    rate_param,
)


def fattree(k: int = 4, rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """k-ary Fat-Tree (Al-Fares 2008): k pods of k/2 edge and k/2 aggregation switches,
    (k/2)^2 cores, k^3/4 hosts. Ports: edge 1..k/2 face hosts, k/2+1..k face aggregation;
    aggregation 1..k/2 face edges, k/2+1..k face cores; core port p+1 faces pod p."""
    k = int_param("fattree", "k", k, 2, even=True)
    rate = rate_param("fattree", "rate_mbps", rate_mbps)
    check_size("fattree", "k^3/4", k ** 3 // 4)
    half = k // 2
    b = Builder("fattree", {"k": k, "rate_mbps": rate})
    cores = [b.switch(f"c{i + 1}", "core", index=i) for i in range(half * half)]
    aggs = [[b.switch(f"a{p * half + j + 1}", "agg", pod=p, index=j) for j in range(half)]
            for p in range(k)]
    edges = [[b.switch(f"e{p * half + j + 1}", "edge", pod=p, index=j) for j in range(half)]
             for p in range(k)]
    n = 0
    for p in range(k):
        for j in range(half):
            for i in range(half):
                n += 1
                b.link(edges[p][j], b.host(f"h{n}", pod=p, edge=j, index=i), rate)
        for j in range(half):
            for a in range(half):
                b.link(edges[p][j], aggs[p][a], rate)
    for p in range(k):
        for a in range(half):
            for c in range(half):
                b.link(aggs[p][a], cores[a * half + c], rate)
    return b.build()


def leafspine(spines: int = 2, leaves: int = 4, hosts_per_leaf: int = 4,
              host_rate: float = DEFAULT_RATE_MBPS,
              uplink_rate: float = DEFAULT_RATE_MBPS) -> Topology:
    """Two-tier Clos: every leaf connects to every spine. Leaf ports 1..hosts_per_leaf face
    hosts, the next `spines` ports face spines; spine port l+1 faces leaf l."""
    spines = int_param("leafspine", "spines", spines, 1)
    leaves = int_param("leafspine", "leaves", leaves, 1)
    hosts_per_leaf = int_param("leafspine", "hosts_per_leaf", hosts_per_leaf, 1)
    host_rate = rate_param("leafspine", "host_rate", host_rate)
    uplink_rate = rate_param("leafspine", "uplink_rate", uplink_rate)
    check_size("leafspine", "leaves x hosts_per_leaf", leaves * hosts_per_leaf)
    b = Builder("leafspine", {"spines": spines, "leaves": leaves,
                              "hosts_per_leaf": hosts_per_leaf,
                              "host_rate": host_rate, "uplink_rate": uplink_rate})
    spine_names = [b.switch(f"sp{i + 1}", "spine", index=i) for i in range(spines)]
    leaf_names = [b.switch(f"l{i + 1}", "leaf", index=i) for i in range(leaves)]
    n = 0
    for li, leaf in enumerate(leaf_names):
        for i in range(hosts_per_leaf):
            n += 1
            b.link(leaf, b.host(f"h{n}", leaf=li, index=i), host_rate)
    for leaf in leaf_names:
        for spine in spine_names:
            b.link(leaf, spine, uplink_rate)
    return b.build()


def oversubscription(topo: Topology) -> float:
    """Leaf-Spine: host-facing capacity of a leaf over its uplink capacity."""
    if topo.kind != "leafspine":
        return 1.0
    p = dict(topo.params)
    return (p["hosts_per_leaf"] * p["host_rate"]) / (p["spines"] * p["uplink_rate"])


def bcube(n: int = 4, k: int = 1, rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """BCube(n, k) (Guo et al. 2009): n^(k+1) servers with k+1 ports each and k+1 levels of
    n^k n-port switches. Server digits a_k..a_0 (index = sum a_i n^i); server port l connects
    to the level-l switch that joins the servers differing only in digit l, on switch port
    a_l + 1. Servers relay packets between levels (server-centric)."""
    n = int_param("bcube", "n", n, 2)
    k = int_param("bcube", "k", k, 0)
    rate = rate_param("bcube", "rate_mbps", rate_mbps)
    if k > 12:  # n >= 2: more than 4096 servers either way, and n^(k+1) stays small
        raise TopologyError(f"bcube: k must be an integer in 0..12 (got {k})")
    check_size("bcube", "n^(k+1)", n ** (k + 1))
    b = Builder("bcube", {"n": n, "k": k, "rate_mbps": rate})
    per_level = n ** k
    switches = [[b.switch(f"b{level}_{j}", "bcube", level=level, index=j)
                 for j in range(per_level)] for level in range(k + 1)]
    servers = []
    for idx in range(n ** (k + 1)):
        digits = bcube_digits(idx, n, k)
        servers.append(b.host(f"h{idx + 1}", ports=k + 1, relay=True,
                              **{f"d{level}": digits[level] for level in range(k + 1)}))
    # Add links switch by switch so that switch port = digit + 1 and server port = level.
    for level in range(k + 1):
        for j in range(per_level):
            for digit in range(n):
                idx = _bcube_server_at(j, level, digit, n, k)
                b.link(servers[idx], switches[level][j], rate)
    return _check_server_ports(b.build())


def bcube_digits(index: int, n: int, k: int) -> list[int]:
    """Digits a_0..a_k of a BCube server index (a_0 first)."""
    return [(index // n ** level) % n for level in range(k + 1)]


def _bcube_server_at(switch_index: int, level: int, digit: int, n: int, k: int) -> int:
    """Index of the server on level-`level` switch `switch_index` whose digit `level` is `digit`.
    The switch index is the server's other k digits read as a number (lowest level first)."""
    others = [(switch_index // n ** i) % n for i in range(k)]
    digits = others[:level] + [digit] + others[level:]
    return sum(d * n ** i for i, d in enumerate(digits))


def _check_server_ports(topo: Topology) -> Topology:
    """Links were added level by level, so each server's port l must face level l."""
    for link in topo.links:
        if link.a_port != topo.node(link.b).label("level"):
            raise AssertionError(f"BCube wiring bug: {link}")
    return topo


def nonblocking(hosts: int = 16, rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """One big switch: the ideal, non-blocking reference for throughput experiments."""
    hosts = int_param("nonblocking", "hosts", hosts, 1)
    rate = rate_param("nonblocking", "rate_mbps", rate_mbps)
    b = Builder("nonblocking", {"hosts": hosts, "rate_mbps": rate})
    sw = b.switch("s1", "big")
    for i in range(hosts):
        b.link(sw, b.host(f"h{i + 1}", index=i), rate)
    return b.build()


def dumbbell(senders: int = 1, receivers: int = 1, access_rate_mbps: float = DEFAULT_RATE_MBPS,
             bottleneck_rate_mbps: float = 20.0) -> Topology:
    """Senders h1..hS on s1, receivers on s2, one s1-s2 bottleneck link. The queue that
    builds is s1's egress port toward s2 (port `senders + 1`)."""
    senders = int_param("dumbbell", "senders", senders, 1)
    receivers = int_param("dumbbell", "receivers", receivers, 1)
    check_size("dumbbell", "senders + receivers", senders + receivers)
    access = rate_param("dumbbell", "access_rate_mbps", access_rate_mbps)
    bottleneck = rate_param("dumbbell", "bottleneck_rate_mbps", bottleneck_rate_mbps)
    b = Builder("dumbbell", {"senders": senders, "receivers": receivers,
                             "access_rate_mbps": access, "bottleneck_rate_mbps": bottleneck})
    left, right = b.switch("s1", "edge"), b.switch("s2", "edge")
    for i in range(senders):
        b.link(left, b.host(f"h{i + 1}", side=0, index=i), access)
    b.link(left, right, bottleneck)
    for i in range(receivers):
        b.link(right, b.host(f"h{senders + i + 1}", side=1, index=i), access)
    return b.build()
