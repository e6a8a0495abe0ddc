"""The architecture, held by tests: layers import only downward, nothing imports in a
circle, and `testbed validate` loads no runtime module."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("topologies", "testbed", "controllers")

# The layers, from the bottom up: (name, folder, pure). A module belongs to the layer of the
# longest folder that holds it (`controllers/apps/` is the controller shells, the rest of
# `controllers/` the decisions; `testbed/workloads/model/` the pure workload models, the rest
# of `testbed/workloads/` the processes in hosts; `testbed/*.py` the top). A module imports
# only from its own layer and the ones below. Pure layers import no runtime library either,
# and the type checker checks them strictly (with the fully typed runtime folders,
# `TYPED` below). docs/ARCHITECTURE.md's table lists the same folders in the same order.
LAYERS = (
    ("topologies", "topologies", True),
    ("configuration", "testbed/config", True),
    ("workload models", "testbed/workloads/model", True),
    ("decisions", "controllers", True),
    ("core", "testbed/core", False),
    ("results", "testbed/results", False),
    ("dataplane", "testbed/dataplane", False),
    ("controller shells", "controllers/apps", False),
    ("workloads", "testbed/workloads", False),
    ("measurement", "testbed/measure", False),
    ("network", "testbed/net", False),
    ("cluster", "testbed/cluster", False),
    ("experiments", "testbed/experiments", False),
    ("live view", "testbed/view", False),
    ("runner, API, CLI", "testbed", False),
)
# runtime folders typed as strictly as the pure layers
TYPED = ("testbed/core", "testbed/results", "testbed/dataplane", "testbed/cluster",
         "testbed/experiments/jobs")
# what a pure layer may not import besides the runtime layers
RUNTIME_LIBRARIES = ("mininet", "pyroute2", "torch", "ryu", "eventlet", "matplotlib")

# what an offline check must never load: the emulator, the controller, the workers' torch,
# plotting, and every module that builds, measures or runs a fabric
VALIDATE_NEVER = RUNTIME_LIBRARIES + (
    "testbed.dataplane", "controllers.apps", "testbed.measure", "testbed.net",
    "testbed.cluster", "testbed.runner", "testbed.core.resources", "testbed.workloads.train",
    "testbed.workloads.models", "testbed.workloads.ps", "testbed.workloads.layerwise",
    "testbed.workloads.compression")


def dotted(folder: str) -> str:
    return folder.replace("/", ".")


def layer_of(module: str) -> int | None:
    """The index in LAYERS of a project module (the longest folder holding it)."""
    best: tuple[int, int] | None = None
    for i, (_, folder, _) in enumerate(LAYERS):
        prefix = dotted(folder)
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > best[1]:
                best = (i, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path) -> set[str]:
    """Modules a file imports when it runs (imports under `if TYPE_CHECKING:` left out),
    relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking_only(node):
                visit(node.orelse)
                continue
            for child in ast.walk(node) if not isinstance(node, ast.If) else [node]:
                if isinstance(child, ast.Import):
                    found.update(a.name for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = package.split(".")
                        base = base[:len(base) - child.level + 1]
                        mod = ".".join(base + ([child.module] if child.module else []))
                    else:
                        mod = child.module or ""
                    found.add(mod)
                    found.update(f"{mod}.{a.name}" for a in child.names)
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
    visit(ast.parse(path.read_text()).body)
    return found


def project_modules() -> dict[str, Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return {module_name(p): p for p in files}


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name imported from a package counts
    as that module when it is one)."""
    mods = project_modules()
    out = {}
    for name, path in mods.items():
        targets = set()
        for imp in imports_of(path):
            while imp and imp not in mods:
                imp = imp.rpartition(".")[0]
            if imp and imp != name:
                targets.add(imp)
        out[name] = targets
    return out


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_module_has_a_layer():
    lost = [m for m in project_modules() if layer_of(m) is None]
    assert not lost, f"modules outside every layer: {lost}"


def test_layers_import_only_downward():
    """No module imports from a layer above its own."""
    g = graph()
    up = [f"{m} ({LAYERS[layer_of(m)][0]}) -> {t} ({LAYERS[layer_of(t)][0]})"
          for m, targets in g.items() for t in targets if layer_of(t) > layer_of(m)]
    assert not up, "imports that go up the layers: " + "; ".join(sorted(up))


def test_pure_layers_import_no_runtime_library():
    mods = project_modules()
    bad = [f"{name} -> {imp}" for name, path in mods.items() if LAYERS[layer_of(name)][2]
           for imp in imports_of(path) if within(imp, RUNTIME_LIBRARIES)]
    assert not bad, "pure layers reach into the runtime: " + ", ".join(sorted(bad))


def test_the_docs_state_the_layers_the_test_checks():
    """docs/ARCHITECTURE.md's table names the same folders, in the same order."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ")]
    folders = [cells[2].strip().strip("`").rstrip("/") for cells in rows[1:]]
    assert folders == [folder for _, folder, _ in LAYERS]


def test_the_type_checker_reads_the_layers():
    """The strict type check covers exactly the pure layers' folders and TYPED."""
    import tomllib
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    pure = [folder for _, folder, is_pure in LAYERS if is_pure]
    # the decisions are `controllers/*.py`: their folder without the shells beneath it
    expected = [f"{f}/*.py" if any(o.startswith(f + "/") and not p for _, o, p in LAYERS)
                else f for f in pure] + list(TYPED)
    assert files == expected


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node)
    # a package's __init__ importing its own modules is not a circle of the code
    circles = [c for c in circles if not all(m == c[0] or m.startswith(c[0] + ".")
                                             for m in c)]
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_import_reader_sees_what_it_should(tmp_path):
    """The checks above are only as good as the reader: a relative import, a function-level
    import and a TYPE_CHECKING import, read as they are."""
    imports = imports_of(ROOT / "testbed" / "experiments" / "base.py")
    assert "testbed.config.spec" in imports
    assert "testbed.runner" not in imports  # experiments see the run through a Protocol
    assert "testbed.experiments.base" in imports_of(
        ROOT / "testbed" / "experiments" / "reachability.py")
    assert "mininet.net" in imports_of(ROOT / "testbed" / "net" / "fabric.py")


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(
        getattr(protocol, "__annotations__", {}))


