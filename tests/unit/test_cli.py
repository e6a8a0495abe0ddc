"""CLI refusals that need no fabric: one line, exit 2, nothing created."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from testbed import cli, resources, runner

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def not_root(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "is_root", lambda: False)
    monkeypatch.setattr("testbed.system.is_root", lambda: False)
    monkeypatch.setattr(resources, "STATE_DIR", tmp_path / "state")
    return tmp_path


@pytest.mark.parametrize("command", ["run", "up"])
def test_run_and_up_without_root_are_one_line_and_create_nothing(not_root, command):
    out = not_root / "results"
    result = CliRunner().invoke(cli.main, [command, str(REPO / "experiments/reachability.yaml"),
                                           "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: `testbed {command}` needs root: run it with sudo"]
    assert not out.exists() and not (not_root / "state").exists()


def test_clean_without_root_is_one_line(not_root):
    result = CliRunner().invoke(cli.main, ["clean"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: `testbed clean` needs root: run it with sudo"


def test_topo_describe_and_validate_need_no_root():
    ok = CliRunner().invoke(cli.main, ["topo", "describe", "bcube", "4", "1", "--json"])
    assert ok.exit_code == 0 and '"equal_cost_paths"' in ok.stdout
    bad = CliRunner().invoke(cli.main, ["topo", "describe", "fattree", "5"])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == "error: fattree: k must be an even integer in 2..4096 (got 5)"
    valid = CliRunner().invoke(cli.main, ["validate", str(REPO / "experiments/quickstart.yaml")])
    assert valid.exit_code == 0 and "ok (quickstart: fattree, 16 hosts" in valid.stdout


def test_one_spec_on_another_fabric():
    spec = str(REPO / "experiments/reachability.yaml")
    ok = CliRunner().invoke(cli.main, ["validate", spec, "--topology", "torus sides=3x3x2"])
    assert ok.exit_code == 0 and ": torus, 18 hosts" in ok.stdout
    ok = CliRunner().invoke(cli.main, ["validate", spec, "--topology", "dcell 4 1"])
    assert ok.exit_code == 0 and ": dcell, 20 hosts" in ok.stdout
    bad = CliRunner().invoke(cli.main, ["validate", spec, "--topology", "dcell n=1"])
    assert bad.exit_code == 2
    assert "--topology: " not in bad.stderr and "dcell: n must be an integer in 2.." in bad.stderr
    bad = CliRunner().invoke(cli.main, ["validate", spec, "--topology", "mesh 4"])
    assert "--topology: unknown topology kind 'mesh'" in bad.stderr
