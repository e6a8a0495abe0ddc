"""Installs the traffic-class dataplane on a fabric (see testbed/net/qos_render.py for its structure):
builds and loads the BPF programs, gives every interface its HTB classes, tbf gates and BPF
hooks, fills the maps that are the dataplane's own (ports, links, buffer limits) and writes
`dataplane.json`, from which the controller's QoS apps (ECN, PFC, priority) and the monitor
open the dataplane API. The policies themselves (DSCP map, marking thresholds, PFC
thresholds) are left to those apps.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from testbed.config.qos import QosConfig, class_buffer
from testbed.config.units import frame_bytes
from testbed.system import TestbedError, in_netns, run
from topologies.model import Topology, ifname

from . import qos_render as qos
from .bpfsys import Map
from .dataplane import apply_tc

BPF_SOURCE = Path(__file__).resolve().parent / "bpf" / "tbqos.bpf.c"
BUILD_DIR = Path(__file__).resolve().parents[2] / "build"
BPFFS = Path("/sys/fs/bpf")
QOS_APPS = ("priority", "ecn", "pfc")  # controllers/apps/<name>_app.py, one status file each


def ensure_bpffs() -> None:
    mounts = Path("/proc/mounts").read_text().split("\n")
    if not any(line.split(" ")[1:3] == [str(BPFFS), "bpf"] for line in mounts if line):
        run(["mount", "-t", "bpf", "bpf", str(BPFFS)])


def build_object() -> Path:
    """Compile tbqos.bpf.c once per source version (clang-14 from the bootstrap)."""
    clang = shutil.which("clang-14") or shutil.which("clang")
    if clang is None:
        raise TestbedError("clang is missing (needed for the BPF dataplane); run "
                           "scripts/bootstrap.sh")
    digest = hashlib.sha1(BPF_SOURCE.read_bytes()).hexdigest()[:12]
    obj = BUILD_DIR / f"tbqos-{digest}.o"
    if not obj.exists():
        BUILD_DIR.mkdir(exist_ok=True)
        tmp = obj.with_suffix(".tmp")
        run([clang, "-O2", "-g", "-mcpu=v3", "-target", "bpf",
             "-I/usr/include/x86_64-linux-gnu", "-I/usr/include/aarch64-linux-gnu",
             "-c", str(BPF_SOURCE), "-o", str(tmp)])
        tmp.replace(obj)
    return obj


def interface_indexes(netns_pid: int | None) -> dict[str, int]:
    """name -> ifindex of every interface of a namespace (one `ip` call per namespace)."""
    argv = ["ip", "-o", "link", "show"]
    out = run(in_netns(netns_pid, argv) if netns_pid else argv).stdout
    indexes = {}
    for line in out.splitlines():
        index, name = line.split(":", 2)[:2]
        indexes[name.strip().split("@", 1)[0]] = int(index)
    return indexes


class QosPlane:
    def __init__(self, topo: Topology, config: QosConfig, *, rate_of, host_pid,
                 mtu_bytes: int, burst_us: int, buffer_pkts: int | None,
                 buffer_bytes: int | None, host_queue_pkts: int, pin_dir: Path, out_dir: Path):
        self.topo = topo
        self.cfg = config
        self.rate_of = rate_of  # link -> Mb/s
        self.host_pid = host_pid
        self.mtu = mtu_bytes
        self.frame = frame_bytes(mtu_bytes)
        self.burst_us = burst_us
        self.buffer_pkts = buffer_pkts
        self.buffer_bytes = buffer_bytes
        self.host_queue_pkts = host_queue_pkts
        self.pin_dir = pin_dir
        self.out_dir = out_dir
        self.description = out_dir / "dataplane.json"
        self.ports = self._ports()
        self.keys: dict[int, bytes] = {}

    # ---- what each interface gets (pure) -------------------------------------------
    def _ports(self) -> list[qos.QosPort]:
        ids: dict[tuple[str, int], int] = {}
        for node, port, _ in self.topo.interfaces():
            ids[(node, port)] = len(ids)
        switch_index = {s.name: i for i, s in enumerate(self.topo.switches)}
        ports: list[qos.QosPort | None] = [None] * len(ids)
        for link in self.topo.links:
            rate = self.rate_of(link)
            ends = list(link.ends())
            for (node, port), (peer_node, peer_port) in (ends, ends[::-1]):
                name = ifname(node, port)
                ports[ids[(node, port)]] = qos.QosPort(
                    id=ids[(node, port)], ifname=name, node=node,
                    is_host=self.topo.is_host(node), rate_mbps=rate,
                    peer=ids[(peer_node, peer_port)],
                    switch_index=switch_index.get(node, qos.NONE),
                    scheduler=self.cfg.port_schedulers.get(name, self.cfg.scheduler))
        if len(ports) > qos.MAX_PORTS:
            raise TestbedError(f"the QoS dataplane handles at most {qos.MAX_PORTS} interfaces "
                               f"(this fabric has {len(ports)})")
        return [p for p in ports if p is not None]

    @staticmethod
    def _port_no(p: qos.QosPort) -> int:
        return int(p.ifname.rsplit("-eth", 1)[1])

    def limits(self, port: qos.QosPort, cls_index: int) -> tuple[int, int]:
        """(limit_bytes, limit_pkts) enforced by BPF; 0 means no limit."""
        cls = self.cfg.classes[cls_index]
        if port.is_host:
            return 0, self.host_queue_pkts
        if cls.lossless:
            return 0, 0  # PFC keeps it bounded: per ingress, xoff + headroom
        return class_buffer(cls, self.buffer_pkts, self.buffer_bytes)

    def tbf_limits(self, port: qos.QosPort) -> list[int]:
        """qdisc limits above the BPF ones, so that the qdiscs never drop."""
        out = []
        for i, cls in enumerate(self.cfg.classes):
            lb, lp = self.limits(port, i)
            if not port.is_host and cls.lossless:
                ports = len(self.topo.ports_of(port.node))
                lb = ports * (self.cfg.pfc.xoff_bytes + self.cfg.pfc.headroom_bytes)
            out.append(max(lb, lp * self.frame) + 4 * self.frame)
        return out

    def switch_buffer_limits(self) -> tuple[list[int], list[int]]:
        """What every switch egress class can hold at once (OVS's send buffer is charged
        for it): a packet-limited class, its packets (the BPF program's limit, and the few
        frames the qdisc admits beyond it); a byte-limited or lossless class, its qdisc's
        bytes. Packets of any size count as full slabs; bytes, as minimum-size packets."""
        pkts: list[int] = []
        nbytes: list[int] = []
        for p in self.ports:
            if p.is_host:
                continue
            tbf = self.tbf_limits(p)
            for c in range(len(self.cfg.classes)):
                limit_bytes, limit_pkts = self.limits(p, c)
                if limit_pkts and not limit_bytes:
                    pkts.append(limit_pkts + 4)
                else:
                    nbytes.append(tbf[c])
        return pkts, nbytes

    # ---- install ---------------------------------------------------------------------
    def install(self, record) -> None:
        ensure_bpffs()
        obj = build_object()
        if self.pin_dir.exists():
            raise TestbedError(f"{self.pin_dir} exists; run `testbed clean`")
        self.pin_dir.mkdir(parents=True)
        record.bpf_pins.append(str(self.pin_dir))
        record.save()
        run(["bpftool", "prog", "loadall", str(obj), str(self.pin_dir / "progs"),
             "type", "classifier", "pinmaps", str(self.pin_dir / "maps")])
        ifindex: dict[int, int] = {}
        indexes: dict[int | None, dict[str, int]] = {}
        by_ns: dict[int | None, list[list[str]]] = {}
        for p in self.ports:
            pid = self.host_pid(p.node) if p.is_host else None
            if pid not in indexes:
                indexes[pid] = interface_indexes(pid)
            ifindex[p.id] = indexes[pid][p.ifname]
            mac = self.topo.host(p.node).macs[self._port_no(p)] if p.is_host else None
            self.keys[p.id] = qos.if_key(ifindex[p.id], mac)
            cmds = qos.htb_class_commands(p, self.cfg, self.mtu,
                                          0 if p.is_host else self.burst_us, self.tbf_limits(p))
            cmds += qos.bpf_attach_commands(p.ifname, str(self.pin_dir / "progs"), p.is_host)
            by_ns.setdefault(pid, []).extend(cmds)
        self._fill_maps(ifindex)
        for pid, cmds in by_ns.items():
            apply_tc(cmds, netns_pid=pid)
        self._write_description(ifindex)

    def _fill_maps(self, ifindex: dict[int, int]) -> None:
        maps = {name: Map(str(self.pin_dir / "maps" / name))
                for name in ("tb_port_cfg", "tb_rx_cfg", "tb_qcfg")}
        try:
            for p in self.ports:
                peer = self.ports[p.peer]
                maps["tb_port_cfg"].update(self.keys[p.id], qos.PORT_CFG.pack(
                    p.id, qos.ROOT_MAJOR, qos.PORT_HOST if p.is_host else 0, p.switch_index))
                maps["tb_rx_cfg"].update(self.keys[p.id], qos.RX_CFG.pack(
                    peer.id, qos.NONE if p.is_host else p.id, peer.switch_index,
                    p.switch_index))
                for c in range(len(self.cfg.classes)):
                    lb, lp = self.limits(p, c)
                    maps["tb_qcfg"].update(qos.U32.pack(qos.slot(p.id, c)),
                                           qos.qcfg_record(lb, lp, None, self.frame, p.rate_mbps))
        finally:
            for m in maps.values():
                m.close()

    def _write_description(self, ifindex: dict[int, int]) -> None:
        ports = []
        for p in self.ports:
            d = asdict(p)
            d.update(ifindex=ifindex[p.id],
                     netns=f"/proc/{self.host_pid(p.node)}/ns/net" if p.is_host else None,
                     tbf_limits=self.tbf_limits(p),
                     limits=[self.limits(p, c) for c in range(len(self.cfg.classes))])
            ports.append(d)
        desc = {"map_dir": str(self.pin_dir / "maps"), "prog_dir": str(self.pin_dir / "progs"),
                "mtu_bytes": self.mtu, "burst_us": self.burst_us, "qos": asdict(self.cfg),
                "ports": ports,
                "written": time.time()}
        self.description.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.description.with_suffix(".tmp")
        tmp.write_text(json.dumps(desc, indent=1))
        tmp.replace(self.description)

    def wait_apps(self, status_dir: Path, since: float, timeout: float = 30.0,
                  alive=lambda: True, apps: tuple[str, ...] = QOS_APPS) -> dict:
        """Until every QoS app has applied its policy to this dataplane."""
        deadline = time.time() + timeout
        status: dict = {}
        while time.time() < deadline:
            for app in apps:
                try:
                    st = json.loads((status_dir / f"{app}.json").read_text())
                except (OSError, ValueError):
                    continue
                if st.get("applied", 0) >= since:
                    status[app] = st
            if len(status) == len(apps):
                return status
            if not alive():
                break
            time.sleep(0.05)
        missing = sorted(set(apps) - set(status))
        raise TestbedError(f"QoS apps {missing} did not configure the dataplane within "
                           f"{timeout:.0f} s; see the controller log")

    def remove(self) -> None:
        shutil.rmtree(self.pin_dir, ignore_errors=True)
