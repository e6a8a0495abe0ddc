"""One rank of a parallel training job:

    python -m testbed.workloads.parallel.worker --rank R --world-size W --master IP:PORT \\
        --config job.json --out DIR [--ifname h1-eth0]

The layout (`job.JobConfig.layout`) splits the world into tensor-, pipeline-, data- and
expert-parallel groups, each its own Gloo process group whose TCP connections carry the
DSCP of its collective type, so that switches can tell them apart and the worker can count
each type's bytes from its own sockets (TCP_INFO). An iteration runs the pipeline schedule
(GPipe or 1F1B) over the micro-batches; inside each layer the tensor-parallel allreduces,
the expert all-to-alls and (ZeRO-3) the parameter all-gathers; after the last micro-batch
the data-parallel synchronisation (allreduce, or reduce-scatter and all-gather).

Compute is real (the MLP on the digits data, its weights sliced as Megatron-LM slices them,
forward and backward written out so that every collective sits where Megatron puts it) or
emulated (a wait as long as the layer's FLOPs take on the stated device, or its profiled
time; the tensors exchanged are the real sizes times the scale).

Gloo's reduce_scatter is an allreduce followed by a slice (measured: a rank sends 2(n-1)/n
of the tensor, not (n-1)/n), so the reduce-scatter here is a ring over send/recv.

Writes `rank<R>.jsonl` (one line per iteration), `rank<R>.trace.json` (Chrome trace: compute,
each collective, pipeline waits), `rank<R>.summary.json`, and `rank<R>.error` on failure.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

from testbed.config.loader import load_json
from testbed.config.units import ETHERNET_HEADER_BYTES, IP_TCP_HEADER_BYTES
from testbed.workloads.model.jobsync import Gate, Reporter, before_iteration
from testbed.workloads.model.parallel.cost import KINDS
from testbed.workloads.model.parallel.desc import LayerWork, stage_layers
from testbed.workloads.model.parallel.job import JobConfig
from testbed.workloads.model.parallel.schedule import actions

from ..sockets import mark_sockets, socket_fds, tcp_sent
from ..train import Timeline, counters, exit_now, report_failure, union_s

TCP_HEADERS = ETHERNET_HEADER_BYTES + IP_TCP_HEADER_BYTES  # per segment sent
IN_FLIGHT: list[str] = []  # what a failed rank was waiting for, for its error file
TID = {"compute": 0, "tp": 1, "pp": 2, "dp": 3, "ep": 4, "fsdp": 5, "wait": 6}


class Comm:
    """The rank's process groups, each collective timed (a trace span) and its sockets'
    bytes counted per collective type."""

    def __init__(self, cfg: JobConfig, rank: int, timeline: Timeline):
        import torch.distributed as dist
        self.dist, self.rank, self.timeline = dist, rank, timeline
        self.layout = cfg.layout
        self.groups: dict[str, tuple[object, list[int]]] = {}
        self.fds: dict[str, set[int]] = {k: set() for k in KINDS}
        self.spans: list[tuple[float, float, str]] = []
        self.marked: dict[str, int] = {}
        self.in_flight = ""  # the blocking operation under way, named in a timeout's error
        plan = {"tp": "tp", "pp": "pp", "dp": "dp", "ep": "ep", "edp": "dp"}
        if cfg.zero:
            plan.update(dp="fsdp", edp="fsdp")
        for kind, account in plan.items():
            for ranks in cfg.layout.groups(kind):
                if len(ranks) < 2:
                    continue
                before = socket_fds()
                pg = dist.new_group(ranks, backend="gloo",
                                    timeout=timedelta(seconds=cfg.timeout_s))
                if rank in ranks:
                    dist.barrier(group=pg)  # its connections are up
                    fds = socket_fds() - before
                    self.fds[account] |= fds
                    self.groups[kind] = (pg, ranks)
                    dscp = cfg.dscp.get(account, 0)
                    self.marked[account] = self.marked.get(account, 0) + (
                        mark_sockets(fds, dscp) if dscp else 0)

    def has(self, kind: str) -> bool:
        return kind in self.groups

    def sent(self) -> dict[str, tuple[int, int]]:
        return {k: tcp_sent(self.fds[k]) for k in KINDS}

    def _span(self, account: str, name: str, start: float, nbytes: int) -> None:
        self.in_flight = ""
        end = time.perf_counter()
        self.spans.append((start, end, account))
        self.timeline.span(name, account, start, end, tid=TID[account], bytes=nbytes)

    def _enter(self, what: str, kind: str) -> None:
        self.in_flight = f"{what} with ranks {self.groups[kind][1]}"

    def allreduce(self, kind: str, t, account: str | None = None) -> None:
        pg, _ = self.groups[kind]
        self._enter(f"{kind} allreduce", kind)
        start = time.perf_counter()
        self.dist.all_reduce(t, group=pg)
        self._span(account or kind, f"{kind} allreduce", start, t.numel() * t.element_size())

    def all_gather(self, kind: str, out, shard) -> None:
        """Ring all-gather of every rank's `shard` into `out` (rank order): n-1 steps, each
        passing on the shard received in the step before, every receive posted first (see
        `reduce_scatter`; Gloo's own all-gather took 233 ms where this ring takes the
        model's 180-190 at 10 Mb/s, the same bytes)."""
        pg, ranks = self.groups[kind]
        self._enter(f"{kind} all-gather", kind)
        start = time.perf_counter()
        n, i = len(ranks), ranks.index(self.rank)
        parts = out.view(n, -1)
        parts[i].copy_(shard)
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        recvs = [self.dist.irecv(parts[(i - k - 1) % n], prv, group=pg, tag=k)
                 for k in range(n - 1)]
        sends = []
        for k in range(n - 1):
            sends.append(self.dist.isend(parts[(i - k) % n], nxt, group=pg, tag=k))
            recvs[k].wait()
        for send in sends:
            send.wait()
        self._span("fsdp", f"{kind} all-gather", start, out.numel() * out.element_size())

    def all_to_all(self, t, out) -> None:
        """Slice j of `t` to member j, slice j of `out` from member j: every receive posted,
        then every send, all pairs at once (as NCCL runs it). Gloo's `all_to_all_single`
        sends the same bytes but took 1.4x this model's time on 8 ranks across a Fat-Tree."""
        pg, ranks = self.groups["ep"]
        self._enter("ep all-to-all", "ep")
        start = time.perf_counter()
        n, i = len(ranks), ranks.index(self.rank)
        src, dst = t.view(n, -1), out.view(n, -1)
        dst[i].copy_(src[i])
        recvs = [self.dist.irecv(dst[j], ranks[j], group=pg) for j in range(n) if j != i]
        sends = [self.dist.isend(src[j], ranks[j], group=pg) for j in range(n) if j != i]
        for work in recvs + sends:
            work.wait()
        self._span("ep", "ep all-to-all", start, t.numel() * t.element_size())

    def reduce_scatter(self, kind: str, flat):
        """Ring reduce-scatter of `flat` (its length a multiple of the group size): returns
        this rank's chunk, summed over the group. n-1 steps, each sending one chunk to the
        next rank while receiving one from the previous. Every step's receive is posted
        first: a Gloo send starts only once its receive is posted, and with one receive
        posted per step the ranks' steps lagged each other and every step took two chunk
        times (measured: 115 ms instead of 60 at 10 Mb/s)."""
        pg, ranks = self.groups[kind]
        self._enter(f"{kind} reduce-scatter", kind)
        n, i = len(ranks), ranks.index(self.rank)
        chunks = flat.view(n, -1).clone()
        start = time.perf_counter()
        nxt, prv = ranks[(i + 1) % n], ranks[(i - 1) % n]
        bufs = [chunks[0].clone() for _ in range(n - 1)]
        recvs = [self.dist.irecv(bufs[k], prv, group=pg, tag=k) for k in range(n - 1)]
        sends = []
        for k in range(n - 1):
            sends.append(self.dist.isend(chunks[(i - k - 1) % n].contiguous(), nxt, group=pg,
                                         tag=k))
            recvs[k].wait()
            chunks[(i - k - 2) % n] += bufs[k]
        for send in sends:
            send.wait()
        self._span("fsdp", f"{kind} reduce-scatter", start, flat.numel() * flat.element_size())
        return chunks[i]

    def send(self, t, stage: int, tag: int):
        pg, ranks = self.groups["pp"]
        start = time.perf_counter()
        work = self.dist.isend(t, ranks[stage], group=pg, tag=tag)
        self.timeline.span("pp send", "pp", start, time.perf_counter(), tid=TID["pp"],
                           bytes=t.numel() * t.element_size())
        return work

    def irecv(self, t, stage: int, tag: int):
        """Posts a receive from a neighbour stage (posted early, as Megatron-LM does, so that
        the transfer overlaps this stage's compute: Gloo sends only once the receive is
        posted)."""
        pg, ranks = self.groups["pp"]
        return self.dist.irecv(t, ranks[stage], group=pg, tag=tag), t, ranks[stage]

    def wait(self, posted) -> float:
        """Blocks until a posted receive has its tensor; returns the seconds waited."""
        work, t, src = posted
        self.in_flight = f"pp recv with ranks [{src}]"
        start = time.perf_counter()
        work.wait()
        self.in_flight = ""
        end = time.perf_counter()
        self.spans.append((start, end, "pp"))
        self.timeline.span("pp recv (wait)", "wait", start, end, tid=TID["wait"],
                           bytes=t.numel() * t.element_size())
        return end - start


# ---- the layers of one stage ---------------------------------------------------------------

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

    def slice_unit(self, unit) -> list:
        if len(unit) == 1:
            return [unit[0].weight, unit[0].bias]
        a, b = unit
        k = a.out_features // self.tp
        lo, hi = self.tpi * k, (self.tpi + 1) * k
        return [a.weight[lo:hi], a.bias[lo:hi], b.weight[:, lo:hi], b.bias]

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
        return x

    def backward(self, mb: int, g):
        saved = self.saved.pop(mb)
        for j in reversed(range(len(self.mine))):
            p = self.unpack(j, self.shards.full(j))
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

    def backward(self, mb: int, g):
        for j in reversed(range(len(self.work))):
            self.layer(j, backward=True)
        return self.act


# ---- the iteration -------------------------------------------------------------------------

class Runner:
    def __init__(self, cfg: JobConfig, rank: int, out: Path, ifname: str | None):
        import torch
        self.torch, self.cfg, self.rank, self.out, self.ifname = torch, cfg, rank, out, ifname
        lay = cfg.layout
        self.dpi, self.stage, _ = lay.coords(rank)
        self.timeline = Timeline(rank)
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
        self.grad_out: dict = {}

    def boundary_shape(self, stage: int) -> tuple:
        """The activation leaving `stage` (the input of stage + 1)."""
        if self.real:
            return (self.mb_size, self.cfg.real.width)
        plan = self.cfg.plan()
        return (plan.stage_work(stage)[-1].act_elems,)

    def iteration(self, it: int) -> dict:
        torch, cfg, lay = self.torch, self.cfg, self.cfg.layout
        if it == cfg.crash_iter and self.rank == cfg.crash_rank:
            raise RuntimeError(f"injected fault at iteration {it}")
        if it == cfg.crash_iter and self.rank == cfg.hang_rank:
            time.sleep(10 * cfg.timeout_s)
        last = lay.pp - 1
        dtype = torch.float32 if self.real else self.model.dtype
        if self.real:
            idx = torch.randint(0, self.xtr.shape[0], (cfg.real.batch,), generator=self.gen)
            xs = self.xtr[idx].split(self.mb_size)
            ys = self.ytr[idx].split(self.mb_size)
        losses, sends, waited = [], [], 0.0
        self.comm.spans.clear()
        t0 = time.perf_counter()
        compute = 0.0
        m = cfg.micro_batches
        acts = {mb: self.comm.irecv(torch.empty(self.boundary_shape(self.stage - 1),
                                                dtype=dtype), self.stage - 1, 2 * mb)
                for mb in range(m)} if self.stage > 0 else {}
        grads = {mb: self.comm.irecv(torch.empty(self.boundary_shape(self.stage),
                                                 dtype=dtype), self.stage + 1, 2 * mb + 1)
                 for mb in range(m)} if self.stage < last else {}
        for kind, mb in actions(cfg.schedule, self.stage, lay.pp, m):
            if kind == "F":
                if self.stage > 0:
                    waited += self.comm.wait(acts[mb])
                    x = acts.pop(mb)[1]
                else:
                    x = xs[mb].reshape(len(xs[mb]), -1) if self.real else None
                c0 = time.perf_counter()
                y = self.model.forward(mb, x)
                compute += time.perf_counter() - c0
                if self.stage < last:
                    sends.append(self.comm.send(y.contiguous(), self.stage + 1, tag=2 * mb))
                elif self.real:
                    losses.append(self.loss(mb, y, ys[mb]))
            else:
                if self.stage < last:
                    waited += self.comm.wait(grads[mb])
                    g = grads.pop(mb)[1]
                else:
                    g = self.grad_out.pop(mb) if self.real else None
                c0 = time.perf_counter()
                gx = self.model.backward(mb, g)
                compute += time.perf_counter() - c0
                if self.stage > 0:
                    sends.append(self.comm.send(gx.contiguous(), self.stage - 1,
                                                tag=2 * mb + 1))
        for w in sends:
            w.wait()
        t_pipe = time.perf_counter()
        self.reporter.set_phase("sync")
        self.sync()
        t1 = time.perf_counter()
        self.timeline.span(f"iteration {it}", "iteration", t0, t1, tid=7)
        # the bubble: the share of the pipeline phase this rank spent outside its layers
        # (waiting for a neighbour, or for its own sends)
        # perf_counter is the machine's monotonic clock, the same in every namespace: the
        # analysis lines up the ranks of a group with these
        row = {"iteration": it, "iter_s": t1 - t0, "pipeline_s": t_pipe - t0,
               "sync_s": t1 - t_pipe, "pp_wait_s": waited,
               "t_start": t0, "t_sync_start": t_pipe, "t_sync_end": t1,
               "bubble": 1 - compute / (t_pipe - t0) if t_pipe > t0 else 0.0}
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
        cfg = self.cfg
        lr, mom = (cfg.real.lr, cfg.real.momentum) if self.real else (0.0, 0.0)
        groups = [self.model.shards]
        if not self.real and self.model.experts is not None:
            groups.append(self.model.experts)
        for shards in groups:
            grads = shards.synchronise()
            shards.step(grads, lr, mom)

    def close(self) -> None:
        import resource
        self.logfh.close()
        self.timeline.write(self.out / f"rank{self.rank}.trace.json")
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        (self.out / f"rank{self.rank}.summary.json").write_text(json.dumps(
            {"rank": self.rank, "peak_rss_mb": round(peak_mb, 1),
             "sockets_marked": self.comm.marked,
             "groups": {k: r for k, (_, r) in self.comm.groups.items()}}))

    def run(self) -> None:
        # one snapshot closes an iteration and opens the next: a byte whose ACK comes after
        # the collective returned (the tail of a send) counts in the next iteration instead
        # of falling between two (it did: a DP allreduce measured 0.87-0.89 of its volume)
        self.sent_mark = self.comm.sent()
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
        sent1 = self.sent_mark = self.comm.sent()
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
            row[f"{k}_wire_bytes"] = payload + (sent1[k][1] - sent0[k][1]) * TCP_HEADERS
        if self.real:  # the layers' time without their tensor-parallel allreduces
            row["compute_s"] = max(0.0, row["compute_loop_s"] - row["tp_s"])
        self.logfh.write(json.dumps(row) + "\n")

    def compute_spans_now(self) -> float:
        if self.real:
            return 0.0
        return sum(e - s for s, e in self.model.compute_spans)


def run(cfg: JobConfig, rank: int, world: int, master: str, out: Path,
        ifname: str | None) -> None:
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if world != cfg.layout.world:
        raise ValueError(f"world size {world} is not dp*tp*pp = {cfg.layout.world}")
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=cfg.timeout_s))
    r = Runner(cfg, rank, out, ifname)
    IN_FLIGHT[:] = [""]
    try:
        r.run()
    except Exception:
        IN_FLIGHT[:] = [r.comm.in_flight]
        raise
    finally:
        r.close()
    dist.barrier()
    dist.destroy_process_group()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="parallel-worker")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master", required=True, help="IP:PORT of rank 0's rendezvous")
    ap.add_argument("--config", required=True, help="the job's JSON (job.JobConfig)")
    ap.add_argument("--ifname", default=None, help="the host's interface (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--out", required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        cfg = load_json(JobConfig, args.config)
        run(cfg, args.rank, args.world_size, args.master, out, args.ifname)
        return 0
    except Exception as exc:
        where = f" (during {IN_FLIGHT[0]})" if IN_FLIGHT and IN_FLIGHT[0] else ""
        return report_failure(out, args.rank, exc, where)


if __name__ == "__main__":
    exit_now(main())


def local_job(cfg: JobConfig, out: Path, timeout_s: float = 300.0) -> dict[int, list[dict]]:
    """Every rank of a job as a process on loopback (development and unit tests, no root);
    returns each rank's iteration rows. Raises with the first failed rank's error."""
    import subprocess

    from testbed.config.loader import dump_json

    from ..launch import REPO_ROOT, free_port, parallel_argv
    out.mkdir(parents=True, exist_ok=True)
    dump_json(cfg, out / "job.json")
    port = free_port()
    world = cfg.layout.world
    procs = [subprocess.Popen(
        parallel_argv(r, world, f"127.0.0.1:{port}", out, "lo"), cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for r in range(world)]
    deadline = time.time() + timeout_s
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.time() > deadline:
                break
            time.sleep(0.1)
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed or any(p.poll() is None for p in procs):
            r = failed[0] if failed else -1
            err = out / f"rank{r}.error"
            why = err.read_text().strip() if r >= 0 and err.exists() else "timed out"
            raise RuntimeError(f"rank {r} failed: {why}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return {r: [json.loads(line) for line in (out / f"rank{r}.jsonl").read_text().splitlines()]
            for r in range(world)}
