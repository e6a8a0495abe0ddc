"""Installs the traffic-class dataplane on a fabric (see testbed/dataplane/qos_render.py for its structure):
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
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from testbed.config.loader import from_data
from testbed.config.qos import QosConfig, class_buffer, int_rate_table
from testbed.config.units import frame_bytes
from testbed.core.resources import RunRecord
from testbed.core.system import TestbedError, in_netns, run
from testbed.dataplane import qos_render as qos
from testbed.dataplane.bpfsys import Map
from testbed.dataplane.queues import apply_tc
from topologies.model import Link, Topology, ifname, port_of

BPF_SOURCE = Path(__file__).resolve().parent / "bpf" / "tbqos.bpf.c"
BUILD_DIR = Path(__file__).resolve().parents[2] / "build"
BPFFS = Path("/sys/fs/bpf")
QOS_APPS = ("priority", "ecn", "pfc")  # controllers/apps/<name>_app.py, one status file each


def ensure_bpffs() -> None:
    """A BPF filesystem at /sys/fs/bpf. Asked of the directory itself, not /proc/mounts: a
    sysfs mounted over /sys later (as a server in a namespace does) hides a bpffs mount
    that the mount table still lists."""
    if run(["stat", "-f", "-c", "%T", str(BPFFS)]).stdout.strip() != "bpf_fs":
        run(["mount", "-t", "bpf", "bpf", str(BPFFS)])


def build_object(source: Path = BPF_SOURCE, defines: dict[str, int] | None = None) -> Path:
    """Compile a BPF program (tbqos.bpf.c unless told) once per source version and set of
    `defines` (clang-14 from the bootstrap)."""
    clang = shutil.which("clang-14") or shutil.which("clang")
    if clang is None:
        raise TestbedError("clang is missing (needed for the BPF dataplane); run "
                           "scripts/bootstrap.sh")
    flags = [f"-D{k}={v}" for k, v in sorted((defines or {}).items())]
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.h")))
    digest = hashlib.sha1(source.read_bytes() + headers + " ".join(flags).encode()
                          ).hexdigest()[:12]
    obj = BUILD_DIR / f"{source.name.split('.')[0]}-{digest}.o"
    if not obj.exists():
        BUILD_DIR.mkdir(exist_ok=True)
        tmp = obj.with_suffix(".tmp")
        run([clang, "-O2", "-g", "-mcpu=v3", "-target", "bpf", *flags,
             "-I/usr/include/x86_64-linux-gnu", "-I/usr/include/aarch64-linux-gnu",
             "-c", str(source), "-o", str(tmp)])
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
    def __init__(self, topo: Topology, config: QosConfig, *, rate_of: Callable[[Link], float],
                 host_pid: Callable[[str], int],
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
        self.clsact_added: list[str] = []  # servers' own devices that had no clsact qdisc

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
        return port_of(p.ifname)[1]

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
            if not port.is_host and cls.lossless and self.cfg.pfc is not None:
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
    def install(self, record: RunRecord) -> None:
        """Every port, on this machine (a fabric on one server)."""
        self.pin(record)
        self.write_description(self.install_ports(self.ports, self.pin_dir))

    def pin(self, record: RunRecord, pin_dir: Path | None = None) -> None:
        """Makes this machine's pin directory (refused if one is left from another run) and
        records it for `testbed clean`."""
        pin_dir = pin_dir or self.pin_dir
        ensure_bpffs()
        if pin_dir.exists():
            raise TestbedError(f"{pin_dir} exists; run `testbed clean`")
        pin_dir.mkdir(parents=True)
        if record is not None:
            record.bpf_pins.append(str(pin_dir))
            record.save()

    def install_ports(self, ports: list[qos.QosPort], pin_dir: Path,
                      vnis: dict[int, int] | None = None,
                      underlay: tuple[str, ...] = ()) -> dict[int, int]:
        """Loads the programs into `pin_dir` (made by `pin`) and gives `ports`, all on this
        machine, their classes, gates, hooks and map entries; port id -> ifindex. A server
        of a cluster also gets, for its ports on links to other servers (`vnis`: port id ->
        the link's VNI), the program that counts their dequeues on the devices its tunnels
        leave by (`underlay`; see tbqos.bpf.c)."""
        obj = build_object()
        run(["bpftool", "prog", "loadall", str(obj), str(pin_dir / "progs"),
             "type", "classifier", "pinmaps", str(pin_dir / "maps")])
        ifindex: dict[int, int] = {}
        indexes: dict[int | None, dict[str, int]] = {}
        by_ns: dict[int | None, list[list[str]]] = {}
        for p in ports:
            pid = self.host_pid(p.node) if p.is_host else None
            if pid not in indexes:
                indexes[pid] = interface_indexes(pid)
            ifindex[p.id] = indexes[pid][p.ifname]
            mac = self.topo.host(p.node).macs[self._port_no(p)] if p.is_host else None
            self.keys[p.id] = qos.if_key(ifindex[p.id], mac)
            cmds = qos.htb_class_commands(p, self.cfg, self.mtu,
                                          0 if p.is_host else self.burst_us, self.tbf_limits(p))
            cmds += qos.bpf_attach_commands(p.ifname, str(pin_dir / "progs"), p.is_host)
            by_ns.setdefault(pid, []).extend(cmds)
        self._fill_maps(ports, pin_dir)
        if vnis:
            vni_map = Map(str(pin_dir / "maps" / "tb_vni"))
            try:
                for port, vni in vnis.items():
                    vni_map.update(qos.U32.pack(vni), qos.U32.pack(port))
            finally:
                vni_map.close()
            for dev in underlay:
                if run(["tc", "qdisc", "add", "dev", dev, "clsact"], check=False).returncode == 0:
                    self.clsact_added.append(dev)  # removed with the filter, after the run
                by_ns.setdefault(None, []).extend(
                    qos.underlay_attach_commands(dev, str(pin_dir / "progs")))
        for pid, cmds in by_ns.items():
            apply_tc(cmds, netns_pid=pid)
        return ifindex

    # ---- on another server (testbed/net/dpagent.py installs its ports there) ------------
    def to_data(self, host_pids: dict[str, int]) -> dict:
        """What another server needs to install its ports: this plane as plain data, with
        the hosts' PIDs as that server sees them."""
        return {"topo": self.topo.to_dict(), "qos": asdict(self.cfg),
                "rates": [self.rate_of(link) for link in self.topo.links],
                "host_pids": host_pids, "mtu_bytes": self.mtu, "burst_us": self.burst_us,
                "buffer_pkts": self.buffer_pkts, "buffer_bytes": self.buffer_bytes,
                "host_queue_pkts": self.host_queue_pkts, "pin_dir": str(self.pin_dir),
                "out_dir": str(self.out_dir)}

    @classmethod
    def from_data(cls, data: dict) -> QosPlane:
        topo = Topology.from_dict(data["topo"])
        rates = dict(zip(topo.links, data["rates"]))
        pids = data["host_pids"]
        return cls(topo, from_data(QosConfig, data["qos"], "qos"), rate_of=rates.__getitem__,
                   host_pid=pids.__getitem__, mtu_bytes=data["mtu_bytes"],
                   burst_us=data["burst_us"], buffer_pkts=data["buffer_pkts"],
                   buffer_bytes=data["buffer_bytes"], host_queue_pkts=data["host_queue_pkts"],
                   pin_dir=Path(data["pin_dir"]), out_dir=Path(data["out_dir"]))

    def _fill_maps(self, ports: list[qos.QosPort], pin_dir: Path) -> None:
        maps = {name: Map(str(pin_dir / "maps" / name))
                for name in ("tb_port_cfg", "tb_rx_cfg", "tb_qcfg", "tb_int_rate")}
        here = {p.id for p in ports}
        table = int_rate_table([self.rate_of(link) for link in self.topo.links])
        try:
            for p in ports:
                peer = self.ports[p.peer]
                # a peer on another server counts no dequeue here (tb_underlay does)
                tx = peer.id if peer.id in here else qos.NONE
                maps["tb_port_cfg"].update(self.keys[p.id], qos.PORT_CFG.pack(
                    p.id, qos.ROOT_MAJOR, qos.PORT_HOST if p.is_host else 0, p.switch_index))
                maps["tb_rx_cfg"].update(self.keys[p.id], qos.RX_CFG.pack(
                    tx, qos.NONE if p.is_host else p.id, peer.switch_index,
                    p.switch_index))
                if not p.is_host and p.rate_mbps in table:
                    maps["tb_int_rate"].update(qos.U32.pack(p.id), qos.U32.pack(
                        1 + table.index(p.rate_mbps)))
                for c in range(len(self.cfg.classes)):
                    lb, lp = self.limits(p, c)
                    maps["tb_qcfg"].update(qos.U32.pack(qos.slot(p.id, c)),
                                           qos.qcfg_record(lb, lp, None, self.frame, p.rate_mbps))
        finally:
            for m in maps.values():
                m.close()

    def write_description(self, ifindex: dict[int, int],
                           servers: dict[str, dict] | None = None,
                           server_of: dict[str, str] | None = None,
                           here: str | None = None) -> None:
        """dataplane.json. A fabric split across servers (`servers`: name -> its map and
        program directories and the argv of its dataplane agent, None for this machine)
        also says each port's server and which server is this one (`here`)."""
        ports = []
        for p in self.ports:
            d = asdict(p)
            d.update(ifindex=ifindex[p.id],
                     netns=f"/proc/{self.host_pid(p.node)}/ns/net" if p.is_host else None,
                     tbf_limits=self.tbf_limits(p),
                     limits=[self.limits(p, c) for c in range(len(self.cfg.classes))])
            if server_of is not None:
                d["server"] = server_of[p.node]
            ports.append(d)
        desc = {"map_dir": str(self.pin_dir / "maps"), "prog_dir": str(self.pin_dir / "progs"),
                "mtu_bytes": self.mtu, "burst_us": self.burst_us, "qos": asdict(self.cfg),
                "ports": ports,
                "written": time.time()}
        if servers is not None:
            desc.update(servers=servers, here=here, map_dir=servers[here]["map_dir"]
                        if here in servers else None)
        self.description.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.description.with_suffix(".tmp")
        tmp.write_text(json.dumps(desc, indent=1))
        tmp.replace(self.description)

    def wait_apps(self, status_dir: Path, since: float, timeout: float = 30.0,
                  alive: Callable[[], bool] = lambda: True, apps: tuple[str, ...] = QOS_APPS) -> dict:
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
