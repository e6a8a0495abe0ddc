"""Optical circuits on a hybrid fabric (c-Through / Helios): what a circuit carries once
lit, how long a reconfiguration leaves it dark, and what reconfiguring costs at each
scheduling period and dark time.

Each setting of `settings` (period and dark time of `controller.circuits`) is a fabric of
its own, routed ``cthrough``. On it the rack pairs of `pairs` take turns: for `turn_s`
seconds rack a's hosts each send one long flow to one host of rack b (a stride between
the two racks); then the next pair. The controller sees the demand move at its next
period and moves the circuit: dark, then lit `dark_ms` later (its log has both steps
with their times). Measured per turn:
- `lit_after_s`: from the turn's start to the light step that gave its pair a circuit;
- `dark_measured_ms`: from that change's dark step to the first packet the optical switch
  sent towards the destination rack (its egress queue's counters, sampled at `sample_hz`;
  a ping every `probe_ms` between the pair's first hosts keeps packets waiting, whatever
  TCP's state): the configured dark time plus the controller's flow-table writes. Only when the pair's
  traffic was already crossing the packet fabric at the dark step (its ToR's uplink
  counters): otherwise the first packet waits for the flows to start, not for the mirror.
  `dark_applied_ms` is the controller's own: from its dark step to its light step (the
  difference to the measured one is Open vSwitch taking the new entries into its datapath);
  `dark_resolution_ms`: how far apart the two samples were between which that first packet
  left (the measured time is the later one; the sampler reads every port's counters in one
  netlink dump, 1 ms apart when it keeps up);
- `circuit_mbps`: the pair's received goodput from `settle_s` after the light step to the
  turn's end, against the circuit's rate in TCP payload (`circuit_over_rate`);
- `turn_mbps` against `model_mbps`: the whole turn's goodput beside what an instant
  switch-over after the same wait would give (the packet fabric's share until the light
  step, the circuit's after it); `lost_mb`: the bytes the wait cost against a circuit lit
  from the turn's start.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from controllers import trace
from controllers.fabric_routing import circuit_plan
from testbed.config.capacity import Capacity
from testbed.config.loader import SpecError
from testbed.config.spec import ExperimentSpec, Spec
from testbed.config.units import tcp_payload_fraction
from testbed.results.stats import round_or_none
from testbed.workloads.model.flows import assign_ports, probe_argv
from topologies.fairshare import maxmin
from topologies.model import Topology, ifname

from .base import Context, Experiment, Outcome, check_cc
from .load import Load, rated


@dataclass(frozen=True, kw_only=True)
class CircuitSetting:
    period_s: float = 1.0
    dark_ms: float = 10.0


@dataclass(frozen=True, kw_only=True)
class Circuits(ExperimentSpec):
    type: Literal["circuits"] = "circuits"
    on_cluster: ClassVar[bool] = False
    pairs: list[list[int]] = field(default_factory=lambda: [[0, 1], [0, 2]])
    turn_s: float = 10.0
    settle_s: float = 1.0
    interval_s: float = 0.1
    sample_hz: float = 1000.0
    probe_ms: float = 2.0  # a ping this often from the pair's first hosts (dark time)
    # each a fabric of its own; default: the spec's controller.circuits
    settings: list[CircuitSetting] = field(default_factory=list)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if topo.kind != "hybrid":
            raise SpecError(f"{path}.type: circuits needs a hybrid topology (got {topo.kind})")
        racks = topo.param("racks")
        if not self.pairs:
            raise SpecError(f"{path}.pairs: at least one rack pair")
        for j, pair in enumerate(self.pairs):
            if len(pair) != 2 or pair[0] == pair[1] or not all(0 <= r < racks for r in pair):
                raise SpecError(f"{path}.pairs[{j}]: two different racks in 0..{racks - 1} "
                                f"(got {pair})")
        if not 2 <= self.turn_s <= 600:
            raise SpecError(f"{path}.turn_s: must be in 2..600 (got {self.turn_s:g})")
        if not 0 <= self.settle_s < self.turn_s:
            raise SpecError(f"{path}.settle_s: must be in 0..turn_s")
        if not 0.1 <= self.interval_s <= 1:
            raise SpecError(f"{path}.interval_s: must be in 0.1..1 (got {self.interval_s:g})")
        if not 1 <= self.probe_ms <= 100:
            raise SpecError(f"{path}.probe_ms: must be in 1..100 (got {self.probe_ms:g})")
        if not 10 <= self.sample_hz <= 5000:
            raise SpecError(f"{path}.sample_hz: must be in 10..5000 (got {self.sample_hz:g})")
        for j, s in enumerate(self.settings):
            if not s.period_s > 0 or not 0 <= s.dark_ms < 1000 * s.period_s:
                raise SpecError(f"{path}.settings[{j}]: period_s > 0 and 0 <= dark_ms < the "
                                f"period (got {s.period_s:g} s, {s.dark_ms:g} ms)")


TURN_HEADER = ["period_s", "dark_ms", "turn", "src_rack", "dst_rack", "lit_after_s",
               "dark_applied_ms", "dark_measured_ms", "dark_resolution_ms", "circuit_mbps",
               "circuit_rate_mbps", "circuit_over_rate", "turn_mbps", "model_mbps",
               "turn_over_model", "lost_mb", "flows", "retransmits_pkts", "cpu_bound"]


def rack_hosts(topo: Topology, rack: int) -> list[str]:
    return [h.name for h in topo.hosts if h.label("rack") == rack]


def rates(topo: Topology, a: int, b: int, mtu_bytes: int) -> tuple[float, float]:
    """The pair's max-min goodput (TCP payload, Mb/s) on the packet fabric and on a lit
    circuit: rack a's hosts each to one of rack b's."""
    fraction = tcp_payload_fraction(mtu_bytes)
    flows = list(zip(rack_hosts(topo, a), rack_hosts(topo, b)))
    out = []
    for lit in ((), ((min(a, b), max(a, b), 0),)):
        p = circuit_plan(topo, lit, mode="single")
        paths = [next(iter(trace.paths(topo, p, s, d))) for s, d in flows]
        out.append(sum(maxmin(topo, paths, rate_of=lambda r: r * fraction)))
    return out[0], out[1]


def steps_of(log: Path) -> list[dict]:
    """The circuit app's steps (dark and light, with their Unix times)."""
    if not log.exists():
        return []
    return [r for r in map(json.loads, log.read_text().splitlines()) if "step" in r]


