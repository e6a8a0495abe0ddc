import csv
import json
import os
from pathlib import Path

from testbed.config.spec import sweep_points
from testbed.runner import run_spec
from testbed.spec import loads


def run(tmp_path: Path, data: dict) -> tuple[Path, dict]:
    """Run a spec given as data. TESTBED_TEST_DATAPATH (user | kernel | auto) sets the
    datapath of every spec that names none: how the suite is run on the kernel datapath
    (README: Datapaths). TESTBED_TEST_FORWARDING (a number of processes, or auto) sets
    `forwarding.processes` of every spec on one machine's userspace datapath that names
    none: how the suite is run with its fabrics split across forwarding processes."""
    if os.environ.get("TESTBED_TEST_DATAPATH") and "datapath" not in data:
        data = {**data, "datapath": os.environ["TESTBED_TEST_DATAPATH"]}
    split = os.environ.get("TESTBED_TEST_FORWARDING")
    if split and not {"forwarding", "cluster"} & set(data) \
            and data.get("datapath", "user") == "user":
        data = {**data, "forwarding": {"processes": split if split == "auto" else int(split)}}
    spec, topo = loads(data)
    out = run_spec(spec, topo, json.dumps(data), tmp_path / "run", log=lambda m: None,
                   points=sweep_points(data))
    return out, json.loads((out / "summary.json").read_text())


def not_cpu_bound(got: dict | list[dict], summary: dict) -> None:
    """Every row measured with CPU to spare; if not, the failure says why in full (the run's
    CPU-bound and unfaithful verdicts: pytest would cut a row's dict short)."""
    for r in [got] if isinstance(got, dict) else got:
        assert r["cpu_bound"] == "False", (
            f"{r}\nCPU-bound: {summary.get('cpu_bound')}\nunfaithful: {summary.get('unfaithful')}")


def rows(out: Path, name: str) -> list[dict]:
    with (out / "metrics" / name).open() as fh:
        return list(csv.DictReader(fh))


def leftovers(topo_switches: list[str]) -> list[str]:
    from testbed.core.resources import records
    from testbed.dataplane import ovs
    left = [b for b in ovs.bridges() if b in topo_switches]
    left += [n for n in topo_switches if Path(f"/sys/class/net/{n}").exists()]
    left += [r.run_id for r in records()]
    return left


def machine_state() -> dict:
    """What a run changes on the machine and `testbed clean` must put back: OVS bridges,
    network interfaces, processes (not kernel threads; not the machine's own OVS daemons,
    which a run restarts when their socket buffer is too small, docs/FIDELITY.md; but the
    extra ones a split fabric starts), the directories of those, the sysctls under
    net.core and net.ipv4, pinned BPF objects, and registered struct_ops (BPF congestion
    controls)."""
    from testbed.dataplane import forwarders, ovs
    procs = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        if cmd and (not cmd.startswith(("ovs-vswitchd", "ovsdb-server"))
                    or f"{forwarders.ROOT}/" in cmd):
            procs.add((int(pid), cmd))
    sysctls = {}
    for d in ("/proc/sys/net/core", "/proc/sys/net/ipv4"):
        for f in sorted(Path(d).iterdir()):
            if f.is_file():
                try:
                    sysctls[str(f)] = f.read_text().strip()
                except OSError:
                    pass
    bpf = Path("/sys/fs/bpf/testbed")
    from testbed.dataplane.hostcc import registered
    return {"bridges": set(ovs.bridges()), "interfaces": set(os.listdir("/sys/class/net")),
            "processes": procs, "sysctls": sysctls,
            "forwarders": sorted(os.listdir(forwarders.ROOT)) if forwarders.ROOT.exists() else [],
            "bpf": sorted(str(p) for p in bpf.rglob("*")) if bpf.exists() else [],
            "struct_ops": sorted(m["name"] for m in registered())}
