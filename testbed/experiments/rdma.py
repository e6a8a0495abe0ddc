"""RDMA over the emulated lossless fabric: RoCEv2 WRITEs between hosts, carried by the
testbed's RoCE engine (testbed/workloads/roce) through the switches' lossless class with
PFC and ECN, once per congestion-control scheme. Every flow's completion time against
its ideal (the path's base RTT plus its bytes on the wire at the path's slowest link),
the engines' counters, each flow's rate over time, pauses and drops."""
from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from testbed.config.capacity import Capacity
from testbed.config.loader import SpecError
from testbed.config.qos import EcnProfile, PfcConfig, QosConfig, TrafficClass, check_pfc_thresholds
from testbed.config.qos import validate as validate_qos
from testbed.config.spec import ExperimentSpec, Spec
from testbed.core.errors import TestbedError
from testbed.dataplane.qos_render import INT_RATES, int_rate_table
from testbed.results.plots import pyplot, save, several_experiments, title
from testbed.workloads.model.rdma import (
    INT_LEN,
    ROCE_MTUS,
    ROCE_OVERHEAD,
    WIRE_OVERHEAD,
    Dcqcn,
    Hpcc,
    Irn,
    Timely,
    ideal_fct_us,
    wire_bytes,
)
from topologies.graph import shortest_paths
from topologies.model import Topology

from . import qos_common as qc
from .base import Context, Experiment, Outcome
from .load import Load, rated

RDMA_CCS = ("none", "dcqcn", "timely", "hpcc")   # none: every QP at its line rate
# after the congestion control, "+"-joined: w, at most one BDP in flight per QP (the HPCC
# paper's "+w" variants); irn, IRN's selective recovery instead of go-back-N; lossy, no
# PFC for this scheme
RDMA_MODIFIERS = ("w", "irn", "lossy")
RDMA_SCHEMES = ("none", "dcqcn", "dcqcn+w", "timely", "timely+w", "hpcc")   # the default


class Scheme(NamedTuple):
    cc: str
    window: bool
    irn: bool
    lossy: bool


def parse_scheme(name: str) -> Scheme:
    """`dcqcn+irn+lossy` -> its parts; ValueError naming what is wrong."""
    cc, *mods = name.split("+")
    if cc not in RDMA_CCS:
        raise ValueError(f"a congestion control first, one of {', '.join(RDMA_CCS)} "
                         f"(got {name!r})")
    for m in mods:
        if m not in RDMA_MODIFIERS or mods.count(m) > 1:
            raise ValueError(f"after {cc!r}, each of {', '.join(RDMA_MODIFIERS)} at most "
                             f"once (got {name!r})")
    if cc == "hpcc" and "w" in mods:
        raise ValueError(f"hpcc has its own window (got {name!r})")
    return Scheme(cc, "w" in mods, "irn" in mods, "lossy" in mods)


def reacts_to_ecn(scheme: str) -> bool:
    return parse_scheme(scheme).cc == "dcqcn"


