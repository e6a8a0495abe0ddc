"""A second server on this machine, as Mininet's cluster edition sees a server: its own
network, mount and PID namespaces, its own Open vSwitch (database and run directory on
tmpfs), and an `sshd` listening on an address of a bridge in the initial namespace. The
cluster tests build fabrics across the initial namespace ("localhost") and such servers;
nothing distinguishes them from a VM reached over SSH except that they share this
machine's kernel and CPU.

What they share with the initial namespace, and what follows from it (docs/CLUSTER.md):
- `net.core.{r,w}mem_*` are global and read-only inside: the runner raises them in the
  initial namespace while any server's OVS creates its sockets.
- The filesystem, except the tmpfs mounts: the same binaries, Mininet and the testbed.
- When the namespace's first process ends, everything in it ends: OVS, sshd, the remote
  node shells, its interfaces (the kernel deletes them with the network namespace).

    python -m testbed.cluster.nsserver start DIR [INDEX]   # prints the ssh config to use
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.system import TestbedError, run
from testbed.dataplane.ovs import MALLOC_TUNABLES

BRIDGE = "tbclu0"  # the servers' network, in the initial namespace
NET = "10.251.0"  # the bridge is .1, server i is .(i + 1)
PREFIX = 24
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IP 20 + UDP 8 + VXLAN 8
OUTER_MTU = 9216  # the servers' network: room for a jumbo inner frame and the VXLAN header

# Run as the namespace's first process. The tmpfs mounts give it an OVS of its own; it
# waits for its end of the veth, starts OVS and sshd, says "ready" and then reaps orphans.
IN_NAMESPACE = r"""
set -euo pipefail
for dir in /run /etc/openvswitch /var/lib/openvswitch /var/log/openvswitch; do
  mount -t tmpfs tmpfs "$dir"
done
mount -t sysfs sysfs /sys  # this namespace's interfaces in /sys/class/net
mkdir -p /run/sshd
ip link set lo up
for _ in $(seq 200); do ip link show "$IFACE" >/dev/null 2>&1 && break; sleep 0.05; done
ip link set "$IFACE" mtu "$MTU" up
ip addr add "$ADDR/$PREFIX" dev "$IFACE"
if [ "$OVS" = 1 ]; then
  GLIBC_TUNABLES="$MALLOC_TUNABLES" /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null
