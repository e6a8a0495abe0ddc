"""TCP congestion controls written in BPF, for the hosts' kernels: compiled with clang
against the running kernel's BTF (`vmlinux.h`, generated once per kernel), cached by a
hash of what they are built from like the switch dataplane's objects, registered as
`struct_ops` with bpftool for one run, and unregistered at its end.

A registered algorithm is one more name in `tcp_available_congestion_control`: a host's
namespace selects it like a built-in one, once the initial namespace's
`tcp_allowed_congestion_control` lists it (net/hostsetup.py adds it first: setting a
namespace's default to an algorithm the list lacks fails with EPERM and leaks a kernel
reference, so that the program stays loaded until reboot).

What a run registers is written into its record *before* it is registered (the object's
struct_ops map names), so that `testbed clean` unregisters what a killed run left
(core/resources.py). The programs trace their state into a ring buffer (bpf/cc/tbcc.h),
drained here into rows.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from testbed.config.network import BPF_CONGESTION_CONTROLS, BpfProgram
from testbed.core.resources import RunRecord, struct_ops_registered
from testbed.core.system import TestbedError, congestion_controls, run
from testbed.dataplane.bpfsys import Map, RingBuffer
from testbed.dataplane.qosplane import BUILD_DIR

CC_DIR = Path(__file__).resolve().parent / "bpf" / "cc"
BTF = Path("/sys/kernel/btf/vmlinux")
# struct tbcc_event (bpf/cc/tbcc.h): t_ns, saddr, daddr, sport, dport, cwnd, ssthresh,
# srtt_us, state, value, marks, delivered
TRACE_RECORD = struct.Struct("<Q4s4sHH7I")
TRACE_STATES = {1: "alpha", 2: "target_us", 3: "scale", 4: "queued_pkts",
                5: "phase_bytes"}
INFINITE_SSTHRESH = 0x7FFFFFFF  # the kernel's TCP_INFINITE_SSTHRESH: no loss or mark yet
TRACE_FIELDS = ["t_unix_s", "algorithm", "flow", "cwnd_segs", "ssthresh_segs", "srtt_us",
                "state", "value", "marks", "delivered"]


def bpf_possible() -> bool:
    """Whether this machine can build and register BPF congestion controls: root, the
    kernel's BTF, clang and bpftool (what `doctor` checks one by one)."""
    return os.geteuid() == 0 and BTF.exists() and shutil.which("bpftool") is not None \
        and (shutil.which("clang-14") or shutil.which("clang")) is not None


def shipped_source(name: str) -> Path:
    """The source of one of the testbed's own algorithms."""
    return CC_DIR / f"{name}.bpf.c"


def _tools() -> tuple[str, str]:
    clang = shutil.which("clang-14") or shutil.which("clang")
    if clang is None or shutil.which("bpftool") is None:
        raise TestbedError("BPF congestion controls need clang and bpftool; run "
                           "scripts/bootstrap.sh")
    return clang, "bpftool"


def vmlinux_header() -> Path:
    """vmlinux.h of the running kernel, from its BTF (one per kernel build)."""
    if not BTF.exists():
        raise TestbedError(f"{BTF} is missing: this kernel has no BTF, which BPF congestion "
                           "controls need")
    digest = hashlib.sha1(BTF.read_bytes()).hexdigest()[:12]
    header = BUILD_DIR / f"vmlinux-{digest}" / "vmlinux.h"
    if not header.exists():
        header.parent.mkdir(parents=True, exist_ok=True)
        text = run(["bpftool", "btf", "dump", "file", str(BTF), "format", "c"],
                   timeout=120).stdout
        tmp = header.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(header)
    return header


def _local_includes(source: Path) -> list[Path]:
    """The files a source includes with quotes from its own directory or bpf/cc (one level),
    so that editing one rebuilds the object."""
    found = []
    for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', source.read_text(), re.M):
        for folder in (source.parent, CC_DIR):
            if (folder / name).is_file() and name != "vmlinux.h":
                found.append(folder / name)
                break
    return found


def compile_error(stderr: str, source: Path) -> str:
    """The compiler's first errors, each with the source line and caret it prints."""
    lines = stderr.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if ": error:" in line or ": fatal error:" in line:
            keep += lines[i:i + 3]
            if len(keep) >= 9:
                break
    return "\n".join(keep or lines[-8:]) or f"clang failed on {source}"


