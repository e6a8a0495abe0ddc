"""A stage's parameters, one flat vector per layer, and their data-parallel
synchronisation: an allreduce of the gradients, or under ZeRO a reduce-scatter and the
all-gathers of the updated shards (ZeRO-1/2) or of each layer's parameters before it runs
(ZeRO-3); the optimizer step on what the rank holds. Both kinds of stage keep theirs here.
"""
from __future__ import annotations

from .comm import Comm


class Shards:
    """A stage's parameters as one flat vector per layer (its TP slice), optionally sharded
    over the data-parallel group (ZeRO): `full(i)` gathers layer i's, `params[i]` is what the
    rank keeps."""

    def __init__(self, torch, flats: list, comm: Comm, zero: int, kind: str = "dp"):
        self.torch, self.comm, self.zero, self.kind = torch, comm, zero, kind
        self.n = len(comm.groups[kind][1]) if comm.has(kind) else 1
        self.idx = comm.groups[kind][1].index(comm.rank) if comm.has(kind) else 0
        self.sizes = [f.numel() for f in flats]
        self.padded = [-(-s // self.n) * self.n for s in self.sizes]
        self.params = []
        for f, p in zip(flats, self.padded):
            full = torch.cat([f, f.new_zeros(p - f.numel())])
            self.params.append(full.view(self.n, -1)[self.idx].clone() if zero == 3 else full)
        self.grads = [torch.zeros(p, dtype=flats[0].dtype) for p in self.padded]
        self.momentum: list = [None] * len(flats)

    def full(self, i: int):
        if self.zero != 3 or self.n == 1:
            return self.params[i][:self.sizes[i]]
        out = self.torch.empty(self.padded[i], dtype=self.params[i].dtype)
        self.comm.all_gather(self.kind, out, self.params[i])
        return out[:self.sizes[i]]

    def synchronise(self) -> list:
        """Average the gradients over the group; returns the gradient of what this rank
        updates (the whole vector, or its shard under ZeRO)."""
        out = []
        for g in self.grads:
            if self.n == 1:
                out.append(g)
            elif self.zero == 0:
                self.comm.allreduce(self.kind, g, account="dp")
                out.append(g.div_(self.n))
            else:
                out.append(self.comm.reduce_scatter(self.kind, g).div_(self.n))
        return out

    def step(self, grads: list, lr: float, momentum: float) -> None:
        """SGD with momentum (torch.optim.SGD's rule) on what this rank holds; ZeRO-1/2
        all-gather the updated shards back into the full vectors."""
        for i, g in enumerate(grads):
            p = self.params[i]
            target = p if (self.zero in (0, 3) or self.n == 1) else \
                p.view(self.n, -1)[self.idx]
            if not lr:  # emulated compute: the exchange without the arithmetic
                if self.zero in (1, 2) and self.n > 1:
                    self.comm.all_gather(self.kind, p, target.clone())
                self.grads[i].zero_()
                continue
            if momentum:
                buf = self.momentum[i]
                self.momentum[i] = g.clone() if buf is None else buf.mul_(momentum).add_(g)
                g = self.momentum[i]
            target.sub_(lr * g)
            if self.zero in (1, 2) and self.n > 1:
                out = self.torch.empty_like(p)
                self.comm.all_gather(self.kind, out, target.clone())
                p.copy_(out)
            self.grads[i].zero_()
