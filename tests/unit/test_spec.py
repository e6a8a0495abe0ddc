import copy
import dataclasses

import pytest

from testbed.config.controller import MOVED, plugin_problem
from testbed.spec import Permutation, QueueCalibration, SpecError, load, loads

BASE = {"name": "t", "topology": {"kind": "fattree", "params": {"k": 4}},
        "experiments": [{"type": "reachability"}]}


def with_(path, value):
    data = copy.deepcopy(BASE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {}) if not k.isdigit() else node[int(k)]
    last = keys[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


def test_minimal_spec_and_defaults():
    spec, topo = loads(BASE)
    assert spec.links.buffer_pkts == 100 and spec.links.drop == "head"
    assert spec.hosts.congestion_control == "cubic" and spec.hosts.ecn is False
    assert spec.controller.routing == "ecmp" and len(topo.hosts) == 16


VALID = [
    with_("links", {"buffer_pkts": None, "buffer_bytes": 150000}),
    with_("links", {"rate_mbps": 20, "drop": "tail", "host_queue_pkts": 50}),
    with_("links", {"mtu_bytes": 9000}),
    with_("hosts", {"congestion_control": "reno", "ecn": True}),
    # plugins the controller can load: modules on its path (Ryu's own), a .py file
    with_("controller", {"routing": "single",
                         "plugins": ["ryu.app.simple_monitor_13", "ryu.app.ofctl_rest",
                                     "examples/port_monitor.py"]}),
    with_("topology", {"kind": "bcube", "params": {"n": 2, "k": 2}}),
    {**with_("topology", {"kind": "torus", "params": {"sides": "3x3x2"}}),
     "controller": {"routing": "own"}},
    {**with_("topology", {"kind": "hybrid", "params": {"racks": 4}}),
     "controller": {"routing": "cthrough", "circuits": {"period_s": 0.5, "dark_ms": 20}}},
    {**with_("topology", {"kind": "vl2", "params": {"da": 4, "di": 4}}),
     "controller": {"routing": "vlb"},
     "experiments": [{"type": "permutation", "routings": ["nonblocking", "ecmp", "vlb",
                                                          "own", "hedera_sa"]}]},
    with_("experiments", [{"type": "permutation", "patterns": ["stride:4", "randbij"],
                           "routings": ["ecmp"], "duration_s": 5, "omit_s": 1, "repeats": 2}]),
    with_("experiments", [{"type": "queue_calibration", "rate_mbps": 10, "buffer_pkts": 50}]),
    with_("experiments", [{"type": "link_calibration", "rates_mbps": [10, 20.5]}]),
]


@pytest.mark.parametrize("data", VALID)
def test_valid_specs(data):
    spec, _ = loads(data)
    assert spec.name == "t"


INVALID = [
    (with_("links.bufer_pkts", 10), "links.bufer_pkts: unknown key"),
    (with_("links.buffer_pkts", "100"), "links.buffer_pkts: expected an integer"),
    (with_("links.buffer_pkts", True), "links.buffer_pkts: expected an integer"),
    (with_("links.buffer_pkts", 0), "links.buffer_pkts: must be > 0"),
    (with_("links", {"buffer_bytes": 1000}), "links: set exactly one"),
    (with_("links", {"buffer_pkts": None, "buffer_bytes": 1000}), "links.buffer_bytes: must hold"),
    (with_("links.loss_pct", 150), "links.loss_pct"),
    (with_("links.delay_us", -1), "links.delay_us"),
    (with_("links.drop", "random"), "links.drop"),
    (with_("links.mtu_bytes", 9600), "links.mtu_bytes: must be in 576..9000"),
    (with_("links.burst_us", -1), "links.burst_us: must be in 0..1000000"),
    (with_("links.host_queue", "sfq"), "links.host_queue: must be fifo or fair (got 'sfq')"),
    ({**with_("links.host_queue", "fair"), "qos": {"classes": [{"name": "be", "dscp": [0]}]}},
     "links.host_queue: fair and a qos section both shape the host NICs"),
    (with_("links", {"mtu_bytes": 9000, "buffer_pkts": None, "buffer_bytes": 5000}),
     "links.buffer_bytes: must hold one full-size frame (>= 9014)"),
    (with_("links.rate_mbps", -5), "links.rate_mbps: must be > 0"),
    (with_("hosts.ecn", "yes"), "hosts.ecn: expected true/false"),
    (with_("hosts.congestion_control", "cu bic"), "hosts.congestion_control"),
    (with_("controller.routing", "vl2"),
     "controller.routing: 'vl2' is not a routing of a fattree fabric; choose one of ecmp, "
     "single, hedera, own"),
    (with_("controller.routing", "dor"), "controller.routing: 'dor' is not a routing of a fattree"),
    ({**with_("topology", {"kind": "torus", "params": {"k": 4, "n": 2}}),
      "controller": {"routing": "dor", "flow_priority": {"policy": "by_port",
                                                          "ports": {5201: 46}}}},
     "controller.flow_priority.policy: needs routing ecmp, single or hedera"),
    ({**with_("topology", {"kind": "vl2", "params": {}}),
      "controller": {"routing": "own", "fast_failover": True}},
     "controller.fast_failover: needs routing ecmp, single or hedera (got vlb)"),
    ({**with_("topology", {"kind": "dcell", "params": {"n": 4, "k": 1}}),
      "controller": {"routing": "hedera"}},
     "controller.routing: hedera needs a switched fabric"),
    (with_("controller.hedera", {"period_s": 0}), "controller.hedera.period_s: must be > 0"),
    (with_("controller.circuits", {"dark_ms": -1}), "controller.circuits.dark_ms: must be in 0..10000"),
    (with_("controller.circuits", {"dark_ms": 500, "period_s": 0.5}),
     "controller.circuits.dark_ms: 500 ms is not shorter than the period (0.5 s)"),
    (with_("controller.circuits", {"period_s": 0}), "controller.circuits.period_s: must be > 0"),
    (with_("controller.circuits", {"hold": 0.5}), "controller.circuits.hold: must be >= 1"),
    (with_("topology", {"kind": "hybrid", "params": {"circuit_rate": 0}}),
     "topology.params: hybrid: circuit_rate must be a rate in Mb/s"),
    (with_("controller.hedera", {"elephant_fraction": 1.5}),
     "controller.hedera.elephant_fraction"),
    (with_("controller.hedera", {"base": "hedera"}), "controller.hedera.base"),
    (with_("controller.hedera", {"placement": "tabu"}),
     "controller.hedera.placement: must be one of gff, annealing"),
    (with_("controller.hedera", {"annealing_iterations": 0}),
     "controller.hedera.annealing_iterations: must be >= 1"),
    (with_("controller.flow_priority", {"policy": "fastest"}), "controller.flow_priority.policy"),
    (with_("controller.flow_priority", {"policy": "by_port", "ports": {5201: 64}}),
     "controller.flow_priority.ports[5201]: a DSCP must be"),
    (with_("controller.flow_priority", {"policy": "by_port"}), "controller.flow_priority.ports"),
    (with_("controller.flow_priority", {"policy": "by_hosts", "hosts": ["h99"]}),
     "controller.flow_priority.hosts"),
    (with_("controller.flow_priority", {"policy": "small_first", "threshold_bytes": 0}),
     "controller.flow_priority.threshold_bytes"),
    (with_("controller.flow_priority", {"policy": "plugin", "plugin": "nofile.py:X"}),
     "controller.flow_priority.plugin: file nofile.py does not exist"),
    (with_("controller.plugins", ["/nonexistent/app.py"]), "controller.plugins[0]"),
    (with_("topology.kind", "dragonfly"), "unknown topology kind"),
    (with_("topology", {"kind": "torus", "params": {"sides": "4x1"}}),
     "topology.params: torus: sides '4x1' has a side below 2"),
    (with_("topology.params", {"k": 5}), "topology.params: fattree: k must be an even"),
    (with_("topology.params", {"radix": 4}), "unknown parameter 'radix'"),
    (with_("experiments", []), "experiments: at least one"),
    (with_("experiments", [{"type": "warp"}]), "experiments[0].type: unknown experiment"),
    (with_("experiments", [{"count": 3}]), "experiments[0].type: required"),
    (with_("experiments", [{"type": "reachability", "count": 0}]), "experiments[0].count"),
    (with_("experiments", [{"type": "reachability", "cnt": 1}]), "experiments[0].cnt: unknown key"),
    (with_("experiments", [{"type": "permutation", "patterns": ["stride:16"]}]),
     "experiments[0].patterns[0]: stride must be in 1..15"),
    (with_("experiments", [{"type": "permutation", "patterns": ["shuffle"]}]),
     "experiments[0].patterns[0]: unknown pattern"),
    (with_("experiments", [{"type": "permutation", "omit_s": 30}]), "experiments[0].omit_s"),
    (with_("experiments", [{"type": "permutation", "routings": ["vl2"]}]),
     "experiments[0].routings[0]: 'vl2' is not a routing of a fattree fabric; choose one of "
     "ecmp, single, hedera, own, nonblocking, hedera_sa"),
    ({**with_("topology", {"kind": "torus", "params": {}}),
      "experiments": [{"type": "permutation", "routings": ["nonblocking", "dor", "vlb"]}]},
     "experiments[0].routings[2]: 'vlb' is not a routing of a torus fabric"),
    ({**with_("topology", {"kind": "dcell", "params": {}}),
      "experiments": [{"type": "permutation", "routings": ["hedera_sa"]}]},
     "experiments[0].routings: hedera needs a switched fabric"),
    (with_("experiments", [{"type": "queue_calibration", "access_rate_mbps": 10}]),
     "experiments[0].access_rate_mbps"),
    (with_("experiments", [{"type": "queue_calibration", "sample_hz": 5000}]),
     "experiments[0].sample_hz"),
    (with_("experiments", [{"type": "link_calibration", "rates_mbps": [10, 0]}]),
     "experiments[0].rates_mbps[1]"),
    ({"topology": {"kind": "fattree"}, "experiments": [{"type": "reachability"}]}, "name: required"),
    ([1, 2], "spec: expected a mapping"),
]


@pytest.mark.parametrize("data,message", INVALID, ids=[m for _, m in INVALID])
def test_invalid_specs_name_the_field(data, message):
    with pytest.raises(SpecError) as err:
        loads(data)
    assert message in str(err.value)


def test_specs_are_frozen():
    spec, _ = loads(with_("experiments", [{"type": "permutation"}]))
    assert isinstance(spec.experiments[0], Permutation)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.links.buffer_pkts = 5  # type: ignore[misc]


def test_shipped_experiments_validate():
    from pathlib import Path
    specs = sorted(Path(__file__).parents[2].joinpath("experiments").glob("*.yaml"))
    assert len(specs) >= 6
    for path in specs:
        load(path)


def test_load_reports_yaml_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "missing.yaml")


