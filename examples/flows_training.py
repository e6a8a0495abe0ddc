"""Flows, then a training job, from one script on a k=4 Fat-Tree at 20 Mb/s: four iperf3
flows from pod 0 to pod 2 on a fabric the script builds, then a 4-worker ring-allreduce job
run as `testbed run` would run a `training` experiment (its tables, plots and headline in
the same results directory). Run it as root:

    sudo .venv/bin/python examples/flows_training.py [OUT_DIR]
"""
from __future__ import annotations

import json
import sys

from testbed.api import Testbed

SPEC = {"name": "flows-training",
        "topology": {"kind": "fattree", "params": {"k": 4, "rate_mbps": 20}},
        "links": {"mtu_bytes": 9000, "buffer_pkts": 100}}


def main(out: str | None = None) -> dict:
    with Testbed(SPEC, out=out) as tb:
        fab = tb.fabric("flows")
        results = fab.flows([("h1", "h9"), ("h2", "h10"), ("h3", "h11"), ("h4", "h12")],
                            duration_s=6, omit_s=1)
        for r in results:
            print(f"{r.src} -> {r.dst}: {r.goodput_mbps:.1f} Mb/s, {r.retransmits} retransmits")
        # a training experiment: its own fabric (the flows' one is torn down first)
        training = tb.experiment({"type": "training", "model": "mlp", "width": 256,
                                  "iters": 6, "jobs": [{"sync": "ring", "workers": 4}]})
        print(json.dumps(training["headline"], indent=1))
    return {"goodputs": [r.goodput_mbps for r in results], "training": training,
            "out": str(tb.out_dir)}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
