"""The permutation experiment's analysis, pure: each flow's outage under faults, a
controller restart's record, and the headlines of its tables."""
from __future__ import annotations

from testbed.config.faults import describe_steps
from testbed.workloads.model.flows import crosses, outage, probe_outage
from topologies.model import Topology

from .spec import Permutation

OUTAGE_HEADER = ["routing", "pattern", "repeat", "src", "dst", "faults", "crossed_fault",
                 "blackholed_s", "longest_outage_s", "resumed", "goodput_mbps", "interval_s",
                 "probe_outage_s", "probe_before_s"]
# the same probe measure this long before each failure: the background of congestion losses
PROBE_BACKGROUND_S = 2.0


def outages(topo: Topology, routing: str, pattern: str, rep: int, flows: list, res: list,
            steps: list[dict], replies: list[list[tuple[int, float]]] | None = None,
            probe_ms: float | None = None) -> list[list]:
    """One row per flow of a phase with faults: whether its packets (or its ACKs) were on a
    failed port just before the failure (`crossed_fault`, from the headers read there), and
    how long it carried nothing after the failure (flows.outage, the failure's time placed
    on the flow's own clock); with probes, the longest break the failures made in its pair's
    pings (flows.probe_outage; None without probes), and the same measure taken
    `PROBE_BACKGROUND_S` before each failure (what congestion alone does to the probes)."""
    what = describe_steps(steps)
    downs = [s for s in steps if s["action"] == "down"]
    seen = [tuple(c) for s in downs for c in s.get("connections_seen", [])]
    rows = []
    for i, (f, r) in enumerate(zip(flows, res)):
        crossed = crosses(seen, (topo.host(f.src).ip, topo.host(f.dst).ip, r.local_port, f.port))
        o = outage(r.intervals_mbps, r.interval_s, [s["time"] - r.started for s in downs],
                   window_s=1.0)
        probe = before = None
        if replies and probe_ms:
            probe, before = (max((probe_outage(replies[i], probe_ms / 1000, s["time"] - shift)
                                  for s in downs), default=0.0)
                             for shift in (0.0, PROBE_BACKGROUND_S))
        rows.append([routing, pattern, rep, r.src, r.dst, what, crossed, o["blackholed_s"],
                     o["longest_s"], o["resumed"], round(r.goodput_mbps, 3), r.interval_s,
                     probe, before])
    return rows


def restart_record(label: str, step: dict, steps: list[dict]) -> dict:
    """A controller restart in the headline: how long until every switch was resynchronised,
    what it read and changed, how many switches' tables differ from before the kill, and
    how many other fault steps happened while it was dead (which the resync must repair:
    then the tables should differ)."""
    killed = max((s["time"] for s in steps if s["fault"] == "controller"
                  and s["action"] == "down" and s["time"] < step["time"]), default=0.0)
    return {"phase": label, "at_s": step["at_s"], "ready_s": step["ready_s"],
            "rules_read": step["resync"]["rules_read"], "changes": step["resync"]["changes"],
            "switches_changed": len(step["table_diff"]),
            "faults_meanwhile": sum(1 for s in steps if s["fault"] != "controller"
                                    and killed < s["time"] < step["time"])}


def outage_headline(rows: list[list]) -> dict:
    """Per routing: the faults, how many flows crossed a failed port, their median and
    largest blackholed time, how many flows never came back, and how many others stalled
    within a second of a failure anyway (rerouted traffic joining their links, or TCP's
    own loss recovery: the background against which the cut flows stand out)."""
    out: dict = {}
    for routing in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == routing]
        cut = sorted(r[7] or 0.0 for r in mine if r[6])
        others = [r for r in mine if not r[6]]
        out[f"faults_{routing}"] = mine[0][5]
        out[f"flows_cut_{routing}"] = len(cut)
        out[f"blackholed_median_s_{routing}"] = cut[len(cut) // 2] if cut else None
        out[f"blackholed_max_s_{routing}"] = cut[-1] if cut else None
        out[f"flows_not_resumed_{routing}"] = sum(1 for r in mine if r[9] is False)
        out[f"other_flows_stalled_{routing}"] = f"{sum(1 for r in others if r[7])}/{len(others)}"
        probed = sorted(r[12] for r in mine if r[12])
        if any(r[12] is not None for r in mine):  # pairs whose pings a failure interrupted
            out[f"probes_cut_{routing}"] = f"{len(probed)}/{len(mine)}"
            # the same measure 2 s before each failure: congestion's share of the above
            out[f"probes_cut_before_{routing}"] = f"{sum(1 for r in mine if r[13])}/{len(mine)}"
            out[f"probe_outage_median_ms_{routing}"] = (round(probed[len(probed) // 2] * 1000, 1)
                                                        if probed else None)
            out[f"probe_outage_max_ms_{routing}"] = round(probed[-1] * 1000, 1) if probed else None
    return out


def headline(rows: list[list], exp: Permutation, modes: list[str], ideal: float,
             ideal_fcts: dict[str, float | None]) -> dict:
    """The headline of permutation.csv's rows (`modes`: the routings, "own" resolved): per
    pattern and routing the mean fraction of the ideal and the routing's own max-min and
    proportionally fair models,
    the non-blocking max-min model, ECMP over single path, and with several patterns the
    mean over patterns of the phases that were not CPU-bound (and how many were)."""
    out: dict = {"ideal_mbps": ideal}
    if ideal_fcts:
        out["ideal_fct_s"] = {k: round(v, 4) for k, v in ideal_fcts.items() if v}
    for pattern in exp.patterns:
        means = {}
        for routing in modes:
            mine = [r for r in rows if r[0] == routing and r[1] == pattern]
            means[routing] = sum(r[4] for r in mine) / len(mine)
            out[f"{pattern}_{routing}_normalised"] = round(means[routing], 4)
            if mine[0][15] is not None:
                out[f"{pattern}_{routing}_model"] = round(
                    sum(r[15] for r in mine) / len(mine), 4)
                fair = [r[18] for r in mine if r[18] is not None]
                if fair:
                    out[f"{pattern}_{routing}_model_pf"] = round(sum(fair) / len(fair), 4)
        model = [r[14] for r in rows if r[1] == pattern and r[0] == modes[0]]
        out[f"{pattern}_maxmin_model"] = round(sum(model) / len(model), 4)
        if "ecmp" in means and "single" in means and means["single"] > 0:
            out[f"{pattern}_ecmp_over_single"] = round(means["ecmp"] / means["single"], 3)
    if len(exp.patterns) > 1:  # mean over patterns, CPU-bound phases left out (and counted)
        for routing in modes:
            ok = [r[4] for r in rows if r[0] == routing and not r[8]]
            out[f"mean_{routing}_normalised"] = round(sum(ok) / len(ok), 4) if ok else None
            out[f"cpu_bound_phases_{routing}"] = sum(1 for r in rows if r[0] == routing and r[8])
    return out
