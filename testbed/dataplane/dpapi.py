"""The dataplane API of a running fabric: what controller apps (built-in or a user's plugin)
and the monitor call to set thresholds, pause and resume a class on a port, and read queue
depth and counters.

It is opened from `dataplane.json`, which the fabric writes once its queues and BPF programs
are in place. Standard library only (bpf(2) through ctypes, netlink through a raw socket), so
that it runs unchanged inside Ryu's eventlet loop; class weights, a change a policy makes a few
times a second at most, go through `tc`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.config.loader import from_data
from testbed.config.qos import EV_OVERFLOW, EV_XOFF, EV_XON, EcnProfile, PfcConfig, QosConfig
from testbed.config.units import class_minor, frame_bytes
from testbed.dataplane import qos_render as qos
from testbed.dataplane.bpfsys import Map, RingBuffer

CLONE_NEWNET = 0x40000000
KICK_FRAME = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x00" + b"\x88\xb5" + bytes(46)
_libc = ctypes.CDLL(None, use_errno=True)


def netns_socket(netns_path: str | None, family: int, kind: int, proto: int) -> socket.socket:
    """A socket created inside another network namespace (it stays bound to it)."""
    if netns_path is None:
        return socket.socket(family, kind, proto)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns_path}")
        try:
            return socket.socket(family, kind, proto)
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the controller's namespace")
    finally:
        os.close(own)
        os.close(target)


@dataclass(frozen=True)
class QueueState:
    bytes: int
    pkts: int
    enq_pkts: int
    deq_pkts: int
    drops: int
    marks: int
    not_ect_over_k: int
    enq_bytes: int
    kicks: int


@dataclass(frozen=True)
class DscpCounters:
    enq_bytes: int
    enq_pkts: int
    marks: int
    drops: int


@dataclass(frozen=True)
class IngressState:
    bytes: int
    paused: int
    xoff_ns: int
    pauses: int
    bytes_after_xoff: int
    last_arrival_ns: int
    paused_ns: int
    overflow_drops: int
    untracked: int
    overflow_escaped: int   # overflowed, but already forwarded: not dropped (see the C)


@dataclass(frozen=True)
class PfcEvent:
    ns: int
    xoff_ns: int
    last_arrival_ns: int
    bytes_after_xoff: int
    kind: int
    rx_port: int
    tx_port: int
    cls: int
    bytes: int

    @property
    def name(self) -> str:
        return {EV_XOFF: "pause", EV_XON: "resume", EV_OVERFLOW: "overflow"}[self.kind]


def _routed(kind: type | None = None) -> Callable:
    """A method whose first argument is a port: run here when the port is on this server,
    else by that server's agent (its result rebuilt as `kind`)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def method(self: Dataplane, port: int, *args: Any) -> Any:
            server = self.server_of(port)
            if server == self.here:
                return fn(self, port, *args)
            out = self.agent(server).call(fn.__name__, port, *args)
            return kind(**out) if kind is not None else out
        return method
    return wrap


