import csv
import json
import os
from pathlib import Path

from testbed.config.spec import sweep_points
from testbed.runner import run_spec
from testbed.spec import loads


def run(tmp_path: Path, data: dict) -> tuple[Path, dict]:
    """Run a spec given as data. TESTBED_TEST_DATAPATH (user | kernel | auto) sets the
    datapath of every spec that names none: how the suite is run on the kernel datapath
    (README: Datapaths)."""
    if os.environ.get("TESTBED_TEST_DATAPATH") and "datapath" not in data:
        data = {**data, "datapath": os.environ["TESTBED_TEST_DATAPATH"]}
    spec, topo = loads(data)
    out = run_spec(spec, topo, json.dumps(data), tmp_path / "run", log=lambda m: None,
                   points=sweep_points(data))
    return out, json.loads((out / "summary.json").read_text())


def rows(out: Path, name: str) -> list[dict]:
    with (out / "metrics" / name).open() as fh:
        return list(csv.DictReader(fh))


def leftovers(topo_switches: list[str]) -> list[str]:
    from testbed.core.resources import records
    from testbed.dataplane import ovs
    left = [b for b in ovs.bridges() if b in topo_switches]
    left += [n for n in topo_switches if Path(f"/sys/class/net/{n}").exists()]
    left += [r.run_id for r in records()]
    return left
