"""One training worker per emulated host (issue 4, data-parallel ring allreduce):

    python -m testbed.workloads.train --rank R --world-size W --master IP:PORT \\
        --model mlp --width 256 --iters 20 --out DIR [--ifname h1-eth0]

Gloo through DistributedDataParallel (tensor fusion by `--bucket-mb`), one thread, a bounded
timeout so that a broken network fails the run with a clear message. Writes, per rank,
`rank<R>.jsonl` (one line per iteration: compute and communication time, bytes on the
wire of the host's interface, loss, accuracy when evaluated) and `rank<R>.trace.json`, a
Chrome trace of compute and allreduce spans that opens in Perfetto / chrome://tracing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path


def iface_bytes(ifname: str | None) -> tuple[int, int]:
    """(rx, tx) bytes of an interface, from this namespace's /proc/net/dev."""
    if not ifname:
        return 0, 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            f = rest.split()
            return int(f[0]), int(f[8])
    return 0, 0


class Timeline:
    """Chrome trace events (complete events, microseconds)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self.t0 = time.perf_counter()
        self.lock = threading.Lock()

    def span(self, name: str, cat: str, start: float, end: float, tid: int = 0, **args):
        with self.lock:
            self.events.append({"name": name, "cat": cat, "ph": "X", "pid": self.rank,
                                "tid": tid, "ts": (start - self.t0) * 1e6,
                                "dur": (end - start) * 1e6, "args": args})

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ms"}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="train")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master", required=True, help="IP:PORT of rank 0's rendezvous")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--data", default="digits")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--ifname", default=None, help="the host's interface (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        run(args, out)
        return 0
    except Exception as exc:  # the runner reads this file to say which worker failed and why
        (out / f"rank{args.rank}.error").write_text(f"{type(exc).__name__}: {exc}\n")
        print(f"rank {args.rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def run(args, out: Path) -> None:
    if args.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = args.ifname
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from . import models

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}", rank=args.rank,
                            world_size=args.world_size, timeout=timedelta(seconds=args.timeout_s))
    model = models.build(args.model, args.width, args.depth)
    ddp = DDP(model, bucket_cap_mb=args.bucket_mb)
    timeline = Timeline(args.rank)
    comm: list[tuple[float, float, int]] = []

    def timed_allreduce(state, bucket):
        start = time.perf_counter()
        buf = bucket.buffer()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            end = time.perf_counter()
            comm.append((start, end, buf.numel() * buf.element_size()))
            timeline.span("allreduce", "comm", start, end, tid=1,
                          bytes=buf.numel() * buf.element_size())
            return f.value()[0].div_(args.world_size)
        return fut.then(done)

    ddp.register_comm_hook(None, timed_allreduce)
    xtr, ytr, xte, yte = models.dataset(args.data, args.model, seed=args.seed)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed * 1000 + args.rank)
    log = (out / f"rank{args.rank}.jsonl").open("w", buffering=1)
    grad_bytes = models.param_bytes(model)
    for it in range(args.iters):
        idx = torch.randint(0, xtr.shape[0], (args.batch,), generator=g)
        rx0, tx0 = iface_bytes(args.ifname)
        comm.clear()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss, correct, total = models.loss_and_correct(ddp, args.model, xtr[idx], ytr[idx])
        t_fwd = time.perf_counter()
        loss.backward()  # returns once every bucket's allreduce has completed
        t_bwd = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        rx1, tx1 = iface_bytes(args.ifname)
        comm_s = sum(e - s for s, e, _ in comm)
        exposed = t_bwd - max([t_fwd] + [s for s, _, _ in comm]) if comm else 0.0
        timeline.span("forward", "compute", t0, t_fwd, iteration=it)
        timeline.span("backward+allreduce", "compute", t_fwd, t_bwd, iteration=it)
        timeline.span("step", "compute", t_bwd, t1, iteration=it)
        row = {"iteration": it, "iter_s": t1 - t0, "compute_s": (t1 - t0) - max(0.0, exposed),
               "comm_s": comm_s, "comm_exposed_s": max(0.0, exposed), "buckets": len(comm),
               "grad_bytes": grad_bytes, "tx_bytes": tx1 - tx0, "rx_bytes": rx1 - rx0,
               "loss": loss.item(), "train_acc": correct / total}
        if args.eval_every and (it + 1) % args.eval_every == 0:
            with torch.no_grad():
                _, c, n = models.loss_and_correct(model, args.model, xte, yte)
            row["test_acc"] = c / n
        log.write(json.dumps(row) + "\n")
    log.close()
    timeline.write(out / f"rank{args.rank}.trace.json")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
