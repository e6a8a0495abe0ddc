"""One training process per emulated host:

    python -m testbed.workloads.train --rank R --world-size W --master IP:PORT \\
        --sync ring|ps|local --model mlp --width 256 --iters 20 --out DIR [--ifname h1-eth0]

Synchronisation (`--sync`):
- ring: data parallel, Gloo ring allreduce through DistributedDataParallel (tensor fusion by
  `--bucket-mb`); with `--compression`, what crosses the wire is compressed (fp16 is
  allreduced, sparse and quantised formats are allgathered); with `--priority p3`, layer-wise
  allreduce on one process group per priority level, each with its DSCP (layerwise.py).
- ps: parameter server with `--ps-shards` servers (ranks 0..S-1), BSP / SSP / ASP (ps.py).
- local: local SGD, parameters averaged every `--local-steps` steps.

`--optimizer lars|lamb` (ring and local) takes the layer-wise trust ratios of large-batch
training, and `--lr-scale` with `--warmup-iters` the linear scaling rule with gradual
warm-up (largebatch.py, optimizers.py).

One thread, a bounded timeout so that a broken network fails the run with a clear message.
Writes, per rank, `rank<R>.jsonl` (one line per iteration: compute and communication time,
bytes on the wire of the host's interface, loss, accuracy when evaluated; servers log one
line per push) and `rank<R>.trace.json`, a Chrome trace of compute and communication spans
that opens in Perfetto / chrome://tracing. On failure, `rank<R>.error` says why.

Every TCP connection of the job's process group is marked with `--job-dscp` (when jobs share
a fabric, each job's own code point: the switches count it per port) and the payload the
iteration wrote to them (acknowledged or still queued) is its `sent_bytes`; `cwnd_segs` and
`ssthresh_segs` are the congestion window and slow-start threshold of its busiest
connection when the iteration starts. With `--gate-file`, `--report-file` and
`--start-file` a worker takes part in jobs sharing a
fabric (jobsync.py): it waits for the runner's common start and a policy's gate before its
iterations, and the first worker reports its progress. Rows carry the iteration's start,
the start of its synchronisation and its end on the machine's monotonic clock (`t_start`,
`t_sync_start`, `t_sync_end`).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

from testbed.workloads.model.jobsync import Gate, Reporter, before_iteration

from .commsched import PRIORITIES
from .fusion import MODES as FUSIONS
from .largebatch import OPTIMIZERS, learning_rate
from .rank import Timeline, counters, exit_now, run_rank, union_s
from .sockets import mark_sockets, socket_fds, tcp_sent, tcp_window, tcp_written
from .staleness import LR_STALENESS

SYNCS = ("ring", "ps", "local")
FIT_SIZES = (1_024, 16_384, 65_536)  # floats per timed allreduce of a layer-wise job's fit


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="train")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master", required=True, help="IP:PORT of rank 0's rendezvous")
    ap.add_argument("--sync", choices=SYNCS, default="ring")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--data", default="digits")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                    help="ring (without --priority) and local only; a server applies SGD")
    ap.add_argument("--lr-scale", type=float, default=1.0,
                    help="the linear scaling rule's k: the rate is --lr x k after warm-up")
    ap.add_argument("--warmup-iters", type=int, default=0,
                    help="gradual warm-up from --lr to --lr x --lr-scale over these")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="default: the optimizer's paper's (SGD: none)")
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--fusion", choices=("ddp",) + FUSIONS, default="ddp",
                    help="ring: DDP's buckets (--bucket-mb), or the messages of fusionsync.py")
    ap.add_argument("--fusion-threshold-mb", type=float, default=128.0,
                    help="--fusion horovod: the fusion buffer (HOROVOD_FUSION_THRESHOLD)")
    ap.add_argument("--cycle-ms", type=float, default=1.0,
                    help="--fusion horovod: the cycle time (HOROVOD_CYCLE_TIME)")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--topk-ratio", type=float, default=0.01)
    ap.add_argument("--qsgd-levels", type=int, default=16)
    ap.add_argument("--terngrad-clip", type=float, default=2.5)
    ap.add_argument("--priority", choices=PRIORITIES, default="none",
                    help="ring only: layer-wise allreduce, fifo (one level), p3 (levels), or "
                    "tictac / bytescheduler (scheduled in best effort: commsched.py)")
    ap.add_argument("--partition-bytes", type=int, default=0,
                    help="bytescheduler: the largest piece of a gradient (0: whole)")
    ap.add_argument("--credit-bytes", type=int, default=0,
                    help="bytescheduler: the bytes in flight (one piece at least)")
    ap.add_argument("--forward-ms", type=float, default=0.0,
                    help="layer-wise: emulated forward compute per iteration over the layers "
                    "by their multiply-accumulates, backward twice as long")
    ap.add_argument("--dscp", default="0",
                    help="comma-separated DSCP per priority level, highest first (tictac, "
                    "bytescheduler: the negotiation's, then the gradients')")
    ap.add_argument("--ps-shards", type=int, default=1)
    ap.add_argument("--consistency", default="bsp", choices=("bsp", "ssp", "asp"))
    ap.add_argument("--staleness", type=int, default=2)
    ap.add_argument("--lr-staleness", default="none", choices=LR_STALENESS,
                    help="ps, ssp or asp: a push's weight cut by its staleness (ps.py)")
    ap.add_argument("--local-steps", type=int, default=4)
    ap.add_argument("--compute-delay-ms", type=float, default=0.0,
                    help="extra compute time per iteration, between forward and backward "
                    "(a compute straggler; emulated compute)")
    ap.add_argument("--crash-at-iter", type=int, default=-1,
                    help="fault injection: raise at the start of this iteration")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--ifname", default=None, help="the host's interface (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--job-dscp", type=int, default=0,
                    help="DSCP of every connection of the job's process group")
    ap.add_argument("--gate-file", default="", help="jobs sharing a fabric: a policy's gate")
    ap.add_argument("--report-file", default="",
                    help="jobs sharing a fabric: where the first worker reports its progress")
    ap.add_argument("--start-file", default="",
                    help="jobs sharing a fabric: the runner's start of iteration 0")
    ap.add_argument("--out", required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return run_rank(args.out, args.rank, lambda out: run(args, out))


class Worker:
    """What every synchronisation mode shares: model, data, log, timeline, counters."""

    def __init__(self, args, out: Path, fds: set[int]):
        import torch

        from . import compression, models
        self.torch, self.models = torch, models
        self.args, self.out = args, out
        torch.manual_seed(args.seed)  # every rank builds the same initial model
        self.model = models.build(args.model, args.width, args.depth)
        self.grad_bytes = models.param_bytes(self.model)
        self.xtr, self.ytr, self.xte, self.yte = models.dataset(args.data, args.model,
                                                                seed=args.seed)
        # data and compression randomness follow the worker's index, not its rank, so that
        # the i-th worker sees the same batches whatever the architecture (servers first)
        self.index = args.rank - (args.ps_shards if args.sync == "ps" else 0)
        self.comp = compression.make(args.compression, ratio=args.topk_ratio,
                                     levels=args.qsgd_levels, clip=args.terngrad_clip,
                                     seed=args.seed * 1000 + self.index)
        self.gen = torch.Generator().manual_seed(args.seed * 1000 + self.index)
        self.timeline = Timeline(args.rank)
        self.logfh = (out / f"rank{args.rank}.jsonl").open("w", buffering=1)
        # the job's connections: marked, and their bytes counted; one snapshot closes an
        # iteration and opens the next, so no byte falls between two, and a snapshot counts
        # what the iteration wrote (acknowledged or still queued), so none falls into the next
        self.fds = fds
        self.sent_mark = tcp_written(fds)[0]
        self.window: tuple[int, int | None] = (0, None)
        self.gate = Gate(args.gate_file)
        self.reporter = Reporter(args.report_file if self.index == 0 else "",
                                 lambda: tcp_sent(fds)[0])

    def before(self, it: int) -> float:
        """Before iteration `it`: the gate and the common start (jobs sharing a fabric);
        returns the seconds waited."""
        if it == 0:
            self.reporter.start()
        waited = before_iteration(self.gate, self.reporter, it, self.args.start_file,
                                  self.args.timeout_s)
        # the window the iteration's first send starts from (Linux restarts an idle
        # connection's window, not its threshold: a mark in one iteration slows the next)
        self.window = tcp_window(self.fds)
        return waited

    def optimizer(self, params):
        """The job's optimizer (optimizers.py) at its first iteration's rate."""
        from . import optimizers
        return optimizers.build(self.args.optimizer, params, self.lr(0), self.args.momentum,
                                self.args.weight_decay)

    def lr(self, it: int) -> float:
        """Iteration `it`'s learning rate (the linear scaling rule's warm-up)."""
        a = self.args
        return learning_rate(it, a.lr, a.lr_scale, a.warmup_iters)

    def begin_iteration(self, it: int, opt) -> tuple[float, float, tuple]:
        """Iteration `it` of a job that steps its own optimizer: the gate and common start
        (`before`), its rate set on `opt`, and the interface counters it starts from;
        returns (seconds waited, rate, counters)."""
        from .optimizers import set_lr
        waited = self.before(it)
        set_lr(opt, lr := self.lr(it))
        return waited, lr, counters(self.args.ifname)

    def syncing(self) -> None:
        self.reporter.set_phase("sync")

    def sent(self) -> int:
        now = tcp_written(self.fds)[0]
        sent, self.sent_mark = now - self.sent_mark, now
        return sent

    def batch(self):
        idx = self.torch.randint(0, self.xtr.shape[0], (self.args.batch,), generator=self.gen)
        return self.xtr[idx], self.ytr[idx]

    def forward_backward(self, module, it: int, before_backward=None):
        """Loss and accuracy of one batch, gradients in .grad; returns (loss, acc).
        `before_backward()` is called between the two."""
        if it == self.args.crash_at_iter:
            raise RuntimeError(f"injected fault at iteration {it} (--crash-at-iter)")
        x, y = self.batch()
        loss, correct, total = self.models.loss_and_correct(module, self.args.model, x, y)
        if self.args.compute_delay_ms:  # before backward, whose gradients start the sync
            time.sleep(self.args.compute_delay_ms / 1000)
        if before_backward is not None:
            before_backward()
        loss.backward()
        return loss.item(), correct / total

    def evaluate(self, row: dict, it: int) -> None:
        if self.args.eval_every and (it + 1) % self.args.eval_every == 0:
            with self.torch.no_grad():
                _, c, n = self.models.loss_and_correct(self.model, self.args.model,
                                                       self.xte, self.yte)
            row["test_acc"] = c / n

    def write(self, row: dict) -> None:
        self.logfh.write(json.dumps(row) + "\n")

    def close(self) -> None:
        import resource
        self.reporter.stop()
        self.logfh.close()
        self.timeline.write(self.out / f"rank{self.args.rank}.trace.json")
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        (self.out / f"rank{self.args.rank}.summary.json").write_text(json.dumps(
            {"rank": self.args.rank, "peak_rss_mb": round(peak_mb, 1)}))


def run(args, out: Path) -> None:
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    before = socket_fds()
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank,
                            world_size=args.world_size, timeout=timedelta(seconds=args.timeout_s))
    dist.barrier()  # the group's connections are up
    fds = socket_fds() - before
    if args.job_dscp:
        mark_sockets(fds, args.job_dscp)
    if args.optimizer != "sgd" and (args.sync == "ps" or args.priority != "none"):
        raise ValueError(f"--optimizer {args.optimizer}: for --sync ring without --priority, "
                         "or local (a server and layer-wise priority apply plain SGD)")
    w = Worker(args, out, fds)
    try:
        {"ring": run_ring, "ps": run_ps, "local": run_local}[args.sync](w)
    finally:
        w.close()
    dist.barrier()
    dist.destroy_process_group()


def _row(w: Worker, it: int, t0: float, t1: float, comm_spans, exposed: float, base,
         loss: float, acc: float, gate_wait: float = 0.0, **extra) -> dict:
    """An iteration's row; its synchronisation starts with its first communication (none:
    the iteration has no synchronisation phase, which starts and ends at its end)."""
    (rx0, tx0, run0, wait0), (rx1, tx1, run1, wait1) = base, counters(w.args.ifname)
    row = {"iteration": it, "t_end": time.time(), "iter_s": t1 - t0,
           "compute_s": max(0.0, (t1 - t0) - exposed),
           "comm_s": union_s(comm_spans), "comm_exposed_s": max(0.0, exposed),
           "messages": len(comm_spans), "grad_bytes": w.grad_bytes,
           "tx_bytes": tx1 - tx0, "rx_bytes": rx1 - rx0, "cpu_wait_s": wait1 - wait0,
           "cpu_s": run1 - run0,
           "sent_bytes": w.sent(), "t_start": t0, "cwnd_segs": w.window[0],
           "ssthresh_segs": w.window[1],
           "t_sync_start": min((s for s, *_ in comm_spans), default=t1), "t_sync_end": t1,
           "gate_wait_s": gate_wait, "loss": loss, "train_acc": acc,
           **extra}
    w.evaluate(row, it)
    return row


def run_ring(w: Worker) -> None:
    args = w.args
    if args.priority != "none":
        return run_layerwise(w)
    if args.fusion != "ddp":
        return run_fusion(w)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from . import compression
    ddp = DDP(w.model, bucket_cap_mb=args.bucket_mb)
    comm: list[tuple[float, float, int]] = []
    wire: list[int] = []
    world = args.world_size

    def timed(start, nbytes, value):
        end = time.perf_counter()
        comm.append((start, end, nbytes))
        w.timeline.span("allreduce" if compression.additive(args.compression) else "allgather",
                        "comm", start, end, tid=1, bytes=nbytes)
        return value

    def hook(state, bucket):
        w.syncing()
        start = time.perf_counter()
        buf = bucket.buffer()
        if args.compression == "none":
            fut = dist.all_reduce(buf, async_op=True).get_future()
            wire.append(buf.numel() * 4)
            return fut.then(lambda f: timed(start, buf.numel() * 4, f.value()[0].div_(world)))
        if args.compression == "fp16":
            half = buf.to(torch.float16).div_(world)
            wire.append(half.numel() * 2)
            fut = dist.all_reduce(half, async_op=True).get_future()

            def back(f):
                buf.copy_(f.value()[0])
                return timed(start, half.numel() * 2, buf)
            return fut.then(back)
        # error feedback per bucket, known by its parameters: DDP rebuilds its buckets
        # after the first iteration, so an index names other parameters from then on
        key = "bucket:" + ",".join(str(id(p)) for p in bucket.parameters())
        payload = w.comp.compress(buf, key)
        msg = compression.to_bytes(payload)
        wire.append(msg.numel())
        gathered = [torch.empty_like(msg) for _ in range(world)]
        fut = dist.all_gather(gathered, msg, async_op=True).get_future()

        def combine(f):
            total = torch.zeros(buf.numel())
            for part in gathered:
                total += w.comp.decompress(compression.from_bytes(part, payload))
            buf.copy_(total.div_(world))
            return timed(start, msg.numel(), buf)
        return fut.then(combine)

    ddp.register_comm_hook(None, hook)
    opt = w.optimizer(ddp.parameters())
    for it in range(args.iters):
        waited, lr, base = w.begin_iteration(it, opt)
        comm.clear()
        wire.clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss, acc = w.forward_backward(ddp, it)  # returns once every bucket is synchronised
        t_bwd = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        # what backward waited for after the last bucket became ready (its compute ends
        # about when the last bucket starts)
        exposed = t_bwd - max(s for s, _, _ in comm) if comm else 0.0
        w.timeline.span("forward+backward", "compute", t0, t_bwd, iteration=it)
        w.timeline.span("step", "compute", t_bwd, t1, iteration=it)
        w.write(_row(w, it, t0, t1, comm, exposed, base, loss, acc, waited,
                     payload_bytes=sum(wire), lr=lr))


def run_fusion(w: Worker) -> None:
    """Ring data parallelism whose messages fusionsync.py makes (no DDP): each iteration's
    messages, their sizes and timing from the start of backward, beside the model's."""
    from .fusionsync import FusionSync
    args = w.args
    sync = FusionSync(w.model, args.world_size, args.fusion,
                      int(args.fusion_threshold_mb * 2 ** 20), args.cycle_ms / 1000,
                      args.timeout_s, w.timeline)

    def before_backward() -> None:
        w.syncing()
        sync.begin()
    opt = w.optimizer(w.model.parameters())
    try:
        for it in range(args.iters):
            waited, lr, base = w.begin_iteration(it, opt)
            t0 = time.perf_counter()
            opt.zero_grad()
            loss, acc = w.forward_backward(w.model, it, before_backward=before_backward)
            t_bwd = time.perf_counter()
            sync.wait()
            t_synced = time.perf_counter()
            opt.step()
            t1 = time.perf_counter()
            model = sync.predicted()
            spans = [(sync.t_backward + s, sync.t_backward + e) for _, s, e, _ in sync.messages]
            w.timeline.span("forward+backward", "compute", t0, t_bwd, iteration=it)
            w.timeline.span("step", "compute", t_synced, t1, iteration=it)
            w.write(_row(w, it, t0, t1, spans, t_synced - t_bwd, base, loss, acc, waited,
                         payload_bytes=sum(b for *_, b in sync.messages), lr=lr,
                         fusion=args.fusion, message_bytes=[b for *_, b in sync.messages],
                         backward_s=t_bwd - sync.t_backward,
                         synced_s=t_synced - sync.t_backward,
                         model_synced_s=model.end_s, model_messages=len(model.messages),
                         negotiations=sync.negotiations, planned=sync.planned_now,
                         comm_a_s=sync.comm.a, comm_b_s_per_byte=sync.comm.b))
    finally:
        sync.close()