def test_the_run_and_its_fabric_offer_what_experiments_use():
    """Experiments know the run only as base.Context and base.Phase: the runner's context
    and the fabric must have every member those promise."""
    import dataclasses

    from testbed.experiments.base import Context, Phase
    from testbed.net.fabric import Fabric
    from testbed.runner import RunContext
    for impl, protocol in ((RunContext, Context), (Fabric, Phase)):
        fields = {f.name for f in dataclasses.fields(impl)}
        missing = [m for m in _members(protocol) if not hasattr(impl, m) and m not in fields]
        assert not missing, f"{impl.__name__} lacks {missing}"


SPECS = sorted((ROOT / "experiments").glob("*.yaml"))


def modules_after(args: list[str], says: str) -> list[str]:
    """The modules loaded after `testbed ARGS`, run as a user runs it (its output must hold
    `says`)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from testbed import cli\n"
        f"r = CliRunner().invoke(cli.main, {args!r})\n"
        "assert r.exit_code == 0, r.output\n"
        f"assert {says!r} in r.output, r.output\n"
        "print('\\n'.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_validate_loads_no_runtime(spec):
    """`testbed validate SPEC`, run as a user runs it, leaves no runtime module loaded."""
    loaded = modules_after(["validate", str(spec)], ": ok")
    bad = [m for m in loaded if within(m, VALIDATE_NEVER)]
    assert not bad, f"validate loaded runtime modules: {bad}"
    assert "testbed.config.spec" in loaded  # it did load the spec (the check is not empty)


@pytest.mark.parametrize("name", ["permutation_fattree", "parallel_16", "incast"])
def test_plan_loads_no_runtime(name):
    """`testbed plan SPEC` is offline like validate: it builds nothing and, unless a spec's
    trainers have real compute to time, loads no torch either."""
    loaded = modules_after(["plan", f"experiments/{name}.yaml"], "one machine is")
    bad = [m for m in loaded if within(m, VALIDATE_NEVER)]
    assert not bad, f"plan loaded runtime modules: {bad}"
    assert "testbed.plan" in loaded
