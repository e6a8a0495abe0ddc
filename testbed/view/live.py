"""The counters of a running fabric, read by the live view's own process (never the run's):
the runner says which fabric is up in `live.json` (its topology, its dataplane's description,
its Hedera directory); link loads come from the switch ports' byte counters in sysfs, queues,
marks, drops and pauses from the BPF dataplane's shared memory (fabrics with classes) or one
netlink dump of the ports' root qdiscs (fabrics without), decisions and training progress from
the files the controller and the workers append to."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from testbed.dataplane.dpapi import Dataplane
from testbed.dataplane.nlqdisc import root_queues
from topologies.model import Topology, ifname

from .frames import decision_name, link_loads, port_state, recent
from .layout import layout

LIVE_JSON = "live.json"


def port_bytes(ifnames: list[str]) -> dict[str, tuple[int, int]]:
    """(tx, rx) bytes of each interface that exists, from sysfs."""
    out = {}
    for name in ifnames:
        try:
            base = f"/sys/class/net/{name}/statistics/"
            with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
                out[name] = (int(tx.read()), int(rx.read()))
        except (OSError, ValueError):
            continue  # a port going away with its fabric
    return out


class Tail:
    """New JSON lines of a file that grows."""

    def __init__(self, path: Path):
        self.path, self.offset, self.partial = path, 0, ""

    def read(self) -> list[dict]:
        try:
            with open(self.path) as fh:
                fh.seek(self.offset)
                text = fh.read()
                self.offset = fh.tell()
        except OSError:
            return []
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


class LiveSource:
    """One frame at a time from a run's directory (`out_dir`) while it runs."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.started = time.time()  # the clock's origin until the runner's is known
        self.state: dict = {}
        self.state_mtime = 0.0
        self.layout: dict | None = None
        self.topo: Topology | None = None
        self.switch_ports: list[str] = []
        self.dp: Dataplane | None = None
        self.nl: socket.socket | None = None
        self.seq = 0
        self.index: dict[str, int] = {}
        self.last: tuple[float, dict[str, tuple[int, int]]] | None = None
        self.decisions: list[dict] = []
        self.hedera: Tail | None = None
        self.progress: dict[Path, tuple[int, int]] = {}  # rank file -> (size, lines)

    @property
    def t0(self) -> float:
        """The run's start (live.json's, once the first fabric is up): frames count from it,
        as the timeline and the replay do."""
        return self.state.get("t0_unix_s", self.started)

    def _phase(self) -> None:
        """Follows live.json: the fabric that is up now (or none)."""
        path = self.out_dir / LIVE_JSON
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if mtime == self.state_mtime:
            return
        self.state_mtime = mtime
        try:
            state = json.loads(path.read_text())
        except ValueError:
            return  # written as we read: next tick
        self.close()
        self.state = state
        if not state.get("up"):
            return
        self.topo = Topology.from_json(Path(state["topology"]).read_text())
        self.layout = {**layout(self.topo), "phase": state["slug"], "label": state["label"]}
        self.switch_ports = [ifname(s.name, p) for s in self.topo.switches
                             for p, _, _ in self.topo.ports_of(s.name)]
        if state.get("dataplane"):
            try:
                self.dp = Dataplane(state["dataplane"])
            except (OSError, ValueError, KeyError):
                self.dp = None  # not written yet: next tick
                self.state_mtime = 0.0
        if state.get("hedera"):
            self.hedera = Tail(Path(state["hedera"]) / "hedera_decisions.jsonl")

    def _queues(self) -> dict[str, dict]:
        ports: dict[str, dict] = {}
        if self.dp is not None:
            n = len(self.dp.classes)
            for p in self.dp.ports:  # switch egress ports and hosts' NICs
                q = marks = drops = 0
                paused = False
                for cls in range(n):
                    st = self.dp.queue(p["id"], cls)
                    q, marks, drops = q + st.bytes, marks + st.marks, drops + st.drops
                    paused = paused or self.dp.held(p["id"], cls)
                state = port_state(q, marks, drops, paused)
                if state:
                    ports[p["ifname"]] = state
            return ports
        if self.nl is None:  # a fabric without classes: its ports' root qdiscs
            self.nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
            self.nl.bind((0, 0))
            self.index = {}
            for name in self.switch_ports:
                try:
                    self.index[name] = int(Path(f"/sys/class/net/{name}/ifindex").read_text())
                except (OSError, ValueError):
                    continue
        self.seq += 1
        roots = root_queues(self.nl, self.seq)
        for name, idx in self.index.items():
            if idx in roots:
                backlog, _, drops = roots[idx]
                state = port_state(backlog, 0, drops, False)
                if state:
                    ports[name] = state
        return ports

    def _jobs(self) -> dict[str, int]:
        """Iterations the first rank file of each job has written (one line each)."""
        out: dict[str, int] = {}
        for path in sorted(self.out_dir.glob("*/*/rank*.jsonl")):
            job = str(path.parent.relative_to(self.out_dir))
            if job in out:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if self.progress.get(path, (-1, 0))[0] != size:
                self.progress[path] = (size, path.read_bytes().count(b"\n"))
            out[job] = self.progress[path][1]
        return out

    def frame(self, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        self._phase()
        t = round(now - self.t0, 3)
        if self.topo is None or not self.state.get("up"):
            self.last = None
            return {"t": t, "phase": None, "load": {}, "ports": {}, "moves": [],
                    "jobs": self._jobs()}
        counters = port_bytes(self.switch_ports)
        load = {}
        if self.last is not None:
            switches = {s.name for s in self.topo.switches}
            load = link_loads(self.layout["links"] if self.layout else [], switches,
                              self.last[1], counters, now - self.last[0])
        self.last = (now, counters)
        if self.hedera is not None:
            self.decisions += [{"t": rec["t"] - self.t0, "name": decision_name(rec)}
                               for rec in self.hedera.read() if "t" in rec and "flow" in rec]
        return {"t": t, "phase": self.state["slug"], "load": load, "ports": self._queues(),
                "moves": recent(self.decisions, t), "jobs": self._jobs()}

    def close(self) -> None:
        if self.dp is not None:
            self.dp.close()
        if self.nl is not None:
            self.nl.close()
        self.dp, self.nl, self.topo, self.layout, self.last = None, None, None, None, None
        self.hedera = None