class Dataplane:
    """One fabric's dataplane. A fabric split across servers (testbed/cluster/) has one BPF
    map set per server: the ports of this one (`here`) are read and written directly, the
    others through their server's agent (testbed/net/dpagent.py, over ssh), which runs the
    same methods there."""

    def __init__(self, description: str | Path | dict, here: str | None = None,
                 forward: bool = True):
        """`here`: this server (default: the one that wrote the description); `forward`:
        whether to reach the other servers (an agent reaches only its own ports)."""
        self.desc = (description if isinstance(description, dict)
                     else json.loads(Path(description).read_text()))
        self.servers: dict[str, dict] = self.desc.get("servers") or {}
        self.here: str | None = here if here is not None else self.desc.get("here")
        self.forward = forward
        self.map_dir = (self.servers[self.here]["map_dir"]
                        if self.here is not None and self.here in self.servers
                        else self.desc["map_dir"])
        self.ports: list[dict] = self.desc["ports"]
        self.by_name = {p["ifname"]: p for p in self.ports}
        self.qos: QosConfig = from_data(QosConfig, self.desc["qos"], "qos")
        self.classes: list[dict] = self.desc["qos"]["classes"]
        self.frame = frame_bytes(self.desc["mtu_bytes"])
        self._maps: dict[str, Map] = {}
        self._agents: dict[str, Agent] = {}
        # whether this server has ports (and so maps) of the fabric
        self.mine = not self.servers or self.here in self.servers
        self._arrays = {name: self._map(name).mmap_array() for name in
                        ("tb_qstate", "tb_inq", "tb_dscp_stats")} if self.mine else {}
        self._nl: dict[str | None, socket.socket] = {}
        self._gates: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self._kickers: dict[int, socket.socket] = {}
        self.paused: set[tuple[int, int]] = set()
        self._seq = 0

    def _map(self, name: str) -> Map:
        if name not in self._maps:
            self._maps[name] = Map(f"{self.map_dir}/{name}")
        return self._maps[name]

    # ---- the servers of a split fabric --------------------------------------------------
    def server_of(self, port: int) -> str | None:
        """The server a port is on (None: the fabric is on one machine)."""
        return self.ports[port].get("server")

    def is_here(self, port: int) -> bool:
        return self.server_of(port) == self.here

    def elsewhere(self) -> list[str]:
        """The other servers of a split fabric (none for an agent)."""
        return [s for s in self.servers if s != self.here] if self.forward else []

    def agent(self, server: str | None) -> Agent:
        if not self.forward:
            raise OSError(f"server {self.here}'s agent was asked about server {server}'s port")
        if server not in self._agents:
            assert server is not None
            self._agents[server] = Agent(self.servers[server]["agent"], server,
                                         {"desc": self.desc, "here": server})
        return self._agents[server]

    def close(self) -> None:
        for array in self._arrays.values():
            array.close()
        for m in self._maps.values():
            m.close()
        for a in self._agents.values():
            a.close()
        for s in [*self._nl.values(), *self._kickers.values()]:
            s.close()

    # ---- configuration -----------------------------------------------------------
    def class_index(self, name: str) -> int:
        for i, c in enumerate(self.classes):
            if c["name"] == name:
                return i
        raise KeyError(f"no traffic class {name!r}")

    def set_dscp_map(self, table: list[int]) -> None:
        """table[dscp] = class index, for all 64 code points."""
        for server in self.elsewhere():
            self.agent(server).call("set_dscp_map", table)
        if not self.mine:
            return
        m = self._map("tb_dscp")
        for dscp, cls in enumerate(table):
            m.update(qos.U32.pack(dscp), qos.U32.pack(cls))

    @_routed()
    def set_ecn(self, port: int, cls: int, profile: EcnProfile | None) -> None:
        """Marking profile of one port and class (None: no marking); its buffer limits are
        the ones the fabric installed (dataplane.json)."""
        p = self.ports[port]
        limit_bytes, limit_pkts = p["limits"][cls]
        self._map("tb_qcfg").update(qos.U32.pack(qos.slot(port, cls)), qos.qcfg_record(
            limit_bytes, limit_pkts, profile, self.frame, p["rate_mbps"]))

    def set_lossless(self, classes: list[bool]) -> None:
        """Which classes PFC makes lossless (the dataplane tracks their packets per switch)."""
        for server in self.elsewhere():
            self.agent(server).call("set_lossless", classes)
        if not self.mine:
            return
        m = self._map("tb_lossless")
        for cls in range(qos.NCLASS):
            m.update(qos.U32.pack(cls), qos.U32.pack(int(cls < len(classes) and classes[cls])))

    @_routed()
    def set_pfc(self, port: int, cls: int, cfg: PfcConfig | None) -> None:
        """PFC thresholds of a switch ingress port and class (None: PFC off there)."""
        rec = (qos.PFC_CFG.pack(1, cfg.xoff_bytes, cfg.xon_bytes, cfg.headroom_bytes)
               if cfg and cfg.enabled else qos.PFC_CFG.pack(0, 0, 0, 0))
        self._map("tb_pfc_cfg").update(qos.U32.pack(qos.slot(port, cls)), rec)

    def set_schedule(self, ports: list[int], weights: list[int] | None = None,
                     priorities: list[int] | None = None) -> None:
        """On these switch egress ports, while traffic runs: weighted round robin with
        these weights, or strict priority with these priorities (one per class, higher
        first); each class changed by one netlink request (a policy may move weights
        several times a second: no tc process per change)."""
        for server in self.elsewhere():
            theirs = [p for p in ports if self.server_of(p) == server]
            if theirs:
                self.agent(server).call("set_schedule", theirs, weights, priorities)
        fields = {f.name for f in dataclasses.fields(qos.QosPort)}
        n = len(weights if weights is not None else priorities or [])
        for port in (p for p in ports if self.is_here(p)):
            p = qos.QosPort(**{k: v for k, v in self.ports[port].items() if k in fields})
            for index in range(n):
                c = qos.htb_class_params(p, index, self.desc["mtu_bytes"],
                                         self.desc.get("burst_us", 0), weights,
                                         priorities[index] if priorities is not None else 0)
                self._send(port, qos.htb_class_change_message(self.ports[port]["ifindex"], c))

    # ---- reading -------------------------------------------------------------------
    @_routed(QueueState)
    def queue(self, port: int, cls: int) -> QueueState:
        return QueueState(*qos.QSTATE.unpack_from(self._arrays["tb_qstate"],
                                                  qos.slot(port, cls) * qos.QSTATE.size))

    @_routed(DscpCounters)
    def dscp_counters(self, port: int, dscp: int) -> DscpCounters:
        """What one code point (e.g. one job's) has put through a port's egress so far,
        whatever class it maps to."""
        return DscpCounters(*qos.DSCP_STATS.unpack_from(
            self._arrays["tb_dscp_stats"], qos.dscp_slot(port, dscp) * qos.DSCP_STATS.size))

    @_routed(IngressState)
    def ingress(self, port: int, cls: int) -> IngressState:
        return IngressState(*qos.INGRESS.unpack_from(self._arrays["tb_inq"],
                                                     qos.slot(port, cls) * qos.INGRESS.size))

    def held(self, port: int, cls: int) -> bool:
        """Whether PFC holds this transmitter's class: the ingress at the other end of its
        link asks for a pause (XOFF)."""
        return bool(self.ingress(self.ports[port]["peer"], cls).paused)

    @_routed()
    def clear_pause(self, port: int, cls: int) -> None:
        """Mark a switch ingress port's class as no longer asking for a pause (the BPF
        program's flag), when the executor ends a pause itself."""
        off = qos.slot(port, cls) * qos.INGRESS.size + 8
        struct.pack_into("Q", self._arrays["tb_inq"], off, 0)

    def events(self) -> RingBuffer:
        """PFC's events of this server's ports."""
        return RingBuffer(f"{self.map_dir}/tb_events")

    @staticmethod
    def decode(record: bytes) -> PfcEvent:
        return PfcEvent(*qos.EVENT.unpack_from(record))

    # ---- pause and resume ------------------------------------------------------------
    def _socket(self, netns: str | None) -> socket.socket:
        if netns not in self._nl:
            s = netns_socket(netns, socket.AF_NETLINK, socket.SOCK_RAW, 0)
            s.bind((0, 0))
            self._nl[netns] = s
        return self._nl[netns]

    def _gate_messages(self, port: int, cls: int) -> tuple[bytes, bytes]:
        key = (port, cls)
        if key not in self._gates:
            p = self.ports[port]
            minor = class_minor(cls)
            limit = p["tbf_limits"][cls]
            self._gates[key] = (
                qos.tbf_change_message(p["ifindex"], minor, qos.PAUSED_RATE_BPS,
                                       qos.gate_burst(self.frame, paused=True), limit),
                qos.tbf_change_message(p["ifindex"], minor, qos.RUNNING_RATE_BPS,
                                       qos.gate_burst(self.frame, paused=False), limit))
        return self._gates[key]

    def _send(self, port: int, message: bytes) -> int:
        """Send one netlink request and wait for its ack; returns CLOCK_MONOTONIC ns.
        Not reentrant: call it from one (green) thread."""
        sock = self._socket(self.ports[port]["netns"])
        self._seq += 1
        message = message[:8] + struct.pack("I", self._seq) + message[12:]
        sock.send(message)
        while True:
            reply = sock.recv(65536)
            length, mtype, _, seq, _ = struct.unpack_from("IHHII", reply)
            if mtype == 2 and seq == self._seq:  # NLMSG_ERROR carries the ack
                err = struct.unpack_from("i", reply, 16)[0]
                if err:
                    raise OSError(-err, f"qdisc or class change on "
                                        f"{self.ports[port]['ifname']}: {os.strerror(-err)}")
                return time.monotonic_ns()

    def prepare(self, classes: list[int]) -> None:
        """Open every netlink and kick socket and build every gate message now, so that no
        pause pays for a namespace switch or a socket at the moment it is needed (each
        server for its own ports)."""
        for server in self.elsewhere():
            self.agent(server).call("prepare", classes)
        for p in self.ports:
            if not self.is_here(p["id"]):
                continue
            self._socket(p["netns"])
            for cls in classes:
                self._gate_messages(p["id"], cls)
            if p["id"] not in self._kickers:
                s = netns_socket(p["netns"], socket.AF_PACKET, socket.SOCK_RAW, 0)
                s.bind((p["ifname"], 0))
                self._kickers[p["id"]] = s

    @_routed()
    def pause(self, port: int, cls: int) -> int:
        """Stop transmitting class `cls` on `port` (a switch egress port or a host NIC).
        Returns when the kernel has applied it (CLOCK_MONOTONIC ns, as BPF timestamps)."""
        self.paused.add((port, cls))
        return self._send(port, self._gate_messages(port, cls)[0])

    @_routed()
    def resume(self, port: int, cls: int) -> int:
        self.paused.discard((port, cls))
        done = self._send(port, self._gate_messages(port, cls)[1])
        self._kick(port)
        return done

    def _kick(self, port: int) -> None:
        """Run the interface's qdisc now: one frame the BPF programs know to discard
        (tbqos.bpf.c, ETH_P_TB_KICK); otherwise held packets wait for the next arrival."""
        if port not in self._kickers:
            self.prepare([])
        self._kickers[port].send(KICK_FRAME)


