"""The shell of the cross-job policies (controllers/jobpolicy.py): when the runner starts a
round of jobs sharing the fabric (jobs_dir/round.json), the policy is told it; every period
the app reads each job's progress and steps the policy; each decision is applied through
the dataplane API (each job's DSCP to its class, the classes' WRR weights or priorities)
and by writing the jobs' gates, and logged in jobs_dir/decisions.jsonl with the monotonic
and wall-clock time it was applied.

What else there is to decide is controllers/jobsctl.py's (pure): when a round begins and
ends, which ports a decision's schedule goes to (a start's to every port the jobs' paths
may share, a step's only to the ports where the jobs have met, found from the per-DSCP
counters twice a second), what each record says. This app reads the round file, the
switches' counters, the jobs' progress and the clock, and sends what those return."""
from __future__ import annotations

import json
import time
from pathlib import Path

from controllers import jobsctl, qos_policy
from controllers.apps.compat import hub
from controllers.apps.qos_base import QosApp
from controllers.jobpolicy import JobPolicy, RoundFile, policy_for
from testbed.config.controller import phase_config
from testbed.config.loader import from_data
from testbed.workloads.model.jobsync import read_progress, write_gate


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
            step = jobsctl.round_step(rf.round.id if rf is not None else None, data,
                                      policy is not None)
            if step.end and rf is not None:
                self.guarded(rf, self.send, dp, jobsctl.reset(cfg, rf))  # the fabric as built
                rf = policy = None
            if step.begin:
                try:
                    rf = from_data(RoundFile, data, "round")
                except Exception as exc:  # not the runner's file: say so, wait for another
                    self.logger.exception("jobs: unreadable round")
                    self.log(jobsctl.unreadable_record(data, exc))
                    hub.sleep(jobsctl.UNREADABLE_S)
                    continue
                policy = self.guarded(rf, self.begin, dp, cfg, rf)
            elif step.tick and rf is not None and policy is not None:
                self.guarded(rf, self.tick, dp, cfg, policy)
                if self.failed:
                    policy = None
            hub.sleep(jobsctl.wait_s(rf))

    def begin(self, dp, cfg, rf: RoundFile) -> JobPolicy:
        counts = self.counts(dp, rf)
        self.control = jobsctl.RoundControl(rf, time.monotonic(), counts)
        policy = policy_for(rf.round.policy, rf.round.args)
        decision = policy.start(time.monotonic(), rf.round)
        self.send(dp, self.control.apply(decision, "start", qos_policy.dscp_table(cfg)))
        return policy

    def tick(self, dp, cfg, policy: JobPolicy) -> None:
        control = self.control
        if control.look_due(time.monotonic()):
            counts = self.counts(dp, control.rf)
            found = control.look(time.monotonic(), counts)
            if found is not None:
                self.send(dp, found)
        progress = {name: p for name, f in control.rf.progress.items()
                    if (p := read_progress(Path(f))) is not None}
        decision = policy.step(time.monotonic(), progress)
        if decision is not None:
            self.send(dp, control.apply(decision, "step", qos_policy.dscp_table(cfg)))

    @staticmethod
    def counts(dp, rf: RoundFile) -> jobsctl.Counts:
        """Each of the round's ports' bytes enqueued per job DSCP, as the switches count
        them."""
        dscps = jobsctl.counted_dscps(rf)
        return {name: {d: dp.dscp_counters(dp.by_name[name]["id"], d).enq_bytes for d in dscps}
                for name in rf.ports}

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

    def send(self, dp, todo: jobsctl.Apply) -> None:
        """What jobsctl decided: the DSCP table, the schedule on its ports, the gates, then
        the record."""
        if todo.dscp_map is not None:
            dp.set_dscp_map(todo.dscp_map)
        if todo.ports is not None:
            dp.set_schedule([dp.by_name[name]["id"] for name in todo.ports],
                            weights=todo.weights, priorities=todo.priorities)
        for path, gate in (todo.gates or {}).items():
            write_gate(Path(path), gate)
        if todo.note is not None:
            self.log(todo.record(time.monotonic(), time.time()))

    def log(self, record: dict) -> None:
        self.log_fh.write(json.dumps(record) + "\n")
