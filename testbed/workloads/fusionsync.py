"""A data-parallel worker's gradients sent as the fusion plans of fusion.py say: each
parameter tensor is a layer; a hook on it notes when backward has produced its gradient,
and one communication thread sends the groups, one allreduce at a time, as the model
assumes (Horovod's background thread and MG-WFBP's implementation on it do the same).

A layer is a tensor in the order backward makes them: rank 0's order at the first
iteration, broadcast (a model's registration order need not be it: a residual block
registers both convolutions before both norms).

- Static plans (`wfbp`, `mgwfbp`, `optimal`, `one`): a group goes as soon as its last
  gradient is ready. MG-WFBP and the optimum are planned from a profile: per-layer
  backward times (rank 0's median over `PROFILE_ITERS` iterations after the first, all
  of which send one message after backward) and the allreduce's a and b, fitted by least
  squares to timed allreduces of a few sizes before training, as the authors' code does;
  rank 0 broadcasts both, so every rank computes the same plan.
- `horovod`: the communication thread runs Horovod's cycle. Every `cycle_s` it agrees with
  the other workers on which gradients all of them have ready (a MIN allreduce of one
  flag per layer: Horovod's bit-vector negotiation), fuses those not yet sent into buffers
  of at most `threshold` bytes, and sends them. Horovod's loop runs for the whole job;
  this one runs from the start of backward until every gradient is sent.
"""
from __future__ import annotations

import queue
import statistics
import threading
import time

import torch

from .fusion import (
    MODES,
    PROFILE_ITERS,
    CommModel,
    fusion,
    mgwfbp_groups,
    one_group,
    optimal_groups,
    overlap,
    pack,
    wfbp_groups,
)

FIT_SIZES = (1_024, 16_384, 65_536, 262_144)  # floats per timed allreduce
FIT_REPEATS = 5


def fit_comm(sizes_floats=FIT_SIZES, repeats: int = FIT_REPEATS) -> CommModel:
    """a and b of an allreduce here, least squares over timed allreduces (every rank times
    them, rank 0's fit is broadcast): the authors' _benchmark_communication."""
    import torch.distributed as dist
    xs, ys = [], []
    for n in sizes_floats:
        buf = torch.zeros(n)
        dist.all_reduce(buf)  # warm
        for _ in range(repeats):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(buf)
            xs.append(n * 4.0)
            ys.append(time.perf_counter() - t)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))
    ab = torch.tensor([max(0.0, my - b * mx), b], dtype=torch.float64)
    dist.broadcast(ab, 0)
    return CommModel(float(ab[0]), float(ab[1]))