def turn_row(setting: CircuitSetting, turn: int, pair: list[int], t0: float, t1: float,
             steps: list[dict], first_sent: dict[int, tuple[float, float]], results: list,
             interval_s: float,
             settle_s: float, packet_mbps: float, circuit_mbps: float, cpu_bound: bool,
             waiting_since: float | None = None) -> list:
    """One turn's row of circuits.csv (TURN_HEADER); `first_sent`: dst rack -> the Unix
    times of the samples between which the optical switch sent its first packet towards it
    after the turn's light step (first_packets);
    `waiting_since`: when the pair's first packet crossed the packet fabric (its ToR's
    uplink). The dark time is measured only when traffic was waiting when the circuit went
    dark (before that, the circuit's first packet waits for the flows to start, not for
    the mirror)."""
    a, b = pair
    key = [min(a, b), max(a, b)]
    light = next((s for s in steps if s["step"] == "light" and s["time"] >= t0
                  and any(list(c[:2]) == key for c in s["circuits"])), None)
    dark = None
    if light is not None:
        dark = max((s for s in steps if s["step"] == "dark" and s["time"] <= light["time"]),
                   key=lambda s: s["time"], default=None)
    series = [sum(vals) for vals in zip(*(r.intervals_mbps for r in results))] \
        if results and all(r.intervals_mbps for r in results) else []
    lit_after = light["time"] - t0 if light else None
    on_circuit = None
    if lit_after is not None and series:
        first = int((lit_after + settle_s) / interval_s) + 1
        tail = series[first:]
        on_circuit = sum(tail) / len(tail) if tail else None
    total = sum(r.goodput_mbps for r in results)
    duration = t1 - t0
    wait = min(lit_after, duration) if lit_after is not None else duration
    model = (packet_mbps * wait + circuit_mbps * (duration - wait)) / duration
    lost = (circuit_mbps - packet_mbps) * wait / 8  # MB the wait cost
    measured_dark = resolution = None
    waiting = dark is not None and waiting_since is not None and waiting_since <= dark["time"]
    if waiting and dark is not None and light is not None and b in first_sent:
        sent, before = first_sent[b]
        measured_dark = (sent - dark["time"]) * 1000
        resolution = (sent - max(before, light["time"])) * 1000
    applied = (light["time"] - dark["time"]) * 1000 if light and dark else None
    return [setting.period_s, setting.dark_ms, turn, a, b, round_or_none(lit_after, 3),
            round_or_none(applied, 2), round_or_none(measured_dark, 2),
            round_or_none(resolution, 2), round_or_none(on_circuit, 3),
            round(circuit_mbps, 3),
            round_or_none(on_circuit / circuit_mbps if on_circuit else None, 4),
            round(total, 3), round(model, 3), round(total / model, 4) if model else None,
            round(lost, 3), len(results), sum(r.retransmits for r in results), cpu_bound]


