"""The jobs experiment's results from its rounds (pure): one row per job and round with the
model beside it, the communication phases on one time axis, bytes / marks / drops per job
and link, and the policies' decisions."""
from __future__ import annotations

import json
import statistics

from controllers.jobpolicy import JobInfo, gated_model
from testbed.results.stats import round_or_none as _r
from testbed.workloads.model.interference import simulate, steady_iteration_s

from .model import (
    Expected,
    aligned,
    expected,
    group_overlaps,
    periods,
    recovered,
    round_link_s,
    settled_after,
    shared_iterations,
)
from .spec import JOB_DSCPS, Jobs

PHASE_FIELDS = ["experiment", "placement", "policy", "job", "iteration", "start_s",
                "sync_start_s", "end_s", "iter_s", "compute_s", "comm_s", "gate_wait_s",
                "overlap"]
LINK_FIELDS = ["experiment", "placement", "policy", "job", "link", "bytes", "bytes_per_iter",
               "marks", "drops"]
STRICT = 1000.0  # the model's weight ratio between strict-priority levels


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def round_t0(rnd: dict) -> float:
    """The round's first rank start (monotonic): zero of its time axis."""
    return min(rows[0]["t_start"] for ranks in rnd["ranks"].values() for rows in ranks if rows)


def note_of(rnd: dict) -> dict:
    """What the policy said when it acted (the last note of the round)."""
    notes = [d.get("note") for d in rnd["decisions"] if d.get("note")]
    return notes[-1] if notes else {}


def policy_model(policy: str, group: list[JobInfo], rnd: dict, exp: Jobs,
                 names: list[str], at: dict[str, list[float]]) -> dict[str, float | None]:
    """The model's iteration per job under the policy (None where it has none: a plugin)."""
    offsets = [exp.jobs[names.index(j.name)].offset_s for j in group]
    exp_fair = expected(group, offsets)
    if policy == "none":  # fair sharing at the alignment the jobs had, on their links
        return {j.name: _median(at[j.name][exp.warmup_iters:] or at[j.name]) for j in group}
    if policy == "mltcp":  # its promise: the interleaving the model's best offsets give
        return {j.name: e.interleaved_s for j, e in zip(group, exp_fair)}
    if policy == "time_shift":  # the gates' model; jobs left ungated: as under none
        plan = note_of(rnd)
        if not all(j.name in plan.get("period_s", {}) for j in group):
            return {j.name: _median(at[j.name][exp.warmup_iters:] or at[j.name])
                    for j in group}
        runs = simulate(gated_model(group, plan["period_s"][group[0].name],
                                    [plan["offset_s"][j.name] for j in group]), 16)
        return dict(zip((j.name for j in group), steady_iteration_s(runs, 4)))
    if policy == "priority":
        ranking = note_of(rnd).get("ranking", [j.name for j in group])
        strict = exp.priority.scheduler == "strict"
        n = len(ranking)
        level = {name: n - r for r, name in enumerate(ranking)}
        weights = [STRICT ** level.get(j.name, 0) if strict else float(level.get(j.name, 1))
                   for j in group]
        return {j.name: e.shared_s for j, e in zip(group, expected(group, offsets, weights))}
    return dict.fromkeys((j.name for j in group), None)