def build(source: Path) -> Path:
    """The BPF object of a congestion control's C source, compiled once per content of the
    source, the headers it includes and the kernel's BTF (the build cache's key).
    TestbedError with the compiler's first errors when it does not compile."""
    clang, _ = _tools()
    if not source.is_file():
        raise TestbedError(f"congestion control source {source} does not exist")
    header = vmlinux_header()
    h = hashlib.sha1(source.read_bytes() + header.parent.name.encode())
    for inc in _local_includes(source):
        h.update(inc.read_bytes())
    obj = BUILD_DIR / f"cc-{source.name.split('.')[0]}-{h.hexdigest()[:12]}.o"
    if obj.exists():
        return obj
    tmp = obj.with_suffix(f".{os.getpid()}.tmp")  # two builds at once do not collide
    arch = {"aarch64": "arm64"}.get(os.uname().machine, "x86")  # bpf_tracing.h's PT_REGS
    proc = run([clang, "-O2", "-g", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
                "-I", str(header.parent), "-I", str(CC_DIR), "-I", str(source.parent),
                "-c", str(source), "-o", str(tmp)], check=False, timeout=120)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise TestbedError(f"congestion control {source} does not compile:\n"
                           f"{compile_error(proc.stderr, source)}")
    tmp.replace(obj)
    return obj


def struct_ops_maps(obj: Path) -> list[str]:
    """The names of the struct_ops maps an object defines (its `SEC(".struct_ops")`
    variables), read from its symbol table; the names bpftool lists once registered."""
    objdump = shutil.which("llvm-objdump-14") or shutil.which("llvm-objdump")
    if objdump is None:
        raise TestbedError("llvm-objdump is missing; run scripts/bootstrap.sh")
    names = []
    for line in run([objdump, "-t", str(obj)]).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-3].startswith(".struct_ops"):
            names.append(parts[-1][:15])  # a BPF object's name: 15 characters
    if not names:
        raise TestbedError(f"{obj}: no tcp_congestion_ops in SEC(\".struct_ops\"): nothing "
                           "to register")
    return names


def registered() -> list[dict]:
    """The struct_ops maps the kernel holds: [{"id", "name"}]."""
    return [{"id": i, "name": name} for i, name in struct_ops_registered().items()]


def _maps() -> dict[int, str]:
    """Every BPF map the kernel holds: id -> name."""
    out = run(["bpftool", "-j", "map", "show"], check=False).stdout or "[]"
    try:
        return {m["id"]: m.get("name", "") for m in json.loads(out)}
    except (ValueError, KeyError, TypeError):
        return {}


def verifier_error(stderr: str) -> str:
    """What matters of a failed registration: libbpf's reason and the end of the
    verifier's log (where it says which instruction it refused and why)."""
    lines = [ln.removeprefix("libbpf: ") for ln in stderr.splitlines() if ln.strip()]
    log: list[str] = []
    inside = False
    for ln in lines:
        if "BEGIN PROG LOAD LOG" in ln:
            inside, log = True, []
        elif "END PROG LOAD LOG" in ln:
            inside = False
        elif inside:
            log.append(ln)
    reasons = [ln for ln in lines if "failed" in ln or "Error" in ln or "error" in ln][:3]
    tail = [ln for ln in log if not ln.startswith(("processed ", "verification time"))][-6:]
    return "\n".join(reasons + (["verifier log (end):"] + tail if tail else [])) \
        or "\n".join(lines[-8:])


@dataclass
class Registration:
    """One algorithm registered for a run."""
    algorithm: str          # the name hosts select (tcp_available_congestion_control)
    maps: list[str]         # its struct_ops maps' names, as the record lists them
    ids: list[int]          # their ids
    source: str
    object: str
    trace: RingBuffer | None = None
    # the program's own maps by name (tbcc_events, tbcc_config, tbcc_hops, ...): their ids
    own_maps: dict[str, int] = field(default_factory=dict)


