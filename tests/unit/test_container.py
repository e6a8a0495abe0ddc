"""The Dockerfile stays the README's scripts and nothing else: these machines
reach no image registry, so the image is never built here, and what keeps it true is that
it cannot drift from the scripts the README runs (which CI runs on every commit)."""
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_is_debian_12_with_the_repository_and_the_readme_scripts_only():
    ins = instructions()
    assert ins[0] == ("FROM", "debian:12")
    assert ("COPY", ". .") in ins
    runs = [args for word, args in ins if word == "RUN"]
    # one build step: the bootstrap the README's two commands run first, install only
    assert runs == ["TESTBED_START_OVS=0 scripts/bootstrap.sh --test"]  # as test.sh runs it
    assert [args for word, args in ins if word == "CMD"] == ['["scripts/test.sh"]']
    assert {word for word, _ in ins} <= {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "CMD"}


def test_the_containers_commands_are_the_readmes_and_bootstrap_again():
    readme = (REPO / "README.md").read_text()
    for script, args in (("scripts/test.sh", " --test"), ("scripts/run-default.sh", "")):
        assert f"sudo {script}" in readme  # the quick start's two commands
        assert f'"$ROOT/scripts/bootstrap.sh"{args}\n' in (REPO / script).read_text()
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert 'if [ "${TESTBED_START_OVS:-1}" = 0 ]; then' in bootstrap


def test_the_readme_shows_the_dockerfiles_commands():
    docker = [shlex.split(line.lstrip("# ").replace("\\", ""))
              for line in re.sub(r"\\\n#\s*", " ", (REPO / "Dockerfile").read_text()).splitlines()
              if line.lstrip("# ").startswith("docker ")]
    readme = re.sub(r"\\\n\s*", " ", (REPO / "README.md").read_text())
    shown = [shlex.split(line) for line in readme.splitlines() if line.startswith("docker ")]
    assert docker and docker == shown
    assert all("--privileged" in cmd and "--network" in cmd for cmd in shown
               if cmd[1] == "run")


def test_the_build_context_leaves_out_this_machines_venv_and_results():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", "results", ".git"} <= set(ignored)
