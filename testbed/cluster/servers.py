"""The servers of a cluster run, as the runner reaches them: a command on a server (in its
root namespace or in a host's), and the checks that must pass on every server before any
fabric is built. Remote commands go over ssh with the cluster's options, as root (`sudo -E`
for another user, as the cluster edition does); local ones run directly.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.config.cluster import LOCAL, ClusterSpec, Server
from testbed.core import resources
from testbed.core.system import REPO_ROOT, TestbedError, in_netns
from testbed.dataplane.qos_render import UNDERLAY_PRIO

SSH_TIMEOUT_S = 5
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"  # the testbed's, at the same path everywhere
# what every server needs (Debian packages: openvswitch-switch, mininet, iperf3, iputils-ping,
# iproute2, ethtool; scripts/bootstrap.sh installs them)
NEEDED = ("ovs-vsctl", "mnexec", "iperf3", "ping", "ip", "tc", "ethtool", "nsenter")


def ssh_user(server: Server) -> str:
    """The cluster edition's choice: the server's user, else the one who ran sudo."""
    return server.user or os.environ.get("SUDO_USER") or "root"


# A Unix socket's path has at most 107 bytes: a run's shared ssh connections live in a
# short directory named by a hash of its run id, each named by ssh's own hash (%C).
CONTROL_NAME = "%C"


def control_dir(state_dir: Path, run_id: str) -> Path:
    """Where a run's shared ssh connections live (`testbed clean` closes them there)."""
    return state_dir / "ssh" / hashlib.sha1(run_id.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Conn:
    """How the runner runs commands on one server."""
    server: Server
    ssh_config: str | None = None
    control_dir: Path | None = None  # one shared ssh connection per server (ControlMaster)

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def local(self) -> bool:
        return self.server.local

    @property
    def user(self) -> str:
        return ssh_user(self.server)

    def ssh_options(self, control: bool = True) -> list[str]:
        # LogLevel ERROR, not -q: -q also silences why a connection failed (ssh_failure)
        opts = ["-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o",
                f"ConnectTimeout={SSH_TIMEOUT_S}"]
        if self.ssh_config:
            opts = ["-F", self.ssh_config, *opts]
        if control and self.control_dir is not None:
            opts += ["-o", f"ControlPath={self.control_dir}/{CONTROL_NAME}", "-o",
                     "ControlMaster=auto", "-o", "ControlPersist=30"]
        return opts

    def ssh(self, control: bool = True) -> list[str]:
        """The local argv prefix that runs a command line on the server."""
        local_user = [] if self.user == "root" else ["sudo", "-E", "-u", self.user]
        return [*local_user, "ssh", *self.ssh_options(control), f"{self.user}@{self.server.address}"]

    def argv(self, argv: list[str], netns_pid: int | None = None,
             tty: bool = False) -> list[str]:
        """argv that runs `argv` on this server (in the network namespace of its process
        `netns_pid` if given), as root. `tty`: on a terminal (ssh -tt), so that it gets a
        hangup and ends when the ssh here ends (its output then has CRLF line ends)."""
        inner = in_netns(netns_pid, argv) if netns_pid else argv
        if self.local:
            return inner
        root = [] if self.user == "root" else ["sudo", "-E"]
        return [*self.ssh(), *(["-tt"] if tty else []), "--", shlex.join([*root, *inner])]

    def run(self, argv: list[str], netns_pid: int | None = None, input: str | None = None,
            check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run(self.argv(argv, netns_pid), input=input, capture_output=True,
                              text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise TestbedError(f"server {self.name}: {shlex.join(argv)[:200]} failed: "
                               f"{(done.stderr or done.stdout).strip()[-400:]}")
        return done

    def close(self) -> None:
        """Ends the shared ssh connection, if one is open."""
        if not self.local and self.control_dir is not None:
            subprocess.run([*self.ssh(), "-O", "exit"], capture_output=True, timeout=10)


def conns(cluster: ClusterSpec, control_dir: Path | None) -> dict[str, Conn]:
    if control_dir is not None:
        control_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return {s.name: Conn(s, cluster.ssh_config, control_dir) for s in cluster.servers}


def on_servers(items: list[Any], fn: Any) -> list[Any]:
    """`fn(item)` for every item (a server, or a server's switches) at once, each in a
    thread; the results in order (the first error is raised here)."""
    results: list[Any] = [None] * len(items)
    errors: list[BaseException] = []

    def one(i: int, item: Any) -> None:
        try:
            results[i] = fn(item)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, x)) for i, x in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def ssh_failure(conn: Conn, stderr: str, code: int) -> str:
    """Why ssh to `conn`'s server failed, and the fix, from ssh's words."""
    where = f"server {conn.name} ({conn.user}@{conn.server.address})"
    text = stderr.strip()
    if "Connection refused" in text:
        return (f"{where}: SSH refused: no sshd listens there; install and start it "
                "(apt install openssh-server)")
    if re.search(r"timed out|No route to host|Network is unreachable|Could not resolve", text):
        return f"{where}: unreachable ({text.splitlines()[-1]}); check the address and network"
    if "Permission denied" in text:
        return (f"{where}: SSH refused the key; add the runner's public key to "
                f"{conn.user}'s authorized_keys there (ssh-copy-id)")
    if "Host key verification failed" in text:
        return (f"{where}: its host key is not known; connect once by hand "
                f"(ssh {conn.user}@{conn.server.address}) or give cluster.ssh_config")
    return f"{where}: ssh failed (exit {code}): {text[-300:] or 'no message'}"


def check_server(conn: Conn, tunnel: str) -> dict:
    """TestbedError naming the server and the fix unless it can carry its part of a fabric;
    what was found (addresses, the outer MTU toward the others, versions). Creates nothing
    that outlives the check (a tunnel is tried in a namespace of its own)."""
    if not conn.local:
        try:
            done = subprocess.run([*conn.ssh(control=False), "--", "true"], capture_output=True,
                                  text=True, timeout=SSH_TIMEOUT_S + 10,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"server {conn.name} ({conn.server.address}): unreachable (no "
                               "answer to ssh); check the address and network") from None
        if done.returncode != 0:
            raise TestbedError(ssh_failure(conn, done.stderr, done.returncode))
        if conn.user != "root":
            done = subprocess.run([*conn.ssh(control=False), "--", "sudo -n true"],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                raise TestbedError(f"server {conn.name}: {conn.user} cannot run sudo without "
                                   "a password there; allow it (sudoers NOPASSWD) or use root")
    files = " ".join(shlex.quote(str(REPO_ROOT / (m.replace(".", "/") + ".py")))
                     for m in REMOTE_MODULES)
    probe = conn.run(["sh", "-c", PROBE.format(python=shlex.quote(str(PYTHON)),
                                               needed=" ".join(NEEDED), tunnel=tunnel,
                                               files=files)],
                     check=False)
    if probe.returncode == 255 and not conn.local:
        raise TestbedError(ssh_failure(conn, probe.stderr, probe.returncode))
    found = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    missing = found.get("missing", "").split()
    if missing:
        raise TestbedError(f"server {conn.name}: {' '.join(missing)} not installed; run "
                           "scripts/bootstrap.sh there")
    if found.get("repo") != "yes":
        raise TestbedError(f"server {conn.name}: the testbed is not installed at {REPO_ROOT} "
                           "(every server needs it at the same path); clone it there and "
                           "run scripts/bootstrap.sh")
    if found.get("code"):
        raise TestbedError(f"server {conn.name}: its testbed at {REPO_ROOT} lacks "
                           f"{found['code'].strip()}, which this one runs there; check out "
                           "the same version on every server")
    if found.get("ovs") != "yes":
        raise TestbedError(f"server {conn.name}: Open vSwitch is not running; run "
                           "scripts/bootstrap.sh there (it starts OVS)")
    if found.get("tunnel") != "yes":
        fix = "use tunnel: vxlan" if tunnel == "gre" else "load the vxlan module"
        raise TestbedError(f"server {conn.name}: its kernel cannot make a {tunnel} tunnel "
                           f"({found.get('tunnel_error', '').strip() or 'no error text'}); {fix}")
    return found


# One shell round trip per server: what is missing, whether the testbed and OVS are there,
# and whether a tunnel of the asked type can be made (in a throwaway network namespace).
PROBE = r"""
missing=""
for cmd in {needed}; do command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"; done
echo "missing=$missing"
if [ -x {python} ]; then echo repo=yes; else echo repo=no; fi
code=""
for f in {files}; do [ -f "$f" ] || code="$code $f"; done
echo "code=$code"
if ovs-vsctl --timeout=3 show >/dev/null 2>&1; then echo ovs=yes; else echo ovs=no; fi
case {tunnel} in
  vxlan) args="type vxlan id 1 local 127.0.0.1 remote 127.0.0.2 dstport 4789";;
  gre) args="type gretap local 127.0.0.1 remote 127.0.0.2 key 1";;
esac
if err=$(unshare -n ip link add tbprobe $args 2>&1); then echo tunnel=yes
else echo tunnel=no; echo "tunnel_error=$err"; fi
echo "bridges=$(ovs-vsctl --timeout=3 list-br 2>/dev/null | tr '\n' ' ')"
"""


def route_mtu(conn: Conn, toward: str) -> tuple[str, int]:
    """(the device, its MTU) a server sends through toward address `toward`."""
    out = conn.run(["ip", "-o", "route", "get", toward]).stdout
    dev = out.split(" dev ")[1].split()[0]
    mtu = int(conn.run(["cat", f"/sys/class/net/{dev}/mtu"]).stdout.strip())
    return dev, mtu


def address_of(server: Server, others: list[Server]) -> str:
    """The IPv4 address others reach `server` at (a local server: the source address of its
    route toward the first remote one)."""
    if not server.local:
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", server.address):
            return server.address
        out = subprocess.run(["getent", "ahostsv4", server.address], capture_output=True,
                             text=True).stdout.split()
        if not out:
            raise TestbedError(f"server {server.name}: cannot resolve {server.address}; give "
                               "an IPv4 address or fix name resolution")
        return out[0]
    remote = next((s for s in others if s.address != LOCAL), None)
    if remote is None:
        return "127.0.0.1"
    route = subprocess.run(["ip", "-o", "route", "get", address_of(remote, [])],
                           capture_output=True, text=True).stdout
    if " src " not in route:
        raise TestbedError(f"server {server.name}: no route from this machine to "
                           f"{remote.name} ({remote.address})")
    return route.split(" src ")[1].split()[0]


def remote_entry(conn: Conn, bridges: list[str], ifaces: list[str]) -> dict:
    """What a run's record keeps of a remote server, for `testbed clean`."""
    return {"name": conn.name, "address": conn.server.address, "user": conn.server.user,
            "ssh_config": conn.ssh_config, "bridges": bridges, "ifaces": ifaces,
            "sysctls": {}, "bpf_pins": [], "underlay": []}


# Removes, on a server, the bridges, interfaces and BPF pins a run made (those still there),
# and puts back the buffer sysctls it raised; prints what it removed.
RELEASE = r"""
for b in {bridges}; do
  if ovs-vsctl --timeout=5 br-exists "$b" 2>/dev/null; then
    ovs-vsctl --timeout=20 --if-exists del-br "$b" && echo "bridge $b"
  fi
done
for i in {ifaces}; do
  if [ -e "/sys/class/net/$i" ]; then ip link del "$i" 2>/dev/null && echo "interface $i"; fi
done
{underlay}
for p in {pins}; do
  if [ -e "$p" ]; then rm -rf "$p" && echo "BPF pins $p"; fi
done
{sysctls}
"""


def underlay_script(entry: dict) -> str:
    """Removes the class dataplane's program from a server's own devices (and the clsact
    qdiscs the run added to them), printing what it removed."""
    devs = [u["dev"] for u in entry.get("underlay", [])]
    added = [u["dev"] for u in entry.get("underlay", []) if u["clsact_added"]]
    return (f'for d in {" ".join(shlex.quote(d) for d in devs)}; do\n'
            f'  tc filter del dev "$d" egress prio {UNDERLAY_PRIO} 2>/dev/null && '
            'echo "BPF filter on $d"\ndone\n'
            f'for d in {" ".join(shlex.quote(d) for d in added)}; do\n'
            '  tc qdisc del dev "$d" clsact 2>/dev/null && echo "clsact qdisc on $d"\ndone\n')


def release_remote(entries: list[dict], control_dir: Path, pin_root: Path) -> list[str]:
    """`testbed clean` on a run's remote servers: what it removed on each (an unreachable
    server is reported, not skipped silently; BPF pins only in `pin_root`)."""
    removed = []
    for entry in entries:
        server = Server(name=entry["name"], address=entry["address"], user=entry.get("user"))
        conn = Conn(server, entry.get("ssh_config"), None)
        script = RELEASE.format(
            bridges=" ".join(shlex.quote(b) for b in entry["bridges"]),
            ifaces=" ".join(shlex.quote(i) for i in entry["ifaces"]),
            underlay=underlay_script(entry),
            pins=" ".join(shlex.quote(p) for p in entry.get("bpf_pins", [])
                          if Path(p).parent == pin_root),
            sysctls=(shlex.join(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in
                                                         entry["sysctls"].items())])
                     if entry.get("sysctls") else ""))
        try:
            done = conn.run(["sh", "-c", script], check=False, timeout=120)
        except subprocess.TimeoutExpired:
            removed.append(f"server {conn.name}: not cleaned (no answer within 120 s)")
            continue
        if done.returncode == 255:
            removed.append(f"server {conn.name}: not cleaned ({ssh_failure(conn, done.stderr, 255)})")
            continue
        removed += [f"{line} on server {conn.name}" for line in done.stdout.splitlines()
                    if line.strip()]
        Conn(server, entry.get("ssh_config"), control_dir).close()
    if control_dir.exists():
        for sock in control_dir.iterdir():
            sock.unlink(missing_ok=True)
        control_dir.rmdir()
    return removed


