"""The `testbed` command."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from topologies import TopologyError, build, parse_params
from topologies.graph import describe as describe_topology

from .errors import TestbedError


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@topology_option
def validate(spec: Path, topology: str | None) -> None:
    """Check SPEC offline: types, unknown keys, values."""
    from .spec import SpecError, load
    try:
        s, t = load(spec, topology=topology)
    except SpecError as exc:
        _fail(f"{spec}: {exc}")
    click.echo(f"{spec}: ok ({s.name}: {t.kind}, {len(t.hosts)} hosts, "
               f"{len(s.experiments)} experiment(s))")


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--cores", type=click.IntRange(1), help="cores of each server (default: the "
              "reference machine's, on which the costs were measured)")
def plan(spec: Path, cores: int | None) -> None:
    """The CPU SPEC needs at its link rates and MTU, whether one machine is enough, and how
    many servers it would take (offline, from costs measured on the reference machine)."""
    import dataclasses

    from .config.capacity import REFERENCE
    from .plan import plan as make_plan
    from .plan import render
    from .spec import SpecError, load
    try:
        s, t = load(spec)
    except SpecError as exc:
        _fail(f"{spec}: {exc}")
    # another server size: the cores the fabric leaves trainers grow with it
    cap = dataclasses.replace(REFERENCE, cores=cores, compute_cores=REFERENCE.compute_cores
                              + cores - REFERENCE.cores) if cores else REFERENCE
    click.echo(render(make_plan(s, t, cap)))


LIVE_PORT = 8088

live_option = click.option("--live", is_flag=True,
                           help="serve a live view of the fabric on 127.0.0.1 (--live-port)")
live_port_option = click.option("--live-port", type=click.IntRange(1, 65535), default=LIVE_PORT,
                                show_default=True, help="the live view's port")


@main.command("run")
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@topology_option
@live_option
@live_port_option
def run_cmd(spec: Path, out: Path | None, topology: str | None, live: bool,
            live_port: int) -> None:
    """Run SPEC on an emulated fabric; results go to a directory."""
    from .runner import run_spec
    from .spec import SpecError, load
    try:
        s, t = load(spec, topology=topology)
    except SpecError as exc:
        _fail(f"{spec}: {exc}")
    text = spec.read_text()
    if topology:  # the results keep the spec as it ran: its data with the new topology
        import yaml

        from .config.loader import read_yaml
        from .config.spec import with_topology
        text = (f"# {spec} run with --topology '{topology}'\n"
                + yaml.safe_dump(with_topology(read_yaml(spec), topology), sort_keys=False))
    try:
        out_dir = run_spec(s, t, text, out, log=lambda m: click.echo(m, err=True),
                           live_port=live_port if live else None)
    except TestbedError as exc:
        _fail(str(exc))
    summary = json.loads((out_dir / "summary.json").read_text())
    click.echo(f"results: {out_dir}")
    for name, res in summary["experiments"].items():
        click.echo(f"  {name}: {json.dumps(res['headline'])}")
    for w in summary["fidelity_warnings"]:
        click.echo(f"  warning: {w}")


@main.command()
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), help="results directory")
@click.option("--script", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="run these CLI commands (one per line) instead of the prompt")
@live_option
@live_port_option
def up(spec: Path, out: Path | None, script: Path | None, live: bool, live_port: int) -> None:
    """Bring SPEC's fabric up (controller, routing, classes, plugins) and open Mininet's
    CLI on it, with the testbed's `queue`, `paths` and `ports`; `exit` or Ctrl-D tears
    down what it built."""
    from .api import Testbed
    from .spec import SpecError
    try:
        tb = Testbed(spec, out=out, log=lambda m: click.echo(m, err=True),
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


@main.command()
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=LIVE_PORT, show_default=True)
def view(results: Path, port: int) -> None:
    """Replay a finished run in the browser: its fabric, link loads, queues, marks, pauses,
    decisions and training progress, with a time slider (http://127.0.0.1:PORT/)."""
    from .system import port_free
    if not (results / "manifest.json").exists():
        _fail(f"{results}: not a finished run's results directory (no manifest.json)")
    if why := port_free(port):
        _fail(why.replace("--live-port", "--port"))
    click.echo(f"replaying {results} at http://127.0.0.1:{port}/ (Ctrl-C to stop)", err=True)
    from .view.server import main as serve
    sys.exit(serve(["--replay", str(results), "--port", str(port)]))


@main.command()
def clean() -> None:
    """Remove what earlier (crashed) runs left behind, and only that."""
    from .resources import clean as clean_records
    from .system import is_root
    if not is_root():
        _fail("`testbed clean` needs root: run it with sudo")
    try:
        removed = clean_records()
    except TestbedError as exc:
        _fail(str(exc))
    click.echo("\n".join(f"removed {r}" for r in removed) or "nothing to clean")


if __name__ == "__main__":
    main()
