"""What each rank of a parallel job computes and exchanges, per layer and micro-batch: the
one description both the worker (which runs it) and the analytical model (which prices it)
read. Pure; element counts, not bytes (times `dtype_bytes`).

A transformer layer (Megatron-LM, Narayanan et al. 2021), per micro-batch of b samples of
s tokens, hidden size h, MLP size f:
- parameters 4h^2 + 2hf (+ biases and norms, ~9h + f, ignored);
- forward FLOPs 2bs(4h^2 + 2hf) + 4bs^2h (matrix products; attention scores and their
  product with V); backward twice that;
- tensor parallel over t ranks: each rank holds 1/t of every matrix and does 1/t of the
  FLOPs; one allreduce of the layer's output (b*s*h) after attention and one after the MLP
  in forward, and two of the input gradients in backward;
- pipeline parallel: the activation b*s*h crosses each stage boundary forward and its
  gradient backward, once per micro-batch (every TP rank sends its full copy: no
  scatter-gather optimisation);
- mixture of experts (every `moe_every`-th layer): the MLP is `experts` MLPs spread over the
  EP group; each token goes to `top_k` of them: an all-to-all of b*s*k*h out (dispatch) and
  back (combine) in forward, and the same two in backward; a rank computes k MLPs' worth of
  tokens on average (balanced routing).
Embeddings and the output layer are left out of both compute and volume (state it when
comparing with a published number).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from testbed.workloads.model.parallel.layout import Layout

MODELS_FILE = Path(__file__).with_name("models.yaml")


@dataclass(frozen=True, kw_only=True)
class ModelDesc:
    layers: int
    hidden: int
    heads: int
    seq: int
    micro_batch: int = 1
    ffn: int = 0                 # 0: 4 x hidden
    experts: int = 0             # 0: dense
    moe_every: int = 2
    top_k: int = 1
    dtype_bytes: int = 2

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    def check(self, layout: Layout, path: str = "model") -> None:
        """ValueError naming the field, before any process starts."""
        for name in ("layers", "hidden", "heads", "seq", "micro_batch", "moe_every", "top_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{path}.{name}: must be >= 1 (got {getattr(self, name)})")
        if self.dtype_bytes not in (2, 4):
            raise ValueError(f"{path}.dtype_bytes: 2 (bf16) or 4 (fp32) (got {self.dtype_bytes})")
        if self.hidden % self.heads:
            raise ValueError(f"{path}.heads: must divide hidden={self.hidden} (got {self.heads})")
        if self.hidden % layout.tp or self.heads % layout.tp or self.ffn_size % layout.tp:
            raise ValueError(f"tp: {layout.tp} must divide hidden ({self.hidden}), heads "
                             f"({self.heads}) and ffn ({self.ffn_size})")
        if layout.pp > self.layers:
            raise ValueError(f"pp: {layout.pp} stages for {self.layers} layers")
        if self.experts < 0:
            raise ValueError(f"{path}.experts: must be >= 0 (got {self.experts})")
        if self.experts and self.experts % layout.ep:
            raise ValueError(f"ep: {layout.ep} must divide experts={self.experts}")
        if layout.ep > 1 and not self.experts:
            raise ValueError(f"ep: expert parallelism ({layout.ep}) needs a model with experts")
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"{path}.top_k: at most experts={self.experts}")

    def is_moe(self, layer: int) -> bool:
        return bool(self.experts) and (layer + 1) % self.moe_every == 0


@dataclass(frozen=True)
class LayerWork:
    """One layer as one rank sees it, per micro-batch (elements; FLOPs)."""
    index: int
    fwd_flops: float
    bwd_flops: float
    params: int                  # dense parameters this rank holds (after TP)
    expert_params: int = 0       # expert parameters this rank holds (after TP and EP)
    tp_allreduces: int = 0       # per direction (forward; the same in backward)
    tp_elems: int = 0            # elements of each TP allreduce (forward)
    tp_bwd_elems: int = 0        # ... backward, when it differs (0: the same)
    a2a_elems: int = 0           # elements of each all-to-all (2 forward, 2 backward)
    act_elems: int = 0           # the layer's output, what crosses a stage boundary

    @property
    def tp_elems_bwd(self) -> int:
        return self.tp_bwd_elems or self.tp_elems


def scaled(n: float, scale: float) -> int:
    """An element count shrunk by `scale`, at least 1."""
    return max(1, round(n * scale))


def layer_work(m: ModelDesc, layout: Layout, scale: float = 1.0) -> list[LayerWork]:
    """Every layer of the model, as one rank of `layout` runs it; `scale` shrinks every
    tensor (and, through the FLOPs, every compute time) by the same factor."""
    b, s, h, f, t = m.micro_batch, m.seq, m.hidden, m.ffn_size, layout.tp
    tokens = b * s
    attn_params, mlp_params = 4 * h * h, 2 * h * f
    attn_flops = 2 * tokens * attn_params + 4 * b * s * s * h
    mlp_flops = 2 * tokens * mlp_params
    out = []
    for i in range(m.layers):
        moe = m.is_moe(i)
        if moe:
            fwd = attn_flops + m.top_k * mlp_flops
            dense, expert = attn_params, m.experts // layout.ep * mlp_params
        else:
            fwd = attn_flops + mlp_flops
            dense, expert = attn_params + mlp_params, 0
        out.append(LayerWork(
            index=i, fwd_flops=fwd / t * scale, bwd_flops=2 * fwd / t * scale,
            params=scaled(dense / t, scale), expert_params=scaled(expert / t, scale) if expert else 0,
            tp_allreduces=2 if t > 1 else 0, tp_elems=scaled(tokens * h, scale) if t > 1 else 0,
            a2a_elems=(-(-scaled(tokens * m.top_k * h, scale) // layout.ep) * layout.ep
                       if moe and layout.ep > 1 else 0),  # all-to-all: whole slices
            act_elems=scaled(tokens * h, scale)))
    return out


def mlp_work(width: int, depth: int, micro_batch: int, layout: Layout) -> list[LayerWork]:
    """The real-compute MLP (testbed/workloads/models.py: 64 inputs, `depth` hidden layers
    of `width`, 10 outputs) as the worker runs it: Linear layers in pairs, each pair a
    Megatron MLP block (one TP allreduce of the micro-batch's output forward, one of the
    input gradient backward), a lone last Linear replicated; fp32."""
    dims = [64] + [width] * depth + [10]
    linears = list(zip(dims, dims[1:]))
    out: list[LayerWork] = []
    for u in range(0, len(linears), 2):
        pair = linears[u:u + 2]
        params = sum(i * o + o for i, o in pair)
        flops = 2 * micro_batch * sum(i * o for i, o in pair)
        tp = layout.tp if len(pair) == 2 else 1
        # a pair's TP slice: its inner dimension over the TP group, the last bias whole
        local = (params - pair[-1][1]) // tp + pair[-1][1] if tp > 1 else params
        out.append(LayerWork(index=len(out), fwd_flops=flops / tp, bwd_flops=2 * flops / tp,
                             params=local, tp_allreduces=1 if tp > 1 else 0,
                             # forward: the pair's output; backward: its input's gradient
                             tp_elems=micro_batch * pair[-1][1] if tp > 1 else 0,
                             tp_bwd_elems=micro_batch * pair[0][0] if tp > 1 else 0,
                             act_elems=micro_batch * pair[-1][1]))
    return out


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Layers of each pipeline stage: contiguous, as even as possible (earlier stages get
    the remainder)."""
    base, extra = divmod(n_layers, pp)
    out, start = [], 0
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def load_models(path: Path = MODELS_FILE) -> dict[str, ModelDesc]:
    from testbed.config.loader import SpecError, from_data, read_yaml
    try:
        data = read_yaml(path)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    return {name: from_data(ModelDesc, d, f"{path.name}:{name}") for name, d in data.items()}


def params_total(m: ModelDesc) -> int:
    """Parameters of the layers (experts counted once each)."""
    return sum(w.params + w.expert_params for w in layer_work(m, Layout(ep=1)))


def flops_per_sample(m: ModelDesc) -> float:
    """Forward + backward FLOPs of one sample through every layer."""
    per_mb = sum(w.fwd_flops + w.bwd_flops for w in layer_work(m, Layout()))
    return per_mb / m.micro_batch


def describe(m: ModelDesc) -> str:
    p = params_total(m)
    return (f"{m.layers} layers, hidden {m.hidden}, {m.heads} heads, seq {m.seq}, "
            f"micro-batch {m.micro_batch}: {p / 1e6:.1f} M parameters"
            + (f" ({m.experts} experts every {m.moe_every} layers, top-{m.top_k})"
               if m.experts else "")
            + f", {math.ceil(flops_per_sample(m) / 1e9)} GFLOP per sample")
