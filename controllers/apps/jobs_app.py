"""The shell of the cross-job policies (controllers/jobpolicy.py): when the runner starts a
round of jobs sharing the fabric (jobs_dir/round.json), the policy is told it; every period
the app reads each job's progress and steps the policy; each decision is applied through
the dataplane API (each job's DSCP to its class, the classes' WRR weights or priorities)
and by writing the jobs' gates, and logged in jobs_dir/decisions.jsonl with the monotonic
and wall-clock time it was applied.

A start decision's schedule goes to every port the jobs' paths may share (the round's
`ports`); a step's, which may come many times a second, only to the ports where the jobs
have actually met (two jobs' DSCPs seen by the per-DSCP counters, looked at twice a
second; a port found later gets the schedule in force), so that a Fat-Tree's 48 candidate
ports do not cost a netlink request per class on 48 ports per step."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from controllers import qos_policy
from controllers.apps.compat import hub
from controllers.apps.qos_base import QosApp
from controllers.jobpolicy import (
    Decision,
    JobPolicy,
    RoundFile,
    dscp_table,
    meeting_ports,
    policy_for,
)
from testbed.config.controller import phase_config
from testbed.config.loader import from_data
from testbed.workloads.model.jobsync import read_progress, write_gate

MEETING_LOOK_S = 0.5
MEETING_MIN_BYTES = 9000  # a jumbo frame: a job's traffic, not a stray packet


class JobsApp(QosApp):
    NAME = "jobs"

    def configure(self, dp, cfg):
        jobs_dir = phase_config().jobs_dir
        if not jobs_dir:
            raise RuntimeError("jobs: this phase has no jobs directory")
        self.jobs_dir = Path(jobs_dir)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.log_fh = (self.jobs_dir / "decisions.jsonl").open("a", buffering=1)
        self.failed = False
        return {"jobs_dir": str(self.jobs_dir)}

    def serve(self, dp, cfg):
        path = self.jobs_dir / "round.json"
        rf: RoundFile | None = None
        policy: JobPolicy | None = None  # None while a round's policy has failed
        while True:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = None
            if rf is not None and (data is None or data["round"]["id"] != rf.round.id):
                self.guarded(rf, self.reset, dp, cfg, rf)  # the fabric as it was built
                rf = policy = None
            if data is not None and rf is None:
                try:
                    rf = from_data(RoundFile, data, "round")
                except Exception as exc:  # not the runner's file: say so, wait for another
                    self.logger.exception("jobs: unreadable round")
                    self.log({"round": data.get("round", {}).get("id"), "error": repr(exc)})
                    hub.sleep(1.0)
                    continue
                policy = self.guarded(rf, self.begin, dp, cfg, rf)
            elif rf is not None and policy is not None:
                self.guarded(rf, self.tick, dp, cfg, rf, policy)
                if self.failed:
                    policy = None
            hub.sleep(rf.period_s if rf is not None else 0.05)

    def begin(self, dp, cfg, rf: RoundFile) -> JobPolicy:
        self.meeting: set[str] = set()
        self.schedule: tuple[list[int] | None, list[int] | None] | None = None
        self.counted = self.counts(dp, rf)
        self.looked = time.monotonic()
        policy = policy_for(rf.round.policy, rf.round.args)
        self.apply(dp, cfg, rf, policy.start(time.monotonic(), rf.round), "start")
        return policy

    def tick(self, dp, cfg, rf: RoundFile, policy: JobPolicy) -> None:
        if time.monotonic() - self.looked >= MEETING_LOOK_S:
            self.look(dp, rf)
        progress = {name: p for name, f in rf.progress.items()
                    if (p := read_progress(Path(f))) is not None}
        decision = policy.step(time.monotonic(), progress)
        if decision is not None:
            self.apply(dp, cfg, rf, decision, "step")

    def counts(self, dp, rf: RoundFile) -> dict[str, dict[int, int]]:
        dscps = [j.dscp for j in rf.round.jobs]
        return {name: {d: dp.dscp_counters(dp.by_name[name]["id"], d).enq_bytes for d in dscps}
                for name in rf.ports}

    def look(self, dp, rf: RoundFile) -> None:
        """Which ports the jobs met on since the last look; a newly found one gets the
        schedule in force."""
        now = self.counts(dp, rf)
        deltas = {p: {d: b - self.counted[p][d] for d, b in by.items()} for p, by in now.items()}
        self.counted, self.looked = now, time.monotonic()
        new = meeting_ports(deltas, MEETING_MIN_BYTES) - self.meeting
        if new:
            self.meeting |= new
            if self.schedule is not None:
                weights, priorities = self.schedule
                dp.set_schedule([dp.by_name[n]["id"] for n in sorted(new)], weights=weights,
                                priorities=priorities)
            self.log({"round": rf.round.id, "when": "met", "t_mono": time.monotonic(),
                      "t": time.time(), "ports": sorted(self.meeting)})

    def guarded(self, rf: RoundFile, call, *args):
        """call(*args); on an exception (the policy's, or applying its decision), None,
        logged for the runner (which fails the round with it)."""
        self.failed = False
        try:
            return call(*args)
        except Exception as exc:
            self.logger.exception("jobs: policy %s failed", rf.round.policy)
            self.log({"round": rf.round.id, "error": repr(exc)})
            self.failed = True
            return None

    def reset(self, dp, cfg, rf: RoundFile) -> None:
        dp.set_dscp_map(qos_policy.dscp_table(cfg))
        dp.set_schedule([dp.by_name[name]["id"] for name in rf.ports],
                        weights=[c.weight for c in cfg.classes])

    def apply(self, dp, cfg, rf: RoundFile, decision: Decision, when: str) -> None:
        if decision.classes is not None:
            dp.set_dscp_map(dscp_table(qos_policy.dscp_table(cfg), rf.round.jobs,
                                       decision.classes))
        if decision.weights is not None or decision.priorities is not None:
            self.schedule = (decision.weights, decision.priorities)
            ports = rf.ports if when == "start" else sorted(self.meeting)
            dp.set_schedule([dp.by_name[name]["id"] for name in ports],
                            weights=decision.weights, priorities=decision.priorities)
        for name, gate in (decision.gates or {}).items():
            write_gate(Path(rf.gates[name]), gate)
        self.log({"round": rf.round.id, "when": when, "t_mono": time.monotonic(),
                  "t": time.time(), **{k: v for k, v in asdict(decision).items()
                                       if v not in (None, {})}})

    def log(self, record: dict) -> None:
        self.log_fh.write(json.dumps(record) + "\n")
