"""Layer-wise gradient synchronisation with network priorities, in the spirit of P3
(Jayarajan et al. 2019) and ByteScheduler (Peng et al. 2019).

Each layer's gradient is allreduced as soon as backward has produced it, on the process
group of its priority level; the layer's update is applied just before the next forward
pass reaches it, so that the next iteration starts as soon as the first layers' gradients
are back. Every level is its own Gloo process group, whose TCP connections carry the level's
DSCP, so that switch priority queues can act on them. Layers near the input get the highest
level: they are needed first and produced last.

With one level (FIFO) the same engine sends every layer on one connection set in the order
backward produces them: the baseline that differs only in priority.

`ScheduledSync` sends the same gradients in best effort as TicTac or ByteScheduler order
them (commsched.py): a communication thread agrees with the other workers on what all have
ready, in rounds on a process group of its own, and starts the allreduces the schedule picks.

`forward_s` emulates compute: that much forward time per iteration, shared over the layers
by their multiply-accumulates (`layer_macs`), and twice as much backward (each layer's
share before its gradient is handed over), so that the scheduling matters as it does when
compute and communication are of a size.
"""
from __future__ import annotations

import queue
import threading
import time

import torch
from torch import nn

from .commsched import Schedule, pick, pieces
from .sockets import mark_sockets, socket_fds


def priority_groups(dscps: list[int], timeout_s: float) -> list[tuple[object, int, int]]:
    """One Gloo process group per DSCP: [(group, dscp, sockets marked)]; a collective on one
    fails after `timeout_s`."""
    from datetime import timedelta

    import torch.distributed as dist
    groups = []
    for dscp in dscps:
        before = socket_fds()
        pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        dist.barrier(group=pg)  # connections are up
        groups.append((pg, dscp, mark_sockets(socket_fds() - before, dscp)))
    return groups


def layers(model: nn.Module) -> list[nn.Module]:
    """Modules that hold parameters directly, in registration order (input side first)."""
    return [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]


def layer_macs(model: nn.Module, x) -> list[float]:
    """Multiply-accumulates of each of `layers(model)` in one forward pass of `x`: its
    outputs times the weights per output of a linear layer or a convolution; one per output
    of any other (norms, embeddings)."""
    found: dict[int, float] = {}

    def hook(module, _inputs, out):
        per = 1.0
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            per = module.weight.numel() / module.weight.shape[0]
        outs = out if isinstance(out, tuple) else (out,)
        found[id(module)] = found.get(id(module), 0.0) + per * sum(
            o.numel() for o in outs if isinstance(o, torch.Tensor))
    hooks = [m.register_forward_hook(hook) for m in layers(model)]
    training = model.training
    model.eval()  # a norm's running statistics stay as they were
    try:
        with torch.no_grad():
            model(x)
    finally:
        model.train(training)
        for h in hooks:
            h.remove()
    return [found.get(id(m), 0.0) for m in layers(model)]


