"""The `testbed` command."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import click

from testbed.core.errors import TestbedError
from topologies import TopologyError, build, parse_params
from topologies.graph import describe as describe_topology


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from testbed.core.provenance import version_line
        click.echo(version_line())
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="the version and the commit of this checkout, then exit")
def main() -> None:
    """Packet-level emulation testbed for data-center networks carrying DL traffic."""


@main.command()
def doctor() -> None:
    """What this machine offers, with the fix for each missing piece."""
    from .doctor import checks
    failed = False
    for name, ok, detail, fix in checks():
        mark = "ok " if ok else ("-- " if fix is None else "NO ")
        click.echo(f"{mark} {name:<28} {detail}")
        if not ok and fix:
            click.echo(f"    fix: {fix}")
            failed = True
    sys.exit(1 if failed else 0)


@main.group()
def topo() -> None:
    """Topology tools (no root needed)."""


@topo.command("describe")
@click.argument("kind")
@click.argument("params", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--pair", nargs=2, help="hosts whose equal-cost paths to count")
def topo_describe(kind: str, params: tuple[str, ...], as_json: bool, pair) -> None:
    """Describe KIND built with PARAMS (positional or name=value), e.g. `fattree 4`."""
    try:
        t = build(kind, **parse_params(kind, list(params)))
        info = describe_topology(t, *(pair or (None, None)))
    except (TopologyError, KeyError) as exc:
        _fail(str(exc).strip("'\""))
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    for key, value in info.items():
        click.echo(f"{key:<20} {value}")


topology_option = click.option(
    "--topology", metavar="'KIND [PARAM=VALUE ...]'",
    help="run SPEC's experiments on this fabric instead of its own (e.g. 'dcell n=4 k=1')")
set_option = click.option(
    "--set", "sets", multiple=True, metavar="PATH=VALUE",
    help="change a field of SPEC (repeatable), e.g. links.rate_mbps=50 or "
         "experiments.0.duration_s=20")


def _load(spec: Path, topology: str | None = None, sets: tuple[str, ...] = (),
          experiments_required: bool = True):
    """SPEC loaded and checked with its --topology and --set applied, or exit 2 with one
    line naming the bad field."""
    from .spec import SpecError, load
    try:
        return load(spec, experiments_required, topology=topology, sets=sets)
    except SpecError as exc:
        _fail(f"{spec}: {exc}")


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@topology_option
@set_option
def validate(spec: Path, topology: str | None, sets: tuple[str, ...]) -> None:
    """Check SPEC offline: types, unknown keys, values (every point of its sweep too)."""
    s, t = _load(spec, topology, sets)
    points = f", a sweep of {len(s.sweep.points())} points" if s.sweep else ""
    click.echo(f"{spec}: ok ({s.name}: {t.kind}, {len(t.hosts)} hosts, "
               f"{len(s.experiments)} experiment(s){points})")


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--cores", type=click.IntRange(1), help="cores of each server (default: the "
              "reference machine's, on which the costs were measured)")
@topology_option
@set_option
@click.option("--models", is_flag=True, help="also each parallel job's iteration by the "
              "analytical and the path-aware model, per transport (the path-aware model "
              "replays the job over its hash draws: seconds per job)")
def plan(spec: Path, cores: int | None, topology: str | None, sets: tuple[str, ...],
         models: bool) -> None:
    """The CPU SPEC needs at its link rates and MTU, whether one machine is enough, and how
    many servers it would take (offline, from costs measured on the reference machine);
    with --models, what the models expect of each parallel job's iteration."""
    import dataclasses

    from .config.capacity import REFERENCE
    from .plan import plan as make_plan
    from .plan import render
    s, t = _load(spec, topology, sets)
    # another server size: the cores the fabric leaves trainers grow with it
    cap = dataclasses.replace(REFERENCE, cores=cores, compute_cores=REFERENCE.compute_cores
                              + cores - REFERENCE.cores) if cores else REFERENCE
    from .config.spec import spec_data, sweep_points
    points = sweep_points(spec_data(spec, topology, sets))
    for p in points:  # a sweep: each point's load (its spec, without the sweep)
        values = ", ".join(f"{k}={v}" for k, v in p.values.items())
        click.echo(f"sweep point {p.index}: {values}\n"
                   f"{render(make_plan(p.spec, p.topo, cap, models))}\n")
    if not points:
        click.echo(render(make_plan(s, t, cap, models)))


LIVE_PORT = 8088

live_option = click.option("--live", is_flag=True,
                           help="serve a live view of the fabric on 127.0.0.1 (--live-port)")
live_port_option = click.option("--live-port", type=click.IntRange(1, 65535), default=LIVE_PORT,
                                show_default=True, help="the live view's port")