def register(obj: Path, source: Path, record: RunRecord) -> Registration:
    """Register the struct_ops of a built object: recorded first (so that a kill at any
    moment leaves something `testbed clean` finds), then registered; the new algorithm's
    name is what `tcp_available_congestion_control` gained."""
    maps = struct_ops_maps(obj)
    held = struct_ops_registered()
    if clash := [m for m in maps if m in held.values()]:
        raise TestbedError(f"a struct_ops map named {clash[0]} is already registered (an "
                           "earlier run's? `testbed clean` removes what runs left)")
    before = set(congestion_controls())
    maps_before = _maps()
    record.add_struct_ops(maps)
    proc = run(["bpftool", "struct_ops", "register", str(obj)], check=False, timeout=60)
    ids = [i for i, name in struct_ops_registered().items() if name in maps and i not in held]
    if proc.returncode != 0 or len(ids) != len(maps):
        for i in ids:  # a partial registration goes too
            run(["bpftool", "struct_ops", "unregister", "id", str(i)], check=False)
        raise TestbedError(f"congestion control {source} was refused by the kernel:\n"
                           f"{verifier_error(proc.stderr + proc.stdout)}")
    record.add_struct_ops(maps, ids)
    new = [cc for cc in congestion_controls() if cc not in before]
    if len(new) != 1:
        for i in ids:
            run(["bpftool", "struct_ops", "unregister", "id", str(i)], check=False)
        raise TestbedError(f"{source}: registering it added {new or 'no'} congestion "
                           "control(s); one tcp_congestion_ops per file is expected")
    own = {name: i for i, name in _maps().items() if i not in maps_before and name}
    trace = None
    if "tbcc_events" in own:
        ring = Map.by_id(own["tbcc_events"])
        try:
            trace = RingBuffer(ring)
        except OSError:
            ring.close()
            raise
    return Registration(algorithm=new[0], maps=maps, ids=ids, source=str(source),
                        object=str(obj), trace=trace, own_maps=own)


def unregister(reg: Registration) -> None:
    if reg.trace is not None:
        reg.trace.close()
        reg.trace = None
    for i in reg.ids:
        run(["bpftool", "struct_ops", "unregister", "id", str(i)], check=False)


CONFIG = struct.Struct("<II")  # struct tbcc_config: link_mbps, frame_bytes


def configure(reg: Registration, link_mbps: float, frame_bytes: int,
              hops: dict[tuple[str, str], int]) -> None:
    """Tell a program that reads them (`tbcc_config`, `tbcc_hops`) the phase's link rate,
    frame size and the switches on the path between every two hosts (by address)."""
    if "tbcc_config" in reg.own_maps:
        cfg = Map.by_id(reg.own_maps["tbcc_config"])
        try:
            cfg.update(struct.pack("<I", 0), CONFIG.pack(max(1, round(link_mbps)), frame_bytes))
        finally:
            cfg.close()
    if "tbcc_hops" in reg.own_maps:
        table = Map.by_id(reg.own_maps["tbcc_hops"])
        try:
            for (src, dst), n in hops.items():
                key = socket.inet_aton(dst) + socket.inet_aton(src)  # u64: saddr << 32 | daddr
                table.update(key, struct.pack("<I", n))
        except OSError as exc:  # full (a fabric of more than 256 hosts): say so
            raise TestbedError(f"{reg.algorithm}: its tbcc_hops map cannot hold the paths "
                               f"of {len(hops)} host pairs ({exc})") from None
        finally:
            table.close()


def flow_name(saddr: bytes, sport: int, daddr: bytes, dport: int) -> str:
    return f"{'.'.join(map(str, saddr))}:{sport}>{'.'.join(map(str, daddr))}:{dport}"


def trace_rows(records: list[bytes], algorithm: str, mono_to_unix: float) -> list[list]:
    """cc_trace.csv rows (TRACE_FIELDS) of a program's trace records."""
    rows = []
    for rec in records:
        (t_ns, saddr, daddr, sport, dport, cwnd, ssthresh, srtt, state, value, marks,
         delivered) = TRACE_RECORD.unpack_from(rec)
        rows.append([round(t_ns / 1e9 + mono_to_unix, 6), algorithm,
                     flow_name(saddr, sport, daddr, dport), cwnd,
                     None if ssthresh >= INFINITE_SSTHRESH else ssthresh, srtt,
                     TRACE_STATES.get(state, str(state)), value, marks, delivered])
    return rows


