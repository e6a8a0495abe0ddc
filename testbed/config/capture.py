"""`capture:` in a spec: packets written to pcap files in the results, for tcpdump and
Wireshark (the runtime side: testbed/measure/capture.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from topologies.model import Topology, ifname

from .loader import SpecError

PCAP_RECORD_HEADER = 16  # bytes before each packet in a pcap file
PCAP_FILE_HEADER = 24


@dataclass(frozen=True, kw_only=True)
class CaptureSpec:
    """Switch ports by interface name (`l1-eth3`: the link's packets as that port sends and
    receives them) and hosts by name (every NIC of the host); `filter` is a tcpdump (pcap)
    expression, `snaplen` the bytes kept of each packet, and each file stops at `max_mb`.
    Every fabric the run builds captures what it has of these (capture/<phase>/<iface>.pcap)."""
    ports: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    filter: str = ""
    snaplen: int = 128
    max_mb: float = 100.0

    def check(self, path: str = "capture") -> None:
        if not self.ports and not self.hosts:
            raise SpecError(f"{path}: name ports (e.g. l1-eth1) or hosts (e.g. h1) to capture")
        for port in self.ports:
            if not re.fullmatch(r"[A-Za-z0-9_.]+-eth\d+", port):
                raise SpecError(f"{path}.ports: {port!r} is not an interface name "
                                "(<switch>-eth<port>, e.g. l1-eth1)")
        if not 64 <= self.snaplen <= 262144:
            raise SpecError(f"{path}.snaplen: bytes kept of each packet, 64..262144 "
                            f"(got {self.snaplen})")
        if not 0 < self.max_mb <= 100_000:
            raise SpecError(f"{path}.max_mb: a file's cap in MB, in (0, 100000] "
                            f"(got {self.max_mb})")
        if "\n" in self.filter:
            raise SpecError(f"{path}.filter: one tcpdump expression on one line")

    def interfaces(self, topo: Topology) -> tuple[list[str], dict[str, list[str]]]:
        """What a fabric of `topo` has of these: its switch ports, and per host its NICs."""
        switch_ports = {ifname(n, p) for n, p, _ in topo.interfaces() if not topo.is_host(n)}
        hosts = {h.name for h in topo.hosts}
        return ([p for p in self.ports if p in switch_ports],
                {h: [ifname(h, p) for p, _, _ in topo.ports_of(h)]
                 for h in self.hosts if h in hosts})

    def check_on(self, topo: Topology, path: str = "capture") -> None:
        """Every port and host named is in `topo` (the spec's own fabric)."""
        ports, hosts = self.interfaces(topo)
        for port in self.ports:
            if port not in ports:
                example = next((ifname(n, p) for n, p, _ in topo.interfaces()
                                if not topo.is_host(n)), "")
                raise SpecError(f"{path}.ports: {port!r} is not a switch port of this "
                                f"{topo.kind} (e.g. {example})")
        for host in self.hosts:
            if host not in hosts:
                raise SpecError(f"{path}.hosts: no host {host!r} in this {topo.kind} (hosts "
                                f"{topo.hosts[0].name}..{topo.hosts[-1].name})")

    def max_packets(self) -> int:
        """tcpdump's packet count that keeps a file within `max_mb`, each packet cut to
        `snaplen` (a packet shorter than that leaves the file smaller)."""
        return max(1, int((self.max_mb * 1e6 - PCAP_FILE_HEADER)
                          // (self.snaplen + PCAP_RECORD_HEADER)))

    def tcpdump_argv(self, iface: str, path: str) -> list[str]:
        """The tcpdump that writes `iface`'s packets to `path` (as root: Debian's tcpdump
        would otherwise drop to its own user, who cannot write the results)."""
        argv = ["tcpdump", "-i", iface, "-w", path, "-s", str(self.snaplen),
                "-c", str(self.max_packets()), "-n", "-Z", "root"]
        return argv + (["--", self.filter] if self.filter else [])