@main.command("run")
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@topology_option
@set_option
@click.option("--strict", is_flag=True, help="exit 1 when a phase was CPU-bound or otherwise "
              "not faithful, or the run ended degraded (for CI)")
@live_option
@live_port_option
def run_cmd(spec: Path, out: Path | None, topology: str | None, sets: tuple[str, ...],
            strict: bool, live: bool, live_port: int) -> None:
    """Run SPEC on an emulated fabric; results go to a directory."""
    from .config.spec import spec_data, sweep_points
    from .runner import run_spec
    s, t = _load(spec, topology, sets)
    text = spec.read_text()
    data = spec_data(spec, topology, sets)
    if topology or sets:  # the results keep the spec as it ran
        import yaml
        how = " ".join([f"--topology '{topology}'"] * bool(topology)
                       + [f"--set {x}" for x in sets])
        text = f"# {spec} run with {how}\n" + yaml.safe_dump(data, sort_keys=False)
    try:
        out_dir = run_spec(s, t, text, out, log=lambda m: click.echo(m, err=True),
                           live_port=live_port if live else None,
                           points=sweep_points(data))
    except TestbedError as exc:
        _fail(str(exc))
    summary = json.loads((out_dir / "summary.json").read_text())
    click.echo(f"results: {out_dir}")
    for name, res in summary["experiments"].items():
        click.echo(f"  {name}: {json.dumps(res['headline'])}")
    for w in summary["fidelity_warnings"]:
        click.echo(f"  warning: {w}")
    if summary["status"] != "ok":
        click.echo(f"  status: {summary['status']}: {'; '.join(summary.get('degraded', []))}")
    reasons = summary["unfaithful"]
    if strict and reasons:
        click.echo(f"error: --strict: {len(reasons)} reason(s) the numbers are not "
                   f"faithful: {reasons[0]}" + (f" (and {len(reasons) - 1} more in "
                                               f"{out_dir / 'summary.json'})"
                                               if len(reasons) > 1 else ""), err=True)
        sys.exit(1)


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@click.option("--script", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="run these CLI commands (one per line) instead of the prompt")
@click.option("--detach", is_flag=True,
              help="return once the fabric is up; `testbed exec`, `status` and `down` reach it")
@click.option("--name", help="the detached fabric's name (default: the spec's name)")
@topology_option
@set_option
@live_option
@live_port_option
def up(spec: Path, out: Path | None, script: Path | None, detach: bool, name: str | None,
       topology: str | None, sets: tuple[str, ...], live: bool, live_port: int) -> None:
    """Bring SPEC's fabric up (controller, routing, classes, plugins) and open Mininet's
    CLI on it, with the testbed's `queue`, `paths` and `ports`; `exit` or Ctrl-D tears
    down what it built. With --detach, the fabric stays up in the background instead."""
    from .api import Testbed
    from .config.spec import spec_data
    from .spec import SpecError
    s, _ = _load(spec, topology, sets, experiments_required=False)  # one line for a bad spec
    if s.sweep is not None:
        click.echo("note: `testbed up` builds the spec's own fabric; its sweep is for "
                   "`testbed run`", err=True)
    if detach:
        _detach(spec, s.name, name or s.name, out, script, topology, sets, live,
                s.cluster is not None)
        return
    try:
        tb = Testbed(spec if not (topology or sets) else spec_data(spec, topology, sets),
                     out=out, log=lambda m: click.echo(m, err=True),
                     what="`testbed up`", live_port=live_port if live else None)
    except SpecError as exc:
        _fail(f"{spec}: {exc}")
    try:
        with tb:
            live = tb.fabric("up")
            from mininet.log import setLogLevel

            from .net.shell import TestbedCLI
            setLogLevel("output")
            TestbedCLI(live, script=str(script) if script else None)
    except TestbedError as exc:
        _fail(str(exc))
    click.echo(f"results: {tb.out_dir}")


def _detach(spec: Path, spec_name: str, name: str, out: Path | None, script: Path | None,
            topology: str | None, sets: tuple[str, ...], live: bool, s_cluster: bool) -> None:
    """`up --detach`: the holder started, its fabric up, its name printed."""
    from testbed.config.loader import SpecError
    from testbed.core.system import is_root

    from .config.spec import check_name, spec_data
    from .detached import start
    if script is not None or live:
        _fail("--detach: without --script or --live (run commands with `testbed exec`)")
    if s_cluster:
        _fail("--detach: on one machine only so far (`exec` enters a host's namespace "
              "here); leave out --detach, or the spec's cluster")
    if not is_root():
        _fail("`testbed up` needs root: run it with sudo")
    try:
        check_name(name)
        d = start(str(spec.resolve()) if not (topology or sets)
                  else spec_data(spec, topology, sets), spec_name, name, out)
    except (TestbedError, SpecError) as exc:
        _fail(str(exc))
    hosts = [n for n, pid in d.nodes.items() if pid is not None]
    click.echo(f"{d.name}: up ({len(hosts)} hosts, {len(d.nodes) - len(hosts)} switches); "
               f"results in {d.out_dir}\n"
               f"  sudo testbed exec {d.name} {hosts[0]} -- ip -4 addr\n"
               f"  sudo testbed down {d.name}")


