"""A fabric split across servers (the spec's `cluster`): the same `Fabric`, with its nodes
placed on servers (config/placement.py), built with the cluster edition's remote classes
and VXLAN links (cluster/engine.py), and every command on a node run on the node's server
(cluster/servers.py). One controller, on this machine, at this server's cluster address.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import shlex
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from testbed.config.cluster import ClusterSpec
from testbed.config.placement import Crossing, crossings, inner_mtu, place
from testbed.core.resources import STATE_DIR
from testbed.core.system import TestbedError
from testbed.dataplane import ovs
from testbed.dataplane.dpapi import Agent
from testbed.dataplane.qosplane import QosPlane
from testbed.measure.conservation import SwitchCounters, switch_counters
from testbed.net.fabric import Fabric
from topologies.model import ifname

from . import servers as srv

# makes directory $1 and prints the outermost directory it made (empty if it existed)
MAKE_DIR = 'd=$1; top=; while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done; ' \
           'mkdir -p "$1" && echo "$top"'
TUNNEL_HEADROOM = 0.95  # a tunnel's links may use this share of the underlay's goodput
_UNDERLAY: dict[tuple[str, str, str], dict] = {}  # (run id, from, to): measured once per run



def on_servers(items: list[Any], fn: Any) -> list[Any]:
    """`fn(item)` for every item (a server, or a server's switches) at once, each in a
    thread; the results in order (the first error is raised here)."""
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int, item: Any) -> None:
        try:
            results[i] = fn(item)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, x)) for i, x in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@dataclass
class ClusterFabric(Fabric):
    cluster: ClusterSpec | None = None
    where: dict[str, str] = field(default_factory=dict)  # node -> server name
    conns: dict[str, srv.Conn] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # server -> its cluster address
    links_crossing: list[Crossing] = field(default_factory=list)
    servers_found: dict[str, dict] = field(default_factory=dict)
    mtu_report: dict = field(default_factory=dict)
    underlay: dict[tuple[str, str], dict] = field(default_factory=dict)  # (from, to) -> ...
    warnings: list[str] = field(default_factory=list)  # fidelity warnings for the summary
    underlay_devs: dict[str, set[str]] = field(default_factory=dict)  # server -> its devices
    _shared: dict[str, bool] = field(default_factory=dict)  # server -> sees our files
    _cpu: dict[str, Agent] = field(default_factory=dict)  # server -> its CPU monitor

    def __post_init__(self) -> None:
        assert self.cluster is not None
        self.where = place(self.topo, self.cluster)
        self.links_crossing = crossings(self.topo, self.where, self.links.rate_mbps)
        self._vnis = {(c.a, c.a_port, c.b, c.b_port): c.vni for c in self.links_crossing}
        control = srv.control_dir(STATE_DIR, self.record.run_id)
        self.conns = srv.conns(self.cluster, control)

    # ---- before anything is built -----------------------------------------------------
    def preflight(self) -> None:
        """Every server checked (reachable, SSH, OVS, the testbed, the tunnel type), then
        the MTU the tunnels leave; nothing is created on any server before this passes."""
        assert self.cluster is not None
        servers = self.cluster.servers
        self.addresses = {s.name: srv.address_of(s, servers) for s in servers}
        found = on_servers(list(self.conns.values()),
                           lambda c: srv.check_server(c, self.cluster.tunnel))
        self.servers_found = dict(zip(self.conns, found))
        ours = {s.name for s in self.topo.switches}
        for name, info in self.servers_found.items():
            left = ours & set(info.get("bridges", "").split())
            if left:
                raise TestbedError(f"server {name}: bridge {sorted(left)[0]} already exists "
                                   "(an interrupted run?); run `testbed clean` and retry")
        if self.qos is not None:
            self._check_bpf_tools()
        self._fit_mtu()  # first: the class dataplane is sized for the fabric's MTU
        super().preflight()
        self._measure_underlay()
        # what `testbed clean` must remove on each remote server if this run is interrupted
        # (this server's entry holds only what the class dataplane adds to its own device)
        self.record.servers = [srv.remote_entry(
            conn, [s.name for s in self.topo.switches if self.where[s.name] == name],
            self.switch_ifaces([s.name for s in self.topo.switches
                                if self.where[s.name] == name])) if not conn.local
            else srv.remote_entry(conn, [], [])
            for name, conn in self.conns.items()]
        self.record.save()

    def _ready_ovs(self, conn: srv.Conn) -> None:
        """A server's OVS whose send socket, if it has one already, is as large as its part
        of the fabric needs (an ovs-vswitchd that carries no bridges is restarted for it, as
        on this machine; a new socket takes the raised defaults)."""
        done = conn.run(srv.module("testbed.dataplane.ovs", "ensure-started",
                                   str(self.needed_buffer_bytes)), check=False, timeout=180)
        if done.returncode != 0:
            raise TestbedError(f"server {conn.name}: "
                               + done.stderr.strip().removeprefix("error: ")[-400:])

    def _check_bpf_tools(self) -> None:
        """Every server compiles and loads the class dataplane's BPF programs itself."""
        def missing(conn: srv.Conn) -> list[str]:
            return conn.run(["sh", "-c", "command -v bpftool >/dev/null || echo bpftool; "
                             "command -v clang-14 >/dev/null || command -v clang >/dev/null "
                             "|| echo clang"], check=False).stdout.split()
        for name, lacks in zip(self.conns, on_servers(list(self.conns.values()), missing)):
            if lacks:
                raise TestbedError(f"server {name}: {' '.join(lacks)} not installed (the class "
                                   "dataplane's BPF programs are built and loaded on every "
                                   "server); run scripts/bootstrap.sh there")

    def _fit_mtu(self) -> None:
        assert self.cluster is not None
        pairs = {(c.a_server, c.b_server) for c in self.links_crossing}
        outer = {}
        for a, b in pairs:
            for here, there in ((a, b), (b, a)):
                outer[here] = srv.route_mtu(self.conns[here], self.addresses[there])
                self.underlay_devs.setdefault(here, set()).add(outer[here][0])
        worst = min((mtu for _, mtu in outer.values()), default=9216)
        mtu, needed = inner_mtu(self.links.mtu_bytes, worst, self.cluster.overhead,
                                self.cluster.tunnel_mtu)
        self.mtu_report = {"configured": self.links.mtu_bytes, "fabric": mtu,
                           "tunnel_overhead": self.cluster.overhead,
                           "outer": {s: {"dev": d, "mtu": m} for s, (d, m) in outer.items()},
                           "mode": self.cluster.tunnel_mtu}
        if mtu != self.links.mtu_bytes:
            said = (f"cluster: the servers' network carries {worst} bytes; the fabric's MTU "
                    f"is lowered from {self.links.mtu_bytes} to {mtu} for the "
                    f"{self.cluster.tunnel} header ({self.cluster.overhead} bytes)")
            self.log(said)
            self.warnings.append(said)
            self.links = replace(self.links, mtu_bytes=mtu)
        if needed > worst:
            raise TestbedError(
                f"cluster.tunnel_mtu: raise_outer needs an MTU of {needed} on the servers' "
                f"network (it carries {worst}); raise it on every server's "
                + ", ".join(f"{s}:{d}" for s, (d, _) in sorted(outer.items()))
                + " or use lower_inner")

    def _measure_underlay(self) -> None:
        """Each direction between two servers that tunnels join: its round trip and TCP
        goodput (once per run), the extra delay it adds to each link it carries, and a
        warning when it cannot carry all those links at their rate at once."""
        pairs = sorted({(c.a_server, c.b_server) for c in self.links_crossing}
                       | {(c.b_server, c.a_server) for c in self.links_crossing})
        for a, b in pairs:
            key = (self.record.run_id, a, b)
            if key not in _UNDERLAY:
                _UNDERLAY[key] = srv.underlay(self.conns[a], self.conns[b], self.addresses[b])
            self.underlay[(a, b)] = _UNDERLAY[key]
            need = sum(c.rate_mbps for c in self.links_crossing
                       if {c.a_server, c.b_server} == {a, b})
            got = _UNDERLAY[key]["goodput_mbps"]
            if got is None or need > TUNNEL_HEADROOM * got:
                self.warnings.append(
                    f"cluster: the {sum(1 for c in self.links_crossing if {c.a_server, c.b_server} == {a, b})} "
                    f"links from server {a} to {b} carry up to {need:g} Mb/s at once; the "
                    f"servers' network carried {got} Mb/s that way: a tunnel cannot carry its "
                    "link's rate when they are busy together")

    # ---- building -----------------------------------------------------------------------
    @property
    def controller_host(self) -> str:  # type: ignore[override]
        return self.addresses[self.here]

    def _net_classes(self) -> tuple[Any, Any, Any]:
        from .engine import VxlanLink, remote_classes
        opts = ["-F", self.cluster.ssh_config] if self.cluster and self.cluster.ssh_config else []
        host, switch = remote_classes(opts)
        return host, switch, VxlanLink

    def _node_params(self, name: str) -> dict:
        conn = self.conns[self.where[name]]
        params: dict[str, Any] = {"server": conn.server.address if not conn.local else "localhost",
                                  "user": conn.user}
        if not conn.local:
            params["serverIP"] = self.addresses[conn.name]
            if conn.control_dir is not None:
                params["controlPath"] = f"{conn.control_dir}/{srv.CONTROL_NAME}"
        return params

    def _link_params(self, index: int) -> dict:
        link = self.topo.links[index]
        vni = self._vnis.get((link.a, link.a_port, link.b, link.b_port))
        return {"vni": vni} if vni is not None else {}

    @contextlib.contextmanager
    def _raised_buffers(self) -> Iterator[None]:
        """This machine's socket buffer defaults raised, and every remote server's too
        (a server in a namespace of this machine shares them: `net.core` is global)."""
        with super()._raised_buffers():
            remote = [c for c in self.conns.values() if not c.local]
            saved = [self._raise_remote(c) for c in remote]
            try:
                on_servers(remote, self._ready_ovs)
                yield
            finally:
                for conn, old in zip(remote, saved):
                    if old:
                        conn.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in old.items())],
                                 check=False)

    def _raise_remote(self, conn: srv.Conn) -> dict[str, str]:
        """Raises a server's buffer defaults that are below what the fabric needs; the old
        values of those it raised."""
        need = min(self.needed_buffer_bytes, 2**31 - 1)
        text = conn.run(["sysctl", "-n", *ovs.BUFFER_SYSCTLS]).stdout.split()
        low = {k: v for k, v in zip(ovs.BUFFER_SYSCTLS, text) if int(v) < need}
        if low:
            entry = next(e for e in self.record.servers if e["name"] == conn.name)
            entry["sysctls"] = low
            self.record.save()
            conn.run(["sysctl", "-q", "-w", *(f"{k}={need}" for k in low)], check=False)
        return low

    def _first_packet(self) -> None:
        """Every server's OVS makes its send socket now (first host there pings another)."""
        for server in self.conns:
            mine = [h for h in self.topo.hosts if self.where[h.name] == server]
            other = next((h for h in self.topo.hosts if mine and h is not mine[0]), None)
            if other is not None:
                self.host_run(mine[0].name, ["ping", "-c", "1", "-W", "2", other.ip],
                              check=False)

    # ---- the class dataplane, one map set per server ----------------------------------
    def _pin_dir(self, plane: QosPlane, server: str) -> Path:
        return plane.pin_dir.with_name(f"{plane.pin_dir.name}-{server}")

    def _install_qos(self, plane: QosPlane) -> None:
        """Each server loads the programs into its own kernel and installs its own ports
        (a remote one through its dataplane agent), with the program that counts the
        dequeues of its links to other servers on its own devices; dataplane.json then
        says where each port is and how to reach each server's agent."""
        server_of = {p.node: self.where[p.node] for p in plane.ports}
        port_id = {p.ifname: p.id for p in plane.ports}
        vnis: dict[str, dict[int, int]] = {}
        for c in self.links_crossing:
            vnis.setdefault(c.a_server, {})[port_id[ifname(c.a, c.a_port)]] = c.vni
            vnis.setdefault(c.b_server, {})[port_id[ifname(c.b, c.b_port)]] = c.vni
        servers: dict[str, dict] = {}
        for name, conn in self.conns.items():
            if name in server_of.values():
                pins = self._pin_dir(plane, name)
                servers[name] = {"map_dir": str(pins / "maps"), "prog_dir": str(pins / "progs"),
                                 "agent": None if conn.local else conn.argv(srv.module(srv.DPAGENT))}

        saving = threading.Lock()  # the servers install at once; one record

        def install(name: str) -> dict[int, int]:
            conn = self.conns[name]
            pins = self._pin_dir(plane, name)
            ports = [p for p in plane.ports if server_of[p.node] == name]
            devs = tuple(sorted(self.underlay_devs.get(name, ()))) if vnis.get(name) else ()
            entry = next(e for e in self.record.servers if e["name"] == name)
            entry["underlay"] = [{"dev": d, "clsact_added": False} for d in devs]
            if conn.local:
                with saving:
                    plane.pin(self.record, pins)
                ifindex = plane.install_ports(ports, pins, vnis.get(name), devs)
                added = plane.clsact_added
            else:
                with saving:
                    entry["bpf_pins"].append(str(pins))
                    self.record.save()
                pids = {p.node: self.host_pid(p.node) for p in ports if p.is_host}
                request = {"install": plane.to_data(pids), "ports": [p.id for p in ports],
                           "pin_dir": str(pins), "vnis": vnis.get(name, {}),
                           "underlay": list(devs)}
                out = conn.run(srv.module(srv.DPAGENT),
                               input=json.dumps(request) + "\n", timeout=120).stdout
                reply = json.loads(out.strip().splitlines()[-1])
                if "error" in reply:
                    raise TestbedError(f"server {name}: installing the class dataplane "
                                       f"failed: {reply['error']}")
                ifindex = {int(k): v for k, v in reply["result"]["ifindex"].items()}
                added = reply["result"]["clsact_added"]
            with saving:
                entry["underlay"] = [{"dev": d, "clsact_added": d in added} for d in devs]
                self.record.save()
            return ifindex

        ifindex: dict[int, int] = {}
        for part in on_servers(list(servers), install):
            ifindex.update(part)
        plane.write_description(ifindex, servers, server_of, self.here)

    def _remove_qos(self, plane: QosPlane) -> None:
        """Every server's pins, and its program on its own devices."""
        for entry in self.record.servers:
            conn = self.conns[entry["name"]]
            conn.run(["sh", "-c", srv.underlay_script(entry)], check=False)
            entry["underlay"] = []
            pins = self._pin_dir(plane, conn.name)
            if conn.local:
                shutil.rmtree(pins, ignore_errors=True)
            else:
                conn.run(["rm", "-rf", str(pins)], check=False)
                entry["bpf_pins"] = []
        self.record.save()

    def send_buffers(self) -> dict[str, int | None]:
        return {name: ovs.send_socket_buffer(
                    conn.run(ovs.packet_sockets_argv(True), check=False).stdout)
                for name, conn in self.conns.items()
                if any(self.where[s.name] == name for s in self.topo.switches)}

    # ---- outputs written on the servers ---------------------------------------------------
    def _shares_files(self, conn: srv.Conn) -> bool:
        """Whether a server sees this machine's results directory (the same filesystem, as
        a server in a namespace here does): a token written here, read there."""
        if conn.local:
            return True
        if conn.name not in self._shared:
            mark = self.out_dir / f".cluster-{self.record.run_id}"
            token = f"{self.record.run_id} {time.time()}"
            mark.write_text(token)
            seen = conn.run(["cat", str(mark)], check=False).stdout.strip()
            self._shared[conn.name] = seen == token
            mark.unlink(missing_ok=True)
        return self._shared[conn.name]

    @contextlib.contextmanager
    def writing_in(self, path: Path, hosts: list[str]) -> Iterator[None]:
        """The directory on every server of `hosts` that does not share this machine's
        files; what they wrote there is copied back at the end (and removed there)."""
        path.mkdir(parents=True, exist_ok=True)
        away = [self.conns[n] for n in sorted({self.where[h] for h in hosts})
                if not self._shares_files(self.conns[n])]
        made = {}  # server -> the outermost directory made there
        for conn in away:
            made[conn.name] = conn.run(["sh", "-c", MAKE_DIR, "-", str(path)]).stdout.strip()
        try:
            yield
        finally:
            for conn in away:
                packed = conn.run(["sh", "-c", f"tar -C {shlex.quote(str(path))} -cz . | "
                                   "base64 -w0"], timeout=300).stdout
                with tarfile.open(fileobj=io.BytesIO(base64.b64decode(packed)),
                                  mode="r:gz") as tar:
                    # plain files and directories inside `path` only (Python 3.11.2 has
                    # no extraction filters)
                    tar.extractall(path, members=[
                        m for m in tar.getmembers() if (m.isfile() or m.isdir())
                        and not m.name.startswith("/") and ".." not in Path(m.name).parts])
                conn.run(["rm", "-rf", made[conn.name] or str(path)], check=False)

    # ---- where commands run -------------------------------------------------------------
    def host_argv(self, host: str, argv: list[str], hangup: bool = False) -> list[str]:
        return self.conns[self.where[host]].argv(argv, netns_pid=self.host_pid(host),
                                                 tty=hangup)

    def switch_groups(self) -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for sw in self.topo.switches:
            groups.setdefault(self.where[sw.name], []).append(sw.name)
        return list(groups.values())

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return self.conns[self.where[switch]].run(argv, input=input, check=check)

    def switch_counters(self) -> dict[str, SwitchCounters]:
        groups = self.switch_groups()

        def read(group: list[str]) -> dict[str, SwitchCounters]:
            ports = {sw: self.switch_ifaces([sw]) for sw in group}
            conn = self.conns[self.where[group[0]]]
            if conn.local:
                return switch_counters(ports, self.traits.socket_drops)
            out = conn.run(srv.module("testbed.measure.conservation"),
                           input=json.dumps({"ports": ports,
                                             "socket_drops": self.traits.socket_drops})).stdout
            return {sw: SwitchCounters(**c) for sw, c in json.loads(out).items()}

        counters: dict[str, SwitchCounters] = {}
        for part in on_servers(groups, read):
            counters.update(part)
        return counters

    # ---- the other servers' CPU --------------------------------------------------------
    @property
    def here(self) -> str:  # type: ignore[override]
        local = next((c for c in self.conns.values() if c.local), None)
        if local is None:
            raise TestbedError("cluster: one server must be this machine (address: localhost);"
                               " it runs the controller")
        return local.name

    def start(self) -> None:
        super().start()
        # each other server's own CPU monitor, following its switches' receive sockets
        for name, conn in self.conns.items():
            if not conn.local:
                ports = self.switch_ifaces([s.name for s in self.topo.switches
                                            if self.where[s.name] == name])
                self._cpu[name] = Agent(conn.argv(srv.module("testbed.measure.cpu")),
                                        name, {"watch": ports})

    def servers_cpu(self, t_start: float, t_end: float) -> dict[str, dict]:
        return {name: agent.call("window", t_start, t_end) for name, agent in self._cpu.items()}

    def packets_by_server(self, per_switch: dict[str, dict]) -> dict[str, int]:
        out = {name: 0 for name in self.conns}
        for switch, counts in per_switch.items():
            out[self.where[switch]] += counts["in"]
        return out

    def stop(self) -> None:
        try:
            for agent in self._cpu.values():
                agent.close()
            self._cpu.clear()
            super().stop()
        finally:
            for conn in self.conns.values():
                conn.close()

    def manifest(self) -> dict:
        """What the manifest records of the cluster: placement, tunnels, MTU."""
        assert self.cluster is not None
        return {"servers": {s.name: {"address": s.address, "cluster_address":
                                     self.addresses.get(s.name), "user": srv.ssh_user(s),
                                     "nodes": sorted(n for n, w in self.where.items()
                                                     if w == s.name)}
                            for s in self.cluster.servers},
                "placement": self.cluster.placement, "tunnel": self.cluster.tunnel,
                "mtu": self.mtu_report,
                "underlay": {f"{a}->{b}": u for (a, b), u in self.underlay.items()},
                "crossing_links": [{"link": c.name, "servers": [c.a_server, c.b_server],
                                    "vni": c.vni, "rate_mbps": c.rate_mbps,
                                    "extra_delay_ms": self._extra_delay_ms(c)}
                                   for c in self.links_crossing]}

    def _extra_delay_ms(self, c: Crossing) -> float | None:
        """What a tunnel adds to its link's one-way delay: half the servers' minimum
        round trip over their own network."""
        u = self.underlay.get((c.a_server, c.b_server)) or {}
        return round(u["rtt_min_ms"] / 2, 4) if u.get("rtt_min_ms") is not None else None
