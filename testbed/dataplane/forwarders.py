"""Extra Open vSwitch processes on this machine, each forwarding a share of a fabric's switches
(`forwarding.processes`, testbed/config/forwarding.py says why).

Each is an ovsdb-server with its own database and an ovs-vswitchd, both in a directory of
their own that is their run, database and log directory (OVS_RUNDIR, OVS_DBDIR and
OVS_LOGDIR: Open vSwitch's tools reach the process whose directory their environment
names). The ovs-vswitchd is started with `--enable-dummy` and its bridges take the "dummy"
datapath type: the userspace datapath with in-memory internal ports. A second "netdev"
datapath in the same network namespace cannot be made (its internal port is a tap device
named `ovs-netdev`, which the machine's own ovs-vswitchd holds already); the switch ports,
veth interfaces, are read and written through AF_PACKET sockets exactly as the machine's
own process does. Each is started with the machine's malloc thresholds (ovs.py says why).
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from testbed.core.resources import STATE_DIR, directory_daemons, stop_directory
from testbed.core.system import TestbedError, run

from .ovs import MALLOC_TUNABLES

ROOT = STATE_DIR / "ovs"
SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


@dataclass(frozen=True)
class Forwarder:
    """One extra ovsdb-server and ovs-vswitchd, in `directory`."""
    directory: Path

    @property
    def env(self) -> dict[str, str]:
        """The variables that point Open vSwitch's tools at this process."""
        d = str(self.directory)
        return {"OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d}

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` (an Open vSwitch tool) aimed at this process."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *argv]

    def pid(self) -> int | None:
        """ovs-vswitchd's PID while it runs."""
        return directory_daemons(self.directory).get("ovs-vswitchd")

    def start(self) -> None:
        """Its database, ovsdb-server and ovs-vswitchd, started detached."""
        d = self.directory
        if directory_daemons(d):
            raise TestbedError(f"Open vSwitch processes of {d} are running already; "
                               "run `testbed clean`")
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        run(["ovsdb-tool", "create", str(d / "conf.db"), SCHEMA])
        run(self.argv(["ovsdb-server", str(d / "conf.db"), f"--remote=punix:{d}/db.sock",
                       f"--pidfile={d}/ovsdb-server.pid", "--detach",
                       f"--log-file={d}/ovsdb-server.log"]))
        run(self.argv(["ovs-vsctl", "--timeout=20", "--no-wait", "init"]))
        run(["env", f"GLIBC_TUNABLES={MALLOC_TUNABLES}", *self.argv(
            ["ovs-vswitchd", f"unix:{d}/db.sock", f"--pidfile={d}/ovs-vswitchd.pid",
             "--enable-dummy", "--detach", f"--log-file={d}/ovs-vswitchd.log"])])
        if self.pid() is None:
            raise TestbedError(f"ovs-vswitchd of {d} did not start; see {d}/ovs-vswitchd.log")


def start_all(forwarders: list[Forwarder]) -> None:
    """Start them side by side (a few tenths of a second each)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(Forwarder.start, forwarders))


def stop_all(directories: list[Path]) -> list[str]:
    """Stop them (resources.stop_directory), side by side; what was removed."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return [line for lines in pool.map(stop_directory, directories) for line in lines]
