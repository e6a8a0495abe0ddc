"""Gradient compression applied to what crosses the wire: fp16, top-k
sparsification with error feedback, QSGD with s levels, and 1-bit sign with error feedback.

A compressor turns one gradient tensor into a `Payload`: the tensors that are actually sent
(their `nbytes` are the bytes on the wire, index overhead included) and what is needed to
rebuild a dense tensor. Error feedback keeps, per gradient (by key), what compression left
out and adds it to the next gradient of that key. Deterministic given the seed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

METHODS = ("none", "fp16", "topk", "qsgd", "sign")


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


def make(method: str, *, ratio: float = 0.01, levels: int = 16, seed: int = 0) -> Compressor:
    """A compressor by name (METHODS); parameters out of range raise CompressionError."""
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
