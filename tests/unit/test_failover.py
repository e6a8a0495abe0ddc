"""Fast failover (controllers/failover.py), traced on a flow table that honours `in_port`,
watch ports and group types: with any one link between switches down and the controller
not yet told, every host pair is still delivered on every branch a select group may take,
and no packet ever passes the same switch port twice; without fast failover some pairs are
not."""
import pytest

from controllers.failover import Detour, detour, protect
from controllers.failover import plan as failover_plan
from controllers.recovery import changes, degraded, link_ports, replan
from controllers.routing import PRIORITY_DETOUR, plan
from topologies import fattree, leafspine


def deliveries(topo, p, down: set, src: str, dst: str) -> list[list[str] | None]:
    """Every path a packet from src to dst can take with the ports in `down` dead (None:
    dropped somewhere). Select groups use any live bucket; fast-failover groups the first
    live one; a rule with `in_port` matches only packets that came in on that port."""
    groups = {(g.dpid, g.group_id): g for g in p.groups}
    ip = topo.host(dst).ip
    out: list[list[str] | None] = []

    def at(sw: str, in_port: int, path: list[str], seen: set) -> None:
        assert (sw, in_port) not in seen, f"loop: {path}"
        seen = seen | {(sw, in_port)}
        dpid = topo.switch(sw).dpid
        rules = [r for r in p.for_switch(dpid)[1]
                 if dict(r.match).get("ipv4_dst") == ip
                 and dict(r.match).get("in_port", in_port) == in_port]
        best = max(rules, key=lambda r: r.priority)
        if best.group_id is not None:
            g = groups[(dpid, best.group_id)]
            live = [port for port in g.buckets if (sw, port) not in down]
            ports = set(live) if g.kind == "select" else set(live[:1])
        else:
            ports = {best.out_port} - {port for node, port in down if node == sw}
        if not ports:
            out.append(None)
        for port in sorted(ports):
            node, peer_port = topo.peer(sw, port)
            if node == dst:
                out.append(path + [node])
            else:
                at(node, peer_port, path + [node], seen)

    first, port = topo.peer(src, 0)
    at(first, port, [src, first], set())
    return out


def switch_links(topo):
    return [(a, b) for link in topo.links
            for (a, _), (b, _) in [link.ends()]
            if not topo.is_host(a) and not topo.is_host(b)]


def hosts_pairs(topo):
    return [(a.name, b.name) for a in topo.hosts for b in topo.hosts if a is not b]


@pytest.mark.parametrize("mode", ["ecmp", "single"])
@pytest.mark.parametrize("topo", [fattree(4), leafspine(2, 4, 4)], ids=["fattree", "leafspine"])
def test_any_one_link_down_every_pair_is_delivered_before_the_controller_hears(topo, mode):
    p = failover_plan(topo, mode, fast_failover=True)
    for a, b in switch_links(topo):
        down = set(link_ports(topo, a, b))
        for src, dst in hosts_pairs(topo):
            for path in deliveries(topo, p, down, src, dst):
                assert path is not None, f"{a}-{b} down: {src}->{dst} dropped"
                assert len(path) <= 2 + len(topo.switches)


@pytest.mark.parametrize("mode", ["ecmp", "single"])
def test_without_fast_failover_a_failure_drops_until_the_controller_replans(mode):
    topo = fattree(4)
    p = plan(topo, mode)
    down = set(link_ports(topo, "a1", "c1"))
    dropped = [(s, d) for s, d in hosts_pairs(topo)
               if None in deliveries(topo, p, down, s, d)]
    assert dropped
    if mode == "ecmp":  # only c1's way down into pod 0 (h1-h4) has no alternative
        assert {d for _, d in dropped} <= {"h1", "h2", "h3", "h4"}


def test_the_detours_the_docstring_names():
    topo = fattree(4)
    c1_a1 = dict(link_ports(topo, "c1", "a1"))["c1"]
    down_from_core = detour(topo, "c1", c1_a1, "h1")
    assert isinstance(down_from_core, Detour) and down_from_core.via == "a3"
    assert topo.neighbour("a3", down_from_core.via_out) == "c2"
    a1_e1 = dict(link_ports(topo, "a1", "e1"))["a1"]
    assert detour(topo, "a1", a1_e1, "h1").via == "e2"
    assert topo.neighbour("e2", detour(topo, "a1", a1_e1, "h1").via_out) == "a2"
    # an edge switch's port to its host has no detour
    e1_h1 = dict(link_ports(topo, "e1", "h1"))["e1"]
    assert detour(topo, "e1", e1_h1, "h1") is None


def test_protect_changes_only_single_hops_between_switches():
    topo = fattree(4)
    base, ff = plan(topo, "ecmp"), failover_plan(topo, "ecmp", fast_failover=True)
    assert protect(topo, base) == ff
    assert {g for g in ff.groups if g.kind == "select"} == set(base.groups)
    by_key = {(r.dpid, r.priority, r.match): r for r in ff.rules}
    for r in base.rules:
        mine = by_key[(r.dpid, r.priority, r.match)]
        peer = topo.neighbour(topo.switch_by_dpid(r.dpid).name, r.out_port) \
            if r.out_port is not None else None
        if peer is not None and not topo.is_host(peer) and "ipv4_dst" in dict(r.match):
            assert mine.group_id is not None and mine.out_port is None  # now through a group
        else:
            assert mine == r
    ff_groups = [g for g in ff.groups if g.kind == "ff"]
    assert ff_groups and all(len(g.buckets) == 2 for g in ff_groups)
    assert any(r.priority == PRIORITY_DETOUR for r in ff.rules)
    with pytest.raises(ValueError, match="fast failover needs a switched fabric"):
        from topologies import bcube
        failover_plan(bcube(4, 1), "ecmp", fast_failover=True)


def test_the_controllers_replan_keeps_fast_failover_and_its_group_ids():
    topo = fattree(4)
    installed = failover_plan(topo, "ecmp", fast_failover=True)
    down = link_ports(topo, "a1", "c1")
    new = replan(topo, "ecmp", down, installed, fast_failover=True)
    todo = changes(installed, new, degraded(topo, down))
    assert todo  # c1's way into pod 0 and the detours through it change
    old_ids = {(g.dpid, g.kind, g.buckets): g.group_id for g in installed.groups}
    for g in new.groups:
        if (g.dpid, g.kind, g.buckets) in old_ids:
            assert old_ids[(g.dpid, g.kind, g.buckets)] == g.group_id
    # on what is left, any further single link failure is still covered
    cut = degraded(topo, down)
    for a, b in switch_links(cut)[:8]:
        more = set(link_ports(cut, a, b)) | set(down)
        for src, dst in hosts_pairs(cut)[:40]:
            assert None not in deliveries(cut, new, more, src, dst) or \
                not _connected(cut, more, src, dst)


def _connected(topo, down, src, dst) -> bool:
    from topologies.graph import distances_to
    return src in distances_to(degraded(topo, down), dst)
