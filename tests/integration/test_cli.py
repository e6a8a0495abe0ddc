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


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], cwd=cwd, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=300)


def test_a_detached_fabric_up_exec_status_down_and_a_killed_one_cleaned(tmp_path):
    """`up --detach` returns with the fabric up; `exec` runs in its nodes, `status` lists
    it, a second `up` or `run` is refused by name, `down` tears exactly it down. A holder
    killed with SIGKILL leaves what `testbed clean` removes, its state included."""
    import os
    import signal

    from testbed.detached import fabrics

    from .helpers import leftovers
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: it-detach\ntopology: {kind: leafspine, params: {spines: 1, "
                    "leaves: 2, hosts_per_leaf: 2}}\n")
    done = cli("up", str(spec), "--detach", "--out", str(tmp_path / "one"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("it-detach: up (4 hosts, 3 switches)"), done.stdout
    try:
        assert "it-detach: up, spec it-detach, 4 hosts" in cli("status").stdout
        ping = cli("exec", "it-detach", "h1", "--", "ping", "-c", "2", "-W", "2", "10.0.0.4")
        assert ping.returncode == 0 and "2 received" in ping.stdout, ping.stdout + ping.stderr
        failing = cli("exec", "it-detach", "h1", "--", "sh", "-c", "exit 3")
        assert failing.returncode == 3                       # the command's own status
        flows = cli("exec", "it-detach", "l1", "--", "ovs-ofctl", "-O", "OpenFlow13",
                    "dump-flows", "l1")
        assert flows.returncode == 0 and "priority=" in flows.stdout   # a switch: root ns
        for args, words in ((("exec", "it-detach", "h9", "--", "true"), "no node 'h9'"),
                            (("exec", "other", "h1", "--", "true"), "no fabric 'other' is up"),
                            (("up", str(spec), "--detach", "--name", "it-second"),
                             "fabric 'it-detach' is up"),
                            (("run", str(REPO / "experiments" / "quickstart.yaml"), "--out",
                              str(tmp_path / "run")), "(fabric it-detach)")):
            refused = cli(*args)
            assert refused.returncode != 0 and words in refused.stderr, (args, refused.stderr)
    finally:
        down = cli("down", "it-detach")
    assert down.returncode == 0 and "it-detach: down (ok)" in down.stdout, down.stderr
    assert json.loads((tmp_path / "one" / "summary.json").read_text())["status"] == "ok"
    assert leftovers(["l1", "l2", "sp1"]) == [] and fabrics() == []
    assert "no fabric is up" in cli("status").stdout

    assert cli("up", str(spec), "--detach", "--out", str(tmp_path / "two")).returncode == 0
    (holder,) = fabrics()
    os.kill(holder.pid, signal.SIGKILL)
    assert "holder gone" in cli("status").stdout
    assert "gone" in cli("exec", "it-detach", "h1", "--", "true").stderr
    clean = cli("clean")
    assert clean.returncode == 0 and "state of detached fabric it-detach" in clean.stdout
    assert leftovers(["l1", "l2", "sp1"]) == [] and fabrics() == []
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["status"] == "killed"