def run_layerwise(w: Worker) -> None:
    """Layer-wise allreduce (layerwise.py): FIFO, P3's priority levels, or the schedules of
    commsched.py, whose rows carry the model's iteration beside the measured one."""
    import torch.distributed as dist

    from .commsched import Schedule, iteration
    from .fusionsync import fit_comm
    from .layerwise import LayerwiseSync, ScheduledSync, layer_macs, priority_groups
    args = w.args
    dscps = [int(d) for d in args.dscp.split(",")]
    if args.priority == "fifo":
        dscps = dscps[-1:]
    elif args.priority != "p3":  # a scheduler's groups: its negotiation's, its gradients'
        dscps = [dscps[0], dscps[-1]]
    # the model's a and b, in the class the gradients take (not P3's, above the rest)
    comm = fit_comm(FIT_SIZES) if args.priority != "p3" else None
    groups = priority_groups(dscps, args.timeout_s)
    forward_s = args.forward_ms / 1000
    weights = layer_macs(w.model, w.xtr[:args.batch])  # how the emulated compute is shared
    schedule = Schedule(args.priority if args.priority != "p3" else "fifo",
                        args.partition_bytes or None, args.credit_bytes)
    if args.priority in ("tictac", "bytescheduler"):
        sync: LayerwiseSync = ScheduledSync(
            w.model, groups, args.world_size, args.lr, args.momentum, schedule,
            args.cycle_ms / 1000, args.timeout_s, w.timeline, forward_s, weights)
    else:
        sync = LayerwiseSync(w.model, groups, args.world_size, args.lr, args.momentum,
                             w.timeline, forward_s, weights)
    marked = [m for _, _, m in groups]
    fwd = [sync.forward_share[id(m)] for m in sync.layers]
    prev = None
    try:
        for it in range(args.iters + 1):
            t0 = time.perf_counter()
            if prev is not None:  # the previous iteration ends where this one can start
                pit, pt0, base, loss, acc, waited0 = prev
                extra: dict = {}
                if isinstance(sync, ScheduledSync):
                    rounds, round_s = sync.take_rounds()
                    extra.update(negotiations=rounds, negotiation_s=round_s,
                                 pieces=len(sync.plan))
                if comm is not None:
                    extra.update(model_iter_s=iteration(
                        schedule, sync.sizes, fwd, [2 * f for f in fwd], comm,
                        extra.get("negotiation_s", 0.0)), comm_a_s=comm.a,
                        comm_b_s_per_byte=comm.b)
                spans = sync.take_spans()
                row = _row(w, pit, pt0, t0, spans, sync.waited_s - waited0, base, loss, acc,
                           levels=len(sync.groups), sockets_marked=marked,
                           payload_bytes=sum(b for _, _, b, _ in spans), **extra)
                w.write(row)
            if it == args.iters:
                break
            base = counters(args.ifname)
            waited0 = sync.waited_s
            loss, acc = w.forward_backward(w.model, it)  # forward waits for each update
            w.timeline.span("forward+backward", "compute", t0, time.perf_counter(),
                            iteration=it)
            if it == args.iters - 1:
                sync.flush()
            prev = (it, t0, base, loss, acc, waited0)
    finally:
        if isinstance(sync, ScheduledSync):
            sync.close()
    dist.barrier()