DPAGENT = "testbed.net.dpagent"  # a server's dataplane agent
# the testbed's modules a fabric runs on its servers; the probe checks each is there, so
# that a server with another version of the testbed is refused before anything is built
REMOTE_MODULES = ("testbed.dataplane.ovs", "testbed.measure.conservation",
                  "testbed.measure.cpu", DPAGENT)


def module(name: str, *args: str) -> list[str]:
    """argv of one of the testbed's modules on a server (its Python, at the same path)."""
    if name not in REMOTE_MODULES:
        raise ValueError(f"{name} is not in REMOTE_MODULES, which the servers' probe checks")
    return [str(PYTHON), "-m", name, *args]


UNDERLAY_PORT = 5299  # the underlay goodput test's iperf3 port on the receiving server


def underlay(sender: Conn, receiver: Conn, receiver_address: str,
             seconds: float = 2.0) -> dict:
    """The servers' own network between two servers, which a tunnel rides on: the round trip
    (5 pings) and the TCP goodput one way (iperf3, `seconds`), measured from `sender`."""
    ping = sender.run(["ping", "-n", "-q", "-c", "5", "-i", "0.2", "-W", "2",
                       receiver_address], check=False).stdout
    rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", ping)
    server = subprocess.Popen(receiver.argv(["iperf3", "-s", "-1", "-p", str(UNDERLAY_PORT)],
                                            tty=True),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    try:
        mbps = None
        for _ in range(20):  # until the server listens
            done = sender.run(["iperf3", "-c", receiver_address, "-p", str(UNDERLAY_PORT),
                               "-t", f"{seconds:g}", "-J"], check=False, timeout=seconds + 30)
            try:
                end = json.loads(done.stdout)["end"]  # iperf 3.12 -J: exit 0 and an "error"
            except (ValueError, KeyError):            # when it could not connect
                end = {}
            if "sum_received" in end:
                mbps = end["sum_received"]["bits_per_second"] / 1e6
                break
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(5)
    return {"rtt_min_ms": float(rtt.group(1)) if rtt else None,
            "rtt_avg_ms": float(rtt.group(2)) if rtt else None,
            "goodput_mbps": round(mbps, 1) if mbps is not None else None}


def release_servers(entries: list[dict], run_id: str) -> list[str]:
    """What a run record lists on other servers, removed (`testbed clean`, the runner's
    teardown): `release_remote` with the record's control directory and pin root."""
    return release_remote(entries, control_dir(resources.STATE_DIR, run_id),
                          resources.BPF_PIN_ROOT)
