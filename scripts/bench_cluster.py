"""A fabric on one server and the same fabric split across two, on a quiet
machine: the second server is a namespace server on this machine (testbed/cluster/
nsserver.py), so both share its two cores. Reachability and permutation on a Fat-Tree k=4
at 20 Mb/s; a single VXLAN-carried link at 10 and 50 Mb/s (leaf-spine 1-2-1 with one leaf
and its host on the other server), without and with the class dataplane; and the 4-worker
ring job on the Fat-Tree (h1, h5 here; h9, h13 there) with two gradient sizes.

    sudo .venv/bin/python scripts/bench_cluster.py OUTDIR [SECTION...]

SECTION: fattree (reachability and permutation), links, ring; all three by default.

Prints Markdown tables (docs/BENCHMARKS.md, "Beyond one machine") and writes every run's
results under OUTDIR.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from testbed.cluster.nsserver import NamespaceServer, remove_bridge
from testbed.runner import run_spec
from testbed.spec import loads

FATTREE = {"kind": "fattree", "params": {"k": 4, "rate_mbps": 20}}
LINKS = {"buffer_pkts": 100, "mtu_bytes": 9000}
QOS = {"classes": [{"name": "best-effort", "dscp": [0]}]}
RING_FIELDS = ("tx_bytes_per_sync", "comm_s_median", "model_comm_s", "comm_over_model",
               "rtt_ms", "worker_cpu_wait_share", "machine_idle_mean", "cpu_bound")


def leafspine(rate: float) -> dict:
    return {"kind": "leafspine", "params": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1,
                                            "host_rate": rate, "uplink_rate": rate}}


def run(out: Path, data: dict) -> tuple[Path, dict]:
    spec, topo = loads(data)
    done = run_spec(spec, topo, json.dumps(data), out, log=lambda m: None)
    return done, json.loads((done / "summary.json").read_text())


def cluster(srv: NamespaceServer, **extra) -> dict:
    return {"servers": [{"name": "a", "address": "localhost"},
                        {"name": "b", "address": srv.address, "user": "root"}],
            "ssh_config": str(srv.ssh_config), **extra}


def cpu_bound(summary: dict) -> bool:
    """Whether any phase of the run was CPU-bound (the summary says so)."""
    return bool(summary.get("cpu_bound"))


def main(out_dir: Path, sections: list[str]) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    srv = NamespaceServer(1, out_dir / "server1")
    srv.start()
    results: dict = {}
    try:
        # discarded: the first run after an OVS starts has slow paths (docs/FIDELITY.md),
        # and the namespace server's OVS has just started
        run(out_dir / "warm-up", {"name": "bench-warm-up", "topology": FATTREE, "links": LINKS,
                                  "experiments": [{"type": "reachability", "count": 1}],
                                  "cluster": cluster(srv)})
        for where, extra in (("one server", {}), ("two servers", {"cluster": cluster(srv)})):
            if "fattree" not in sections:
                break
            slug = where.replace(" ", "-")
            _, reach = run(out_dir / f"reach-{slug}", {
                "name": f"bench-reach-{slug}", "topology": FATTREE, "links": LINKS,
                "experiments": [{"type": "reachability", "count": 3}], **extra})
            _, perm = run(out_dir / f"perm-{slug}", {
                "name": f"bench-perm-{slug}", "topology": FATTREE, "links": LINKS,
                "experiments": [{"type": "permutation", "patterns": ["stride:8", "randbij"],
                                 "routings": ["single", "ecmp"], "duration_s": 20,
                                 "omit_s": 3, "repeats": 2}], **extra})
            results[where] = {"reach": reach["experiments"]["0:reachability"]["headline"],
                              "perm": perm["experiments"]["0:permutation"]["headline"],
                              "cpu_bound": cpu_bound(reach) or cpu_bound(perm)}
        split = {"cluster": cluster(srv, placement="explicit", nodes={"b": ["l2", "h2"]})}
        for rate in (10, 50) if "links" in sections else ():
            for where, extra in (("one server", {}), ("two servers", split),
                                 ("two servers, class dataplane", {**split, "qos": QOS})):
                slug = f"{rate}-{where.replace(' ', '-').replace(',', '')}"
                out, link = run(out_dir / f"link-{slug}", {
                    "name": f"bench-link-{slug}", "topology": leafspine(rate), "links": LINKS,
                    "experiments": [
                        {"type": "reachability", "count": 10},
                        {"type": "permutation", "patterns": ["stride:1"],
                         "routings": ["single"], "duration_s": 15, "omit_s": 3,
                         "repeats": 2}], **extra})
                phases = json.loads((out / "manifest.json").read_text())["phases"]
                crossing = [c for p in phases.values() if "cluster" in p
                            for c in p["cluster"]["crossing_links"]]
                results[f"link {rate} {where}"] = {
                    "normalised": link["experiments"]["1:permutation"]["headline"][
                        "stride:1_single_normalised"],
                    "idle_rtt_min_ms": link["experiments"]["0:reachability"]["headline"][
                        "idle_rtt_min_ms"],
                    "extra_delay_ms": crossing[0]["extra_delay_ms"] if crossing else None,
                    "cpu_bound": cpu_bound(link)}
        for width in (768, 256) if "ring" in sections else ():
            for where, extra in (("one server", {}), ("two servers", {"cluster": cluster(srv)})):
                slug = f"{width}-{where.replace(' ', '-')}"
                out, ring = run(out_dir / f"ring-{slug}", {
                    "name": f"bench-ring-{slug}", "topology": FATTREE, "links": LINKS,
                    "controller": {"routing": "single"}, **extra, "experiments": [{
                        "type": "training", "model": "mlp", "width": width, "iters": 10,
                        "jobs": [{"sync": "ring", "workers": 4}]}]})
                with (out / "metrics" / "training.csv").open() as fh:
                    job = next(csv.DictReader(fh))
                results[f"ring {width} {where}"] = {k: job[k] for k in RING_FIELDS}
    finally:
        srv.stop()
        remove_bridge()
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    if "fattree" in sections:
        print_fattree(results)
    if "links" in sections:
        print_links(results)
    if "ring" in sections:
        print_ring(results)
    return 0


def print_fattree(results: dict) -> None:
    print("| | one server | two servers |\n|---|---|---|")
    one, two = results["one server"], results["two servers"]
    for key in ("loss_pct", "rtt_min_median_ms", "idle_rtt_min_ms"):
        print(f"| reachability {key} | {one['reach'][key]} | {two['reach'][key]} |")
    for key in sorted(one["perm"]):
        if key.endswith("_normalised"):
            print(f"| {key} | {one['perm'][key]} | {two['perm'][key]} |")
    print(f"| CPU-bound | {one['cpu_bound']} | {two['cpu_bound']} |\n")


def print_links(results: dict) -> None:
    print("| link | where | goodput / rate | idle RTT h1-h2 (ms) | tunnel's extra one-way "
          "delay (ms) | CPU-bound |\n|---|---|---|---|---|---|")
    for rate in (10, 50):
        for where in ("one server", "two servers", "two servers, class dataplane"):
            r = results[f"link {rate} {where}"]
            print(f"| {rate} Mb/s | {where} | {r['normalised']} | {r['idle_rtt_min_ms']} | "
                  f"{r['extra_delay_ms']} | {r['cpu_bound']} |")


def print_ring(results: dict) -> None:
    print("\n| MLP width | where | " + " | ".join(RING_FIELDS) + " |\n|"
          + "---|" * (len(RING_FIELDS) + 2))
    for width in (768, 256):
        for where in ("one server", "two servers"):
            r = results[f"ring {width} {where}"]
            print(f"| {width} | {where} | " + " | ".join(r[k] for k in RING_FIELDS) + " |")


SECTIONS = ("fattree", "links", "ring")

if __name__ == "__main__":
    asked = sys.argv[2:] or list(SECTIONS)
    if len(sys.argv) < 2 or not set(asked) <= set(SECTIONS):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), asked))
