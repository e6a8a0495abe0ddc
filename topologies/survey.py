"""The survey's other data-center fabrics, as plain data like `builders.py`'s.

Server-centric, recursive (servers relay): DCell, FiConn, MDCube. Switch-centric: VL2's
Clos, the k-ary n-cube torus, the rail-optimised training fabric, and the hybrid
electrical/optical fabric of Helios and c-Through. Each docstring gives the construction
and the counts the unit tests check against the paper's formulas; invalid parameters raise
`TopologyError` naming the parameter, with the instance's size when it is too large.

Labels carry what routing needs: a DCell or FiConn server's `c0..ck` are its index in its
DCell_0 and each sub-cell's index in the cell above (the paper's [a_k, ..., a_0]); an
MDCube server's `m0, m1` are its container's coordinates and `d0..dk` its BCube digits; a
torus switch's `x0, x1, ...` its coordinates.
"""
from __future__ import annotations

from .builders import _bcube_server_at, bcube_digits
from .model import Builder, Topology, TopologyError
from .params import DEFAULT_RATE_MBPS, MAX_HOSTS, check_size, int_param, rate_param

# ---- DCell and FiConn: recursive cells joined server to server ----------------------------

def dcell_sizes(n: int, k: int) -> list[int]:
    """t_0..t_k: servers in a DCell_l (t_0 = n, t_l = t_{l-1} (t_{l-1} + 1)), stopping
    early once past MAX_HOSTS (the sizes grow doubly exponentially)."""
    t = [n]
    while len(t) <= k and t[-1] <= MAX_HOSTS:
        t.append(t[-1] * (t[-1] + 1))
    return t


