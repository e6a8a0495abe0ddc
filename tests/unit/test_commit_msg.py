"""The repository's commit-msg hook (CONTRIBUTING.md): a subject of at most 72 characters,
then a blank line before the body."""
import subprocess
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[2] / ".githooks" / "commit-msg"


def verdict(tmp_path: Path, message: str) -> subprocess.CompletedProcess:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run([str(HOOK), str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("message", [
    "Plugin guard: refuse port-mods\n\nstplib blocked ports with port-mods: 94.6% lost.\n",
    "x" * 72 + "\n",
    "A subject alone\n",
    "# git's own comment first\nA subject\n\nthe body\n# and after\n",
    "",
])
def test_short_subjects_with_a_blank_line_pass(tmp_path, message):
    done = verdict(tmp_path, message)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("message,why", [
    ("x" * 73 + "\n\nbody\n", "the subject is 73 characters"),
    ("Runs tied to their code, nothing overwritten, sweeps, --strict, provenance and more\n",
     "keep it to 72"),
    ("A subject\nthe body right under it\n", "leave a blank line"),
])
def test_long_subjects_and_a_missing_blank_line_are_refused(tmp_path, message, why):
    done = verdict(tmp_path, message)
    assert done.returncode == 1 and why in done.stderr, (done.returncode, done.stderr)