def test_queue_calibration_defaults_match_issue():
    q = QueueCalibration()
    assert (q.rate_mbps, q.buffer_pkts) == (20.0, 100)


def test_a_plugin_importing_a_moved_name_is_told_its_new_name(tmp_path):
    """A plugin written against an earlier layout fails `testbed validate` with the name to
    import instead, not later inside the controller with the fabric already built."""
    plugin = tmp_path / "old_app.py"
    plugin.write_text("from controllers.compat import RyuApp\n"
                      "from controllers.flowsched import Placement, FlowInfo\n")
    problem = plugin_problem(str(plugin))
    assert problem is not None and "controllers.compat (now controllers.apps.compat)" in problem
    assert "controllers.flowsched.Placement (now controllers.flowsched.FlowPlacement)" in problem
    plugin.write_text("from controllers.apps.compat import RyuApp\n")
    assert plugin_problem(str(plugin)) is None


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_name_is_gone_and_its_new_one_exists(old):
    import importlib
    import importlib.util

    def exists(name: str) -> bool:
        if importlib.util.find_spec(name.rpartition(".")[0] or name) is None:
            return False
        try:
            return importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a module's attribute, not a module
            module, _, attr = name.rpartition(".")
            return attr in vars(importlib.import_module(module))
    assert not exists(old) and exists(MOVED[old])
