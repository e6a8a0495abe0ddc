"""Gradient compression applied to what crosses the wire: fp16, top-k
sparsification with error feedback, QSGD with s levels, 1-bit sign with error feedback,
TernGrad's ternary gradients, and sparse binary compression (SBC) with Golomb-coded
positions.

A compressor turns one gradient tensor into a `Payload`: the tensors that are actually sent
(their `nbytes` are the bytes on the wire, index overhead included) and what is needed to
rebuild a dense tensor. Error feedback keeps, per gradient (by key), what compression left
out and adds it to the next gradient of that key. Deterministic given the seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

METHODS = ("none", "fp16", "topk", "qsgd", "sign", "terngrad", "sbc")


class CompressionError(ValueError):
    """Parameters out of range; the message names the parameter."""


@dataclass
class Payload:
    tensors: list[torch.Tensor]
    numel: int
    meta: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: every tensor that is sent, indices and scales included."""
        return sum(t.numel() * t.element_size() for t in self.tensors)


class Compressor:
    name = "none"

    def __init__(self, seed: int = 0):
        self.residuals: dict[str, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(seed)

    def compress(self, grad: torch.Tensor, key: str) -> Payload:
        return Payload([grad.detach().reshape(-1).float().clone()], grad.numel())

    def decompress(self, payload: Payload) -> torch.Tensor:
        return payload.tensors[0]

    def expected_nbytes(self, numel: int) -> int:
        return 4 * numel

    # error feedback -----------------------------------------------------------------
    def _with_residual(self, grad: torch.Tensor, key: str) -> torch.Tensor:
        flat = grad.detach().reshape(-1).float()
        res = self.residuals.get(key)
        return flat + res if res is not None else flat.clone()

    def _keep_residual(self, key: str, acc: torch.Tensor, sent: torch.Tensor) -> None:
        self.residuals[key] = acc - sent


class Fp16(Compressor):
    name = "fp16"

    def compress(self, grad, key):
        return Payload([grad.detach().reshape(-1).half()], grad.numel())

    def decompress(self, payload):
        return payload.tensors[0].float()

    def expected_nbytes(self, numel):
        return 2 * numel


class TopK(Compressor):
    """The `ratio` largest-magnitude entries (of gradient + residual) as fp32 values and
    int32 indices; everything else stays in the residual."""
    name = "topk"

    def __init__(self, ratio: float = 0.01, seed: int = 0):
        if not 0 < ratio <= 1:
            raise CompressionError(f"topk ratio must be in (0, 1] (got {ratio})")
        super().__init__(seed)
        self.ratio = ratio

    def k(self, numel: int) -> int:
        return max(1, math.ceil(self.ratio * numel))

    def compress(self, grad, key):
        acc = self._with_residual(grad, key)
        _, idx = torch.topk(acc.abs(), self.k(acc.numel()), sorted=False)
        values = acc[idx]
        sent = torch.zeros_like(acc)
        sent[idx] = values
        self._keep_residual(key, acc, sent)
        return Payload([values, idx.to(torch.int32)], acc.numel())

    def decompress(self, payload):
        values, idx = payload.tensors
        out = torch.zeros(payload.numel)
        out[idx.long()] = values
        return out

    def expected_nbytes(self, numel):
        return 8 * self.k(numel)


class Qsgd(Compressor):
    """QSGD (Alistarh et al. 2017): |g_i| / ||g|| stochastically rounded to one of `levels`
    levels, sent as a signed int8 per entry plus the fp32 norm. Unbiased; no residual."""
    name = "qsgd"

    def __init__(self, levels: int = 16, seed: int = 0):
        if not 1 <= levels <= 127:
            raise CompressionError(f"qsgd levels must be in 1..127 (got {levels})")
        super().__init__(seed)
        self.levels = levels

    def compress(self, grad, key):
        flat = grad.detach().reshape(-1).float()
        norm = flat.norm()
        if norm == 0:
            q = torch.zeros(flat.numel(), dtype=torch.int8)
        else:
            scaled = flat.abs() / norm * self.levels
            low = scaled.floor()
            up = torch.rand(flat.numel(), generator=self.generator) < (scaled - low)
            q = ((low + up.float()) * flat.sign()).to(torch.int8)
        return Payload([q, norm.reshape(1)], flat.numel())

    def decompress(self, payload):
        q, norm = payload.tensors
        return q.float() * norm / self.levels

    def expected_nbytes(self, numel):
        return numel + 4


class Sign(Compressor):
    """1-bit SGD with error feedback (Seide et al. 2014; Karimireddy et al. 2019): the sign
    of gradient + residual packed 8 per byte, scaled by its mean magnitude (fp32)."""
    name = "sign"

    def compress(self, grad, key):
        acc = self._with_residual(grad, key)
        scale = acc.abs().mean()
        bits = acc >= 0
        sent = torch.where(bits, scale, -scale)
        self._keep_residual(key, acc, sent)
        return Payload([pack_bits(bits), scale.reshape(1)], acc.numel())

    def decompress(self, payload):
        packed, scale = payload.tensors
        bits = unpack_bits(packed, payload.numel)
        return torch.where(bits, scale, -scale)

    def expected_nbytes(self, numel):
        return math.ceil(numel / 8) + 4


_WEIGHTS = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8)


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Booleans to uint8, eight per byte (least significant bit first)."""
    n = bits.numel()
    padded = torch.zeros(math.ceil(n / 8) * 8, dtype=torch.uint8)
    padded[:n] = bits.to(torch.uint8)
    return (padded.reshape(-1, 8) * _WEIGHTS).sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, n: int) -> torch.Tensor:
    return ((packed.reshape(-1, 1) & _WEIGHTS) > 0).reshape(-1)[:n]


class TernGrad(Compressor):
    """TernGrad (Wen et al., NeurIPS 2017): each gradient tensor (a layer, or a bucket of
    layers) clipped to `clip` standard deviations of its entries, then every entry sent as
    s * sign * Bernoulli(|g| / s) with s its largest magnitude: two bits an entry (which are
    non-zero, and their signs) plus s as fp32. Unbiased for the clipped gradient; no
    residual. Workers here gather each other's tensors, each with its own s, so the paper's
    scaler sharing (one s for all, for a parameter server's integer sums) is not needed."""
    name = "terngrad"

    def __init__(self, clip: float = 2.5, seed: int = 0):
        if clip <= 0:
            raise CompressionError(f"terngrad clip must be > 0 (got {clip})")
        super().__init__(seed)
        self.clip = clip

    def compress(self, grad, key):
        flat = grad.detach().reshape(-1).float()
        bound = self.clip * flat.std() if flat.numel() > 1 else torch.tensor(0.0)
        if bound > 0:  # equal entries have no spread to clip to
            flat = flat.clamp(-bound, bound)
        s = flat.abs().max() if flat.numel() else torch.tensor(0.0)
        if s == 0:
            nonzero = torch.zeros(flat.numel(), dtype=torch.bool)
        else:
            nonzero = torch.rand(flat.numel(), generator=self.generator) < flat.abs() / s
        return Payload([pack_bits(nonzero), pack_bits(flat > 0), s.reshape(1)], flat.numel())

    def decompress(self, payload):
        nonzero, positive, s = payload.tensors
        n = payload.numel
        signs = torch.where(unpack_bits(positive, n), 1.0, -1.0)
        return unpack_bits(nonzero, n).float() * signs * s

    def expected_nbytes(self, numel):
        return 2 * math.ceil(numel / 8) + 4


GOLDEN = (1 + math.sqrt(5)) / 2


def golomb_bits(p: float) -> int:
    """SBC's Golomb parameter for positions kept with probability `p`: the remainder's
    bits, b* = 1 + floor(log2(log(phi - 1) / log(1 - p)))."""
    if p >= 1:
        return 0
    return max(0, 1 + math.floor(math.log2(math.log(GOLDEN - 1) / math.log(1 - p))))


def golomb_encode(positions: np.ndarray, b: int) -> np.ndarray:
    """Ascending positions as Golomb-Rice codes of their gaps (a gap's quotient by 2^b in
    unary, ones ended by a zero; its remainder in b bits, most significant first), one bool
    per bit: every quotient first, then every remainder, so that both decode at once. The
    same bits as codes laid end to end, in another order."""
    gaps = np.diff(positions, prepend=-1) - 1
    q, r = gaps >> b, gaps & ((1 << b) - 1)
    unary = np.zeros(int(q.sum()) + q.size, dtype=bool)
    ends = np.cumsum(q + 1) - 1  # each quotient's terminating zero
    ones = np.ones(unary.size, dtype=bool)
    ones[ends] = False
    unary[ones] = True
    remainders = ((r[:, None] >> np.arange(b - 1, -1, -1)) & 1).astype(bool).reshape(-1)
    return np.concatenate([unary, remainders])


def golomb_decode(bits: np.ndarray, count: int, b: int) -> np.ndarray:
    """The `count` positions of `golomb_encode`'s bits (anything after them is ignored)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(~bits)[:count]  # the quotients' terminating zeros, in order
    q = np.diff(ends, prepend=-1) - 1
    start = int(ends[-1]) + 1
    r = bits[start:start + count * b].reshape(count, b) @ (1 << np.arange(b - 1, -1, -1)) \
        if b else np.zeros(count, dtype=np.int64)
    return np.cumsum((q << b) + r + 1) - 1


class Sbc(Compressor):
    """Sparse binary compression (Sattler et al., 2019): of gradient + residual, the
    `ratio` largest positive entries and the `ratio` most negative ones; the side whose mean
    magnitude is larger is sent as that mean (fp32) and its positions, Golomb-coded with the
    paper's parameter; everything else stays in the residual. A message has a fixed size
    (workers gather equal-sized messages): the most its positions can take, at most
    n / 2^b + k (b + 1) bits for k positions among n, plus the count (int32); the paper's
    expected size of the code is `golomb_nbytes`."""
    name = "sbc"

    def __init__(self, ratio: float = 0.01, seed: int = 0):
        if not 0 < ratio <= 1:
            raise CompressionError(f"sbc ratio must be in (0, 1] (got {ratio})")
        super().__init__(seed)
        self.ratio = ratio
        self.b = golomb_bits(ratio)

    def k(self, numel: int) -> int:
        """Entries taken from each side (at least one, at most all)."""
        return min(numel, max(1, math.ceil(self.ratio * numel)))

    def capacity_bytes(self, numel: int) -> int:
        return math.ceil(((numel >> self.b) + self.k(numel) * (self.b + 1)) / 8)

    def compress(self, grad, key):
        acc = self._with_residual(grad, key)
        n, k = acc.numel(), self.k(acc.numel())
        top_pos, pos_idx = torch.topk(acc, k, sorted=False)
        top_neg, neg_idx = torch.topk(-acc, k, sorted=False)
        pos_mask, neg_mask = top_pos > 0, top_neg > 0
        mean_pos = top_pos[pos_mask].mean() if pos_mask.any() else torch.tensor(0.0)
        mean_neg = top_neg[neg_mask].mean() if neg_mask.any() else torch.tensor(0.0)
        if mean_pos >= mean_neg:
            idx, value = pos_idx[pos_mask], mean_pos
        else:
            idx, value = neg_idx[neg_mask], -mean_neg
        idx = torch.sort(idx).values
        sent = torch.zeros_like(acc)
        sent[idx] = value
        self._keep_residual(key, acc, sent)
        code = np.zeros(self.capacity_bytes(n) * 8, dtype=bool)
        bits = golomb_encode(idx.numpy(), self.b)
        code[:bits.size] = bits
        return Payload([torch.from_numpy(np.packbits(code, bitorder="little")),
                        value.reshape(1).float(), torch.tensor([idx.numel()], dtype=torch.int32)],
                       n)

    def decompress(self, payload):
        code, value, count = payload.tensors
        bits = np.unpackbits(code.numpy(), bitorder="little").astype(bool)
        idx = golomb_decode(bits, int(count[0]), self.b)
        out = torch.zeros(payload.numel)
        out[torch.from_numpy(idx)] = value
        return out

    def expected_nbytes(self, numel):
        return self.capacity_bytes(numel) + 8

    def golomb_nbytes(self, numel: int) -> int:
        """The paper's expected size of k positions' code (b* + 1 / (1 - (1 - p)^2^b*)
        bits each) with the mean: what a variable-sized message would carry."""
        p = self.ratio
        per = self.b + 1 / (1 - (1 - p) ** (2 ** self.b)) if p < 1 else 1
        return math.ceil(self.k(numel) * per / 8) + 4


def make(method: str, *, ratio: float = 0.01, levels: int = 16, clip: float = 2.5,
         seed: int = 0) -> Compressor:
    """A compressor by name (METHODS); parameters out of range raise CompressionError.
    `ratio`: top-k's and SBC's share of entries; `levels`: QSGD's; `clip`: TernGrad's, in
    standard deviations."""
    if method == "none":
        return Compressor(seed)
    if method == "fp16":
        return Fp16(seed)
    if method == "topk":
        return TopK(ratio, seed)
    if method == "qsgd":
        return Qsgd(levels, seed)
    if method == "sign":
        return Sign(seed)
    if method == "terngrad":
        return TernGrad(clip, seed)
    if method == "sbc":
        return Sbc(ratio, seed)
    raise CompressionError(f"unknown compression method {method!r} (one of {', '.join(METHODS)})")


# ---- one message per payload ------------------------------------------------------------

def to_bytes(payload: Payload) -> torch.Tensor:
    """The payload's tensors as one uint8 tensor (one message on the wire, no padding)."""
    return torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in payload.tensors])


def from_bytes(buf: torch.Tensor, template: Payload) -> Payload:
    """The inverse of `to_bytes`, given a payload of the same layout (every rank compresses
    tensors of the same size, so layouts agree)."""
    tensors, off = [], 0
    for t in template.tensors:
        n = t.numel() * t.element_size()
        tensors.append(buf[off:off + n].clone().view(t.dtype).reshape(t.shape))
        off += n
    if off != buf.numel():
        raise ValueError(f"message of {buf.numel()} bytes, layout of {off}")
    return Payload(tensors, template.numel, dict(template.meta))


def additive(method: str) -> bool:
    """Whether compressed gradients can be summed on the wire (allreduce) rather than
    gathered: dense fp32 and fp16 can; sparse and quantised formats are allgathered."""
    return method in ("none", "fp16")
