"""Packet conservation: per switch, packets in (ports and the controller's packet-outs)
against packets accounted for (egress qdiscs, to the controller, dropped by the flow
table). Anything left was lost inside OVS without being counted."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyroute2 import IPRoute

from testbed.core.system import run
from testbed.dataplane import ovs
from testbed.dataplane.dpapi import Dataplane
from topologies.model import port_of

from .queues import qdisc_stats

if TYPE_CHECKING:
    from testbed.net.fabric import Fabric

@dataclass
class SwitchCounters:
    rx: int = 0  # packets the switch's ports received
    enqueued: int = 0  # packets that reached an egress qdisc (sent + dropped + queued)
    qdisc_drops: int = 0
    to_controller: int = 0  # flow entries that send to the controller
    table_drops: int = 0  # explicit drop entries (unroutable packets)
    socket_drops: int = 0  # OVS receive-socket overflow


@dataclass
class ConservationSnapshot:
    t: float
    switches: dict[str, SwitchCounters] = field(default_factory=dict)
    packet_out: dict[str, int] = field(default_factory=dict)


_FLOW_RE = re.compile(r"n_packets=(\d+).*actions=(\S+)")


def conservation_snapshot(fabric: Fabric) -> ConservationSnapshot:
    topo = fabric.topo
    ctrl_state = fabric.controller_state(since=time.time())
    snap = ConservationSnapshot(t=time.time())
    snap.switches = fabric.switch_counters()
    for name, b in _bpf_port_counters(fabric).items():
        # The BPF dataplane drops before the qdisc (counted here, not by it, headroom
        # overflows included); its resume kicks pass the qdisc, and at the far switch OVS
        # drops them by a counted table-miss entry.
        c = snap.switches.get(port_of(name)[0])
        if c is None:  # a host's port: conservation is per switch
            continue
        c.enqueued += b["drops"] - b["kicks_sent"]
        c.qdisc_drops += b["drops"]
    counters = ctrl_state.counters if ctrl_state else {}
    plugins = ctrl_state.plugin_guard.packet_outs if ctrl_state else {}
    for sw in topo.switches:
        snap.packet_out[sw.name] = (counters.get(str(sw.dpid), {}).get("packet_out", 0)
                                    + plugins.get(str(sw.dpid), 0))
    return snap


def switch_counters(ports: dict[str, list[str]], socket_drops: bool,
                    run_at: Callable[..., subprocess.CompletedProcess] | None = None,
                    groups: list[list[str]] | None = None) -> dict[str, SwitchCounters]:
    """The counters of these switches (name -> its ports' interfaces) on this machine: what
    the ports received, what reached their egress qdiscs, what the flow tables sent to the
    controller or dropped (and, with `socket_drops`, what OVS's receive sockets dropped). A
    cluster's servers run this through `python -m testbed.measure.conservation`. A fabric
    forwarded by several processes (net/partitioned.py) gives `run_at(switch, argv,
    check=False)`, which aims an Open vSwitch tool at the switch's process, and `groups`, the
    switches by process."""
    def at(switch: str, argv: list[str]) -> subprocess.CompletedProcess:
        return run_at(switch, argv, check=False) if run_at else run(argv, check=False)

    # OpenFlow rule counters lag the datapath until a revalidator round pulls them in;
    # kernel counters do not. Wait for a full round so both describe the same packets.
    with ThreadPoolExecutor(max_workers=8) as pool:  # each process's round, side by side
        list(pool.map(lambda group: at(group[0], ["ovs-appctl", "--timeout=10",
                                                  "revalidator/wait"]),
                      [g for g in groups or [list(ports)] if g]))
    drops = (ovs.port_socket_drops({n for names in ports.values() for n in names})
             if socket_drops else {})
    # one ovs-ofctl per switch, a few at once: in series they took most of a snapshot
    with ThreadPoolExecutor(max_workers=4) as pool:
        tables = dict(zip(ports, pool.map(
            lambda sw: at(sw, ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", sw]).stdout,
            ports)))
    out = {}
    with IPRoute() as ipr:
        for sw, names in ports.items():
            c = SwitchCounters()
            for name in names:
                c.rx += int(Path(f"/sys/class/net/{name}/statistics/rx_packets").read_text())
                st = qdisc_stats(ipr, ipr.link_lookup(ifname=name)[0]) or {}
                c.enqueued += st.get("packets", 0) + st.get("drops", 0) + st.get("qlen", 0)
                c.qdisc_drops += st.get("drops", 0)
                c.socket_drops += drops.get(name, 0)
            for m in _FLOW_RE.finditer(tables[sw]):
                if m.group(2).startswith("CONTROLLER"):
                    if "," in m.group(2):
                        continue  # forwarded, with a copy to the controller (hedera)
                    c.to_controller += int(m.group(1))
                elif m.group(2) == "drop":
                    c.table_drops += int(m.group(1))
            out[sw] = c
    return out


def _bpf_port_counters(fabric: Fabric) -> dict[str, dict[str, int]]:
    plane = getattr(fabric, "qos_plane", None)
    if plane is None:
        return {}
    dp = Dataplane(plane.description)
    try:
        ncls = len(dp.classes)
        kicks = {p["id"]: dp.queue(p["id"], 0).kicks for p in dp.ports}
        return {p["ifname"]: {
            "drops": sum(dp.queue(p["id"], c).drops for c in range(ncls)),
            "kicks_sent": kicks[p["id"]]}
            for p in dp.ports}
    finally:
        dp.close()


def conservation_report(before: ConservationSnapshot, after: ConservationSnapshot) -> dict:
    """Per switch: packets in (ports + controller packet-outs) minus packets accounted for
    (egress qdiscs + to controller + dropped by the flow table). Anything left was lost
    inside OVS without being counted: the silent loss of an undersized send buffer."""
    per_switch = {}
    total_lost = 0
    total_in = 0
    for name, a in after.switches.items():
        b = before.switches[name]
        pin = (a.rx - b.rx) + (after.packet_out[name] - before.packet_out[name])
        accounted = ((a.enqueued - b.enqueued) + (a.to_controller - b.to_controller)
                     + (a.table_drops - b.table_drops))
        lost = pin - accounted
        per_switch[name] = {"in": pin, "accounted": accounted, "lost": lost,
                            "qdisc_drops": a.qdisc_drops - b.qdisc_drops,
                            "socket_drops": a.socket_drops - b.socket_drops}
        total_lost += lost
        total_in += pin
    return {"packets_in": total_in, "lost_in_switches": total_lost,
            "qdisc_drops": sum(v["qdisc_drops"] for v in per_switch.values()),
            "socket_drops": sum(v["socket_drops"] for v in per_switch.values()),
            "per_switch": per_switch}


def main() -> int:
    """`switch_counters` for another machine: {"ports": {...}, "socket_drops": bool} on
    stdin, {switch: counters} as JSON on stdout."""
    args = json.load(sys.stdin)
    counters = switch_counters(args["ports"], args["socket_drops"])
    json.dump({sw: dataclasses.asdict(c) for sw, c in counters.items()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
