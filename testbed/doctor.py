"""`testbed doctor`: what the machine offers for the fabric, with fixes."""
from __future__ import annotations

import os
from pathlib import Path

from testbed.config.network import BPF_CONGESTION_CONTROLS
from testbed.core.system import (
    congestion_controls,
    have,
    is_root,
    kernel_release,
    qdisc_supported,
    run,
)
from testbed.dataplane import ovs
from testbed.dataplane.hostcc import bpf_possible

BOOTSTRAP = "sudo scripts/bootstrap.sh"


def checks() -> list[tuple[str, bool, str, str | None]]:
    """(name, ok, detail, fix); fix None means optional (reported, not required)."""
    out = []
    root = is_root()
    out.append(("root", root, "yes" if root else "no", "run with sudo"))
    out.append(("kernel", True, kernel_release(), None))
    for tool, pkg in (("ovs-vsctl", "openvswitch-switch"), ("mn", "mininet"),
                      ("iperf3", "iperf3"), ("ethtool", "ethtool"), ("ping", "iputils-ping"),
                      ("nsenter", "util-linux"), ("tc", "iproute2"),
                      ("clang-14", "clang-14"), ("bpftool", "bpftool")):
        out.append((tool, have(tool), "found" if have(tool) else "missing",
                    f"{BOOTSTRAP} (apt package {pkg})"))
    try:
        import mininet.net  # noqa: F401
        out.append(("mininet python module", True, "importable", None))
    except ImportError:
        out.append(("mininet python module", False, "not importable",
                    "use the venv made by scripts/bootstrap.sh (--system-site-packages)"))
    running = have("ovs-vsctl") and ovs.running()
    if running or root:
        out.append(("Open vSwitch running", running,
                    ovs.version() if running else "not running", BOOTSTRAP))
    else:  # its database socket is root's: without root a running OVS looks absent
        out.append(("Open vSwitch running", False, "unknown (needs root)", None))
    if root:
        kdp = ovs.kernel_datapath_available()
        out.append(("OVS userspace datapath (datapath: user)", True,
                    "available; the measured one (the default)", None))
        out.append(("OVS kernel datapath (datapath: kernel)", kdp,
                    "available, unmeasured (README: Datapaths)" if kdp else
                    "absent: no openvswitch module; `auto` uses the userspace one", None))
        if running:
            buf = ovs.send_socket_buffer()
            out.append(("OVS send socket buffer", True,
                        f"{buf} bytes" if buf else "not created yet (sized at first run)", None))
        for kind, args in (("htb", ()), ("netem", ("delay", "1ms")), ("red", (
                "limit", "400000", "min", "30000", "max", "90000", "avpkt", "1000",
                "burst", "55", "probability", "0.1")), ("fq_codel", ())):
            ok = qdisc_supported(kind, args)
            fix = f"{BOOTSTRAP}" if kind == "htb" else None
            out.append((f"qdisc {kind}", ok, "yes" if ok else
                        "no (experiments needing it refuse to start)", fix))
        # A clsact hook and a one-instruction BPF classifier on the loopback of a throwaway
        # namespace (constant commands, nothing of the user's inside).
        bpf = run(["unshare", "-n", "sh", "-c", "tc qdisc add dev lo clsact && "
                   "tc filter add dev lo egress bpf bytecode '1,6 0 0 4294967295,'"], check=False)
        out.append(("tc clsact + bpf classifier", bpf.returncode == 0,
                    "yes" if bpf.returncode == 0 else f"no ({bpf.stderr.strip()[:60]})", None))
        if have("clang-14") and have("bpftool"):
            out.append(_qos_dataplane())
    ccs = congestion_controls()
    for cc in ("cubic", "reno", "bbr"):
        out.append((f"tcp {cc}", cc in ccs, "yes" if cc in ccs else "no", None))
    for cc in BPF_CONGESTION_CONTROLS:
        if cc in ccs:
            out.append((f"tcp {cc}", True, "yes (the kernel's own)", None))
        elif bpf_possible():
            out.append(_bpf_cc(cc))
        else:
            out.append((f"tcp {cc}", False, "unknown (a BPF program: needs root, clang-14, "
                        "bpftool and the kernel's BTF)", None))
    return out


def _bpf_cc(name: str) -> tuple[str, bool, str, str | None]:
    """One of the testbed's BPF congestion controls built, registered and unregistered at
    once (a throwaway record: `testbed clean` would find it if this were killed)."""
    from testbed.core.resources import RunRecord, records, unregister_struct_ops
    from testbed.dataplane import hostcc
    if any(r.owner_alive() for r in records()):  # its programs' names are taken
        return (f"tcp {name}", True, "not checked: a run is active", None)
    rec = RunRecord(run_id=f"doctor-{os.getpid()}", out_dir="")
    try:
        obj = hostcc.build(hostcc.shipped_source(name))
        reg = hostcc.register(obj, hostcc.shipped_source(name), rec)
        hostcc.unregister(reg)
        return (f"tcp {name}", True, f"yes (BPF program {obj.name}: builds, registers)", None)
    except Exception as exc:  # reported, never fatal
        return (f"tcp {name}", False, f"no: {str(exc).splitlines()[-1][:80]}", BOOTSTRAP)
    finally:
        unregister_struct_ops(rec.struct_ops)  # what an exception left registered
        rec.path.unlink(missing_ok=True)


def _qos_dataplane() -> tuple[str, bool, str, str | None]:
    """Builds the switch program and has the kernel verify it (loaded, pinned in a private
    directory, removed at once)."""
    import shutil
    import tempfile

    from testbed.dataplane.qosplane import BPFFS, build_object, ensure_bpffs
    try:
        ensure_bpffs()
        obj = build_object()
        pin = Path(tempfile.mkdtemp(prefix="testbed-doctor-", dir=BPFFS))
        try:
            res = run(["bpftool", "prog", "loadall", str(obj), str(pin / "p"), "type",
                       "classifier"], check=False)
        finally:
            shutil.rmtree(pin, ignore_errors=True)
        ok = res.returncode == 0
        return ("BPF switch dataplane (classes, ECN, PFC)", ok,
                "builds and passes the verifier" if ok else res.stderr.strip()[-80:], BOOTSTRAP)
    except Exception as exc:  # reported, never fatal
        return ("BPF switch dataplane (classes, ECN, PFC)", False, str(exc)[:80], BOOTSTRAP)