def job_rows(exp: Jobs, experiment: int, placement: str, names: list[str],
             hosts: list[list[str]], groups: list[list[int]], profiles: dict[str, JobInfo],
             rounds: dict[str, dict], rates: dict[str, float],
             flows: dict[str, dict[str, float]] | None = None) -> list[dict]:
    """`rates`: every switch port's rate (Mb/s), for the model on the links jobs used;
    `flows`: each job's connections per port (model.port_flows)."""
    group_of = {names[i]: [names[j] for j in g] for g in groups for i in g}
    rows: list[dict] = []
    iter_by: dict[tuple[str, str], float | None] = {}
    named = [[names[i] for i in g] for g in groups]
    for key, rnd in rounds.items():
        policy = "alone" if key.startswith("alone:") else key
        rank0 = {name: ranks[0] for name, ranks in rnd["ranks"].items()}
        by_job = group_overlaps(rank0, named)
        over = [by_job[n] for n in rank0]
        link_s = round_link_s(rnd["counters"], rates, {n: len(r) for n, r in rank0.items()})
        # the iterations run while the job's whole group ran (its tail may run alone)
        n_of = shared_iterations(rank0, named)
        replayed = aligned([profiles[n] for n in rank0], rank0, link_s, flows)
        at_all = {n: at[:n_of.get(n, len(at))] for n, at in replayed.items()}
        # the start-aligned model, once per group (its offset search is the costly part)
        start_aligned: dict[str, Expected] = {}
        for name in rank0:
            if name not in start_aligned:
                group = [profiles[n] for n in group_of[name] if n in rank0]
                start_aligned.update(zip((g.name for g in group),
                                         expected(group, [0.0] * len(group))))
        model: dict[str, float | None] = {}
        if policy == "alone":
            model = {n: profiles[n].period_s for n in rank0}
        else:
            for name in rank0:
                if name not in model:
                    group = [profiles[n] for n in group_of[name] if n in rank0]
                    model.update(policy_model(policy, group, rnd, exp, names, at_all))
        cpu = rnd["checks"]["cpu"]
        for (name, rows0), per_iter in zip(rank0.items(), over):
            i = names.index(name)
            n_shared = n_of.get(name, len(rows0))
            w = min(exp.warmup_iters, n_shared - 1)
            steady = rows0[w:n_shared]
            iter_s = _median(periods(rows0)[w:n_shared])
            settled = settled_after(per_iter[:n_shared]) if policy != "alone" else None
            # once a policy has pulled the phases apart: its steady state without the way there
            after = (_median(periods(rows0)[max(settled, w):n_shared])
                     if settled is not None and max(settled, w) < n_shared else None)
            iter_by[(policy, name)] = iter_s
            alone = profiles[name].period_s
            counters = rnd["counters"][name]
            n_it = len(rows0) or 1
            waits = [_median([r["cpu_wait_s"] for r in ranks[w:n_shared]])
                     for ranks in rnd["ranks"][name]]
            wait = max((x for x in waits if x is not None), default=None)
            share = wait / iter_s if wait is not None and iter_s else None
            ex = start_aligned[name]
            at = at_all[name]
            note = note_of(rnd)
            model_s = model.get(name)
            rows.append({
                "experiment": experiment, "placement": placement, "policy": policy,
                "job": name, "hosts": " ".join(hosts[i]), "world": len(hosts[i]),
                "dscp": JOB_DSCPS[i], "sharing_with": " ".join(
                    n for n in group_of[name] if n != name and n in rank0),
                "iters": len(rows0), "iter_s_median": _r(iter_s),
                "iter_s_max": _r(max(periods(rows0)[w:n_shared], default=0.0)),
                "iters_shared": n_shared,
                "alone_iter_s": _r(alone),
                "slowdown": _r(iter_s / alone, 3) if iter_s and alone else None,
                "slowdown_settled": _r(after / alone, 3) if after and alone else None,
                "jct_s": _r(rows0[-1]["t_sync_end"] - rows0[0]["t_start"]) if rows0 else None,
                "compute_s_median": _r(_median([r["pipeline_s"] for r in steady])),
                "comm_s_median": _r(_median([r["sync_s"] for r in steady])),
                "alone_comm_s": _r(profiles[name].comm_s),
                "alone_link_s": _r(profiles[name].link_s),
                "alone_comm_share": _r(profiles[name].comm_s / alone, 3) if alone else None,
                "gate_wait_s_median": _r(_median([r.get("gate_wait_s", 0.0) for r in steady])),
                "model_policy_s": _r(model_s),
                "iter_over_model": _r(iter_s / model_s, 3) if iter_s and model_s else None,
                "model_aligned_s": _r(_median(at[w:])),
                "model_shared_s": _r(ex.shared_s), "model_interleaved_s": _r(ex.interleaved_s),
                "model_overlapped_s": _r(ex.overlapped_s),
                "overlap_mean": _r(_median(per_iter[w:n_shared]) if policy != "alone"
                                   else None, 3),
                "overlap_settled_after": settled,
                "predicted_overlap": note.get("predicted_overlap", {}).get(name)
                if isinstance(note.get("predicted_overlap"), dict) else None,
                # the mean over the steady iterations: an iteration's bytes are what its
                # rank wrote between its end and the previous one's
                "bytes_per_iter": _r(sum(r["bytes"] for r in steady) / len(steady), 0)
                if steady else None,
                "marks_per_iter": _r(sum(c[1] for c in counters.values()) / n_it, 2),
                "drops_per_iter": _r(sum(c[2] for c in counters.values()) / n_it, 2),
                "busiest_port": max(counters, key=lambda p: counters[p][0])
                if counters else None,
                "busiest_port_bytes_per_iter": _r(max((c[0] for c in counters.values()),
                                                      default=0) / n_it, 0),
                "worker_cpu_wait_share": _r(share, 3),
                "machine_idle_mean": cpu["machine_idle_mean"],
                "machine_steal_mean": cpu.get("machine_steal_mean"),
                "background_mbps": rnd.get("background_mbps"),
                "_monitor_cpu_bound": cpu["cpu_bound"],
            })
    for row in rows:
        none_s = iter_by.get(("none", row["job"]))
        if row["policy"] not in ("alone", "none") and none_s and row["iter_s_median"]:
            row["recovered"] = _r(recovered(row["alone_iter_s"], none_s,
                                            row["iter_s_median"]), 3)
        else:
            row["recovered"] = None
    return rows


