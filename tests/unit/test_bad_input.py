"""The bad-input corpus: every case goes through the command line as a user's file
would, `testbed validate` and `testbed run`, and must give a non-zero exit, one error line
naming the field (or the file's problem), no traceback, and nothing created: no results
directory, no run record, and `run` never reaches the fabric."""
from __future__ import annotations

import copy

import pytest
import yaml
from click.testing import CliRunner

from testbed import cli, runner
from testbed.core import resources

from .test_spec import BASE, INVALID, with_
from .test_spec_jobs import BAD_JOBS
from .test_spec_jobs import spec as jobs_spec
from .test_spec_parallel import BAD_PARALLEL
from .test_spec_parallel import spec as parallel_spec
from .test_spec_rdma import BAD_RDMA
from .test_spec_rdma import spec as rdma_spec
from .test_spec_training import BAD_TRAINING
from .test_spec_training import spec as training_spec


def text(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def base_with(path: str, value: object) -> str:
    return text(with_(path, value))


def experiment(**fields: object) -> str:
    data = copy.deepcopy(BASE)
    data["experiments"] = [fields]
    return text(data)


SPEC_HEAD = "topology: {kind: fattree, params: {k: 4}}\nexperiments: [{type: reachability}]\n"

# (file content, what the error must say)
HARD_EDGES: list[tuple[str | bytes, str]] = [
    # names that would leave the results and records folders, or need quoting
    ("name: ../../../elsewhere/x\n" + SPEC_HEAD, "name: characters '/' not allowed"),
    ("name: /tmp/abs\n" + SPEC_HEAD, "name: characters '/' not allowed"),
    ("name: a/b\n" + SPEC_HEAD, "name: characters '/' not allowed"),
    ("name: ..\n" + SPEC_HEAD, "name: must start with a letter or digit"),
    ("name: .hidden\n" + SPEC_HEAD, "name: must start with a letter or digit"),
    ("name: ''\n" + SPEC_HEAD, "name: empty"),
    ("name: 'two words'\n" + SPEC_HEAD, "name: characters ' ' not allowed"),
    ("name: 'x;rm -rf'\n" + SPEC_HEAD, "name: characters ' ' ';' not allowed"),
    ("name: 'caf\u00e9'\n" + SPEC_HEAD, "name: characters '\u00e9' not allowed"),
    ("name: '" + "x" * 65 + "'\n" + SPEC_HEAD, "name: more than 64 characters"),
    ('name: "tab\\there"\n' + SPEC_HEAD, "name: characters '\\t' not allowed"),
    ("name: 12\n" + SPEC_HEAD, "name: expected a string"),
    # numbers that make no sense
    (base_with("links.rate_mbps", float("nan")), "links.rate_mbps: must be a finite number"),
    (base_with("links.rate_mbps", float("inf")), "links.rate_mbps: must be a finite number"),
    (base_with("links.rate_mbps", -float("inf")), "links.rate_mbps: must be a finite number"),
    (base_with("links.rate_mbps", 1e12), "links.rate_mbps: out of range for a rate in Mb/s"),
    (base_with("links.rate_mbps", "1e12"), "YAML reads an exponent without a dot as text"),
    (base_with("links.loss_pct", float("nan")), "links.loss_pct: must be a finite number"),
    (base_with("links.delay_us", 10**12), "links.delay_us: out of range"),
    (base_with("links.buffer_pkts", 10**9), "links.buffer_pkts: out of range"),
    (base_with("links.host_queue_pkts", 10**30), "links.host_queue_pkts: out of range"),
    (base_with("links.burst_us", 2_000_000), "links.burst_us: must be in 0..1000000"),
    (base_with("hosts.rto_min_us", -5), "hosts.rto_min_us: out of range"),
    (base_with("hosts.initial_window_pkts", 0), "hosts.initial_window_pkts: at least 1 segment"),
    (base_with("topology.params", {"k": 4, "rate_mbps": float("nan")}),
     "fattree: rate_mbps must be a rate in Mb/s"),
    (base_with("topology.params", {"k": 4, "rate_mbps": 1e12}),
     "fattree: rate_mbps must be a rate in Mb/s"),
    (base_with("topology.params", {"k": 1000}), "fattree: k^3/4 = 250000000 hosts is more than"),
    (base_with("topology.params", {"k": 10**18}), "fattree: k must be an even integer in 2..4096"),
    (base_with("topology", {"kind": "bcube", "params": {"n": 2, "k": 40}}),
     "bcube: k must be an integer in 0..12"),
    (base_with("topology", {"kind": "leafspine", "params": {"spines": 100000}}),
     "leafspine: spines must be an integer in 1..4096"),
    (base_with("topology", {"kind": "leafspine", "params": {"leaves": 1000,
                                                           "hosts_per_leaf": 1000}}),
     "leafspine: leaves x hosts_per_leaf = 1000000 hosts"),
    (base_with("topology", {"kind": "dumbbell", "params": {"senders": 4000,
                                                          "receivers": 4000}}),
     "dumbbell: senders + receivers = 8000 hosts"),
    (base_with("topology", {"kind": "nonblocking", "params": {"hosts": 0}}),
     "nonblocking: hosts must be an integer in 1..4096"),
    (experiment(type="permutation", duration_s=float("nan")),
     "experiments[0].duration_s: must be a finite number"),
    (experiment(type="permutation", duration_s=float("inf")),
     "experiments[0].duration_s: must be a finite number"),
    (experiment(type="permutation", duration_s=10**7),
     "experiments[0].duration_s: out of range for a time in seconds"),
    (experiment(type="permutation", seed=-1), "experiments[0].seed: out of range for a seed"),
    (experiment(type="permutation", seed=2**64), "experiments[0].seed: out of range for a seed"),
    (experiment(type="permutation", repeats=10**9), "experiments[0].repeats: out of range"),
    (experiment(type="reachability", count=10**8), "experiments[0].count: out of range"),
    (experiment(type="reachability", interval_s=float("nan")),
     "experiments[0].interval_s: must be a finite number"),
    (experiment(type="link_calibration", rates_mbps=[10, float("inf")]),
     "experiments[0].rates_mbps[1]: must be a finite number"),
    (experiment(type="link_calibration", rates_mbps=[10, 1e9]),
     "experiments[0].rates_mbps[1]: out of range"),
    (experiment(type="training", width=10**9), "experiments[0].width: out of range for a layer"),
    (experiment(type="training", seed=10**20), "experiments[0].seed: out of range for a seed"),
    (experiment(type="training", lr=float("nan")), "experiments[0].lr: must be a finite number"),
    (experiment(type="training", iters=10**12), "experiments[0].iters: out of range"),
    (experiment(type="parallel", scale=float("inf")),
     "experiments[0].scale: must be a finite number"),
    (experiment(type="parallel", device_tflops=float("nan")),
     "experiments[0].device_tflops: must be a finite number"),
    (experiment(type="parallel", model_desc={"layers": 2, "hidden": 10**9, "heads": 2,
                                             "seq": 8}),
     "experiments[0].model_desc.hidden: out of range for a layer width"),
    (experiment(type="parallel", jobs=[{"seed": -3}]),
     "experiments[0].jobs[0].seed: out of range for a seed"),
    # datapaths, faults and probes (later settings)
    (base_with("datapath", "netdev"), "datapath: must be one of user, kernel, auto"),
    (base_with("controller.on_death", "ignore"), "controller.on_death: must be one of warn"),
    (base_with("controller.fast_failover", "yes"), "controller.fast_failover: expected true/false"),
    (experiment(type="permutation", faults=[{"link": ["a1", "c1"], "at_s": 1}], probe_ms=0.5),
     "experiments[0].probe_ms: must be in 2..1000"),
    (experiment(type="permutation", probe_ms=5),
     "experiments[0].probe_ms: probes time failures; give faults too"),
    (experiment(type="permutation", faults=[{"link": ["a1", "c1"], "at_iter": 3}]),
     "experiments[0].faults[0].at_iter: only a training job has iterations"),
    (experiment(type="training", iters=10, faults=[{"switch": "e1", "at_iter": 10}]),
     "experiments[0].faults[0].at_iter: must be in 0..9"),
    (experiment(type="training", faults=[{"controller": True, "at_s": 1, "for_s": float("nan")}]),
     "experiments[0].faults[0].for_s: must be a finite number"),
    # an experiment's own fabric built from a bad field; plugins ryu-manager cannot load
    ("name: a\ntopology: {kind: dumbbell}\nexperiments: [{type: incast, senders: [0]}]\n",
     "experiments[0].senders: sender counts in 1..63 (got [0])"),
    (base_with("controller.plugins", ["no_such_plugin.app"]),
     "controller.plugins[0]: no module 'no_such_plugin'"),
    (base_with("controller.plugins", ["ryu.app.no_such_app"]),
     "controller.plugins[0]: no module 'ryu.app.no_such_app'"),
    (base_with("controller.plugins", ["examples/port_monitor"]),
     "controller.plugins[0]: examples/port_monitor: a file plugin is a Python file (.py)"),
    (base_with("controller.plugins", ["plugins/mine.py"]),
     "controller.plugins[0]: file plugins/mine.py does not exist"),
    (base_with("controller.plugins", ["my plugin"]),
     "controller.plugins[0]: 'my plugin' is neither a module name"),
    # sweeps
    (base_with("sweep", {"parameter": "links.rate_mbps", "values": []}),
     "sweep.values: no values to sweep"),
    (base_with("sweep", {"parameter": "links.rate_mpbs", "values": [10, 20]}),
     "sweep point links.rate_mpbs=10: links.rate_mpbs: unknown key"),
    (base_with("sweep", {"parameter": "links.rate_mbps", "values": [10, "fast"]}),
     "sweep point links.rate_mbps='fast': links.rate_mbps: expected a number"),
    (base_with("sweep", {"parameter": "experiments.3.duration_s", "values": [5]}),
     "sweep: experiments.3.duration_s: experiments.3: no such entry (1 in the spec)"),
    (base_with("sweep", {"parameter": "links.rate_mbps", "values": [10],
                         "grid": {"links.buffer_pkts": [10]}}),
     "sweep: give either parameter and values, or grid, not both"),
    (base_with("sweep", {}), "sweep: give a parameter and its values, or a grid"),
    (base_with("sweep", {"grid": {"links..rate": [1]}}),
     "sweep.grid.links..rate: 'links..rate' is not a field path"),
    (base_with("sweep", {"parameter": "links.rate_mbps", "values": [10, 10]}),
     "sweep.values: a value is listed twice"),
    (base_with("sweep", {"parameter": "name", "values": ["a", "b"]}),
     "sweep.values: name cannot be swept"),
    # the file itself
    ("name: a\nname: b\n" + SPEC_HEAD, "line 2: duplicate key 'name' (first on line 1)"),
    ("name: a\nlinks: {buffer_pkts: 10, buffer_pkts: 20}\n" + SPEC_HEAD,
     "line 2: duplicate key 'buffer_pkts'"),
    ("name: a\n" + SPEC_HEAD + "topology: {kind: bcube}\n", "duplicate key 'topology'"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00\x01\x00\x00\x00"
     b"\xd0\x86\x01\x00", "not valid YAML (unacceptable character #x007f"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "not UTF-8 text (byte 0x89 at offset 0)"),
    ("name: caf\u00e9\n".encode("latin-1") + SPEC_HEAD.encode(), "not UTF-8 text"),
    (b"name: a\x00\n", "not valid YAML"),
    ("name: [unclosed\n", "not valid YAML"),
    ("", "spec: expected a mapping, got NoneType"),
    ("just text\n", "spec: expected a mapping, got str"),
    ("- a\n- b\n", "spec: expected a mapping, got list"),
    ("name: a\nexperiments: {type: reachability}\n", "experiments: expected a list"),
    ("name: a\nexperiments: [reachability]\n", "experiments[0].type: required"),
    ("name: a\nlinks: 5\n" + SPEC_HEAD, "links: expected a mapping"),
]

CORPUS: list[tuple[str | bytes, str]] = (
    [(text(data), message) for data, message in INVALID]
    + [(text(parallel_spec(**fields)), message) for fields, message in BAD_PARALLEL]
    + [(text(training_spec(**fields)), message) for fields, message in BAD_TRAINING]
    + [(text(jobs_spec(**fields)), message) for fields, message in BAD_JOBS]
    + [(text(rdma_spec(**fields)), message) for fields, message in BAD_RDMA]
    + HARD_EDGES)


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 80


@pytest.fixture
def sandbox(monkeypatch, tmp_path):
    """A working directory and run-record folder that must stay empty; `run` must never get
    past the spec (a bad case that loads would start a fabric: fail instead)."""
    def accepted(*_args, **_kwargs):
        raise AssertionError("a bad spec was accepted and the run started")

    monkeypatch.setattr(runner, "run_spec", accepted)
    monkeypatch.setattr(resources, "STATE_DIR", tmp_path / "state")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return tmp_path


@pytest.mark.parametrize("content,message", CORPUS,
                         ids=[f"{i:03d}" for i in range(len(CORPUS))])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_input_is_one_clear_line_and_creates_nothing(sandbox, content, message, command):
    spec = sandbox / "spec.yaml"
    if isinstance(content, bytes):
        spec.write_bytes(content)
    else:
        spec.write_text(content)
    args = [command, str(spec)] + (["--out", str(sandbox / "results")] if command == "run" else [])
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit)  # not a Python exception escaping
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"error: {spec}: ") and message in lines[0], lines[0]
    assert list((sandbox / "work").iterdir()) == []
    assert not (sandbox / "results").exists() and not (sandbox / "state").exists()


