"""Mininet's `Mininet` class over the testbed (see testbed/mn/__init__.py).

    net = Mininet(topo=LeafSpine(), spec="my.yaml")   # spec, out: the testbed's own
    net.start()
    net.pingAll()
    h1, h4 = net.get("h1", "h4")
    print(h1.cmd("ping -c1", h4.IP()))
    net.iperf((h1, h4))
    net.stop()

The network is built at `start`, as one fabric of a testbed session (`testbed.api.Testbed`):
a spec gives its routing, link buffers, classes and plugins, and a results directory keeps
what ran. Until `start`, `addHost`/`addSwitch`/`addLink` add to the topology and return
handles that become Mininet's nodes once it runs; afterwards the fabric is what it is (a
real fabric's cabling does not change either: take links down and up with
`configLinkStatus`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from mininet.log import info, lg, output
from mininet.topo import Topo

from testbed.api import LiveFabric, Testbed, script_spec
from testbed.config.loader import SpecError
from testbed.config.spec import Spec
from testbed.core.errors import TestbedError
from topologies.params import DEFAULT_RATE_MBPS

from .topo import check_host, to_topology, unwrap

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class NodeError(TestbedError, KeyError):
    """An unknown node: a TestbedError, and the KeyError Mininet raises."""
    __str__ = Exception.__str__


class Pending(str):
    """A node added before `start`: its name, as a Topo takes it, until the network runs;
    then Mininet's node itself for anything else (`h1.cmd(...)`, `h1.IP()`)."""
    net: Mininet

    def __new__(cls, name: str, net: Mininet) -> Pending:
        handle = super().__new__(cls, name)
        handle.net = net
        return handle

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.net[str(self)], attr)


