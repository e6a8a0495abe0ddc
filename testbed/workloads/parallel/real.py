"""Real compute (`compute: real`): this rank's stage of the MLP on the digits data, its
weights sliced as Megatron-LM slices them, forward and backward written out so that every
collective sits where Megatron puts it.
"""
from __future__ import annotations

from testbed.workloads.model.parallel.desc import stage_layers
from testbed.workloads.model.parallel.job import JobConfig
from testbed.workloads.model.parallel.pipemare import gamma, tau
from testbed.workloads.model.parallel.schedule import ASYNC

from .comm import Comm
from .shards import Shards


class RealStage:
    """This rank's share of the MLP: the Linear layers of `models.build("mlp")` (the same
    initial weights as the data-parallel job, from the same seed) grouped into units, a pair
    (column-parallel, ReLU, row-parallel) or a lone replicated Linear at the end; the
    units split into pipeline stages; each pair's matrices sliced over the TP group. One
    allreduce per pair forward (the row-parallel output) and one backward (the input
    gradient of the column-parallel layer), as in Megatron-LM's MLP block."""

    def __init__(self, cfg: JobConfig, comm: Comm, rank: int):
        import torch

        from .. import models
        self.torch, self.comm = torch, comm
        lay = cfg.layout
        _, stage, tpi = lay.coords(rank)
        self.tp, self.tpi = lay.tp, tpi
        torch.manual_seed(cfg.seed)
        full = models.build("mlp", cfg.real.width, cfg.real.depth)
        linears = [m for m in full.modules() if isinstance(m, torch.nn.Linear)]
        units, i = [], 0
        while i < len(linears):
            units.append(linears[i:i + 2])
            i += 2
        self.n_units = len(units)
        self.mine = list(stage_layers(len(units), lay.pp)[stage])
        self.last_linear = len(linears) - 1
        self.shapes: list[list[tuple]] = []
        flats = []
        for u in self.mine:
            tensors = self.slice_unit(units[u])
            self.shapes.append([t.shape for t in tensors])
            flats.append(torch.cat([t.reshape(-1) for t in tensors]).detach().clone())
        self.shards = Shards(torch, flats, comm, cfg.zero)
        self.unit_first = [2 * u for u in self.mine]
        self.saved: dict[int, list] = {}
        # PipeMare's discrepancy correction: per unit, the moving average of an update
        self.velocity: list | None = None
        backward = cfg.pipemare.backward if cfg.schedule in ASYNC else "current"
        if backward == "predicted":
            self.velocity = [torch.zeros_like(f) for f in flats]
            self.gamma = gamma(cfg.pipemare.decay, tau(stage, lay.pp, cfg.micro_batches))
        # weight stashing: each micro-batch's forward weights, kept until its backward
        self.stash: dict[int, list] | None = {} if backward == "stashed" else None

    def slice_unit(self, unit) -> list:
        if len(unit) == 1:
            return [unit[0].weight, unit[0].bias]
        a, b = unit
        k = a.out_features // self.tp
        lo, hi = self.tpi * k, (self.tpi + 1) * k
        return [a.weight[lo:hi], a.bias[lo:hi], b.weight[:, lo:hi], b.bias]

    def weights(self, j: int, lag: int, stashed: list | None) -> list:
        """Unit j's weights for a backward `lag` updates after its forward: today's, those
        the forward used (stashed), or under discrepancy correction those, predicted."""
        if stashed is not None:
            return self.unpack(j, stashed[j])
        w = self.shards.full(j)
        if lag and self.velocity is not None:
            w = w - lag * self.velocity[j]
        return self.unpack(j, w)

    def moved(self, before: list) -> None:
        """After an update (`before`: the weights it started from): the moving averages."""
        if self.velocity is None:
            return
        for v, old, new in zip(self.velocity, before, self.shards.params):
            v.mul_(self.gamma).add_(new[:v.numel()] - old[:v.numel()], alpha=1 - self.gamma)

    def unpack(self, j: int, flat) -> list:
        out, pos = [], 0
        for shape in self.shapes[j]:
            n = 1
            for d in shape:
                n *= d
            out.append(flat[pos:pos + n].view(shape))
            pos += n
        return out

    def relu_after(self, j: int, pair: bool) -> bool:
        """Whether the unit's output goes through a ReLU (every Linear but the model's last)."""
        return self.unit_first[j] + (1 if pair else 0) < self.last_linear

    def forward(self, mb: int, x):
        saved = []
        for j in range(len(self.mine)):
            p = self.unpack(j, self.shards.full(j))
            if len(p) == 2:
                z = x @ p[0].T + p[1]
                saved.append((x, z))
            else:
                w1, b1, w2, b2 = p
                za = x @ w1.T + b1
                ha = za.clamp(min=0)
                z = ha @ w2.T
                if self.tp > 1:
                    self.comm.allreduce("tp", z)
                z = z + b2
                saved.append((x, za, ha, z))
            x = z.clamp(min=0) if self.relu_after(j, len(p) == 4) else z
        self.saved[mb] = saved
        if self.stash is not None:
            self.stash[mb] = [self.shards.full(j).clone() for j in range(len(self.mine))]
        return x

    def backward(self, mb: int, g, lag: int = 0):
        """The micro-batch's backward, `lag` weight updates after its forward."""
        saved = self.saved.pop(mb)
        stashed = self.stash.pop(mb) if self.stash is not None else None
        for j in reversed(range(len(self.mine))):
            p = self.weights(j, lag, stashed)
            grad = self.unpack(j, self.shards.grads[j])
            s = saved[j]
            z = s[-1] if len(p) == 4 else s[1]
            if self.relu_after(j, len(p) == 4):
                g = g * (z > 0)
            if len(p) == 2:
                x, _ = s
                grad[0] += g.T @ x
                grad[1] += g.sum(0)
                g = g @ p[0]
                continue
            x, za, ha, _ = s
            w1, _, w2, _ = p
            grad[3] += g.sum(0)
            grad[2] += g.T @ ha
            gha = (g @ w2) * (za > 0)
            grad[0] += gha.T @ x
            grad[1] += gha.sum(0)
            g = gha @ w1
            if self.tp > 1:
                self.comm.allreduce("tp", g)
        return g
