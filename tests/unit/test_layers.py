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

# the bottom: pure data and decisions, importable by anything, importing no runtime
PURE = ("topologies", "testbed.config", "controllers.routing", "controllers.plans",
        "controllers.fabric_routing",
        "controllers.trace", "controllers.circuits",
        "controllers.flowsched",
        "controllers.priority", "controllers.flowctl", "controllers.qos_policy",
        "controllers.recovery", "controllers.failover", "testbed.workloads.interference",
        # cross-job policies and the gate / progress files they exchange with workers
        "controllers.jobpolicy", "testbed.workloads.jobsync",
        # the jobs app's and the PFC executor's decisions besides the policies
        "controllers.jobsctl", "controllers.pfcctl",
        # the parallel workers' layout, schedules, model descriptions and analytical model
        "testbed.workloads.parallel.layout", "testbed.workloads.parallel.schedule",
        "testbed.workloads.parallel.desc", "testbed.workloads.parallel.cost",
        "testbed.workloads.parallel.job",
        # the live view's drawing of a fabric
        "testbed.view.layout",
        # where a cluster's nodes run and which links cross servers
        "testbed.cluster.placement")
# what the pure layers may not reach
RUNTIME = ("testbed.net", "testbed.measure", "testbed.runner", "testbed.experiments",
           "testbed.results", "testbed.cli", "testbed.doctor", "testbed.resources",
           "testbed.system", "testbed.workloads", "controllers.apps", "controllers.compat",
           "controllers.ofmsgs", "controllers.launch", "mininet", "pyroute2", "torch", "ryu",
           "eventlet", "matplotlib", "testbed.cluster.fabric", "testbed.cluster.servers",
           "testbed.cluster.engine", "testbed.cluster.nsserver")


# what an offline check must never load: the emulator, the controller, the workers' torch,
# plotting, and every module that builds, measures or runs a fabric
VALIDATE_NEVER = ("mininet", "pyroute2", "torch", "ryu", "eventlet", "matplotlib",
                  "testbed.net", "testbed.measure", "testbed.runner", "testbed.resources",
                  "testbed.workloads.train", "testbed.workloads.models",
                  "testbed.workloads.ps", "testbed.workloads.layerwise",
                  "testbed.workloads.compression", "controllers.apps", "controllers.compat",
                  "testbed.cluster.fabric", "testbed.cluster.servers", "testbed.cluster.engine")


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


def test_pure_layers_import_no_runtime():
    mods = project_modules()
    bad = []
    for name, path in mods.items():
        if not within(name, PURE):
            continue
        for imp in imports_of(path):
            if within(imp, RUNTIME) and not within(imp, PURE):
                bad.append(f"{name} -> {imp}")
    assert not bad, "pure layers reach up into the runtime: " + ", ".join(sorted(bad))


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
