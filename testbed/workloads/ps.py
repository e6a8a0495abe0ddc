"""Parameter server over torch.distributed point-to-point.

Ranks 0..S-1 are the servers, one shard each (a contiguous, balanced slice of the flattened
parameters); ranks S..S+n-1 are the workers. Each iteration a worker pushes its (optionally
compressed) gradient slice to every shard and pulls the shard's parameters back; the
servers own the optimiser (SGD with momentum).

Consistency:
- BSP: a server waits for every worker's push of a round, applies their mean once, and
  replies to all.
- SSP (staleness bound s): each push is applied at once (scaled by 1/n); a worker's reply is
  held while it is more than s pushes ahead of the slowest worker (Ho et al. 2013).
- ASP: SSP with no bound.

With `lr_staleness="dynsgd"` (SSP or ASP) a push's weight is cut by how stale it is
(staleness.py: DynSGD's rule); SSP with it is the survey's DynSSP.

The reply carries the shard's version (updates applied) after the parameters, so a worker
knows how stale what it computes on is. Servers log one JSON line per push.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from . import compression
from .staleness import staleness_weight

CONSISTENCY = ("bsp", "ssp", "asp")


def shard_bounds(numel: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous slices of `numel` parameters, sizes differing by at most one."""
    base, extra = divmod(numel, shards)
    bounds, lo = [], 0
    for j in range(shards):
        hi = lo + base + (1 if j < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


@dataclass
class StalenessGate:
    """Which workers may have their reply now: under SSP a worker whose clock (pushes made)
    is more than `bound` ahead of the slowest worker waits. bound None: ASP."""
    workers: list[int]
    bound: int | None
    clock: dict[int, int] = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.clock = {w: 0 for w in self.workers}

    def lead(self, w: int) -> int:
        return self.clock[w] - min(self.clock.values())

    def push(self, w: int) -> None:
        self.clock[w] += 1
        self.waiting.append(w)

    def release(self) -> list[int]:
        """Workers whose reply can go now (removed from the waiting list), in push order."""
        ready = [w for w in self.waiting if self.bound is None or self.lead(w) <= self.bound]
        self.waiting = [w for w in self.waiting if w not in ready]
        return ready


class Server:
    def __init__(self, rank: int, shards: int, workers: int, params: torch.Tensor,
                 consistency: str, staleness: int, lr: float, momentum: float,
                 comp: compression.Compressor, iters: int, log, lr_staleness: str = "none"):
        import torch.distributed as dist
        self.dist = dist
        self.rank = rank
        lo, hi = shard_bounds(params.numel(), shards)[rank]
        self.params = params[lo:hi].clone()
        self.momentum_buf = torch.zeros_like(self.params)
        self.workers = list(range(shards, shards + workers))
        self.consistency = consistency
        bound = {"bsp": 0, "ssp": staleness, "asp": None}[consistency]
        self.gate = StalenessGate(self.workers, bound)
        self.lr, self.momentum = lr, momentum
        self.lr_staleness = lr_staleness
        self.comp = comp
        self.template = comp.compress(torch.zeros(hi - lo), "template")
        comp.residuals.clear()
        self.iters = iters
        self.version = 0
        self.sent_version = {w: 0 for w in self.workers}
        self.pending_sends: list = []
        self.log = log

    def _apply(self, grad: torch.Tensor, scale: float) -> None:
        self.momentum_buf.mul_(self.momentum).add_(grad, alpha=scale)
        self.params.add_(self.momentum_buf, alpha=-self.lr)
        self.version += 1

    def _reply(self, w: int) -> None:
        msg = torch.cat([self.params, torch.tensor([float(self.version)])])
        self.sent_version[w] = self.version
        self.pending_sends.append(self.dist.isend(msg, dst=w))
        self.pending_sends = [s for s in self.pending_sends if not s.is_completed()]

    def _receiver(self, w: int, size: int, arrivals: queue.Queue) -> None:
        """One per worker: keeps a receive posted for that worker's next push."""
        try:
            for _ in range(self.iters):
                buf = torch.empty(size, dtype=torch.uint8)
                self.dist.irecv(buf, src=w).wait()
                arrivals.put((w, buf))
        except Exception as exc:  # a dead worker or a timeout: the main loop raises it
            arrivals.put((w, exc))

    def serve(self) -> None:
        """A receive is posted for every worker at once (one receiving thread each), so that
        pushes arrive together as they do at a real parameter server: the incast at its
        port. Gloo's any-source receive would not do: a sender transmits only once a
        matching receive is posted, so it would pull the pushes in one at a time, and a
        receive's completion is only seen by waiting on it."""
        n = len(self.workers)
        size = self.template.nbytes
        arrivals: queue.Queue = queue.Queue()
        for w in self.workers:
            threading.Thread(target=self._receiver, args=(w, size, arrivals), daemon=True,
                             name=f"push-from-{w}").start()
        round_sum, round_count = torch.zeros_like(self.params), 0
        weight = 1.0
        for push in range(n * self.iters):
            t0 = time.perf_counter()
            w, msg = arrivals.get()
            if isinstance(msg, Exception):
                raise msg
            t1 = time.perf_counter()
            grad = self.comp.decompress(compression.from_bytes(msg, self.template))
            staleness = self.version - self.sent_version[w]
            self.gate.push(w)
            lead = self.gate.lead(w)
            if self.consistency == "bsp":
                round_sum.add_(grad)
                round_count += 1
                if round_count == n:
                    self._apply(round_sum, 1.0 / n)
                    round_sum.zero_()
                    round_count = 0
            else:
                weight = (staleness_weight(staleness, n) if self.lr_staleness == "dynsgd"
                          else 1.0)
                self._apply(grad, weight / n)
            released = self.gate.release() if self.consistency != "bsp" or round_count == 0 \
                else []
            reply_leads = {}
            for r in released:
                reply_leads[r] = self.gate.lead(r)  # what the staleness bound limits
                self._reply(r)
            self.log({"role": "server", "shard": self.rank, "push": push, "worker": w,
                      "clock": self.gate.clock[w], "lead_at_push": lead, "staleness": staleness,
                      "weight": weight,
                      "version": self.version, "wait_s": t1 - t0, "bytes": size,
                      "replied": reply_leads})
        for s in self.pending_sends:
            s.wait()


class Client:
    """A worker's side: push the gradient's slices, pull the shards' parameters."""

    def __init__(self, shards: int, numel: int, comp: compression.Compressor):
        import torch.distributed as dist
        self.dist = dist
        self.bounds = shard_bounds(numel, shards)
        self.comp = comp
        self.versions = [0] * shards

    def exchange(self, grad: torch.Tensor, params: torch.Tensor) -> int:
        """Push `grad`, write the pulled parameters into `params`; returns bytes pushed."""
        works, inbox, outbox = [], [], []
        for j, (lo, hi) in enumerate(self.bounds):
            outbox.append(compression.to_bytes(self.comp.compress(grad[lo:hi], f"shard{j}")))
            works.append(self.dist.isend(outbox[-1], dst=j))
        pushed = sum(m.numel() for m in outbox)
        for j, (lo, hi) in enumerate(self.bounds):
            inbox.append(torch.empty(hi - lo + 1))
            works.append(self.dist.irecv(inbox[-1], src=j))
        for wk in works:
            wk.wait()
        for j, (lo, hi) in enumerate(self.bounds):
            params[lo:hi] = inbox[j][:-1]
            self.versions[j] = int(inbox[j][-1].item())
        return pushed


def jsonl_logger(path):
    fh = open(path, "w", buffering=1)

    def log(row: dict) -> None:
        fh.write(json.dumps(row) + "\n")
    log.close = fh.close
    return log