class FusionSync:
    """Hooks on `model`'s parameters and the communication thread; `begin()` before
    backward, `wait()` after it (the gradients are then averaged in .grad)."""

    def __init__(self, model: torch.nn.Module, world: int, mode: str,
                 threshold: int, cycle_s: float, timeout_s: float, timeline=None):
        import torch.distributed as dist
        if mode not in MODES:
            raise ValueError(f"unknown fusion {mode!r} (one of {', '.join(MODES)})")
        self.dist, self.world, self.mode = dist, world, mode
        self.threshold, self.cycle_s, self.timeout_s = threshold, cycle_s, timeout_s
        self.timeline = timeline
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.sizes = [p.numel() * 4 for p in self.params]
        # tensors by layer: backward makes layer L-1 first (known after the first iteration)
        self.forward: list[int] | None = None
        self.iterations = 0
        self.comm = fit_comm()
        self.tb_profile: list[list[float]] = []
        self.tb: list[float] | None = None
        self.last_tb: list[float] = []
        self.groups: list[list[int]] = one_group(len(self.params))
        self.ready_at: list[float | None] = [None] * len(self.params)
        self.work: queue.Queue = queue.Queue()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.messages: list[tuple[float, float, float, int]] = []  # ready, start, end, bytes
        self.negotiations = 0
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda _p, i=i: self._ready(i))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    # ---- the plan ------------------------------------------------------------------
    @property
    def planned(self) -> bool:
        return self.mode in ("one", "wfbp", "horovod") or self.tb is not None

    def _layers(self, per_tensor: list) -> list:
        """Per-tensor values by layer."""
        order = self.forward or list(range(len(self.params)))
        return [per_tensor[t] for t in order]

    def _tensors(self, groups: list[list[int]]) -> list[list[int]]:
        """Groups of layers as groups of tensors."""
        order = self.forward or list(range(len(self.params)))
        return [[order[layer] for layer in group] for group in groups]

    def _learn_order(self) -> None:
        """After the first iteration: rank 0's order of the gradients, broadcast."""
        made = sorted(range(len(self.params)), key=lambda i: self.ready_at[i] or 0.0)
        order = torch.tensor(made[::-1], dtype=torch.int64)
        self.dist.broadcast(order, 0)
        self.forward = [int(t) for t in order]

    def _plan(self) -> None:
        """After the profile: rank 0's median per-layer backward times, broadcast, and the
        mode's groups from them."""
        n = len(self.params)
        tb = torch.tensor([statistics.median(row[i] for row in self.tb_profile)
                           for i in range(n)], dtype=torch.float64)
        self.dist.broadcast(tb, 0)
        self.tb = [float(t) for t in tb]
        sizes, tb_layers = self._layers(self.sizes), self._layers(self.tb)
        if self.mode == "mgwfbp":
            self.groups = self._tensors(mgwfbp_groups(sizes, tb_layers, self.comm))
        elif self.mode == "optimal":
            self.groups = self._tensors(optimal_groups(sizes, tb_layers, self.comm))

    def current_groups(self) -> list[list[int]]:
        """This iteration's groups of tensors (static plans)."""
        if self.mode == "wfbp":
            return [[t] for t in range(len(self.params))]  # each as soon as it is ready
        return self.groups if self.planned else one_group(len(self.params))

    def predicted(self):
        """The model's Overlap of the iteration just ended: its plan, with the backward
        times it measured and the fitted a and b."""
        sizes, tb = self._layers(self.sizes), self._layers(self.last_tb)
        if self.mode == "horovod":
            return fusion(sizes, tb, self.comm, self.threshold, self.cycle_s)[1]
        if self.mode == "wfbp":
            return overlap(wfbp_groups(len(sizes)), sizes, tb, self.comm)
        where = {t: layer for layer, t in enumerate(self.forward or range(len(sizes)))}
        groups = [[where[t] for t in group] for group in self.current_groups()]
        return overlap(groups, sizes, tb, self.comm)

    # ---- an iteration -----------------------------------------------------------------
    def begin(self) -> None:
        """Before backward: a new iteration's bookkeeping; the thread is told to start."""
        self.t_backward = time.perf_counter()
        self.planned_now = self.planned  # this iteration sends the mode's plan
        self.ready_at = [None] * len(self.params)
        self.messages = []
        self.negotiations = 0
        self.done.clear()
        self.sent = [False] * len(self.params)
        self.pending = [list(g) for g in self.current_groups()]
        self.work.put(("iteration", len(self.pending)))

    def _ready(self, i: int) -> None:
        self.ready_at[i] = time.perf_counter()
        if self.mode == "horovod":
            return  # the thread's cycle picks it up
        for group in self.pending:
            if i in group and all(self.ready_at[j] is not None for j in group):
                self.pending.remove(group)
                self.work.put(("send", group))
                break

    def wait(self) -> None:
        """After backward: until every gradient is back, averaged."""
        missing = [i for i, t in enumerate(self.ready_at) if t is None]
        if missing:  # every rank's backward makes the same gradients: none would send them
            raise RuntimeError(f"backward made no gradient for {len(missing)} parameter "
                               "tensors; fusion plans need every one")
        if not self.done.wait(self.timeout_s):
            raise TimeoutError(f"the gradients were not all back after {self.timeout_s:g} s")
        if self.error is not None:
            raise self.error
        # this iteration's backward time per layer: the gap since the gradient before it
        self.last_tb = [0.0] * len(self.params)
        last = self.t_backward
        for t, i in sorted((t, i) for i, t in enumerate(self.ready_at) if t is not None):
            self.last_tb[i], last = t - last, t
        self.iterations += 1
        if self.forward is None:
            self._learn_order()
        if not self.planned and self.iterations > 1:  # the first one is left out
            self.tb_profile.append(self.last_tb)
            if len(self.tb_profile) == PROFILE_ITERS:
                self._plan()

    def close(self) -> None:
        self.work.put(("stop", None))
        self.thread.join(timeout=5)

    # ---- the communication thread -----------------------------------------------------------
    def _serve(self) -> None:
        try:
            while True:
                what, group = self.work.get()
                if what == "stop":
                    return
                if what == "iteration" and self.mode == "horovod":
                    self._horovod()
                    self.done.set()
                    continue
                if what == "iteration":  # `group`: how many groups it sends
                    for _ in range(group):
                        what, sent = self.work.get()
                        self._send(sent)
                    self.done.set()
        except BaseException as exc:  # noqa: BLE001 (handed to the training thread)
            self.error = exc
            self.done.set()

    def _send(self, group: list[int]) -> None:
        grads = [self.params[i].grad for i in group]
        flat = torch.cat([g.reshape(-1) for g in grads])
        start = time.perf_counter()
        self.dist.all_reduce(flat)
        end = time.perf_counter()
        flat.div_(self.world)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        ready = max(self.ready_at[i] or start for i in group)
        self.messages.append((ready - self.t_backward, start - self.t_backward,
                              end - self.t_backward, flat.numel() * 4))
        if self.timeline is not None:
            self.timeline.span("allreduce", "comm", start, end, tid=1, bytes=flat.numel() * 4,
                               layers=len(group))

    def _horovod(self) -> None:
        n = len(self.params)
        while not all(self.sent):
            cycle = time.perf_counter()
            flags = torch.tensor([0 if self.sent[i] else int(self.ready_at[i] is not None)
                                  for i in range(n)], dtype=torch.int32)
            self.dist.all_reduce(flags, op=self.dist.ReduceOp.MIN)
            self.negotiations += 1
            # in the order backward makes them (the broadcast order, which every worker
            # knows: their own ready times differ)
            order = self.forward or list(range(n))
            due = [i for i in reversed(order) if flags[i]]
            for i in due:
                self.sent[i] = True
            for buffer in pack(due, self.sizes, self.threshold):
                self._send(buffer)
            left = self.cycle_s - (time.perf_counter() - cycle)
            if left > 0 and not all(self.sent):
                time.sleep(left)