fi
/usr/sbin/sshd -f "$DIR/sshd_config" -E "$DIR/sshd.log"
echo ready
# the namespace's init: it adopts every orphan (the node shells' sudo, when their ssh ends)
# and must reap them, as a server's init does
exec python3 -c '
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(1)
'
"""

SSHD_CONFIG = """\
ListenAddress {addr}
HostKey {dir}/host_ed25519
PidFile /run/sshd.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PermitTunnel yes
MaxSessions 200
MaxStartups 200
LogLevel ERROR
"""


@dataclass
class NamespaceServer:
    """Server `index` (1, 2, ...) of this machine's emulated cluster, its keys and
    configuration in `workdir`."""
    index: int
    workdir: Path
    ovs: bool = True  # start Open vSwitch (False: a server the runner must refuse)
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{NET}.{self.index + 1}"

    @property
    def iface(self) -> str:
        """Its end of the veth (inside it), and the initial namespace's end."""
        return f"tbsv{self.index}"

    @property
    def peer(self) -> str:
        return f"tbsv{self.index}p"

    @property
    def ssh_config(self) -> Path:
        """An ssh client configuration that reaches this server as root (`ssh -F`)."""
        return self.workdir / "ssh_config"

    def _keys(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for key in ("host_ed25519", "id_ed25519"):
            if not (self.workdir / key).exists():
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"testbed-{key}",
                     "-f", str(self.workdir / key)])
        (self.workdir / "authorized_keys").write_text(
            (self.workdir / "id_ed25519.pub").read_text())
        host_key = (self.workdir / "host_ed25519.pub").read_text().split()
        (self.workdir / "known_hosts").write_text(f"{self.address} {host_key[0]} {host_key[1]}\n")
        (self.workdir / "sshd_config").write_text(
            SSHD_CONFIG.format(addr=self.address, dir=self.workdir))
        self.ssh_config.write_text(
            f"Host {self.address}\n"
            f"  IdentityFile {self.workdir}/id_ed25519\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.workdir}/known_hosts\n"
            "  StrictHostKeyChecking yes\n"
            "  LogLevel ERROR\n")

    def start(self, timeout: float = 60.0) -> int:
        """Starts the server; the PID of its `unshare` (whose death ends the server)."""
        if Path(f"/sys/class/net/{self.peer}").exists():
            raise TestbedError(f"server {self.index} ({self.address}) exists already "
                               f"({self.peer} is there): stop it or use another index")
        self._keys()
        ensure_bridge()
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "IFACE": self.iface,
               "ADDR": self.address, "PREFIX": str(PREFIX), "MTU": str(OUTER_MTU),
               "DIR": str(self.workdir), "OVS": "1" if self.ovs else "0",
               "MALLOC_TUNABLES": MALLOC_TUNABLES}
        self.proc = subprocess.Popen(
            ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
             "--kill-child=SIGKILL", "bash", "-c", IN_NAMESPACE],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=open(self.workdir / "server.log", "w"), text=True)
        try:
            # unshare itself enters the new network namespace (then forks): once it has, its
            # PID names the namespace. Before, `netns PID` would leave the veth here.
            self._wait_unshared(timeout)
            run(["ip", "link", "add", self.peer, "mtu", str(OUTER_MTU), "type", "veth",
                 "peer", "name", self.iface, "mtu", str(OUTER_MTU), "netns",
                 str(self.proc.pid)])
            run(["ip", "link", "set", self.peer, "master", BRIDGE, "up"])
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.proc.pid

    def _wait_unshared(self, timeout: float) -> None:
        assert self.proc is not None
        ours = os.readlink("/proc/self/ns/net")
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if os.readlink(f"/proc/{self.proc.pid}/ns/net") != ours:
                    return
            except OSError:  # it is starting, or has ended (poll says which)
                pass
            time.sleep(0.01)
        raise TestbedError(f"server {self.address}: unshare did not make a network namespace "
                           f"within {timeout:g} s: "
                           f"{(self.workdir / 'server.log').read_text()[-500:]}")

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.time() + timeout
        while time.time() < deadline:
            if select.select([self.proc.stdout], [], [], 0.05)[0] \
                    and self.proc.stdout.readline().strip() == "ready":
                return
            if self.proc.poll() is not None:
                raise TestbedError(f"server {self.address} did not start: "
                                   f"{(self.workdir / 'server.log').read_text()[-500:]}")
        raise TestbedError(f"server {self.address} did not start within {timeout:g} s")

    def stop(self) -> None:
        """Ends the server: everything in its namespaces goes with its first process."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # unshare ignores SIGTERM while it waits; its death SIGKILLs the namespace's
            # first process (--kill-child), and the kernel then ends every other one in it
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        run(["ip", "link", "del", self.peer], check=False)  # gone with the namespace, normally


def ensure_bridge() -> None:
    """The servers' network: a bridge with the initial namespace's address on it."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    run(["ip", "link", "add", BRIDGE, "mtu", str(OUTER_MTU), "type", "bridge"])
    run(["ip", "addr", "add", f"{NET}.1/{PREFIX}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def remove_bridge() -> None:
    run(["ip", "link", "del", BRIDGE], check=False)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "start":
        server = NamespaceServer(int(argv[2]) if len(argv) > 2 else 1, Path(argv[1]))
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C
        server.start()
        print(f"server {server.address}: ssh -F {server.ssh_config} root@{server.address}; "
              "Ctrl-C or SIGTERM ends it", flush=True)
        try:
            assert server.proc is not None
            server.proc.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