def run_ps(w: Worker) -> None:
    import torch
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    from .ps import Client, Server
    args = w.args
    shards = args.ps_shards
    workers = args.world_size - shards
    flat = parameters_to_vector(w.model.parameters()).detach()
    if args.rank < shards:
        server = Server(args.rank, shards, workers, flat, args.consistency, args.staleness,
                        args.lr, args.momentum, w.comp, args.iters, w.write, args.lr_staleness)
        server.serve()
        return
    client = Client(shards, flat.numel(), w.comp)
    params = flat.clone()
    for it in range(args.iters):
        waited = w.before(it)
        base = counters(args.ifname)
        t0 = time.perf_counter()
        w.model.zero_grad()
        loss, acc = w.forward_backward(w.model, it)
        grad = torch.cat([p.grad.reshape(-1) for p in w.model.parameters()])
        t_c = time.perf_counter()
        versions_before = list(client.versions)
        w.syncing()
        pushed = client.exchange(grad, params)
        t1 = time.perf_counter()
        vector_to_parameters(params, w.model.parameters())
        w.timeline.span("forward+backward", "compute", t0, t_c, iteration=it)
        w.timeline.span("push+pull", "comm", t_c, t1, tid=1, bytes=pushed)
        w.write(_row(w, it, t0, t1, [(t_c, t1)], t1 - t_c, base, loss, acc, waited,
                     payload_bytes=pushed, versions=client.versions,
                     version_gain=sum(a - b for a, b in zip(client.versions, versions_before))))


def run_local(w: Worker) -> None:
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    args = w.args
    opt = w.optimizer(w.model.parameters())
    for it in range(args.iters):
        waited, lr, base = w.begin_iteration(it, opt)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss, acc = w.forward_backward(w.model, it)
        opt.step()
        spans = []
        if (it + 1) % args.local_steps == 0 or it == args.iters - 1:
            w.syncing()
            ts = time.perf_counter()
            vec = parameters_to_vector(w.model.parameters()).detach()
            dist.all_reduce(vec)
            vector_to_parameters(vec.div_(args.world_size), w.model.parameters())
            spans.append((ts, time.perf_counter()))
            w.timeline.span("average", "comm", ts, spans[0][1], tid=1, bytes=vec.numel() * 4)
        t1 = time.perf_counter()
        exposed = sum(e - s for s, e in spans)
        w.timeline.span("iteration", "compute", t0, t1, iteration=it)
        w.write(_row(w, it, t0, t1, spans, exposed, base, loss, acc, waited,
                     synchronised=bool(spans), lr=lr))


if __name__ == "__main__":
    exit_now(main())