@dataclass(frozen=True, kw_only=True)
class RdmaFlow:
    """One RDMA WRITE of `size_bytes` from `src` to `dst`, posted `start_ms` after the
    engines start (all hosts start together)."""
    src: str
    dst: str
    size_bytes: int
    start_ms: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Rdma(ExperimentSpec):
    """RoCEv2 WRITEs on the spec's fabric, once per scheme in `schemes`: data in the
    lossless class (`dscp`, PFC when `pfc`), ECN-marked when the scheme reacts to it
    (DCQCN): every packet above `ecn_k_bytes` queued, or, with `ecn_kmax_bytes`, RED-like
    (probability rising from 0 at K to `ecn_pmax` at Kmax, 1 above); ACKs, NAKs and CNPs
    in `ctrl_dscp`, served first. Each scheme's parameters are in its paper's units at its
    reference rate (`dcqcn`, `timely`, `hpcc`), scaled to the hosts' links; HPCC's T and
    the "+w" window's BDP come from the flows' measured base round trip."""
    type: Literal["rdma"] = "rdma"
    flows: list[RdmaFlow] = field(default_factory=list)
    schemes: list[str] = field(default_factory=lambda: list(RDMA_SCHEMES))
    roce_mtu: int = 1024
    dscp: int = 26
    ctrl_dscp: int = 48
    pfc: bool = True
    xoff_bytes: int = 36000
    xon_bytes: int = 18000
    headroom_bytes: int = 160000
    ecn_k_bytes: int = 20000
    ecn_kmax_bytes: int | None = None
    ecn_pmax: float = 1.0
    buffer_pkts: int = 64           # the lossy class's buffer per port
    burst_us: int = 1000
    rto_us: int = 100000            # the engine's retransmission timeout
    sample_us: int = 5000           # each flow's rate, this often
    timeout_s: float = 120.0
    dcqcn: Dcqcn = field(default_factory=Dcqcn)
    timely: Timely = field(default_factory=Timely)
    hpcc: Hpcc = field(default_factory=Hpcc)
    irn: Irn = field(default_factory=Irn)

    def check(self, path: str, spec: Spec, topo: Topology) -> None:
        if not self.flows:
            raise SpecError(f"{path}.flows: at least one flow")
        hosts = {h.name for h in topo.hosts}
        for i, f in enumerate(self.flows):
            for end in ("src", "dst"):
                if getattr(f, end) not in hosts:
                    raise SpecError(f"{path}.flows[{i}].{end}: no host {getattr(f, end)!r} "
                                    f"in the topology")
            if f.src == f.dst:
                raise SpecError(f"{path}.flows[{i}]: src and dst are the same host")
            if f.size_bytes < 1 or f.start_ms < 0:
                raise SpecError(f"{path}.flows[{i}]: size_bytes >= 1 and start_ms >= 0")
        if not self.schemes:
            raise SpecError(f"{path}.schemes: at least one, such as "
                            f"{', '.join(RDMA_SCHEMES)}")
        for j, s in enumerate(self.schemes):
            try:
                parse_scheme(s)
            except ValueError as exc:
                raise SpecError(f"{path}.schemes[{j}]: {exc}") from None
            if s in self.schemes[:j]:
                raise SpecError(f"{path}.schemes[{j}]: {s!r} twice")
        hpcc = any(parse_scheme(s).cc == "hpcc" for s in self.schemes)
        if self.roce_mtu not in ROCE_MTUS:
            raise SpecError(f"{path}.roce_mtu: a RoCE MTU, one of "
                            f"{', '.join(map(str, ROCE_MTUS))} (got {self.roce_mtu})")
        headers = ROCE_OVERHEAD + (INT_LEN if hpcc else 0)
        if self.roce_mtu + headers > spec.links.mtu_bytes:
            raise SpecError(f"{path}.roce_mtu: {self.roce_mtu} B of payload and "
                            f"{headers} B of headers"
                            f"{' (with HPCC telemetry)' if hpcc else ''} do not fit "
                            f"links.mtu_bytes {spec.links.mtu_bytes}")
        if hpcc and len({link.rate_mbps for link in topo.links}) > INT_RATES:
            raise SpecError(f"{path}.schemes: hpcc's telemetry names at most {INT_RATES} "
                            f"link rates; the topology has more")
        for name in ("dscp", "ctrl_dscp"):
            if not 0 <= getattr(self, name) <= 63 or getattr(self, name) == 0:
                raise SpecError(f"{path}.{name}: a DSCP in 1..63 (got {getattr(self, name)})")
        if self.dscp == self.ctrl_dscp:
            raise SpecError(f"{path}.ctrl_dscp: must differ from dscp")
        for name in ("ecn_k_bytes", "buffer_pkts", "rto_us", "sample_us", "timeout_s"):
            if not getattr(self, name) > 0:
                raise SpecError(f"{path}.{name}: must be > 0")
        if self.ecn_kmax_bytes is not None and self.ecn_kmax_bytes <= self.ecn_k_bytes:
            raise SpecError(f"{path}.ecn_kmax_bytes: above ecn_k_bytes ({self.ecn_k_bytes})")
        if not 0 < self.ecn_pmax <= 1:
            raise SpecError(f"{path}.ecn_pmax: in (0, 1] (got {self.ecn_pmax})")
        try:
            self.dcqcn.check(f"{path}.dcqcn")
            self.timely.check(f"{path}.timely")
            self.hpcc.check(f"{path}.hpcc")
            self.irn.check(f"{path}.irn")
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        check_pfc_thresholds(self.xoff_bytes, self.xon_bytes, self.headroom_bytes,
                             spec.links.mtu_bytes, path)
        validate_qos(rdma_qos(self, "dcqcn"), path, spec.links.mtu_bytes, self.buffer_pkts,
                     None)


