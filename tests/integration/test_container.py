"""The container's start rehearsed on this machine: no image registry is reachable
here, so the Dockerfile's image is never built; what it does at start is. In a fresh mount and
PID namespace sharing the host's network (as `docker run --network host` does), with an empty
Open vSwitch database and run directory and no OVS running, the README's bootstrap starts OVS
and a run passes; when the namespace ends, its OVS goes with it and the host's is untouched."""
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYSCTLS = ("rmem_default", "rmem_max", "wmem_default", "wmem_max")

# What the container starts from: the image's files, nothing of OVS running or stored.
IN_NAMESPACE = r"""
set -euo pipefail
for dir in /run /etc/openvswitch /var/lib/openvswitch /var/log/openvswitch; do
  mount -t tmpfs tmpfs "$dir"
done
cd "$REPO"
if ovs-vsctl --timeout=2 show >/dev/null 2>&1; then echo "OVS visible" >&2; exit 3; fi
scripts/bootstrap.sh
.venv/bin/testbed run "$SPEC" --out "$OUT"
"""


def host_state() -> dict:
    pid = Path("/run/openvswitch/ovs-vswitchd.pid").read_text().strip()
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True,
                           check=True).stdout
    return {"vswitchd": pid, "alive": Path(f"/proc/{pid}").exists(),
            "links": sorted(line.split()[0] for line in links.splitlines()),
            "sysctls": {n: Path(f"/proc/sys/net/core/{n}").read_text() for n in SYSCTLS}}


def test_the_bootstrap_starts_a_fresh_ovs_and_a_run_passes_in_a_new_namespace(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: it-container\n"
                    "topology: {kind: leafspine, params: {spines: 2, leaves: 2, "
                    "hosts_per_leaf: 2}}\n"
                    "experiments: [{type: reachability, count: 2}]\n")
    out = tmp_path / "out"
    before = host_state()
    done = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc",
                           "bash", "-c", IN_NAMESPACE],
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "REPO": str(REPO),
                               "SPEC": str(spec), "OUT": str(out)},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Open vSwitch" in done.stderr and ": started" in done.stderr  # a fresh one
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok"
    headline = summary["experiments"]["0:reachability"]["headline"]
    assert headline["pairs"] == 12 and headline["loss_pct"] == 0.0, headline
    assert host_state() == before  # the host's OVS, interfaces and buffers as they were