def first_packets(samples, t0: float, since: list[float], ports: dict[str, int]
                  ) -> dict[int, tuple[float, float]]:
    """Per destination rack, the Unix time of the first sample after the last of `since`
    (light steps) at which the port towards it had sent more packets, and of the sample
    before it (the packet left between the two)."""
    out: dict[int, tuple[float, float]] = {}
    by_if: dict[str, list] = {}
    for s in samples:
        by_if.setdefault(s.ifname, []).append(s)
    for name, rack in ports.items():
        seq = by_if.get(name, [])
        for start in since:
            before = [s for s in seq if t0 + s.t <= start]
            base = before[-1].sent_pkts if before else 0
            at = next((i for i, s in enumerate(seq) if t0 + s.t > start
                       and s.sent_pkts > base), None)
            if at is not None:
                out[rack] = (t0 + seq[at].t, t0 + seq[at - 1].t if at else start)
    return out


def run(ctx: Context, exp: Circuits) -> Outcome:
    out = Outcome()
    topo = ctx.topo
    mtu = ctx.spec.links.mtu_bytes
    spec_c = ctx.spec.controller.circuits
    settings = exp.settings or [CircuitSetting(period_s=spec_c.period_s, dark_ms=spec_c.dark_ms)]
    per = topo.param("circuits")
    ocs_ports = {ifname("o1", 1 + r * per + c): r for r in range(topo.param("racks"))
                 for c in range(per)}
    hpr = topo.param("hosts_per_rack")  # a ToR's ports: its hosts, then the cores
    uplinks = {ifname(f"e{r + 1}", hpr + 1 + c): r for r in range(topo.param("racks"))
               for c in range(topo.param("cores"))}
    rows = []
    for setting in settings:
        label = f"circuits {setting.period_s:g}s {setting.dark_ms:g}ms"
        with ctx.fabric(topo, "cthrough", label,
                        circuits={"period_s": setting.period_s,
                                  "dark_ms": setting.dark_ms}) as fab:
            sampler = ctx.qdisc_sampler(list(ocs_ports) + list(uplinks),
                                        rate_hz=exp.sample_hz)
            sampler.start()
            turns = []
            try:
                for i, (a, b) in enumerate(exp.pairs):
                    pairs = list(zip(rack_hosts(fab.topo, a), rack_hosts(fab.topo, b)))
                    flows = assign_ports(pairs, exp.turn_s, 0, interval_s=exp.interval_s)
                    with ctx.traffic_phase(fab, out, f"{label} turn {i}") as checks:
                        t0 = time.time()
                        # a ping every probe_ms beside the flows: packets always waiting
                        # for the circuit, whatever TCP's state when it is lit (its output
                        # to a file: an unread pipe stops ping after about 800 replies)
                        probe = fab.start_process(
                            pairs[0][0], probe_argv(fab.topo.host(pairs[0][1]).ip,
                                                    exp.probe_ms / 1000, exp.turn_s),
                            f"circuit probe {pairs[0][0]}",
                            ctx.out_dir / "flows" / ctx.raw_name(f"circuits-{i}-probe.log"))
                        try:
                            res = fab.run_flows(flows, f"circuits-{i}")
                        finally:
                            fab.stop_processes([probe])
                        t1 = time.time()
                    check_cc(res, ctx.spec.hosts.congestion_control, out, f"{label} turn {i}")
                    turns.append((i, [a, b], t0, t1, res, checks["cpu"]["cpu_bound"]))
            finally:
                sampler.stop()
            steps = steps_of(fab.circuits_log)
            lights = [s["time"] for s in steps if s["step"] == "light"]
            for i, pair, t0, t1, res, cpu_bound in turns:
                packet, circuit = rates(fab.topo, pair[0], pair[1], mtu)
                mine = [t for t in lights if t0 <= t <= t1][:1]  # its own turn's light step
                sent = first_packets(sampler.samples, sampler.t0, mine, ocs_ports)
                waiting = first_packets(sampler.samples, sampler.t0, [t0], uplinks)
                since = waiting.get(pair[0])
                rows.append(turn_row(setting, i, pair, t0, t1, steps, sent, res,
                                     exp.interval_s, exp.settle_s, packet, circuit,
                                     cpu_bound, since[0] if since else None))
    ctx.write_csv("circuits.csv", TURN_HEADER, rows)
    out.headline = headline(rows)
    return out