def rdma_qos(exp: Rdma, scheme: str) -> QosConfig:
    """The classes a scheme runs with: the rest (DSCP 0), the RoCE data (lossless when
    `pfc` and the scheme is not lossy, ECN-marked when it reacts to marks) and the control
    packets above both."""
    ecn = EcnProfile(k=exp.ecn_k_bytes, kmax=exp.ecn_kmax_bytes, pmax=exp.ecn_pmax,
                     unit="bytes") if reacts_to_ecn(scheme) else None
    lossless = exp.pfc and not parse_scheme(scheme).lossy
    classes = [TrafficClass(name="data", dscp=[0], buffer_pkts=exp.buffer_pkts),
               TrafficClass(name="roce", dscp=[exp.dscp], priority=3, lossless=lossless,
                            ecn=ecn),
               TrafficClass(name="control", dscp=[exp.ctrl_dscp], priority=6)]
    pfc = PfcConfig(xoff_bytes=exp.xoff_bytes, xon_bytes=exp.xon_bytes,
                    headroom_bytes=exp.headroom_bytes) if lossless else None
    return QosConfig(classes=classes, pfc=pfc, ecn_enabled=ecn is not None)


def bottleneck_mbps(topo: Topology, src: str, dst: str) -> float:
    """The slowest link on the first shortest path (equal-cost paths of these fabrics have
    equal rates)."""
    path = shortest_paths(topo, src, dst)[0]
    return min(link.rate_mbps for a, b in zip(path, path[1:])
               if (link := topo.link_between(a, b)) is not None)


def run(ctx: Context, exp: Rdma) -> Outcome:
    from testbed.workloads import roce  # runtime side: not at import

    out = Outcome()
    binary = roce.build()
    rows: list[dict] = []
    rate_rows: list[list] = []
    params: dict[str, dict] = {}
    for scheme in exp.schemes:
        label = f"rdma {scheme}"
        with ctx.fabric(ctx.topo, ctx.spec.controller.routing, label, qos=rdma_qos(exp, scheme),
                        burst_us=exp.burst_us, buffer_pkts=exp.buffer_pkts,
                        buffer_bytes=None) as fab:
            topo = fab.topo
            rtts = {(f.src, f.dst): fab.ping_rtt_s(f.src, f.dst) for f in exp.flows}
            base_rtt_us = base_rtt(exp, topo, rtts, scheme)
            start_at = time.time() + 2.0      # every engine started and bound by then
            engines = engines_for(exp, topo, scheme, start_at, base_rtt_us)
            params[scheme] = scheme_record(exp, topo, scheme, base_rtt_us)
            folder = ctx.out_dir / "flows" / ctx.raw_name(f"rdma-{scheme}")
            folder.mkdir(parents=True, exist_ok=True)
            dp = fab.dataplane()
            before = qc.fabric_drops(dp)
            t_ns = time.monotonic_ns()
            with ctx.traffic_phase(fab, out, label) as checks:
                procs = {h: fab.start_process(
                    h, [str(binary), str(e.save(folder / f"{h}.conf")),
                        str(folder / f"{h}.json")], f"roce engine {h}", folder / f"{h}.log")
                    for h, e in engines.items()}
                requesters = {f.src for f in exp.flows}
                deadline = start_at + exp.timeout_s
                while time.time() < deadline and not all(
                        "done" in (folder / f"{h}.log").read_text().split()
                        for h in requesters):
                    dead = [h for h, p in procs.items() if p.poll() is not None]
                    if dead:       # the engines serve until stopped: one that ended failed
                        fab.stop_processes(list(procs.values()))
                        log = (folder / f"{dead[0]}.log").read_text().strip()[-500:]
                        raise TestbedError(f"{label}: the RoCE engine of {dead[0]} ended "
                                           f"early: {log}")
                    time.sleep(0.1)
                timed_out = time.time() >= deadline
                time.sleep(0.05)               # the last ACKs' way back
                fab.stop_processes(list(procs.values()))
            drops = {k: v - before[k] for k, v in qc.fabric_drops(dp).items()}
            dp.close()
            pfc = qc.pfc_summary(fab.qos_status_dir, t_ns)
        results = {h: roce.read_result(folder / f"{h}.json") for h in engines}
        t0 = min(r.t0_unix for r in results.values())
        scheme_rows = flow_rows(exp, topo, scheme, results, rtts)
        for r in scheme_rows:
            r.update({"switch_drops": drops.get("switch_drops", 0), "pauses": pfc["pauses"],
                      "timed_out": timed_out, "cpu_bound": checks["cpu"]["cpu_bound"]})
        rows += scheme_rows
        for i, f in enumerate(exp.flows):
            res = results[f.src]
            for qpn, t_us, rate, tx in res.samples:
                if qpn == i + 1:
                    rate_rows.append([scheme, i, round(res.t0_unix - t0 + t_us / 1e6, 6),
                                      round(rate, 4), round(tx, 4)])
        done = [r for r in scheme_rows if r["fct_us"] is not None]
        ctx.log(f"  {label}: {len(done)}/{len(scheme_rows)} flows complete, slowdown median "
                f"{median(r['slowdown'] for r in done)}, {pfc['pauses']} pauses, "
                f"{drops.get('switch_drops', 0)} drops")
        if timed_out:
            out.warnings.append(f"{label}: flows still running after {exp.timeout_s} s")
    (ctx.out_dir / "rdma_params.json").write_text(json.dumps(params, indent=1))
    ctx.write_csv("rdma_flows.csv", list(rows[0]), [list(r.values()) for r in rows])
    ctx.write_csv("rdma_rates.csv", RATE_HEADER, rate_rows)
    out.headline, warnings = analyse(rows, rate_rows)
    out.warnings += warnings
    return out


