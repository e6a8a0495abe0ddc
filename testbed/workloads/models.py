"""Models and data of the training workers: an MLP, a small ResNet-style CNN and a
small transformer language model whose parameter count is set by `width` (and `depth`), on
scikit-learn's digits (real data shipped inside the package, so accuracy means something)
or synthetic tensors. Deterministic given the seed."""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .largebatch import DATASET_SAMPLES, TRAIN_SHARE

MODELS = ("mlp", "cnn", "vgg", "transformer")
DATASETS = ("digits", "synthetic")
VOCAB = 17  # digits pixels take the values 0..16: the language model reads them as tokens


def dense(d: int, width: int, depth: int) -> nn.Sequential:
    """`depth` ReLU layers of `width` on `d` inputs, then the 10 classes."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, 10))
    return nn.Sequential(*layers)


class Mlp(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.net = dense(64, width, depth)

    def forward(self, x):
        return self.net(x.reshape(x.shape[0], -1))


class Block(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.n1 = nn.BatchNorm2d(ch)
        self.n2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        y = torch.relu(self.n1(self.c1(x)))
        return torch.relu(x + self.n2(self.c2(y)))


class SmallResNet(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.stem = nn.Conv2d(1, width, 3, padding=1)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x.reshape(x.shape[0], 1, 8, 8)))
        return self.head(self.blocks(x).mean(dim=(2, 3)))


class SmallVgg(nn.Module):
    """VGG's shape on a digit: four convolutions at 8x8 and 4x4 (32, 32, 64, 64 channels:
    most of the compute, few of the parameters), then `depth` fully connected layers of
    `width` (most of the parameters, little of the compute) and the classifier."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
            nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = dense(64 * 2 * 2, width, depth)

    def forward(self, x):
        x = self.features(x.reshape(x.shape[0], 1, 8, 8))
        return self.classifier(x.flatten(1))


class TinyLM(nn.Module):
    """Next-pixel prediction over the 64 pixels of a digit, read as a token sequence."""

    def __init__(self, width: int, depth: int, seq: int = 64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.pos = nn.Parameter(torch.zeros(seq, width))
        layer = nn.TransformerEncoderLayer(width, nhead=max(1, width // 32),
                                           dim_feedforward=4 * width, batch_first=True,
                                           dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq),
                             persistent=False)

    def forward(self, tokens):
        n = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:n]
        return self.head(self.encoder(h, mask=self.mask[:n, :n], is_causal=True))


def build(name: str, width: int = 64, depth: int = 2) -> nn.Module:
    if name == "mlp":
        return Mlp(width, depth)
    if name == "cnn":
        return SmallResNet(width, depth)
    if name == "vgg":
        return SmallVgg(width, depth)
    if name == "transformer":
        return TinyLM(width, depth)
    raise ValueError(f"unknown model {name!r} (one of {', '.join(MODELS)})")


def param_bytes(model: nn.Module) -> int:
    """Bytes of the gradient a step exchanges (fp32)."""
    return sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1797 images of 8x8 pixels, 0-16, and their labels), read from
    the file its `load_digits` reads, as it reads it, without importing scikit-learn: that
    import took 2 s of every rank's start."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-learn (its digits dataset) is not installed")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path) as fh:
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


def dataset(name: str, model: str, seed: int = 0,
            synthetic_n: int = DATASET_SAMPLES["synthetic"]):
    """(train_x, train_y, test_x, test_y): digits split 80/20 by a seeded permutation."""
    g = torch.Generator().manual_seed(seed)
    if name == "digits":
        pixels, labels = digits()
        x = torch.tensor(pixels, dtype=torch.float32)
        y = torch.tensor(labels, dtype=torch.long)
    elif name == "synthetic":
        x = torch.randint(0, VOCAB, (synthetic_n, 64), generator=g).float()
        y = torch.randint(0, 10, (synthetic_n,), generator=g)
    else:
        raise ValueError(f"unknown dataset {name!r} (one of {', '.join(DATASETS)})")
    if model == "transformer":
        x = x.long().clamp(0, VOCAB - 1)
        y = x  # next-token targets are built from the sequence itself
    else:
        x = x / 16.0
    perm = torch.randperm(x.shape[0], generator=g)
    cut = int(TRAIN_SHARE * x.shape[0])
    tr, te = perm[:cut], perm[cut:]
    return x[tr], y[tr], x[te], y[te]


def loss_and_correct(model: nn.Module, name: str, x, y):
    """(loss, number correct, number predicted) for a batch."""
    out = model(x)
    if name == "transformer":
        logits, target = out[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1)
    else:
        logits, target = out, y
    loss = nn.functional.cross_entropy(logits, target)
    correct = (logits.argmax(dim=1) == target).sum().item()
    return loss, correct, target.numel()


def step_seconds(name: str, width: int, depth: int, batch: int, data: str = "digits",
                 repeats: int = 5) -> tuple[float, int]:
    """One training step's compute (forward and backward of a batch) on one core of this
    machine, as the training worker runs it (one torch thread), the fastest of `repeats`;
    and the gradient's bytes. What `testbed plan` charges a trainer with real compute."""
    import time
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build(name, width, depth)
        xtr, ytr, _, _ = dataset(data, name)
        x, y = xtr[:batch], ytr[:batch]
        best = float("inf")
        for _ in range(repeats + 1):  # the first warms the allocator up
            t0 = time.perf_counter()
            loss, _, _ = loss_and_correct(model, name, x, y)
            loss.backward()
            best = min(best, time.perf_counter() - t0)
            model.zero_grad()
        return best, param_bytes(model)
    finally:
        torch.set_num_threads(threads)
