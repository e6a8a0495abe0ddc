"""Emulated compute (`compute: emulated`): this rank's stage of a described transformer,
each layer's compute a wait as long as its FLOPs take on the stated device (or its profiled
time), the tensors it exchanges the real sizes times the scale.
"""
from __future__ import annotations

import time

from testbed.workloads.model.parallel.desc import LayerWork
from testbed.workloads.model.parallel.job import JobConfig

from .comm import TID, Comm
from .shards import Shards


class EmulatedStage:
    """This rank's layers of the described transformer: compute is a wait, the tensors it
    exchanges are the real (scaled) sizes. Per layer forward: half the compute, the
    attention output's TP allreduce, the MoE dispatch all-to-all, the other half, the
    combine all-to-all, the MLP output's TP allreduce; backward the same in reverse."""

    def __init__(self, cfg: JobConfig, comm: Comm, rank: int):
        import torch
        self.torch, self.comm, self.cfg = torch, comm, cfg
        self.dtype = torch.bfloat16 if cfg.model and cfg.model.dtype_bytes == 2 else torch.float32
        plan = cfg.plan()
        self.work: list[LayerWork] = plan.stage_work(plan.stage_of(rank))
        self.times = []
        for w in self.work:
            if cfg.profile:  # a whole layer's measured time, split over the TP group
                f, b = (cfg.profile["fwd_s"] / cfg.layout.tp, cfg.profile["bwd_s"] / cfg.layout.tp)
            else:
                f, b = w.fwd_flops * cfg.s_per_flop, w.bwd_flops * cfg.s_per_flop
            self.times.append((f, b))
        dense = [torch.zeros(w.params, dtype=self.dtype) for w in self.work]
        self.shards = Shards(torch, dense, comm, cfg.zero)
        expert = [torch.zeros(w.expert_params, dtype=self.dtype) for w in self.work
                  if w.expert_params]
        self.experts = Shards(torch, expert, comm, cfg.zero, "edp") if expert else None
        self.expert_of = {}
        for w in self.work:
            if w.expert_params:
                self.expert_of[w.index] = len(self.expert_of)
        self.buf = {}
        self.act = torch.zeros(self.work[-1].act_elems, dtype=self.dtype)
        self.compute_spans: list[tuple[float, float]] = []

    def tensor(self, n: int):
        if n not in self.buf:
            self.buf[n] = self.torch.ones(n, dtype=self.dtype)
        return self.buf[n]

    def wait(self, seconds: float, name: str) -> None:
        start = time.perf_counter()
        end = start + seconds
        while (now := time.perf_counter()) < end:
            time.sleep(end - now)
        self.compute_spans.append((start, time.perf_counter()))
        self.comm.timeline.span(name, "compute", start, time.perf_counter(), tid=TID["compute"])

    def layer(self, j: int, backward: bool) -> None:
        w, (f, b) = self.work[j], self.times[j]
        c = b if backward else f
        if self.cfg.zero == 3:
            self.shards.full(j)
            if w.expert_params and self.experts:
                self.experts.full(self.expert_of[w.index])
        name = f"{'backward' if backward else 'forward'} L{w.index}"
        self.wait(c / 2, name)
        if w.tp_allreduces:
            self.comm.allreduce("tp", self.tensor(w.tp_elems))
        if w.a2a_elems:
            self.comm.all_to_all(self.tensor(w.a2a_elems), self.torch.empty(
                w.a2a_elems, dtype=self.dtype))
        self.wait(c / 2, name)
        if w.a2a_elems:
            self.comm.all_to_all(self.tensor(w.a2a_elems), self.torch.empty(
                w.a2a_elems, dtype=self.dtype))
        if w.tp_allreduces:
            self.comm.allreduce("tp", self.tensor(w.tp_elems))
        if backward:  # what backward produced: this layer's gradients, accumulated
            self.shards.grads[j][:1] += 1
            if w.expert_params and self.experts:
                self.experts.grads[self.expert_of[w.index]][:1] += 1

    def forward(self, mb: int, x):
        for j in range(len(self.work)):
            self.layer(j, backward=False)
        return self.act

    def backward(self, mb: int, g, lag: int = 0):
        for j in reversed(range(len(self.work))):
            self.layer(j, backward=True)
        return self.act


# ---- the iteration -------------------------------------------------------------------------