RATE_HEADER = ["scheme", "flow", "t_s", "rate_mbps", "tx_mbps"]


def base_rtt(exp: Rdma, topo: Topology, rtts: dict, scheme: str) -> float:
    """HPCC's T and the BDP of the "+w" window, in us: the longest of the flows' base round
    trips as a data packet of a line-rate flow sees it, a ping's plus the packet's
    transmission at the path's slowest link. (HPCC's code adds the transmission at every
    hop; the emulated links let a lone packet through at once, from their token bucket's
    burst, so a paced flow's packet waits for one transmission, measured.) 0 when no ping
    answered."""
    packet = exp.roce_mtu + WIRE_OVERHEAD + (INT_LEN if parse_scheme(scheme).cc == "hpcc"
                                              else 0)
    longest = 0.0
    for f in exp.flows:
        rtt = rtts.get((f.src, f.dst))
        if rtt is not None:
            longest = max(longest, rtt * 1e6 + packet * 8 / bottleneck_mbps(topo, f.src, f.dst))
    return round(longest, 1)


def scheme_record(exp: Rdma, topo: Topology, scheme: str, base_rtt_us: float) -> dict:
    """What a scheme ran with: its parameters in the paper's units and scaled to each host
    link rate of the flows, and the base round trip it was given."""
    parts = parse_scheme(scheme)
    cc = {"dcqcn": exp.dcqcn, "timely": exp.timely, "hpcc": exp.hpcc}.get(parts.cc)
    rates = sorted({topo.link_at(h, 0).rate_mbps for f in exp.flows for h in (f.src, f.dst)})
    out: dict = {"base_rtt_us": base_rtt_us, **parts._asdict()}
    if cc is not None:
        out["params"] = [cc.record(rate) for rate in rates]
    if parts.irn:
        out["irn"] = [exp.irn.record(rate) for rate in rates]
    return out


def engines_for(exp: Rdma, topo: Topology, scheme: str, start_at: float,
                base_rtt_us: float = 0.0) -> dict:
    """One engine per host that sends or receives: flow i is queue pair i+1 at both ends."""
    from testbed.workloads import roce

    engines: dict[str, roce.Engine] = {}
    parts = parse_scheme(scheme)
    cc = parts.cc
    if (cc == "hpcc" or parts.window or parts.irn) and base_rtt_us <= 0:
        raise TestbedError(f"rdma {scheme}: no base round trip measured (no ping answered)")

    def engine(host: str) -> roce.Engine:
        if host not in engines:
            rate = topo.link_at(host, 0).rate_mbps
            engines[host] = roce.Engine(
                bind=topo.host(host).ip, mtu=exp.roce_mtu, dscp=exp.dscp,
                ctrl_dscp=exp.ctrl_dscp, rto_us=exp.rto_us, sample_us=exp.sample_us,
                start_at_unix=start_at, exit_when_done=False, link_mbps=rate,
                dcqcn=exp.dcqcn if cc == "dcqcn" else None,
                timely=exp.timely if cc == "timely" else None,
                hpcc=exp.hpcc if cc == "hpcc" else None,
                base_rtt_us=base_rtt_us, window=parts.window,
                irn=exp.irn if parts.irn else None,
                int_rates=int_rate_table([link.rate_mbps for link in topo.links])
                if cc == "hpcc" else [])
        return engines[host]

    for i, f in enumerate(exp.flows):
        src, dst = engine(f.src), engine(f.dst)
        src.qp(i + 1, peer=topo.host(f.dst).ip, peer_qpn=i + 1,
               line_mbps=topo.link_at(f.src, 0).rate_mbps)
        dst.qp(i + 1, peer=topo.host(f.src).ip, peer_qpn=i + 1,
               line_mbps=topo.link_at(f.dst, 0).rate_mbps)
        src.write(i + 1, start_us=round(f.start_ms * 1000), nbytes=f.size_bytes)
    return engines