GOOD = text(BASE)


@pytest.mark.parametrize("options,message", [
    (["--set", "links.rate_mpbs=50"], "links.rate_mpbs: unknown key"),
    (["--set", "links.rate_mbps=fast"], "links.rate_mbps: expected a number, got 'fast'"),
    (["--set", "links.rate_mbps"], "--set links.rate_mbps: expected PATH=VALUE"),
    (["--set", "=5"], "--set =5: expected PATH=VALUE"),
    (["--set", "experiments.7.count=2"], "experiments.7: no such entry (1 in the spec)"),
    (["--set", "experiments.type=x"], "experiments.type: a list, give an index"),
    (["--set", "name.x=1"], "name.x: name is a value, not a mapping"),
    (["--set", "links.rate_mbps=[1, "], "the value is not YAML"),
    (["--set", "links..rate_mbps=1"], "is not a field path"),
])
@pytest.mark.parametrize("command", ["validate", "run", "plan"])
def test_bad_options_are_one_clear_line_and_create_nothing(sandbox, options, message, command):
    spec = sandbox / "spec.yaml"
    spec.write_text(GOOD)
    args = [command, str(spec), *options] + (["--out", str(sandbox / "results")]
                                             if command == "run" else [])
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert list((sandbox / "work").iterdir()) == []
    assert not (sandbox / "results").exists() and not (sandbox / "state").exists()


