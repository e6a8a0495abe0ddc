"""Per-layer compute times of a described transformer, measured on this machine:

    python -m testbed.workloads.parallel.profile --model gpt2-small [--repeat 5]

Builds one real transformer layer of the description's shape (torch's
TransformerEncoderLayer: attention and MLP, hidden, heads, FFN; fp32, one thread, causal
mask) and times its forward and backward on one micro-batch; prints the two spec fields
(`layer_fwd_s`, `layer_bwd_s`) that replace the FLOP-count estimate in an emulated job
(which then shrinks them by `scale`, and by the reference link's ratio when set)."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from testbed.workloads.model.parallel.desc import ModelDesc, load_models


def profile(m: ModelDesc, repeat: int = 5) -> tuple[float, float]:
    """Median (forward, backward) seconds of one layer on one micro-batch."""
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(m.hidden, m.heads, dim_feedforward=m.ffn_size,
                                             dropout=0.0, batch_first=True)
    x = torch.randn(m.micro_batch, m.seq, m.hidden, requires_grad=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(m.seq)
    fwd, bwd = [], []
    for _ in range(repeat + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        out = layer(x, src_mask=mask, is_causal=True)
        t1 = time.perf_counter()
        out.sum().backward()
        t2 = time.perf_counter()
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
        layer.zero_grad()
        x.grad = None
    return statistics.median(fwd[1:]), statistics.median(bwd[1:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a name in models.yaml")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    models = load_models()
    if args.model not in models:
        print(f"unknown model {args.model!r} (one of {', '.join(models)})", file=sys.stderr)
        return 2
    f, b = profile(models[args.model], args.repeat)
    print(f"# {args.model}: one layer, one micro-batch, this machine's CPU (1 thread)")
    print(f"layer_fwd_s: {f:.6g}\nlayer_bwd_s: {b:.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