def flow_rows(exp: Rdma, topo: Topology, scheme: str, results: dict,
              rtts: dict) -> list[dict]:
    """One row per flow: its completion against its ideal, and both ends' counters."""
    rows = []
    for i, f in enumerate(exp.flows):
        res = results[f.src]
        sent, got = res.qps[i + 1], results[f.dst].qps[i + 1]
        msg = next(m for m in res.messages if m.qpn == i + 1)
        rate = bottleneck_mbps(topo, f.src, f.dst)
        rtt = rtts.get((f.src, f.dst))
        ideal = ideal_fct_us(f.size_bytes, exp.roce_mtu, rate, rtt)
        fct = msg.fct_us
        rows.append({
            "scheme": scheme, "flow": i, "src": f.src, "dst": f.dst,
            "size_bytes": f.size_bytes, "start_ms": f.start_ms, "roce_mtu": exp.roce_mtu,
            "fct_us": None if fct is None else round(fct, 1), "ideal_fct_us": round(ideal, 1),
            "slowdown": None if fct is None else round(fct / ideal, 4),
            "goodput_mbps": None if not fct else round(f.size_bytes * 8 / fct, 3),
            "bottleneck_mbps": rate, "base_rtt_us": None if rtt is None else round(rtt * 1e6),
            "wire_bytes": wire_bytes(f.size_bytes, exp.roce_mtu),
            "rx_bytes": got["rx_bytes"], "tx_pkts": sent["tx_pkts"],
            "retx_pkts": sent["retx_pkts"], "timeouts": sent["timeouts"],
            "naks": got["naks_tx"], "ooo_drops": got["ooo_drops"], "ce_marked": got["ce_rx"],
            "cnps": got["cnps_tx"], "rate_cuts": sent["rate_cuts"],
            "rate_updates": sent["rate_updates"], "rtt_mean_us": sent["rtt_mean_us"],
            "rtt_max_us": sent["rtt_max_us"], "int_hops": sent["int_hops"],
            "ooo_kept": got["ooo_kept"],
            "engine_cpu_s": round(res.cpu_s, 4),
            "dst_engine_cpu_s": round(results[f.dst].cpu_s, 4)})
    return rows


def median(values: Iterator[float] | list[float]) -> float | None:
    v = list(values)
    return round(statistics.median(v), 4) if v else None


def shared_period(rows: list[dict], scheme: str
                  ) -> tuple[list[dict], float, float, float] | None:
    """A scheme's flows, from when the last joined to when the first finished (seconds
    from the engines' start), and an equal split of the slowest bottleneck among them;
    None for fewer than two flows or one unfinished (it would change the others' share)."""
    mine = [r for r in rows if r["scheme"] == scheme]
    if len(mine) < 2 or any(r["fct_us"] is None for r in mine):
        return None
    join = max(float(r["start_ms"]) / 1e3 for r in mine)
    end = min(float(r["start_ms"]) / 1e3 + float(r["fct_us"]) / 1e6 for r in mine)
    return mine, join, end, min(float(r["bottleneck_mbps"]) for r in mine) / len(mine)


def convergence_s(rates: list[list], rows: list[dict], scheme: str, window_s: float = 0.1,
                  tolerance: float = 0.1) -> float | None:
    """How long after the last flow joined every flow's sending rate, averaged over
    windows of `window_s`, came within `tolerance` of an equal share of the bottleneck and
    stayed there until the first flow finished: the start of the first such window (0:
    from the first window on, to this resolution); None when they never settled or never
    ran together. Meant for flows that share one bottleneck (the slowest
    `bottleneck_mbps` of the flows)."""
    together = shared_period(rows, scheme)
    if together is None:
        return None
    mine, join, end, share = together
    n_windows = int((end - join) / window_s + 1e-9)
    if n_windows < 1:
        return None
    ok = []
    for k in range(n_windows):
        lo, hi = join + k * window_s, join + (k + 1) * window_s
        means = []
        for r in mine:
            tx = [x[4] for x in rates if x[0] == scheme and x[1] == r["flow"]
                  and lo <= x[2] < hi]
            means.append(sum(tx) / len(tx) if tx else 0.0)
        ok.append(all(abs(m - share) <= tolerance * share for m in means))
    for k in range(n_windows):
        if all(ok[k:]):
            return round(k * window_s, 3)
    return None