@main.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def exec_(name: str, node: str, command: tuple[str, ...]) -> None:
    """Run COMMAND in NODE of the detached fabric NAME (a host's network namespace, or the
    machine's for a switch): `testbed exec NAME h1 -- ping -c 1 10.0.0.2`. Its exit status
    is this command's."""
    from testbed.core.system import is_root

    from .detached import exec_argv, find
    if not is_root():
        _fail("`testbed exec` needs root: run it with sudo")
    try:
        argv = exec_argv(find(name), node, list(command))
        rc = subprocess.run(argv).returncode
    except TestbedError as exc:
        _fail(str(exc))
    except OSError as exc:  # a command a switch's (the machine's) PATH does not have
        _fail(f"exec: {command[0]}: {exc.strerror}")
    sys.exit(128 - rc if rc < 0 else rc)  # killed by a signal: 128 + its number


@main.command()
def status() -> None:
    """The detached fabrics: name, spec, since when, results directory."""
    from .detached import fabrics
    found = fabrics()
    for d in found:
        state = d.status if d.alive() else "holder gone (`sudo testbed clean`)"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.since))
        hosts = sum(pid is not None for pid in d.nodes.values())
        click.echo(f"{d.name}: {state}, spec {d.spec}, {hosts} hosts, since {since}, "
                   f"pid {d.pid}, results {d.out_dir or '-'}")
    if not found:
        click.echo("no fabric is up (`testbed up SPEC --detach`)")


@main.command()
@click.argument("name")
def down(name: str) -> None:
    """Tear down the detached fabric NAME (exactly what it built) and write its results."""
    from testbed.core.system import is_root

    from .detached import stop
    if not is_root():
        _fail("`testbed down` needs root: run it with sudo")
    try:
        d, status = stop(name)
    except TestbedError as exc:
        _fail(str(exc))
    click.echo(f"{name}: down ({status}); results in {d.out_dir}")
    if status != "ok":
        sys.exit(1)


@main.command()
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=LIVE_PORT, show_default=True)
def view(results: Path, port: int) -> None:
    """Replay a finished run in the browser: its fabric, link loads, queues, marks, pauses,
    decisions and training progress, with a time slider (http://127.0.0.1:PORT/)."""
    from testbed.core.system import port_free
    if not (results / "manifest.json").exists():
        _fail(f"{results}: not a finished run's results directory (no manifest.json)")
    if why := port_free(port):
        _fail(why.replace("--live-port", "--port"))
    click.echo(f"replaying {results} at http://127.0.0.1:{port}/ (Ctrl-C to stop)", err=True)
    from .view.server import main as serve
    sys.exit(serve(["--replay", str(results), "--port", str(port)]))


@main.command()
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
@click.option("--tolerance", type=click.FloatRange(0, min_open=True), default=0.05,
              show_default=True, help="relative difference beyond which a headline differs")
def compare(run_a: Path, run_b: Path, tolerance: float) -> None:
    """Every headline number of two runs side by side, with the ratio B/A; flags those
    that differ beyond the tolerance (offline)."""
    from .results.analysis import NotARun, format_comparison, load
    from .results.analysis import compare as compare_runs
    try:
        a, b = load(run_a), load(run_b)
    except NotARun as exc:
        _fail(str(exc))
    click.echo(format_comparison(compare_runs(a, b, tolerance), [str(run_a), str(run_b)],
                                 rel_tol=tolerance))


@main.command()
def clean() -> None:
    """Remove what earlier (crashed) runs left behind, and only that."""
    from testbed.cluster.servers import release_servers
    from testbed.core.resources import clean as clean_records
    from testbed.core.system import is_root
    if not is_root():
        _fail("`testbed clean` needs root: run it with sudo")
    from .detached import forget_dead
    try:
        removed = clean_records(release_servers)
    except TestbedError as exc:
        _fail(str(exc))
    removed += forget_dead()
    click.echo("\n".join(f"removed {r}" for r in removed) or "nothing to clean")


if __name__ == "__main__":
    main()