def headline(rows: list[list]) -> dict:
    """Per setting: the circuit's goodput over its rate, the measured dark time and the
    whole turns' goodput over the model, means over the turns (CPU-bound turns left out of
    the means and counted)."""
    out: dict = {}
    idx = {name: i for i, name in enumerate(TURN_HEADER)}
    for key in dict.fromkeys((r[0], r[1]) for r in rows):
        mine = [r for r in rows if (r[0], r[1]) == key and not r[idx["cpu_bound"]]]
        tag = f"{key[0]:g}s_{key[1]:g}ms"

        def mean(col: str, sel: list[list] = mine) -> float | None:
            vals = [r[idx[col]] for r in sel if r[idx[col]] is not None]
            return round(sum(vals) / len(vals), 4) if vals else None

        out[f"{tag}_circuit_over_rate"] = mean("circuit_over_rate")
        out[f"{tag}_dark_applied_ms"] = mean("dark_applied_ms")
        out[f"{tag}_dark_measured_ms"] = mean("dark_measured_ms")
        out[f"{tag}_lit_after_s"] = mean("lit_after_s")
        out[f"{tag}_turn_over_model"] = mean("turn_over_model")
        out[f"{tag}_cpu_bound_turns"] = sum(1 for r in rows if (r[0], r[1]) == key
                                            and r[idx["cpu_bound"]])
    return out


def loads(spec: Spec, topo: Topology, exp: Circuits, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: a rack pair's hosts, one flow each, over the packet fabric (its
    circuits can only take load off it), pair by pair."""
    fabric = rated(spec, topo)
    for a, b in exp.pairs:
        yield Load(f"racks {a}->{b}", fabric, spec.links.mtu_bytes,
                   list(zip(rack_hosts(fabric, a), rack_hosts(fabric, b))))


EXPERIMENT = Experiment(spec=Circuits, run=run, load=loads)
