"""CLI refusals that need no fabric: one line, exit 2, nothing created."""
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from testbed import cli, runner
from testbed.core import resources

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def not_root(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "is_root", lambda: False)
    monkeypatch.setattr("testbed.core.system.is_root", lambda: False)
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


def _commands(group: click.Group, prefix: list[str]) -> dict[str, click.Command]:
    """Every leaf command of the CLI by its words ("topo describe")."""
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(_commands(command, [*prefix, name]))
        else:
            out[" ".join([*prefix, name])] = command
    return out


def _readme_rows() -> dict[str, str]:
    """The README's command table: each row's command words ("run", "topo describe") and its
    first cell."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("## The `testbed` command"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if line.startswith("| `testbed"):
            usage = line.split("`")[1]
            words = [w for w in usage.split()[1:] if w.isidentifier() and w.islower()]
            rows[" ".join(words[:2] if words[:1] == ["topo"] else words[:1]) or "--version"] = usage
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_readme_command_table_is_the_help():
    """Every command `--help` lists has a row, every option it shows is in that row, and the
    table names no command or option the CLI lacks."""
    commands = _commands(cli.main, [])
    rows = _readme_rows()
    assert set(rows) == set(commands) | {"--version"}, (set(rows) ^ (set(commands) | {"--version"}))
    for words, command in commands.items():
        shown = {o for p in command.params if isinstance(p, click.Option) for o in p.opts
                 if o.startswith("--") and o != "--help"}
        written = set(re.findall(r"--[a-z][a-z-]*", rows[words]))
        assert shown == written, (words, shown ^ written)
    group_options = {o for p in cli.main.params for o in p.opts if o.startswith("--")}
    assert group_options == {"--version"}


def test_version_names_the_commit():
    result = CliRunner().invoke(cli.main, ["--version"])
    assert result.exit_code == 0
    assert re.fullmatch(r"testbed \S+, ([0-9a-f]{12}|commit unknown)( \(uncommitted changes\))?\n",
                        result.output), result.output