class LayerwiseSync:
    def __init__(self, model: nn.Module, groups: list, world: int, lr: float, momentum: float,
                 timeline=None, forward_s: float = 0.0, weights: list[float] | None = None):
        import torch.distributed as dist
        self.dist = dist
        self.world = world
        self.lr, self.momentum = lr, momentum
        self.timeline = timeline
        self.layers = layers(model)
        n, levels = len(self.layers), len(groups)
        # layer i of n gets level floor(i * L / n): input layers on level 0 (highest)
        self.level = {id(m): min(levels - 1, i * levels // n) for i, m in enumerate(self.layers)}
        self.groups = groups
        self.params = {id(m): [p for p in m.parameters(recurse=False) if p.requires_grad]
                       for m in self.layers}
        self.sizes = [sum(p.numel() for p in self.params[id(m)]) * 4 for m in self.layers]
        self.momentum_bufs = {p: torch.zeros_like(p) for m in self.layers
                              for p in self.params[id(m)]}
        self.ready: dict[int, int] = {}
        self.pending: dict[int, tuple] = {}
        self.spans: list[tuple[float, float, int, int]] = []  # start, end, bytes, level
        self.waited_s = 0.0
        if not weights or sum(weights) <= 0:
            weights = [1.0] * len(self.layers)
        self.forward_share = {id(m): forward_s * w / sum(weights)
                              for m, w in zip(self.layers, weights)}
        for m in self.layers:
            for p in self.params[id(m)]:
                p.register_post_accumulate_grad_hook(self._grad_ready(m))
            m.register_forward_pre_hook(self._before_forward)

    def _grad_ready(self, module):
        key = id(module)

        def hook(_param):
            self.ready[key] = self.ready.get(key, 0) + 1
            if self.ready[key] == len(self.params[key]):
                self.ready[key] = 0
                if self.forward_share[key]:  # the layer's emulated backward
                    time.sleep(2 * self.forward_share[key])
                self._launch(module)
        return hook

    def _launch(self, module) -> None:
        key = id(module)
        flat = torch.cat([p.grad.reshape(-1) for p in self.params[key]])
        level = self.level[key]
        start = time.perf_counter()
        work = self.dist.all_reduce(flat, group=self.groups[level][0], async_op=True)
        record = {"start": start}
        nbytes = flat.numel() * 4

        def done(fut):
            record["end"] = time.perf_counter()
            return fut.value()
        work.get_future().then(done)
        self.pending[key] = (work, flat, record, nbytes, level)

    def _before_forward(self, module, _inputs) -> None:
        self._finish(id(module))
        if self.forward_share[id(module)] and torch.is_grad_enabled():  # not an evaluation
            time.sleep(self.forward_share[id(module)])  # the layer's emulated forward

    def _finish(self, key: int) -> None:
        item = self.pending.pop(key, None)
        if item is None:
            return
        work, flat, record, nbytes, level = item
        t0 = time.perf_counter()
        work.wait()
        self.waited_s += time.perf_counter() - t0
        end = record.get("end", time.perf_counter())
        self.spans.append((record["start"], end, nbytes, level))
        if self.timeline:
            self.timeline.span(f"allreduce L{level}", "comm", record["start"], end,
                               tid=1 + level, bytes=nbytes)
        self._apply(key, flat)

    def _apply(self, key: int, flat: torch.Tensor) -> None:
        """The layer's averaged gradient into its SGD step with momentum."""
        flat.div_(self.world)
        off = 0
        with torch.no_grad():
            for p in self.params[key]:
                g = flat[off:off + p.numel()].view_as(p)
                off += p.numel()
                buf = self.momentum_bufs[p]
                buf.mul_(self.momentum).add_(g)
                p.add_(buf, alpha=-self.lr)
                p.grad = None

    def flush(self) -> None:
        """Complete and apply every outstanding layer (after the last backward)."""
        for key in list(self.pending):
            self._finish(key)

    def take_spans(self) -> list[tuple[float, float, int, int]]:
        spans, self.spans = self.spans, []
        return spans


class ScheduledSync(LayerwiseSync):
    """Layer-wise gradients sent as `schedule` orders them (commsched.py). `groups`: the
    negotiation's process group first (its own class), then the gradients' (best effort).

    In rounds, the communication thread and those of the other workers agree on which
    pieces all have ready and which pieces in flight all have back (one MIN allreduce of two
    flags per piece: Horovod's negotiation), then start, in priority order, the pieces `pick`
    allows. Every worker so starts the same allreduces in the same order. A worker goes to
    the next round when it has news (a gradient made, a piece back) or when the last round
    showed others behind it (they will have news), at most every `cycle_s`; from its first
    gradient of an iteration until every piece of it has started."""

    def __init__(self, model: nn.Module, groups: list, world: int, lr: float, momentum: float,
                 schedule: Schedule, cycle_s: float, timeout_s: float, timeline=None,
                 forward_s: float = 0.0, weights: list[float] | None = None):
        super().__init__(model, groups[1:], world, lr, momentum, timeline, forward_s, weights)
        self.control, self.data = groups[0][0], groups[1][0]
        self.cycle_s, self.timeout_s = cycle_s, timeout_s
        self.index = {id(m): i for i, m in enumerate(self.layers)}  # forward order
        self.plan = pieces(self.sizes, schedule.partition
                           if schedule.name == "bytescheduler" else None)
        self.credit = schedule.credit if schedule.name == "bytescheduler" else 0
        self.of_layer = [[i for i, p in enumerate(self.plan) if p.layer == layer]
                         for layer in range(len(self.layers))]
        self.flats: dict[int, torch.Tensor] = {}
        self.works: list = [None] * len(self.plan)
        self.started_at: list[float] = [0.0] * len(self.plan)
        self.ended_at: list[float | None] = [None] * len(self.plan)
        self.lock = threading.Condition()
        self.launched = 0
        self.rounds, self.round_s = 0, 0.0
        self.error: BaseException | None = None
        self.todo: queue.Queue = queue.Queue()
        self.news = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _launch(self, module) -> None:
        key = id(module)
        with self.lock:
            self.flats[self.index[key]] = torch.cat(
                [p.grad.reshape(-1) for p in self.params[key]])
            self.launched += 1
            self.news.set()
            if self.launched == 1:
                self.todo.put("iteration")
            if self.launched == len(self.layers):
                self.launched = 0
            self.lock.notify_all()

    def _finish(self, key: int) -> None:
        layer = self.index[key]
        if layer not in self.flats:
            return
        t0 = time.perf_counter()
        deadline = t0 + self.timeout_s
        with self.lock:
            while self.error is None and any(self.works[i] is None
                                             for i in self.of_layer[layer]):
                if not self.lock.wait(max(0.0, deadline - time.perf_counter())):
                    raise TimeoutError(f"layer {layer}'s gradient was not sent after "
                                       f"{self.timeout_s:g} s")
            if self.error is not None:
                raise self.error
            works = [self.works[i] for i in self.of_layer[layer]]
        for work in works:
            work.wait()
        self.waited_s += time.perf_counter() - t0
        for i in self.of_layer[layer]:
            end = self.ended_at[i] or time.perf_counter()
            nbytes = self.plan[i].nbytes
            self.spans.append((self.started_at[i], end, nbytes, 0))
            if self.timeline:
                self.timeline.span(f"allreduce L{layer}", "comm", self.started_at[i], end,
                                   tid=1, bytes=nbytes)
            self.works[i] = None
        self._apply(key, self.flats.pop(layer))

    def flush(self) -> None:
        for m in self.layers:
            self._finish(id(m))

    def close(self) -> None:
        self.todo.put("stop")
        self.thread.join(timeout=5)

    def take_rounds(self) -> tuple[int, float]:
        """Negotiation rounds since the last call, and their mean time (s)."""
        with self.lock:
            rounds, total = self.rounds, self.round_s
            self.rounds, self.round_s = 0, 0.0
        return rounds, total / rounds if rounds else 0.0

    # ---- the communication thread -------------------------------------------------------
    def _serve(self) -> None:
        try:
            while self.todo.get() == "iteration":
                self._rounds()
        except BaseException as exc:  # noqa: BLE001 (handed to the training thread)
            with self.lock:
                self.error = exc
                self.lock.notify_all()

    def _rounds(self) -> None:
        n = len(self.plan)
        sizes = [p.nbytes for p in self.plan]
        started = [False] * n
        out: set[int] = set()
        behind = True
        while not all(started):
            if not behind and not self.news.wait(self.timeout_s):
                raise TimeoutError(f"no gradient made and no piece back in {self.timeout_s:g} s")
            self.news.clear()
            t = time.perf_counter()
            flags = torch.zeros(2 * n, dtype=torch.int32)
            with self.lock:
                for i, p in enumerate(self.plan):
                    flags[i] = int(not started[i] and p.layer in self.flats)
            for i in out:
                flags[n + i] = int(self.ended_at[i] is not None)
            mine = flags.clone()
            self.dist.all_reduce(flags, op=self.dist.ReduceOp.MIN, group=self.control)
            behind = bool((mine != flags).any())
            with self.lock:
                self.rounds += 1
                self.round_s += time.perf_counter() - t
            out = {i for i in out if not flags[n + i]}
            waiting = [i for i in range(n) if flags[i]]
            for i in pick(waiting, sum(sizes[j] for j in out), self.credit, sizes):
                self._start(i)
                started[i] = True
                out.add(i)
            left = self.cycle_s - (time.perf_counter() - t)
            if left > 0 and not all(started):
                time.sleep(left)

    def _start(self, i: int) -> None:
        p = self.plan[i]
        with self.lock:
            view = self.flats[p.layer][p.offset // 4:(p.offset + p.nbytes) // 4]
            self.ended_at[i] = None
            self.started_at[i] = time.perf_counter()
            work = self.dist.all_reduce(view, group=self.data, async_op=True)

            def done(fut, i=i):
                self.ended_at[i] = time.perf_counter()
                self.news.set()
                return fut.value()
            work.get_future().then(done)
            self.works[i] = work
            self.lock.notify_all()
