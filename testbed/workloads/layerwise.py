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
"""
from __future__ import annotations

import time

import torch
from torch import nn

from .sockets import mark_sockets, socket_fds


def priority_groups(dscps: list[int]) -> list[tuple[object, int, int]]:
    """One Gloo process group per DSCP: [(group, dscp, sockets marked)]."""
    import torch.distributed as dist
    groups = []
    for dscp in dscps:
        before = socket_fds()
        pg = dist.new_group(backend="gloo")
        dist.barrier(group=pg)  # connections are up
        groups.append((pg, dscp, mark_sockets(socket_fds() - before, dscp)))
    return groups


def layers(model: nn.Module) -> list[nn.Module]:
    """Modules that hold parameters directly, in registration order (input side first)."""
    return [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]


class LayerwiseSync:
    def __init__(self, model: nn.Module, groups: list, world: int, lr: float, momentum: float,
                 timeline=None):
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
        self.momentum_bufs = {p: torch.zeros_like(p) for m in self.layers
                              for p in self.params[id(m)]}
        self.ready: dict[int, int] = {}
        self.pending: dict[int, tuple] = {}
        self.spans: list[tuple[float, float, int, int]] = []  # start, end, bytes, level
        self.waited_s = 0.0
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
