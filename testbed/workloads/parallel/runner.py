"""The rank's main loop: per iteration the pipeline schedule (GPipe or 1F1B) over the
micro-batches, activations and gradients passed between neighbour stages, then the
data-parallel synchronisation; one row per iteration (`rank<R>.jsonl`: times, bytes per
collective type, interface bytes, CPU), and the trace and summary when the rank ends.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from testbed.workloads.model.jobsync import Gate, Reporter, before_iteration
from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.job import JobConfig
from testbed.workloads.model.parallel.pipemare import lr_scale, tau
from testbed.workloads.model.parallel.schedule import ASYNC, actions, stream

from ..rank import Timeline, counters, union_s
from .comm import Comm
from .emulated import EmulatedStage
from .real import RealStage


class Runner:
    def __init__(self, cfg: JobConfig, rank: int, out: Path, ifname: str | None):
        import torch
        self.torch, self.cfg, self.rank, self.out, self.ifname = torch, cfg, rank, out, ifname
        lay = cfg.layout
        self.dpi, self.stage, _ = lay.coords(rank)
        self.timeline = Timeline(rank)
        if cfg.roce is not None:
            from .rocecomm import RoceComm
            self.comm: Comm = RoceComm(cfg, rank, self.timeline, out)
        else:
            self.comm = Comm(cfg, rank, self.timeline)
        self.real = cfg.compute == "real"
        self.model = RealStage(cfg, self.comm, rank) if self.real else \
            EmulatedStage(cfg, self.comm, rank)
        self.logfh = (out / f"rank{rank}.jsonl").open("w", buffering=1)
        self.gate = Gate(cfg.gate_file)
        self.reporter = Reporter(cfg.report_file if rank == 0 else "",
                                 lambda: sum(b for b, _ in self.comm.sent().values()))
        if self.real:
            from .. import models
            self.xtr, self.ytr, _, _ = models.dataset(cfg.real.data, "mlp", seed=cfg.seed)
            # the batches of replica d are those of the data-parallel job's worker d
            self.gen = torch.Generator().manual_seed(cfg.seed * 1000 + self.dpi)
            if cfg.real.batch % cfg.micro_batches:
                raise ValueError(f"batch {cfg.real.batch} is not a multiple of "
                                 f"{cfg.micro_batches} micro-batches")
            self.mb_size = cfg.real.batch // cfg.micro_batches
        self.batches: dict[int, tuple] = {}
        self.grad_out: dict = {}
        # without a flush (PipeMare) an iteration's actions run into the next one's
        self.chunks = stream(self.stage, lay.pp, cfg.micro_batches, cfg.iters) \
            if cfg.schedule in ASYNC else None
        self.pending: list = []  # sends still going at the end of an iteration
        self.version = 0         # the weight updates this stage has made
        self.forward_version: dict[int, int] = {}
        self.acts: dict = {}      # receives posted: activations and gradients, by micro-batch
        self.grads: dict = {}

    def boundary_shape(self, stage: int) -> tuple:
        """The activation leaving `stage` (the input of stage + 1)."""
        if self.real:
            return (self.mb_size, self.cfg.real.width)
        plan = self.cfg.plan()
        return (plan.stage_work(stage)[-1].act_elems,)

    def plan(self, it: int) -> list[tuple[str, int]]:
        """The iteration's actions, micro-batches numbered over the run."""
        if self.chunks is not None:
            return self.chunks[it]
        m = self.cfg.micro_batches
        return [(k, it * m + mb) for k, mb in actions(self.cfg.schedule, self.stage,
                                                      self.cfg.layout.pp, m)]

    def tag(self, it: int, g: int) -> int:
        """A micro-batch's activation tag (its gradient's is one more): numbered within the
        iteration, or over the run when iterations overlap."""
        return 2 * (g if self.chunks is not None else g - it * self.cfg.micro_batches)

    def micro_batch(self, g: int) -> tuple:
        """The samples and labels of micro-batch g of the run, the iteration's batch drawn
        when first needed (in order: the same batches as the data-parallel job's)."""
        k, j = divmod(g, self.cfg.micro_batches)
        if k not in self.batches:
            idx = self.torch.randint(0, self.xtr.shape[0], (self.cfg.real.batch,),
                                     generator=self.gen)
            self.batches = {k: (self.xtr[idx].split(self.mb_size),
                                self.ytr[idx].split(self.mb_size))}
        xs, ys = self.batches[k]
        return xs[j], ys[j]

    def post_receives(self, it: int, todo: list[tuple[str, int]], dtype) -> None:
        """Gloo sends only into a posted receive: the receives of the iteration, and without
        a flush those of the next one too, whose first inputs leave the neighbours while
        this iteration runs."""
        last = self.cfg.layout.pp - 1
        ahead = self.plan(it + 1) if self.chunks is not None and it + 1 < self.cfg.iters \
            else []
        for k, g in todo + ahead:
            if k == "F" and self.stage > 0 and g not in self.acts:
                self.acts[g] = self.comm.irecv(self.torch.empty(
                    self.boundary_shape(self.stage - 1), dtype=dtype), self.stage - 1,
                    self.tag(it, g))
            elif k == "B" and self.stage < last and g not in self.grads:
                self.grads[g] = self.comm.irecv(self.torch.empty(
                    self.boundary_shape(self.stage), dtype=dtype), self.stage + 1,
                    self.tag(it, g) + 1)

    def iteration(self, it: int) -> dict:
        torch, cfg, lay = self.torch, self.cfg, self.cfg.layout
        if it == cfg.crash_iter and self.rank == cfg.crash_rank:
            raise RuntimeError(f"injected fault at iteration {it}")
        if it == cfg.crash_iter and self.rank == cfg.hang_rank:
            time.sleep(10 * cfg.timeout_s)
        last = lay.pp - 1
        dtype = torch.float32 if self.real else self.model.dtype
        losses, sends, waited, lags = [], [], 0.0, []
        todo = self.plan(it)
        first = next((g for k, g in todo if k == "F"), None)  # none in a drain
        if self.real and self.stage in (0, last) and first is not None:
            self.micro_batch(first)  # the batch drawn outside the timing
        self.comm.spans.clear()
        t0 = time.perf_counter()
        compute = 0.0
        m = cfg.micro_batches
        self.post_receives(it, todo, dtype)
        t_sync = t_synced = None
        for kind, g in todo:
            if kind == "F":
                if self.stage > 0:
                    waited += self.comm.wait(self.acts[g])
                    x = self.acts.pop(g)[1]
                else:
                    x = self.micro_batch(g)[0] if self.real else None
                    if x is not None:
                        x = x.reshape(len(x), -1)
                self.forward_version[g] = self.version
                c0 = time.perf_counter()
                y = self.model.forward(g, x)
                compute += time.perf_counter() - c0
                if self.stage < last:
                    sends.append(self.comm.send(y.contiguous(), self.stage + 1,
                                                tag=self.tag(it, g)))
                elif self.real:
                    losses.append(self.loss(g, y, self.micro_batch(g)[1]))
                continue
            if self.stage < last:
                waited += self.comm.wait(self.grads[g])
                grad = self.grads.pop(g)[1]
            else:
                grad = self.grad_out.pop(g) if self.real else None
            lag = self.version - self.forward_version.pop(g)
            lags.append(lag)
            c0 = time.perf_counter()
            gx = self.model.backward(g, grad, lag)
            compute += time.perf_counter() - c0
            if self.stage > 0:
                sends.append(self.comm.send(gx.contiguous(), self.stage - 1,
                                            tag=self.tag(it, g) + 1))
            if self.chunks is not None and g % m == m - 1:
                # no flush: the stage updates its weights as soon as it has the
                # iteration's gradients, and goes on with the next iteration's forwards
                t_sync = time.perf_counter()
                self.sync()
                t_synced = time.perf_counter()
        if self.chunks is None or it == cfg.iters - 1:
            for w in self.pending + sends:
                w.wait()
            self.pending = []
        else:  # the sends of the last iteration are long done, this one's may still go
            for w in self.pending:
                w.wait()
            self.pending = sends
        if t_sync is None or t_synced is None:
            t_sync = time.perf_counter()
            self.reporter.set_phase("sync")
            self.sync()
            t_synced = t1 = time.perf_counter()
        else:
            t1 = time.perf_counter()
        self.timeline.span(f"iteration {it}", "iteration", t0, t1, tid=7)
        sync_s = t_synced - t_sync
        pipe_s = t1 - t0 - sync_s
        # the bubble: the share of the pipeline phase this rank spent outside its layers
        # (waiting for a neighbour, or for its own sends)
        # perf_counter is the machine's monotonic clock, the same in every namespace: the
        # analysis lines up the ranks of a group with these
        row = {"iteration": it, "iter_s": t1 - t0, "pipeline_s": pipe_s,
               "sync_s": sync_s, "pp_wait_s": waited,
               "t_start": t0, "t_sync_start": t_sync, "t_sync_end": t_synced,
               "bubble": 1 - compute / pipe_s if pipe_s > 0 else 0.0,
               "staleness": sum(lags) / len(lags) if lags else 0.0}
        if self.real:
            row["loss"] = sum(losses) if losses else None
        return row | {"compute_loop_s": compute}

    def loss(self, mb: int, logits, y) -> float:
        """Cross-entropy of the micro-batch, weighted by its share of the replica's batch
        (so that the micro-batches' gradients add up to the batch's); its gradient is kept
        for the backward pass."""
        torch = self.torch
        n = self.cfg.real.batch
        logp = torch.log_softmax(logits, dim=1)
        loss = -logp[torch.arange(len(y)), y].sum() / n
        g = logp.exp()
        g[torch.arange(len(y)), y] -= 1
        self.grad_out[mb] = g / n
        return loss.item()

    def sync(self) -> None:
        """The data-parallel synchronisation and the stage's weight update (under PipeMare
        with its learning rate rescheduled, and the update's moving average kept)."""
        cfg = self.cfg
        lr, mom = (cfg.real.lr, cfg.real.momentum) if self.real else (0.0, 0.0)
        if self.chunks is not None:
            lr *= lr_scale(self.version, tau(self.stage, cfg.layout.pp, cfg.micro_batches),
                           cfg.pipemare.lr_steps)
        groups = [self.model.shards]
        if not self.real and self.model.experts is not None:
            groups.append(self.model.experts)
        for shards in groups:
            grads = shards.synchronise()
            before = [p.clone() for p in shards.params] \
                if self.real and self.model.velocity is not None else []
            shards.step(grads, lr, mom)
            if before:
                self.model.moved(before)
        self.version += 1

    def close(self) -> None:
        import resource
        self.logfh.close()
        engine = None
        try:
            engine = self.comm.close()
        except Exception as exc:  # the rank's own error, if any, is the one to report
            print(f"rank {self.rank}: {exc}", file=sys.stderr)
        self.timeline.write(self.out / f"rank{self.rank}.trace.json")
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        (self.out / f"rank{self.rank}.summary.json").write_text(json.dumps(
            {"rank": self.rank, "peak_rss_mb": round(peak_mb, 1),
             "sockets_marked": self.comm.marked,
             "groups": {k: r for k, (_, r) in self.comm.groups.items()},
             "transport": self.comm.transport,
             "roce": roce_totals(engine) if engine is not None else None}))

    def run(self) -> None:
        # one snapshot closes an iteration and opens the next, so no byte falls between two
        # (a DP allreduce once measured 0.87-0.89 of its volume); a snapshot counts what was
        # written, acknowledged or still queued, so the tail of a send whose ACKs come
        # after the collective returned counts in its own iteration, not the next
        self.sent_mark = self.comm.written()
        self.reporter.start()
        try:
            for it in range(self.cfg.iters):
                self.one(it, before_iteration(self.gate, self.reporter, it,
                                              self.cfg.start_file, self.cfg.timeout_s))
        finally:
            self.reporter.stop()

    def one(self, it: int, gate_wait: float) -> None:
        """One iteration, its row written (`gate_wait` is what the gate held it before)."""
        base = counters(self.ifname)
        sent0 = self.sent_mark
        compute0 = self.compute_spans_now()
        row = self.iteration(it)
        sent1 = self.sent_mark = self.comm.written()
        (rx0, tx0, r0, w0), (rx1, tx1, r1, w1) = base, counters(self.ifname)
        spans = self.comm.spans
        row.update({
            "t_end": time.time(), "stage": self.stage, "dp_index": self.dpi,
            "compute_s": self.compute_spans_now() - compute0 if not self.real
            else None,
            "comm_s": union_s([(s, e) for s, e, _ in spans]),
            "tx_bytes": tx1 - tx0, "rx_bytes": rx1 - rx0, "cpu_wait_s": w1 - w0, "cpu_s": r1 - r0,
            "gate_wait_s": gate_wait})
        for k in KINDS:
            row[f"{k}_s"] = union_s([(s, e) for s, e, a in spans if a == k])
            payload = sent1[k][0] - sent0[k][0]
            row[f"{k}_bytes"] = payload
            row[f"{k}_wire_bytes"] = payload + (sent1[k][1] - sent0[k][1]) * \
                self.comm.header_bytes
        if self.real:  # the layers' time without their tensor-parallel allreduces
            row["compute_s"] = max(0.0, row["compute_loop_s"] - row["tp_s"])
        self.logfh.write(json.dumps(row) + "\n")

    def compute_spans_now(self) -> float:
        if self.real:
            return 0.0
        return sum(e - s for s, e in self.model.compute_spans)


ROCE_COUNTERS = ("tx_pkts", "tx_bytes", "retx_pkts", "naks_rx", "cnps_rx", "timeouts",
                 "rate_cuts", "ooo_drops", "reordered")


def roce_totals(result) -> dict:
    """The rank's engine: its counters summed over its queue pairs, the largest reordering,
    the sending lost to late wake-ups and the part of it spent running or waiting for a core
    (its worst QP's: one late wake-up costs every QP that was due) and its CPU time."""
    qps = list(result.qps.values())
    out = {k: sum(q[k] for q in qps) for k in ROCE_COUNTERS}
    return out | {"reorder_max": max((q["reorder_max"] for q in qps), default=0),
                  "pace_lost_us": max((q["pace_lost_us"] for q in qps), default=0.0),
                  "pace_lost_cpu_us": max((q["pace_lost_cpu_us"] for q in qps), default=0.0),
                  "eagain": result.eagain, "cpu_s": result.cpu_s}
