"""The surface users touch: plugins named in a spec, and clear refusals (not-root refusals:
tests/unit/test_cli.py)."""
import json
import subprocess
import sys
from pathlib import Path

from .helpers import run

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
import json, os
from controllers.apps.compat import MAIN_DISPATCHER, OFP_VERSION, RyuApp, ofp_event, set_ev_cls
from testbed.config.controller import phase_config


class CountSwitches(RyuApp):
    """A user's app: records every switch that connects, next to the built-in router."""
    OFP_VERSIONS = [OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = set()

    @set_ev_cls(ofp_event.EventOFPStateChange, MAIN_DISPATCHER)
    def state(self, ev):
        self.seen.add(ev.datapath.id)
        results_dir = phase_config().results_dir
        with open(os.path.join(results_dir, "plugin_seen.json"), "w") as fh:
            json.dump(sorted(self.seen), fh)
'''


def test_plugin_file_is_loaded_beside_the_router(tmp_path):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(PLUGIN)
    out, summary = run(tmp_path, {"name": "it-plugin", "topology": {"kind": "leafspine", "params": {}},
                                  "controller": {"plugins": [str(plugin)]},
                                  "experiments": [{"type": "reachability", "count": 1}]})
    assert summary["status"] == "ok"
    assert summary["experiments"]["0:reachability"]["headline"]["loss_pct"] == 0.0
    assert json.loads((out / "plugin_seen.json").read_text()) == [1, 2, 3, 4, 5, 6]  # every switch, seen by the plugin
    assert "CountSwitches" in (out / "controller.log").read_text()


def test_invalid_spec_is_refused_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntopology: {kind: fattree, params: {k: 3}}\nexperiments: [{type: reachability}]\n")
    proc = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(bad), "--out", str(tmp_path / "o")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}: topology.params: fattree: k must be an even integer in 2..4096 (got 3)"
    assert not (tmp_path / "o").exists()
