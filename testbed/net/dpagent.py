"""The dataplane agent of one server of a split fabric (testbed/cluster/): the BPF maps a
server's programs use live in that server's kernel, so whatever reads or writes them runs
there. The runner and the controller start it over ssh (`python -m testbed.net.dpagent`)
and speak JSON lines on its stdin and stdout:

- `{"install": <QosPlane.to_data()>, "ports": [ids], "pin_dir": ..., "vnis": {port: vni},
  "underlay": [devices]}`: loads the programs and gives those ports (all on this server)
  their classes, hooks and map entries (QosPlane.install_ports); replies with their
  ifindexes and the devices it gave a clsact qdisc, and ends;
- `{"desc": <dataplane.json>, "here": <this server>}`, then `{"call": method, "args": [...]}`
  per request: a Dataplane method on this server's ports (the controller's QoS apps set
  thresholds and classes this way), or `sample_start` / `sample_stop`, a queue sampler run
  here (1 kHz over ssh would not be a sample), whose rows come back at the stop. Ends
  at the end of its input (the ssh that started it ended).

Every reply is one line: `{"result": ...}` or `{"error": "..."}`.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from testbed.config.loader import from_data
from testbed.config.qos import EcnProfile, PfcConfig
from testbed.dataplane.dpapi import Dataplane, serve

# the Dataplane methods another server may call (their first argument, where there is one,
# a port of this server)
METHODS = ("set_dscp_map", "set_ecn", "set_lossless", "set_pfc", "set_schedule", "queue",
           "dscp_counters", "ingress", "clear_pause", "prepare", "pause", "resume")


def install(request: dict) -> dict:
    from testbed.dataplane.qosplane import QosPlane

    plane = QosPlane.from_data(request["install"])
    pin_dir = Path(request["pin_dir"])
    plane.pin(None, pin_dir)
    wanted = set(request["ports"])
    ifindex = plane.install_ports([p for p in plane.ports if p.id in wanted], pin_dir,
                                  {int(k): v for k, v in request["vnis"].items()},
                                  tuple(request["underlay"]))
    return {"ifindex": ifindex, "clsact_added": plane.clsact_added}


class Server:
    """What one agent holds between requests: the dataplane and a sampler."""

    def __init__(self, desc: dict, here: str):
        self.dp = Dataplane(desc, here=here, forward=False)
        self.sampler: Any = None

    def call(self, method: str, args: list) -> Any:
        if method == "sample_start":
            return self.sample_start(*args)
        if method == "sample_stop":
            return self.sample_stop()
        if method not in METHODS:
            raise ValueError(f"no dataplane method {method!r}")
        if method == "set_ecn" and args[2] is not None:
            args[2] = from_data(EcnProfile, args[2], "profile")
        if method == "set_pfc" and args[2] is not None:
            args[2] = from_data(PfcConfig, args[2], "pfc")
        return getattr(self.dp, method)(*args)

    def sample_start(self, slots: list[list[int]], rate_hz: float) -> float:
        from testbed.measure.queues import ClassQueueSampler

        self.sampler = ClassQueueSampler(self.dp, [(p, c) for p, c in slots], rate_hz)
        self.sampler.start()
        return self.sampler.t0

    def sample_stop(self) -> dict:
        s = self.sampler
        s.stop()
        return {"t0": s.t0, "t_end": s.t_end, "ticks": s.ticks,
                "samples": [dataclasses.astuple(x) for x in s.samples], "loads": s.loads}


def main() -> int:
    held: list[Server] = []

    def handle(request: dict) -> Any:
        if "install" in request:
            return install(request)
        if "desc" in request:
            held.append(Server(request["desc"], request["here"]))
            return time.time()
        assert held, "the first request names the dataplane"
        return held[0].call(request["call"], list(request["args"]))

    serve(handle)
    for server in held:
        server.dp.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