def test_compare_refuses_what_is_not_a_run(sandbox):
    (sandbox / "work" / "notes.txt").write_text("x")
    for a in [sandbox / "work", sandbox / "work" / "notes.txt", sandbox / "nowhere"]:
        result = CliRunner().invoke(cli.main, ["compare", str(a), str(a)])
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "not a testbed results directory" in lines[0], lines


@pytest.mark.parametrize("args,message", [
    (["fattree", "k=4", "k=6"], "fattree: parameter 'k' given twice"),
    (["fattree", "4", "k=6"], "fattree: parameter 'k' given twice"),
    (["fattree", "4", "--pair", "h1", "h99"], "fattree: no host 'h99'"),
    (["fattree", "4", "--pair", "c1", "h2"], "fattree: no host 'c1'"),
    (["fattree", "4", "100", "7"], "fattree: too many parameters"),
    (["fattree", "1000"], "hosts is more than 4096"),
    (["fattree", "rate_mbps=nan"], "fattree: rate_mbps must be a rate"),
    (["dragonfly", "4"], "unknown topology kind 'dragonfly'"),
    (["torus", "sides=4x1"], "torus: sides '4x1' has a side below 2"),
    (["dcell", "n=1"], "dcell: n must be an integer in 2.."),
])
def test_topo_describe_refuses_bad_arguments(args, message):
    result = CliRunner().invoke(cli.main, ["topo", "describe", *args])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