class Agent:
    """The client of a process on another server that answers JSON lines (a dataplane agent,
    testbed/net/dpagent.py; a CPU monitor, testbed/measure/cpu.py): `hello` is its first
    request, `call` runs one of its methods there and returns the result as plain data."""

    def __init__(self, argv: list[str], server: str, hello: dict):
        self.server = server
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        self._send(hello)
        self._reply()

    def _send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message, default=_plain) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._gone()

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self._gone()
        reply = json.loads(line)
        if "error" in reply:
            raise OSError(f"server {self.server}: {reply['error']}")
        return reply.get("result")

    def _gone(self) -> None:
        self.proc.wait(5)
        err = self.proc.stderr.read().strip()[-400:] if self.proc.stderr else ""
        raise OSError(f"server {self.server}: its agent ended (exit {self.proc.returncode}): "
                      f"{err or 'no message'}")

    def call(self, method: str, *args: Any) -> Any:
        self._send({"call": method, "args": args})
        return self._reply()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def serve(handle: Callable[[dict], Any]) -> None:
    """An agent's side of `Agent`: one JSON request per line of stdin, one reply per line of
    stdout (`{"result": ...}` or `{"error": "..."}`), until stdin ends."""
    for line in sys.stdin:
        try:
            reply = {"result": handle(json.loads(line))}
        except Exception as exc:  # the caller raises it, naming this server
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply, default=_plain), flush=True)


def _plain(value: Any) -> Any:
    """JSON of a method's arguments and results (the dataclasses they are)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not plain data")
