"""Gradient compression: exact bytes on the wire, reconstruction, error feedback."""
import pytest
import torch

from testbed.workloads import compression as C


def grad(n=1000, seed=1):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("method,n,expected", [
    ("none", 1000, 4000), ("fp16", 1000, 2000),
    ("topk", 1000, 80),          # 10 fp32 values + 10 int32 indices at 1%
    ("topk", 123_457, 8 * 1235),  # ceil(1% of n)
    ("qsgd", 1000, 1004),         # int8 per entry + fp32 norm
    ("sign", 1000, 125 + 4), ("sign", 1001, 126 + 4),
    ("terngrad", 1000, 2 * 125 + 4),  # two bits an entry + fp32 scale
    # SBC at 1%: b* = 6; room for 10 codes of 7 bits and 1000 >> 6 unary ones: 85 bits,
    # 11 bytes, + fp32 mean + int32 count
    ("sbc", 1000, 11 + 8),
])
def test_bytes_on_the_wire_are_exact(method, n, expected):
    comp = C.make(method, ratio=0.01, levels=16)
    payload = comp.compress(grad(n), "w")
    assert payload.nbytes == expected == comp.expected_nbytes(n)


def test_fp16_halves_the_bytes_and_keeps_the_values():
    g = grad()
    comp = C.make("fp16")
    out = comp.decompress(comp.compress(g, "w"))
    assert comp.compress(g, "w").nbytes * 2 == C.make("none").compress(g, "w").nbytes
    assert torch.allclose(out, g, rtol=1e-3, atol=1e-3)


def test_topk_sends_the_largest_and_keeps_the_rest_as_residual():
    g = grad()
    comp = C.make("topk", ratio=0.05)
    sent = comp.decompress(comp.compress(g, "w"))
    assert (sent != 0).sum() == 50
    assert sent.abs().min() == 0 and sent[sent != 0].abs().min() >= g.abs().kthvalue(950).values
    assert torch.allclose(sent + comp.residuals["w"], g)  # nothing lost
    # the residual rides on the next gradient of the same key, not of another one
    g2 = grad(seed=2)
    sent2 = comp.decompress(comp.compress(g2, "w"))
    assert torch.allclose(sent2 + comp.residuals["w"], g2 + (g - sent))
    assert "b" not in comp.residuals


def test_sign_with_error_feedback_keeps_the_residual():
    g = grad()
    comp = C.make("sign")
    sent = comp.decompress(comp.compress(g, "w"))
    scale = g.abs().mean()
    assert torch.allclose(sent.abs(), scale.expand(1000))
    assert torch.equal(sent > 0, g >= 0)
    assert torch.allclose(sent + comp.residuals["w"], g, atol=1e-6)


def test_bit_packing_round_trips():
    bits = torch.rand(1003, generator=torch.Generator().manual_seed(3)) > 0.5
    packed = C.pack_bits(bits)
    assert packed.dtype == torch.uint8 and packed.numel() == 126
    assert torch.equal(C.unpack_bits(packed, 1003), bits)


def test_qsgd_is_unbiased_and_bounded():
    g = grad(200)
    comp = C.make("qsgd", levels=4, seed=7)
    outs = torch.stack([comp.decompress(comp.compress(g, "w")) for _ in range(3000)])
    err = (outs.mean(dim=0) - g).abs()
    assert err.mean() < 0.04 and err.max() < 0.2  # sd of one entry's mean ~0.035
    levels = comp.compress(g, "w").tensors[0]
    assert levels.abs().max() <= 4
    assert comp.residuals == {}


def test_deterministic_with_a_seed():
    a = C.make("qsgd", seed=5).compress(grad(), "w").tensors[0]
    b = C.make("qsgd", seed=5).compress(grad(), "w").tensors[0]
    assert torch.equal(a, b)


@pytest.mark.parametrize("kwargs,msg", [
    ({"method": "topk", "ratio": 0}, "topk ratio"), ({"method": "topk", "ratio": 1.5}, "topk ratio"),
    ({"method": "qsgd", "levels": 0}, "qsgd levels"), ({"method": "qsgd", "levels": 300}, "qsgd levels"),
    ({"method": "terngrad", "clip": 0}, "terngrad clip"),
    ({"method": "sbc", "ratio": 0}, "sbc ratio"),
    ({"method": "zip"}, "unknown compression method"),
])
def test_parameters_out_of_range_are_refused(kwargs, msg):
    method = kwargs.pop("method")
    with pytest.raises(C.CompressionError, match=msg):
        C.make(method, **kwargs)


