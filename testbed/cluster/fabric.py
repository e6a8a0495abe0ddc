"""A fabric split across servers (the spec's `cluster`): the same `Fabric` (net/fabric.py),
with the cluster's executor: its nodes placed on servers (config/placement.py), built with
the cluster edition's remote classes and VXLAN links (cluster/engine.py), every command on a
node run on the node's server (cluster/servers.py), the servers checked first
(cluster/preflight.py), and each server's class dataplane, CPU monitor and job outputs. One
controller, on this machine, at this server's cluster address.
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.cluster import ClusterSpec
from testbed.config.placement import Crossing, crossings, place
from testbed.core.resources import STATE_DIR
from testbed.core.system import TestbedError, side_by_side
from testbed.dataplane import ovs, queues
from testbed.dataplane.dpapi import Agent
from testbed.dataplane.qosplane import QosPlane
from testbed.measure.conservation import SwitchCounters, switch_counters
from testbed.net.executor import LocalExecutor
from topologies.model import ifname

from . import preflight as checks
from . import servers as srv
from .servers import on_servers

if TYPE_CHECKING:
    from testbed.net.fabric import Fabric

# makes directory $1 and prints the outermost directory it made (empty if it existed)
MAKE_DIR = 'd=$1; top=; while [ ! -e "$d" ]; do top=$d; d=$(dirname "$d"); done; ' \
           'mkdir -p "$1" && echo "$top"'


class ClusterExecutor(LocalExecutor):
    """Each node's commands on the server that holds it (a fabric's executor, attached to
    it when the fabric is made: the nodes are placed then)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        super().__init__()
        self.cluster = cluster
        self.where: dict[str, str] = {}  # node -> server name
        self.conns: dict[str, srv.Conn] = {}
        self.addresses: dict[str, str] = {}  # server -> its cluster address
        self.links_crossing: list[Crossing] = []
        self.servers_found: dict[str, dict] = {}
        self.mtu_report: dict = {}
        self.underlay: dict[tuple[str, str], dict] = {}  # (from, to) -> ...
        self.underlay_devs: dict[str, set[str]] = {}  # server -> its devices
        self._shared: dict[str, bool] = {}  # server -> sees our files
        self._cpu: dict[str, Agent] = {}  # server -> its CPU monitor

    def attach(self, fab: Fabric) -> None:
        super().attach(fab)
        self.where = place(fab.topo, self.cluster)
        self.links_crossing = crossings(fab.topo, self.where, fab.links.rate_mbps)
        self._vnis = {(c.a, c.a_port, c.b, c.b_port): c.vni for c in self.links_crossing}
        control = srv.control_dir(STATE_DIR, fab.record.run_id)
        self.conns = srv.conns(self.cluster, control)

    # ---- before anything is built -----------------------------------------------------
    def preflight(self, here: Callable[[], None]) -> None:
        """Every server checked around this machine's checks (`here`): cluster/preflight.py."""
        checks.preflight(self, here)

    def _ready_ovs(self, conn: srv.Conn) -> None:
        """A server's OVS whose send socket, if it has one already, is as large as its part
        of the fabric needs (an ovs-vswitchd that carries no bridges is restarted for it, as
        on this machine; a new socket takes the raised defaults)."""
        done = conn.run(srv.module("testbed.dataplane.ovs", "ensure-started",
                                   str(self.fab.needed_buffer_bytes)), check=False, timeout=180)
        if done.returncode != 0:
            raise TestbedError(f"server {conn.name}: "
                               + done.stderr.strip().removeprefix("error: ")[-400:])

    # ---- building -----------------------------------------------------------------------
    @property
    def controller_host(self) -> str:  # type: ignore[override]
        return self.addresses[self.here]

    def net_classes(self) -> tuple[Any, Any, Any]:
        from .engine import VxlanLink, remote_classes
        opts = ["-F", self.cluster.ssh_config] if self.cluster and self.cluster.ssh_config else []
        host, switch = remote_classes(opts)
        return host, switch, VxlanLink

    def node_params(self, name: str) -> dict:
        conn = self.conns[self.where[name]]
        params: dict[str, Any] = {"server": conn.server.address if not conn.local else "localhost",
                                  "user": conn.user}
        if not conn.local:
            params["serverIP"] = self.addresses[conn.name]
            if conn.control_dir is not None:
                params["controlPath"] = f"{conn.control_dir}/{srv.CONTROL_NAME}"
        return params

    def link_params(self, index: int) -> dict:
        link = self.fab.topo.links[index]
        vni = self._vnis.get((link.a, link.a_port, link.b, link.b_port))
        return {"vni": vni} if vni is not None else {}

    @contextlib.contextmanager
    def raised_buffers(self) -> Iterator[None]:
        """This machine's socket buffer defaults raised, and every remote server's too
        (a server in a namespace of this machine shares them: `net.core` is global)."""
        with super().raised_buffers():
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
        need = min(self.fab.needed_buffer_bytes, 2**31 - 1)
        text = conn.run(["sysctl", "-n", *ovs.BUFFER_SYSCTLS]).stdout.split()
        low = {k: v for k, v in zip(ovs.BUFFER_SYSCTLS, text) if int(v) < need}
        if low:
            entry = next(e for e in self.fab.record.servers if e["name"] == conn.name)
            entry["sysctls"] = low
            self.fab.record.save()
            conn.run(["sysctl", "-q", "-w", *(f"{k}={need}" for k in low)], check=False)
        return low

    def first_packet(self) -> None:
        """Every server's OVS makes its send socket now (first host there pings another)."""
        topo = self.fab.topo
        for server in self.conns:
            mine = [h for h in topo.hosts if self.where[h.name] == server]
            other = next((h for h in topo.hosts if mine and h is not mine[0]), None)
            if other is not None:
                self.host_run(mine[0].name, ["ping", "-c", "1", "-W", "2", other.ip],
                              check=False)

    # ---- the class dataplane, one map set per server ----------------------------------
    def _pin_dir(self, plane: QosPlane, server: str) -> Path:
        return plane.pin_dir.with_name(f"{plane.pin_dir.name}-{server}")

    def install_qos(self, plane: QosPlane) -> None:
        """Each server loads the programs into its own kernel and installs its own ports
        (a remote one through its dataplane agent), with the program that counts the
        dequeues of its links to other servers on its own devices; dataplane.json then
        says where each port is and how to reach each server's agent."""
        record = self.fab.record
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
            entry = next(e for e in record.servers if e["name"] == name)
            entry["underlay"] = [{"dev": d, "clsact_added": False} for d in devs]
            if conn.local:
                with saving:
                    plane.pin(record, pins)
                ifindex = plane.install_ports(ports, pins, vnis.get(name), devs)
                added = plane.clsact_added
            else:
                with saving:
                    entry["bpf_pins"].append(str(pins))
                    record.save()
                pids = {p.node: self.fab.host_pid(p.node) for p in ports if p.is_host}
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
                record.save()
            return ifindex

        ifindex: dict[int, int] = {}
        for part in on_servers(list(servers), install):
            ifindex.update(part)
        plane.write_description(ifindex, servers, server_of, self.here)

    def teardown(self, net: Any) -> None:
        """Mininet's own stop: its nodes and links are on several servers."""
        net.stop()

    def remove_qos(self, plane: QosPlane) -> None:
        """Every server's pins, and its program on its own devices."""
        record = self.fab.record
        for entry in record.servers:
            conn = self.conns[entry["name"]]
            conn.run(["sh", "-c", srv.underlay_script(entry)], check=False)
            entry["underlay"] = []
            pins = self._pin_dir(plane, conn.name)
            if conn.local:
                shutil.rmtree(pins, ignore_errors=True)
            else:
                conn.run(["rm", "-rf", str(pins)], check=False)
                entry["bpf_pins"] = []
        record.save()

    def send_buffers(self) -> dict[str, int | None]:
        return {name: ovs.send_socket_buffer(
                    conn.run(ovs.packet_sockets_argv(True), check=False).stdout)
                for name, conn in self.conns.items()
                if any(self.where[s.name] == name for s in self.fab.topo.switches)}

    # ---- outputs written on the servers ---------------------------------------------------
    def _shares_files(self, conn: srv.Conn) -> bool:
        """Whether a server sees this machine's results directory (the same filesystem, as
        a server in a namespace here does): a token written here, read there."""
        if conn.local:
            return True
        if conn.name not in self._shared:
            mark = self.fab.out_dir / f".cluster-{self.fab.record.run_id}"
            token = f"{self.fab.record.run_id} {time.time()}"
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
        return self.conns[self.where[host]].argv(argv, netns_pid=self.fab.host_pid(host),
                                                 tty=hangup)

    def hosts_run(self, argvs: dict[str, list[str]], inputs: dict[str, str] | None = None
                  ) -> dict[str, subprocess.CompletedProcess]:
        # one at a time: each is a session of its server's one ssh connection
        return {host: self.host_run(host, argv, (inputs or {}).get(host))
                for host, argv in argvs.items()}

    def create_links(self, net: Any) -> None:
        """Made by Mininet's own classes (net_classes), each on its server."""

    def switch_groups(self) -> list[list[str]]:
        groups: dict[str, list[str]] = {}
        for sw in self.fab.topo.switches:
            groups.setdefault(self.where[sw.name], []).append(sw.name)
        return list(groups.values())

    def root_run(self, switch: str, argv: list[str], input: str | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
        return self.conns[self.where[switch]].run(argv, input=input, check=check)

    def offloads_off(self, switch: str, ifnames: list[str]) -> None:
        self.root_run(switch, side_by_side([queues.offload_command(name)
                                            for name in ifnames]))

    def switch_counters(self) -> dict[str, SwitchCounters]:
        groups = self.switch_groups()

        def read(group: list[str]) -> dict[str, SwitchCounters]:
            ports = {sw: self.fab.switch_ifaces([sw]) for sw in group}
            conn = self.conns[self.where[group[0]]]
            if conn.local:
                return switch_counters(ports, self.fab.traits.socket_drops)
            out = conn.run(srv.module("testbed.measure.conservation"),
                           input=json.dumps({"ports": ports,
                                             "socket_drops": self.fab.traits.socket_drops})).stdout
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

    def started(self) -> None:
        # each other server's own CPU monitor, following its switches' receive sockets
        for name, conn in self.conns.items():
            if not conn.local:
                ports = self.fab.switch_ifaces([s.name for s in self.fab.topo.switches
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

    def stopping(self) -> None:
        for agent in self._cpu.values():
            agent.close()
        self._cpu.clear()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()

    def manifest(self) -> dict:
        """What the manifest records of the cluster: placement, tunnels, MTU."""
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
