"""An experiment script reading the switches' queues while traffic runs: three senders (two
beside the receiver under its leaf, one across the spine) send to one host of a Leaf-Spine
(20 Mb/s links, one traffic class with ECN marking at K = 20 packets); the queue of the
leaf's port down to the receiver is read ten times a second, and the marking threshold is
raised to K = 60 while the flows run. The slow start's overshoot, before the first marks
have come back to the senders, is reported apart (`startup_max_pkts`).

    sudo .venv/bin/python examples/queues.py [OUT]
"""
import sys
import time

from testbed.api import Testbed
from testbed.config.qos import EcnProfile

SPEC = {"name": "example-queues",
        "topology": {"kind": "leafspine",
                     "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 3}},
        "links": {"rate_mbps": 20},
        "hosts": {"ecn": True},
        "qos": {"classes": [{"name": "all", "dscp": [0], "ecn": {"k": 20}}]}}


def main(out: str | None = None) -> dict:
    with Testbed(SPEC, out=out) as tb:
        fab = tb.fabric()
        dst = fab.host("h4")
        port = fab.port("h4")  # the leaf's downlink to h4
        servers = [dst.start(["iperf3", "-s", "-1", "-p", str(5201 + i)]) for i in range(3)]
        fab.wait_listening([("h4", 5201 + i) for i in range(3)])
        senders = [fab.host(h).start(["iperf3", "-c", dst.ip, "-p", str(5201 + i), "-t", "6"])
                   for i, h in enumerate(("h5", "h6", "h1"))]
        # the first half second is the senders' slow start: they double their windows until
        # the first marks come back, a round trip later, so the queue overshoots K then
        depth: dict[int | str, list[int]] = {"start": [], 20: [], 60: []}
        t0 = time.time()
        dp = fab.dataplane()
        port_id = dp.by_name[port]["id"]
        while time.time() - t0 < 5.5:
            k = "start" if time.time() - t0 < 0.5 else 20 if time.time() - t0 < 2.5 else 60
            if k == 60 and not depth[60]:
                dp.set_ecn(port_id, 0, EcnProfile(k=60))  # while the flows run
            (q,) = fab.queues([port])
            depth[k].append(q.queue_pkts)
            time.sleep(0.1)
        marks = fab.queues([port])[0].marks
        fab.stop(senders + servers)
        result = {"port": port, "startup_max_pkts": max(depth["start"]),
                  "k20_max_pkts": max(depth[20]), "k60_max_pkts": max(depth[60]),
                  "marks": marks}
        print(result)
    print(f"results: {tb.out_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