@pytest.mark.parametrize("method", ["none", "fp16", "topk", "qsgd", "sign", "terngrad", "sbc"])
def test_one_message_per_payload_round_trips(method):
    from testbed.workloads.compression import from_bytes, make, to_bytes
    comp = make(method, ratio=0.1, seed=3)
    payload = comp.compress(torch.randn(1001), "g")
    msg = to_bytes(payload)
    assert msg.dtype == torch.uint8 and msg.numel() == payload.nbytes
    assert torch.equal(comp.decompress(from_bytes(msg, payload)), comp.decompress(payload))


def test_terngrad_is_ternary_unbiased_after_clipping():
    g = grad(200)
    g[0] = 40.0  # an outlier: clipped to 2.5 standard deviations
    comp = C.make("terngrad", clip=2.5, seed=7)
    clipped = g.clamp(-2.5 * g.std(), 2.5 * g.std())
    outs = torch.stack([comp.decompress(comp.compress(g, "w")) for _ in range(3000)])
    s = clipped.abs().max()
    magnitudes = torch.unique(outs.abs())
    assert magnitudes[0] == 0 and torch.allclose(magnitudes[1:], s) and len(magnitudes) <= 3
    err = (outs.mean(dim=0) - clipped).abs()
    assert err.mean() < 0.05 and err.max() < 0.3  # sd of one entry's mean: s/sqrt(3000)
    assert comp.residuals == {}


def test_golomb_codes_round_trip_and_the_parameter_is_the_papers():
    import numpy as np
    # b* = 1 + floor(log2(log(phi - 1) / log(1 - p))): p = 0.01 -> log2(47.9) = 5.58 -> 6
    assert [C.golomb_bits(p) for p in (0.1, 0.01, 0.001)] == [3, 6, 9]
    rng = np.random.default_rng(4)
    for n, k, b in ((1000, 10, 6), (50_000, 500, 6), (64, 64, 0), (100, 1, 3)):
        pos = np.sort(rng.choice(n, k, replace=False))
        bits = C.golomb_encode(pos, b)
        assert bits.size <= (n >> b) + k * (b + 1)  # what a message has room for
        assert np.array_equal(C.golomb_decode(bits, k, b), pos)
    # gap 0 at b=2 is "0" and "00"; gap 9 = 2 * 4 + 1 is "110" and "01": quotients first
    assert C.golomb_encode(np.array([0, 10]), 2).tolist() == [0, 1, 1, 0, 0, 0, 0, 1]
    assert C.golomb_encode(np.array([], dtype=np.int64), 6).size == 0
    assert C.golomb_decode(np.zeros(8, dtype=bool), 0, 6).size == 0


@pytest.mark.parametrize("method", ["terngrad", "sbc"])
def test_zero_empty_and_constant_gradients(method):
    comp = C.make(method, seed=2)
    # a parameter server's template is all zeros; an empty tensor sends only its header
    for key, g in (("zero", torch.zeros(100)), ("empty", torch.zeros(0))):
        payload = comp.compress(g, key)
        back = comp.decompress(C.from_bytes(C.to_bytes(payload), payload))
        assert payload.nbytes == comp.expected_nbytes(g.numel()) and torch.equal(back, g)
    # equal entries have no spread to clip: TernGrad sends them whole (s = the value)
    if method == "terngrad":
        assert torch.equal(comp.decompress(comp.compress(torch.full((50,), 3.0), "c")),
                           torch.full((50,), 3.0))


def test_sbc_sends_one_side_as_its_mean_and_keeps_the_rest():
    g = grad(1000)
    comp = C.make("sbc", ratio=0.02)
    sent = comp.decompress(comp.compress(g, "w"))
    nonzero = sent[sent != 0]
    assert 0 < nonzero.numel() <= 20 and torch.unique(nonzero).numel() == 1
    top_pos, top_neg = torch.topk(g, 20).values, torch.topk(-g, 20).values
    side = top_pos if top_pos.mean() >= top_neg.mean() else -top_neg
    assert nonzero[0].item() == pytest.approx(side.mean().item())
    assert torch.allclose(sent + comp.residuals["w"], g)  # nothing lost
    # its code is within the room the message has, and near the paper's expected size
    n = 50_000
    big = C.make("sbc", ratio=0.01)
    payload = big.compress(grad(n), "w")
    assert payload.nbytes == big.expected_nbytes(n)
    assert big.golomb_nbytes(n) <= payload.nbytes <= 1.1 * big.golomb_nbytes(n) + 8