@dataclass
class HostCongestion:
    """The BPF congestion controls of one run: registered on first use (or all at once
    before the first fabric, for those the spec names), traced while the run lasts,
    unregistered at its end."""
    record: RunRecord
    log: Callable[[str], None] = print
    cluster: bool = False  # hosts on other servers, whose kernels this does not reach
    regs: dict[str, Registration] = field(default_factory=dict)  # spec key -> registration
    # the trace's records as drained (algorithm, clock offset, raw records): parsed only
    # when read (`rows`), so that draining costs a copy while traffic runs
    raw: list[tuple[str, float, list[bytes]]] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def available(self) -> list[str]:
        """What hosts may select: the kernel's algorithms, and the testbed's own where
        this machine can build and register them for every host (not a cluster's)."""
        kernel = congestion_controls()
        if self.cluster or not bpf_possible():
            return kernel
        return kernel + [n for n in BPF_CONGESTION_CONTROLS if n not in kernel]

    def resolve(self, cc: str | BpfProgram) -> str:
        """The algorithm name hosts select for a spec's `congestion_control`: a kernel
        algorithm as it is; one of the testbed's own (the kernel lacking it) or a user's
        program, built and registered now (once per run)."""
        if isinstance(cc, str):
            if cc not in BPF_CONGESTION_CONTROLS:
                return cc
            key, source = cc, shipped_source(cc)
            if key not in self.regs and cc in congestion_controls():
                if f"tb_{cc}" in struct_ops_registered().values():  # ours, not the kernel's
                    raise TestbedError(f"congestion control {cc}: the testbed's BPF program "
                                       "is still registered by an earlier run; `testbed "
                                       "clean` removes it")
                return cc  # the kernel's own module
        else:
            key, source = f"bpf:{Path(cc.bpf).resolve()}", Path(cc.bpf).resolve()
        if key in self.regs:
            return self.regs[key].algorithm
        if self.cluster:
            raise TestbedError(f"congestion control {cc if isinstance(cc, str) else cc.bpf}: a "
                               "BPF program is registered in this machine's kernel only, and "
                               "a cluster's hosts run on other servers too; choose one of "
                               "their kernels' algorithms")
        obj = build(source)
        reg = register(obj, source, self.record)
        with self._lock:  # the drain thread walks the registrations
            self.regs[key] = reg
        self.log(f"congestion control {reg.algorithm}: BPF program {source.name} registered "
                 f"(struct_ops {', '.join(reg.maps)})")
        self._start_drain()
        return reg.algorithm

    def configurable(self) -> bool:
        """Whether a registered program reads the phase's link rate or path lengths."""
        return any({"tbcc_config", "tbcc_hops"} & set(r.own_maps) for r in self.regs.values())

    def configure(self, link_mbps: float, frame_bytes: int,
                  hops: dict[tuple[str, str], int]) -> None:
        """A phase's link rate, frame size and path lengths, for the programs that read
        them (before its fabric starts)."""
        for reg in list(self.regs.values()):
            configure(reg, link_mbps, frame_bytes, hops)

    def describe(self) -> dict[str, dict]:
        """algorithm -> where it comes from, for the run's summary."""
        return {r.algorithm: {"implementation": "bpf", "source": r.source,
                              "object": Path(r.object).name, "struct_ops": r.maps}
                for r in self.regs.values()}

    # ---- the trace ---------------------------------------------------------------
    def _start_drain(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._drain_loop, daemon=True,
                                            name="cc-trace")
            self._thread.start()

    def _drain_loop(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.drain()
            except Exception as exc:  # the trace stops; the run goes on and says so
                self.log(f"congestion control trace stopped: {type(exc).__name__}: {exc}")
                return

    def drain(self) -> None:
        mono_to_unix = time.time() - time.monotonic()
        with self._lock:
            for reg in list(self.regs.values()):
                if reg.trace is not None and (records := reg.trace.drain()):
                    self.raw.append((reg.algorithm, mono_to_unix, records))

    def rows(self, t0: float = 0.0, t1: float = float("inf")) -> list[list]:
        """The trace so far as cc_trace.csv rows (TRACE_FIELDS), those between `t0` and
        `t1` (Unix time) when given."""
        self.drain()
        with self._lock:
            raw = list(self.raw)
        out = []
        for algorithm, offset, records in raw:
            out += [r for r in trace_rows(records, algorithm, offset) if t0 <= r[0] <= t1]
        return out

    def release(self) -> None:
        """Stop tracing and unregister everything (the record keeps the names until the
        run's resources are released, which unregisters again, harmlessly)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.drain()
        with self._lock:
            for reg in list(self.regs.values()):
                unregister(reg)