def phase_rows(experiment: int, placement: str, names: list[str], groups: list[list[int]],
               rounds: dict[str, dict]) -> list[list]:
    """Every job's iterations (rank 0) on its round's time axis, with the overlap of its
    communication phase with those of the jobs its paths meet."""
    out = []
    named = [[names[i] for i in g] for g in groups]
    for key, rnd in rounds.items():
        policy = "alone" if key.startswith("alone:") else key
        t0 = round_t0(rnd)
        rank0 = {name: ranks[0] for name, ranks in rnd["ranks"].items()}
        by_job = group_overlaps(rank0, named)
        over = [by_job[n] for n in rank0]
        for (name, rows0), per_iter in zip(rank0.items(), over):
            for r, it_s, ov in zip(rows0, periods(rows0), per_iter):
                out.append([experiment, placement, policy, name, r["iteration"],
                            _r(r["t_start"] - t0), _r(r["t_sync_start"] - t0),
                            _r(r["t_sync_end"] - t0), _r(it_s), _r(r["pipeline_s"]),
                            _r(r["sync_s"]), _r(r.get("gate_wait_s", 0.0)), _r(ov, 3)])
    return out


def link_rows(experiment: int, placement: str, rounds: dict[str, dict],
              iters: int) -> list[list]:
    out = []
    for key, rnd in rounds.items():
        policy = "alone" if key.startswith("alone:") else key
        for name, ports in rnd["counters"].items():
            for link, (b, marks, drops) in sorted(ports.items()):
                if b or marks or drops:
                    out.append([experiment, placement, policy, name, link, b,
                                round(b / iters), marks, drops])
    return out


def policy_rows(experiment: int, placement: str, rounds: dict[str, dict]) -> list[dict]:
    out = []
    for key, rnd in rounds.items():
        if key.startswith("alone:"):
            continue
        t0 = round_t0(rnd)
        for d in rnd["decisions"]:
            body = {k: v for k, v in d.items() if k not in ("round", "when", "t_mono", "t")}
            out.append({"experiment": experiment, "placement": placement, "policy": key,
                        "round": d["round"], "when": d.get("when", "error"),
                        "t_s": _r(d["t_mono"] - t0) if "t_mono" in d else None,
                        "decision": json.dumps(body, sort_keys=True)})
    return out