class Mininet:
    """Mininet's network: `start`, `stop`, `get`, `hosts`, `switches`, `pingAll`, `iperf`,
    `configLinkStatus`, with Mininet's own node objects, on a testbed fabric."""

    def __init__(self, topo: Topo | None = None, switch: Any = None, host: Any = None,
                 controller: Any = None, link: Any = None, intf: Any = None,
                 build: bool = True, xterms: bool = False, cleanup: bool = False,
                 ipBase: str = "10.0.0.0/8", inNamespace: bool = False,  # noqa: N803
                 autoSetMacs: bool = False, autoStaticArp: bool = False,  # noqa: N803
                 autoPinCpus: bool = False, listenPort: int | None = None,  # noqa: N803
                 waitConnected: bool = False, *,  # noqa: N803
                 spec: str | Path | dict | Spec | None = None,
                 out: str | Path | None = None) -> None:
        """Mininet's arguments, in Mininet's order; `spec` (a spec file, its data or a Spec:
        routing, buffers, classes, plugins) and `out` (the results directory) are the
        testbed's. The switch, link and controller classes stand for what the testbed runs;
        the parameters they carry (functools.partial, Mininet's `custom`) are checked as a
        link's or a host's own."""
        if xterms:
            raise SpecError("Mininet(xterms=True): open them from the CLI (`xterm h1`)")
        if ipBase != "10.0.0.0/8":
            raise SpecError(f"Mininet(ipBase={ipBase!r}): the testbed numbers hosts in "
                            "10.0.0.0/8 (10.0.0.1, 10.0.0.2, ...)")
        if inNamespace or autoPinCpus:
            raise SpecError("Mininet(inNamespace=/autoPinCpus=): the testbed's switches run "
                            "in the root namespace, unpinned")
        self.host_defaults: dict = {} if host is None else {"cls": host}
        check_host("Mininet(host=...)", self.host_defaults)
        self.link_defaults = unwrap(link)[1] if link is not None else {}
        if controller is not None:
            self._controller("Mininet(controller=...)", unwrap(controller)[1])
        self.auto_macs = autoSetMacs
        self.topo = topo if topo is not None else Topo()
        self.spec = script_spec(spec if spec is not None else {"name": "mininet-script"})[0]
        self.out = out
        self.tb: Testbed | None = None
        self.live: LiveFabric | None = None
        self.controllers: list = []

    @staticmethod
    def _controller(what: str, params: dict) -> None:
        ip = params.get("ip")
        if ip is not None and ip not in LOOPBACK:
            raise SpecError(f"{what}: ip={ip!r}: the testbed's switches answer to its own "
                            "controller; give a Ryu app as the spec's controller.plugins")

    # ---- before start: the topology ------------------------------------------------------
    def _building(self, what: str) -> None:
        if self.live is not None:
            raise TestbedError(f"{what}: the fabric is running; add nodes and links before "
                               "net.start() (configLinkStatus takes a link down and up)")

    def addHost(self, name: str, cls: Any = None, **opts: Any) -> Pending:  # noqa: N802
        """A host of the topology built at `start`; its handle is the host once it runs."""
        self._building(f"addHost({name!r})")
        return Pending(self.topo.addHost(name, **({"cls": cls} if cls else {}), **opts), self)

    def addSwitch(self, name: str, cls: Any = None, **opts: Any) -> Pending:  # noqa: N802
        self._building(f"addSwitch({name!r})")
        return Pending(self.topo.addSwitch(name, **opts), self)

    def addLink(self, node1: Any, node2: Any, port1: int | None = None,  # noqa: N802
                port2: int | None = None, cls: Any = None, **opts: Any) -> tuple[str, str]:
        self._building(f"addLink({node1}, {node2})")
        params = unwrap(cls)[1] if cls is not None else {}
        self.topo.addLink(str(node1), str(node2), port1, port2, **{**params, **opts})
        return str(node1), str(node2)

    def addController(self, name: str = "c0", controller: Any = None, **params: Any) -> None:  # noqa: N802
        """Accepted for Mininet's scripts: the testbed runs its own controller (Ryu, with
        the spec's routing), whatever the class and port; a Ryu app of yours runs beside it
        as a spec's `controller.plugins`. Another machine's controller is refused."""
        carried = unwrap(controller)[1] if controller is not None else {}
        self._controller(f"addController({name!r})", {**carried, **params})
        info(f"*** {name}: the testbed's controller\n")

    def build(self) -> None:
        """Nothing to do: the fabric is built at `start`."""

    # ---- running ---------------------------------------------------------------------------
    def start(self) -> None:
        """Build and start the fabric: switches, controller, routing, queues."""
        if self.live is not None:
            raise TestbedError("net.start(): the network is started already")
        rate = self.spec.links.rate_mbps or DEFAULT_RATE_MBPS
        topology = to_topology(self.topo, rate, self.link_defaults, self.host_defaults,
                               self.auto_macs)
        # a link's own bw stays its rate: the spec's rate is only the default of the others
        spec = dataclasses.replace(self.spec, links=dataclasses.replace(self.spec.links,
                                                                        rate_mbps=None))
        # the fabric quiets Mininet's log while it builds: the script's level comes back
        levels = [(x, x.level) for x in [lg, *lg.handlers]]
        tb = Testbed(spec, topo=topology, out=self.out, log=lambda m: info(m + "\n"),
                     what="a Mininet script").start()
        try:
            self.live = tb.fabric("mininet")
        except BaseException as exc:
            tb.stop(exc)  # the results say it failed, and why (TestbedError)
            raise
        finally:
            for x, level in levels:
                x.setLevel(level)
        self.tb = tb
        info(f"*** {len(topology.hosts)} hosts, {len(topology.switches)} switches, "
             f"{len(topology.links)} links up; results in {tb.out_dir}\n")

    def stop(self) -> None:
        """Tear the fabric down and write the results; a stopped network stays stopped."""
        if self.tb is not None:
            info("*** Stopping the fabric\n")
            self.tb.stop()
            info(f"*** Results in {self.tb.out_dir}\n")
        self.live = None

    def __enter__(self) -> Mininet:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.tb is not None and exc[1] is not None:
                self.tb.stop(exc[1])  # the results say the script failed (TestbedError)
        finally:
            self.stop()

    def live_fabric(self) -> LiveFabric:
        """The running fabric, as the script API has it (queues, flows, routing...)."""
        if self.live is None:
            raise TestbedError("the network is not started (net.start())")
        return self.live

    @property
    def out_dir(self) -> Path:
        """The results directory of the running (or last) network."""
        if self.tb is None:
            raise TestbedError("the network was never started (net.start())")
        return self.tb.out_dir

    # ---- nodes -----------------------------------------------------------------------------
    @property
    def _net(self) -> Any:
        return self.live_fabric().fabric.net

    @property
    def hosts(self) -> list:
        """The hosts: Mininet's node objects (`cmd`, `popen`, `IP`, `MAC`...)."""
        return list(self._net.hosts)

    @property
    def switches(self) -> list:
        return list(self._net.switches)

    def getNodeByName(self, *names: str) -> Any:  # noqa: N802
        """A node by name, or a list of them for several names (Mininet's `get`)."""
        nodes = [self[name] for name in names]
        return nodes[0] if len(nodes) == 1 else nodes

    get = getNodeByName

    def __getitem__(self, name: str) -> Any:
        net = self._net
        if name not in net.nameToNode or name == "c0":
            known = [n.name for n in [*net.hosts, *net.switches]]
            raise NodeError(f"no node {name!r} in this network (nodes: "
                            f"{', '.join(known[:6])}{'...' if len(known) > 6 else ''})")
        return net.nameToNode[name]

    def __contains__(self, name: str) -> bool:
        return self.live is not None and name in self._net.nameToNode and name != "c0"

    def __iter__(self):
        for node in [*self.hosts, *self.switches]:
            yield node.name

    # ---- Mininet's tests ---------------------------------------------------------------------
    def ping(self, hosts: list | None = None, timeout: Any = None) -> float:
        """Each host pings each other host once (or each of `hosts`), printed as Mininet
        prints it; returns the % of pings lost. `timeout` is not used: each ping waits for
        its reply up to the interval's end."""
        names = [str(h) for h in hosts] if hosts else None
        if names is None:
            output("*** Ping: testing ping reachability\n")
        rows = self.live_fabric().ping_rows(count=1, among=names)
        sent = sum(r[2] for r in rows)
        received = sum(r[3] for r in rows)
        for src in names or [h.name for h in self._net.hosts]:
            output(f"{src} -> " + " ".join(dst if got else "X" for s, dst, _, got, *_ in rows
                                          if s == src) + " \n")
        if not sent:
            output("*** Warning: No packets sent\n")
            return 0.0
        ploss = 100.0 * (sent - received) / sent
        output(f"*** Results: {int(ploss)}% dropped ({received}/{sent} received)\n")
        return ploss

    def pingAll(self, timeout: Any = None) -> float:  # noqa: N802
        return self.ping(timeout=timeout)

    def pingPair(self) -> float:  # noqa: N802
        return self.ping(self.hosts[:2])

    def iperf(self, hosts: Any = None, l4Type: str = "TCP", udpBw: str = "10M",  # noqa: N803
              fmt: str | None = None, seconds: float = 5, port: int = 5001) -> list[str]:
        """A TCP flow from the first host to the second (default: the first and the last
        host) for `seconds`, by iperf3 on a port of the testbed's choosing (`port` and
        `fmt` are not used): [server's rate, client's rate] as Mininet returns them (the
        receiver's goodput and the sender's rate), also in metrics/script_flows.csv."""
        if l4Type != "TCP":
            raise TestbedError(f"iperf(l4Type={l4Type!r}): only TCP here; run iperf3 -u in the "
                               "hosts with cmd() or popen() for UDP")
        client, server = hosts or (self.hosts[0], self.hosts[-1])
        output(f"*** Iperf: testing TCP bandwidth between {client} and {server} \n")
        (res,) = self.live_fabric().flows([(str(client), str(server))], duration_s=seconds,
                                          omit_s=0, tag="iperf")
        if res.error:
            raise TestbedError(f"iperf {client} -> {server}: {res.error}")
        result = [rate_text(res.goodput_mbps), rate_text(res.sent_mbps)]
        output(f"*** Results: {result}\n")
        return result

    def configLinkStatus(self, src: str, dst: str, status: str) -> None:  # noqa: N802
        """Take the links between two nodes down or up ('down' / 'up'), as a cable pulled or
        put back (their switch ports); returns once the controller has routed around it."""
        if status not in ("up", "down"):
            raise TestbedError(f"configLinkStatus: status {status!r}: 'up' or 'down'")
        live = self.live_fabric()
        ends = live.topo.switch_ends(str(src), str(dst))
        if not ends:
            raise NodeError(f"configLinkStatus: no link between {src!r} and {dst!r}")
        live.set_ports(ends, status == "up")

    def waitConnected(self, timeout: float | None = None, delay: float = 0.5) -> bool:  # noqa: N802
        """True: `start` returns once every switch has its paths."""
        return self.live is not None

    def staticArp(self) -> None:  # noqa: N802
        """Nothing to do: the controller answers ARP for every host."""

    def interact(self) -> None:
        """Start, the CLI, stop (Mininet's `interact`)."""
        from .cli import CLI
        self.start()
        try:
            CLI(self)
        except BaseException as exc:
            if self.tb is not None:
                self.tb.stop(exc)
            raise
        finally:
            self.stop()


def rate_text(mbps: float) -> str:
    """A rate as iperf prints it: '9.57 Mbits/sec', '1.23 Gbits/sec'."""
    for unit, scale in (("Gbits", 1e3), ("Mbits", 1.0), ("Kbits", 1e-3)):
        if mbps >= scale or unit == "Kbits":
            return f"{float(f'{mbps / scale:.3g}'):g} {unit}/sec"
    raise AssertionError("unreachable")