def shared_shares(rates: list[list], rows: list[dict], scheme: str) -> list[float]:
    """Each flow's mean sending rate while every flow ran, as a share of an equal split of
    the bottleneck (1.0: its fair share); empty when they never ran together."""
    together = shared_period(rows, scheme)
    if together is None:
        return []
    mine, join, end, share = together
    out = []
    for r in mine:
        tx = [x[4] for x in rates if x[0] == scheme and x[1] == r["flow"] and join <= x[2] < end]
        if not tx:
            return []
        out.append(round(sum(tx) / len(tx) / share, 3))
    return out


def analyse(rows: list[dict], rates: list[list] | None = None) -> tuple[dict, list[str]]:
    """Per scheme: how many flows completed, their slowdowns, pauses and drops; a warning
    for a flow that lost bytes or did not complete."""
    headline: dict = {}
    warnings = []
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = [r for r in rows if r["scheme"] == scheme]
        done = [r for r in mine if r["fct_us"] is not None]
        headline[f"{scheme}_complete"] = f"{len(done)}/{len(mine)}"
        headline[f"{scheme}_slowdown_median"] = median(r["slowdown"] for r in done)
        headline[f"{scheme}_slowdown_max"] = max((r["slowdown"] for r in done), default=None)
        headline[f"{scheme}_pauses"] = mine[0]["pauses"]
        headline[f"{scheme}_switch_drops"] = mine[0]["switch_drops"]
        shares = shared_shares(rates or [], rows, scheme)
        if shares:
            headline[f"{scheme}_share_of_fair"] = shares
        conv = convergence_s(rates or [], rows, scheme)
        if conv is not None:
            # one packet's time at the bottleneck: the time in the units of a scaled fabric
            pkt_s = (int(mine[0]["roce_mtu"]) + WIRE_OVERHEAD) * 8 / (
                min(float(r["bottleneck_mbps"]) for r in mine) * 1e6)
            headline[f"{scheme}_converged_s"] = conv
            headline[f"{scheme}_converged_pkt_times"] = round(conv / pkt_s)
        for r in mine:
            if r["rx_bytes"] != r["size_bytes"]:
                warnings.append(f"rdma {scheme}: flow {r['flow']} received {r['rx_bytes']} "
                                f"of {r['size_bytes']} bytes")
    return headline, warnings


def plot_rates(rows: list[dict], plots: Path) -> Path:
    """Each flow's rate (the limiter's, line) and what it sent (dots) over time, one panel
    per scheme."""
    plt = pyplot()
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    fig, axes = plt.subplots(len(schemes), 1, figsize=(8, 1.4 + 2.6 * len(schemes)),
                             squeeze=False)
    several = several_experiments(rows)
    for ax, scheme in zip(axes[:, 0], schemes):
        mine = [r for r in rows if r["scheme"] == scheme]
        for flow in sorted({int(r["flow"]) for r in mine}):
            pts = [r for r in mine if int(r["flow"]) == flow]
            t = [float(r["t_s"]) for r in pts]
            line, = ax.plot(t, [float(r["rate_mbps"]) for r in pts], label=f"flow {flow}")
            ax.plot(t, [float(r["tx_mbps"]) for r in pts], ".", ms=2, color=line.get_color())
        ax.set_ylabel(f"{scheme}\nMb/s")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].set_title(title("RDMA", "each flow's rate (line) and what it sent (dots)",
                               rows) + (" (several experiments)" if several else ""),
                         fontsize=10)
    return save(fig, plots / "rdma_rates.png")


def loads(spec: Spec, topo: Topology, exp: Rdma, cap: Capacity) -> Iterator[Load]:
    """For `testbed plan`: every flow at once, in RoCE-MTU packets, with the engines' CPU
    per packet."""
    yield Load("rdma flows", rated(spec, topo), exp.roce_mtu + ROCE_OVERHEAD,
               [(f.src, f.dst) for f in exp.flows], roce=True)


EXPERIMENT = Experiment(spec=Rdma, run=run, load=loads, plots={"rdma_rates.csv": plot_rates})