def dcell(n: int = 4, k: int = 1, rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """DCell(n, k) (Guo et al. 2008): a DCell_0 is n servers on an n-port switch; a DCell_l
    is g_l = t_{l-1} + 1 DCell_{l-1}s, every two of them joined by one server-to-server
    link: sub-cell i's server j-1 to sub-cell j's server i (i < j), server numbers within
    the sub-cell. t_k = t_{k-1} g_k servers with k+1 ports (port 0 to the switch, port l
    to its level-l link), t_k / n switches, t_k (1 + k/2) links. Servers relay."""
    n = int_param("dcell", "n", n, 2)
    k = int_param("dcell", "k", k, 0)
    rate = rate_param("dcell", "rate_mbps", rate_mbps)
    t = dcell_sizes(n, k)
    check_size("dcell", f"t_{len(t) - 1} for n={n}", t[-1])
    groups = [n] + [t[level - 1] + 1 for level in range(1, k + 1)]
    b = Builder("dcell", {"n": n, "k": k, "rate_mbps": rate})
    return _cells(b, "dcell", n, k, groups, [list(range(t[level - 1])) for level in
                                            range(1, k + 1)], rate)


def ficonn_sizes(n: int, k: int) -> tuple[list[int], list[int]]:
    """(t_0..t_k, g_1..g_k): FiConn_l has g_l = t_{l-1} / 2^l + 1 FiConn_{l-1}s (for an
    even n, t_{l-1} is always a multiple of 2^l), stopping early once past MAX_HOSTS."""
    t, g = [n], []
    for level in range(1, k + 1):
        g.append(t[-1] // 2 ** level + 1)
        t.append(t[-1] * g[-1])
        if t[-1] > MAX_HOSTS:
            break
    return t, g


def ficonn(n: int = 4, k: int = 1, rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """FiConn(n, k) (Li et al. 2009): servers with two ports, one to an n-port switch and
    one backup. A FiConn_l joins g_l = t_{l-1}/2^l + 1 FiConn_{l-1}s through the backup
    ports of the servers whose number u in their FiConn_{l-1} has u mod 2^l = 2^{l-1} - 1
    (half the backup ports still idle), sub-cell i's (j-1)-th such server to sub-cell j's
    i-th (i < j). t_k = t_{k-1} g_k servers, t_k / n switches. A server whose backup port
    stays idle gets no second interface (the paper's spare port, not emulated). Servers
    relay."""
    n = int_param("ficonn", "n", n, 2, even=True)
    k = int_param("ficonn", "k", k, 0)
    rate = rate_param("ficonn", "rate_mbps", rate_mbps)
    t, g = ficonn_sizes(n, k)
    check_size("ficonn", f"t_{len(t) - 1} for n={n}", t[-1])
    chosen = [[u for u in range(t[level - 1]) if u % 2 ** level == 2 ** (level - 1) - 1]
              for level in range(1, k + 1)]
    b = Builder("ficonn", {"n": n, "k": k, "rate_mbps": rate})
    return _cells(b, "ficonn", n, k, [n] + g, chosen, rate)


def _cells(b: Builder, kind: str, n: int, k: int, groups: list[int],
           chosen: list[list[int]], rate: float) -> Topology:
    """DCell's and FiConn's construction. `groups[l]`: sub-cells per level-l cell (groups[0]
    = n servers per switch); `chosen[l-1]`: the server numbers (within a level-(l-1) cell)
    whose level-l port links to another sub-cell, the (j-1)-th of sub-cell i to the i-th of
    sub-cell j."""
    sizes = [n]
    for level in range(1, k + 1):
        sizes.append(sizes[-1] * groups[level])
    total = sizes[-1]
    ports = [1 + sum(1 for level in range(1, k + 1) if u % sizes[level - 1] in chosen[level - 1])
             for u in range(total)]
    switches = [b.switch(f"s{i + 1}", "cell", index=i) for i in range(total // n)]
    hosts = []
    for u in range(total):
        digits = _mixed_digits(u, groups)
        hosts.append(b.host(f"h{u + 1}", ports=ports[u], relay=True,
                            **{f"c{level}": d for level, d in enumerate(digits)}))
        b.link(hosts[u], switches[u // n], rate)
    for level in range(1, k + 1):
        sub = sizes[level - 1]
        for cell in range(total // sizes[level]):
            base = cell * sizes[level]
            for i in range(groups[level]):
                for j in range(i + 1, groups[level]):
                    a = base + i * sub + chosen[level - 1][j - 1]
                    z = base + j * sub + chosen[level - 1][i]
                    b.link(hosts[a], hosts[z], rate)
    topo = b.build()
    for link in topo.links:  # port l of a DCell server is its level-l link
        if kind == "dcell" and topo.is_host(link.b) and link.a_port != link.b_port:
            raise AssertionError(f"DCell wiring bug: {link}")
    return topo


def _mixed_digits(u: int, radices: list[int]) -> list[int]:
    """u in the mixed radix `radices` (lowest first): a DCell server's [a_0, ..., a_k]."""
    out = []
    for r in radices:
        out.append(u % r)
        u //= r
    return out


# ---- MDCube: BCube containers joined through their switches' spare ports ------------------

def mdcube(n: int = 2, k: int = 1, m0: int = 2, m1: int = 2,
           rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """MDCube (Wu et al. 2009): m0 x m1 BCube(n, k) containers (m1 = 1: one dimension).
    Each container switch has n ports to servers and one spare (port n+1); along dimension
    d, containers that differ only in coordinate d (i < j) are joined switch to switch:
    container i's switch o_d + j - 1 to container j's switch o_d + i, where o_d = sum of
    (m_e - 1) for e < d and switches count level by level. Needs sum (m_d - 1) <= (k+1)
    n^k spare ports. Servers: n^(k+1) m0 m1; switches: (k+1) n^k m0 m1; links: servers
    (k+1) + m0 m1 sum (m_d - 1) / 2."""
    n = int_param("mdcube", "n", n, 2)
    k = int_param("mdcube", "k", k, 0)
    m = [int_param("mdcube", "m0", m0, 2), int_param("mdcube", "m1", m1, 1)]
    rate = rate_param("mdcube", "rate_mbps", rate_mbps)
    if k > 12:
        raise TopologyError(f"mdcube: k must be an integer in 0..12 (got {k})")
    per = n ** (k + 1)
    check_size("mdcube", f"n^(k+1) m0 m1 = {per} x {m[0]} x {m[1]}", per * m[0] * m[1])
    spare = (k + 1) * n ** k
    need = sum(x - 1 for x in m)
    if need > spare:
        raise TopologyError(f"mdcube: m0={m[0]}, m1={m[1]} need {need} inter-container links "
                            f"per container but a BCube({n}, {k}) container has only {spare} "
                            f"switches with a spare port")
    b = Builder("mdcube", {"n": n, "k": k, "m0": m[0], "m1": m[1], "rate_mbps": rate})
    containers = m[0] * m[1]
    per_level = n ** k
    switches, servers = [], []
    for c in range(containers):
        coords = {"m0": c % m[0], "m1": c // m[0]}
        switches.append([b.switch(f"b{c}_{level}_{j}", "bcube", level=level, index=j,
                                  container=c, **coords)
                         for level in range(k + 1) for j in range(per_level)])
        cells = []
        for idx in range(per):
            digits = bcube_digits(idx, n, k)
            cells.append(b.host(f"h{c * per + idx + 1}", ports=k + 1, relay=True,
                                container=c, **coords,
                                **{f"d{level}": digits[level] for level in range(k + 1)}))
        servers.append(cells)
    for c in range(containers):
        for level in range(k + 1):
            for j in range(per_level):
                for digit in range(n):
                    b.link(servers[c][_bcube_server_at(j, level, digit, n, k)],
                           switches[c][level * per_level + j], rate)
    offset = 0
    for d in range(2):
        stride = 1 if d == 0 else m[0]
        for c in range(containers):
            i = (c // stride) % m[d]
            for j in range(i + 1, m[d]):
                other = c + (j - i) * stride
                b.link(switches[c][offset + j - 1], switches[other][offset + i], rate,
                       a_port=n + 1, b_port=n + 1)
        offset += m[d] - 1
    return b.build()


# ---- VL2: a Clos of ToRs, aggregation and intermediate switches ---------------------------

def vl2(da: int = 4, di: int = 4, hosts_per_tor: int = 4,
        host_rate: float = DEFAULT_RATE_MBPS, fabric_rate: float = DEFAULT_RATE_MBPS) -> Topology:
    """VL2 (Greenberg et al. 2009): di aggregation switches with da ports (da/2 down to
    ToRs, da/2 up), da/2 intermediate switches with di ports (one to every aggregation
    switch), da di / 4 ToRs each with two uplinks, to the aggregation pair 2p, 2p+1 that
    serves it. Both counts must be even. ToR ports: hosts, then the pair; aggregation
    ports: its ToRs, then the intermediates; intermediate port a+1 faces aggregation a.
    VL2's paper hangs 20 servers on each ToR; `hosts_per_tor` sets it."""
    da = int_param("vl2", "da", da, 2, even=True)
    di = int_param("vl2", "di", di, 2, even=True)
    hosts_per_tor = int_param("vl2", "hosts_per_tor", hosts_per_tor, 1)
    host_rate = rate_param("vl2", "host_rate", host_rate)
    fabric_rate = rate_param("vl2", "fabric_rate", fabric_rate)
    tors = da * di // 4
    check_size("vl2", f"hosts_per_tor x da di / 4 = {hosts_per_tor} x {tors}",
               hosts_per_tor * tors)
    b = Builder("vl2", {"da": da, "di": di, "hosts_per_tor": hosts_per_tor,
                        "host_rate": host_rate, "fabric_rate": fabric_rate})
    ints = [b.switch(f"i{x + 1}", "int", index=x) for x in range(da // 2)]
    aggs = [b.switch(f"a{x + 1}", "agg", index=x, pair=x // 2) for x in range(di)]
    tor_names = [b.switch(f"t{x + 1}", "tor", index=x, pair=x // (da // 2))
                 for x in range(tors)]
    h = 0
    for x, tor in enumerate(tor_names):
        for i in range(hosts_per_tor):
            h += 1
            b.link(tor, b.host(f"h{h}", tor=x, index=i), host_rate)
    for x, tor in enumerate(tor_names):
        pair = x // (da // 2)
        for agg in aggs[2 * pair:2 * pair + 2]:
            b.link(tor, agg, fabric_rate)
    for agg in aggs:
        for inter in ints:
            b.link(agg, inter, fabric_rate)
    return b.build()


# ---- Torus: a k-ary n-cube of switches, a host on each ---------------------------------

def torus_sides(k: int, n: int, sides: str) -> list[int]:
    """The side of each dimension: `sides` ("4x4", "3x3x2") or n sides of k."""
    if sides in ("", None):
        n = int_param("torus", "n", n, 2)
        k = int_param("torus", "k", k, 2)
        out = [k] * n
    else:
        try:
            out = [int(x) for x in str(sides).lower().split("x")]
        except ValueError:
            raise TopologyError(f"torus: sides must look like 4x4 or 3x3x2 (got {sides!r})") \
                from None
        if len(out) < 2:
            raise TopologyError(f"torus: sides {sides!r} has {len(out)} dimension; "
                                "at least 2 are needed")
        if min(out) < 2:
            raise TopologyError(f"torus: sides {sides!r} has a side below 2")
    size = 1
    for side in out:
        size *= side
        check_size("torus", "x".join(map(str, out)), size)
    return out


def torus(k: int = 4, n: int = 2, sides: str = "",
          rate_mbps: float = DEFAULT_RATE_MBPS) -> Topology:
    """Torus (the k-ary n-cube of Blue Gene/L's network): a switch per node, joined to
    its two neighbours along every dimension with wraparound, and one host on each.
    N = k^n nodes (or the product of `sides`, e.g. "3x3x2"); a dimension of side 2 has
    one link per neighbour pair, else N links. Switch port 1 faces the host; port 2 + 2d
    the neighbour one step up dimension d, port 3 + 2d the one a step down."""
    dims = torus_sides(k, n, sides)
    rate = rate_param("torus", "rate_mbps", rate_mbps)
    params: dict = {"sides": "x".join(map(str, dims)), "rate_mbps": rate}
    b = Builder("torus", params)
    total = 1
    for side in dims:
        total *= side
    coords = [_mixed_digits(i, dims) for i in range(total)]
    names = [b.switch(f"t{i + 1}", "torus", index=i,
                      **{f"x{d}": c for d, c in enumerate(coords[i])})
             for i in range(total)]
    for i in range(total):
        b.link(names[i], b.host(f"h{i + 1}", 1, False, index=i,
                                **{f"x{d}": c for d, c in enumerate(coords[i])}), rate,
               a_port=1, b_port=0)
    for d, side in enumerate(dims):
        step = 1
        for s in dims[:d]:
            step *= s
        for i in range(total):
            c = coords[i][d]
            if side == 2 and c == 1:
                continue  # the pair is joined once
            up = i + step if c + 1 < side else i - c * step
            b.link(names[i], names[up], rate, a_port=2 + 2 * d,
                   b_port=2 + 2 * d if side == 2 else 3 + 2 * d)
    return b.build()


def torus_coords(topo: Topology, node: str) -> tuple[int, ...]:
    """A torus switch's or host's coordinates (x0, x1, ...)."""
    labels = dict(topo.node(node).labels)
    return tuple(labels[f"x{d}"] for d in range(len(topo.param("sides").split("x"))))


# ---- Rail-optimised: NIC i of every server on rail leaf i, spines above ------------------

def rail(servers: int = 4, rails: int = 4, spines: int = 2,
         nic_rate: float = DEFAULT_RATE_MBPS, nvlink_rate: float = 4 * DEFAULT_RATE_MBPS,
         uplink_rate: float = DEFAULT_RATE_MBPS) -> Topology:
    """Rail-optimised two-tier fabric (the layout of today's GPU clusters): each server has
    `rails` accelerators (hosts) and as many NICs; its internal switch (NVLink/PCIe,
    `nvlink_rate`) joins them, and NIC i goes to rail leaf i; every rail leaf connects to
    every spine. Server switch ports: 1..rails face its accelerators, rails+1+i is NIC i;
    leaf ports: 1..servers, then the spines; spine port i+1 faces rail i. Hosts: servers x
    rails; switches: servers + rails + spines; links: 2 servers rails + rails spines."""
    servers = int_param("rail", "servers", servers, 1)
    rails = int_param("rail", "rails", rails, 1)
    spines = int_param("rail", "spines", spines, 1)
    nic = rate_param("rail", "nic_rate", nic_rate)
    nvlink = rate_param("rail", "nvlink_rate", nvlink_rate)
    uplink = rate_param("rail", "uplink_rate", uplink_rate)
    check_size("rail", f"servers x rails = {servers} x {rails}", servers * rails)
    b = Builder("rail", {"servers": servers, "rails": rails, "spines": spines,
                         "nic_rate": nic, "nvlink_rate": nvlink, "uplink_rate": uplink})
    spine_names = [b.switch(f"sp{j + 1}", "spine", index=j) for j in range(spines)]
    leaves = [b.switch(f"r{i + 1}", "rail", rail=i) for i in range(rails)]
    boxes = [b.switch(f"sv{s + 1}", "server", server=s) for s in range(servers)]
    for s, box in enumerate(boxes):
        for i in range(rails):
            b.link(box, b.host(f"h{s * rails + i + 1}", server=s, rail=i), nvlink)
        for i in range(rails):
            b.link(box, leaves[i], nic)
    for leaf in leaves:
        for spine in spine_names:
            b.link(leaf, spine, uplink)
    return b.build()


# ---- Hybrid electrical/optical: Helios, c-Through -------------------------------------

def hybrid(racks: int = 4, hosts_per_rack: int = 4, circuits: int = 1, cores: int = 1,
           host_rate: float = DEFAULT_RATE_MBPS, packet_rate: float = DEFAULT_RATE_MBPS,
           circuit_rate: float = 2 * DEFAULT_RATE_MBPS) -> Topology:
    """Hybrid packet/circuit fabric (c-Through, Wang et al. 2010; Helios, Farrington et al.
    2010): ToRs (`tor`) on `cores` electrical core switches at `packet_rate` (the
    oversubscribed packet fabric), and `circuits` optical ports per ToR at `circuit_rate`
    on one optical circuit switch (`ocs`), whose circuits, each joining two racks, the
    controller sets. ToR ports: hosts, then cores, then its optical ports; OCS port
    1 + r circuits + c is rack r's optical port c. Hosts: racks x hosts_per_rack; switches:
    racks + cores + 1; links: hosts + racks (cores + circuits)."""
    racks = int_param("hybrid", "racks", racks, 2)
    hosts_per_rack = int_param("hybrid", "hosts_per_rack", hosts_per_rack, 1)
    circuits = int_param("hybrid", "circuits", circuits, 1)
    if circuits > racks - 1:
        raise TopologyError(f"hybrid: circuits must be in 1..{racks - 1} (racks - 1) "
                            f"(got {circuits})")
    cores = int_param("hybrid", "cores", cores, 1)
    host_rate = rate_param("hybrid", "host_rate", host_rate)
    packet_rate = rate_param("hybrid", "packet_rate", packet_rate)
    circuit_rate = rate_param("hybrid", "circuit_rate", circuit_rate)
    check_size("hybrid", f"racks x hosts_per_rack = {racks} x {hosts_per_rack}",
               racks * hosts_per_rack)
    b = Builder("hybrid", {"racks": racks, "hosts_per_rack": hosts_per_rack,
                           "circuits": circuits, "cores": cores, "host_rate": host_rate,
                           "packet_rate": packet_rate, "circuit_rate": circuit_rate})
    core_names = [b.switch(f"c{j + 1}", "core", index=j) for j in range(cores)]
    ocs = b.switch("o1", "ocs")
    tors = [b.switch(f"e{r + 1}", "tor", rack=r) for r in range(racks)]
    h = 0
    for r, tor in enumerate(tors):
        for i in range(hosts_per_rack):
            h += 1
            b.link(tor, b.host(f"h{h}", rack=r, index=i), host_rate)
        for core in core_names:
            b.link(tor, core, packet_rate)
        for c in range(circuits):
            b.link(tor, ocs, circuit_rate, b_port=1 + r * circuits + c)
    return b.build()


def rack_of(topo: Topology, host: str) -> int:
    """A hybrid fabric's rack of `host`."""
    rack = topo.host(host).label("rack")
    if rack is None:
        raise KeyError(f"{host} has no rack")
    return rack
