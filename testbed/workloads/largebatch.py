"""Large-batch training, pure (no torch): the linear scaling rule with gradual warm-up of
Goyal et al., "Accurate, Large Minibatch SGD" (2017), and the layer-wise trust ratios of
LARS (You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks", 2017,
Algorithm 1) and LAMB (You et al., "Large Batch Optimization for Deep Learning: Training
BERT in 76 minutes", ICLR 2020, Algorithm 2). The optimizers that use them are
testbed/workloads/optimizers.py.
"""
from __future__ import annotations

import math

OPTIMIZERS = ("sgd", "lars", "lamb")
LARS_TRUST = 0.001            # LARS's trust coefficient eta (the paper's)
LARS_WEIGHT_DECAY = 5e-4      # LARS's beta (the paper's AlexNet-BN and ResNet-50 runs)
LAMB_WEIGHT_DECAY = 0.01      # LAMB's lambda (the paper's BERT runs)
LAMB_BETAS = (0.9, 0.999)
LAMB_EPS = 1e-6
GOYAL_WARMUP_EPOCHS = 5.0     # "gradual warmup" over the first 5 epochs

DATASET_SAMPLES = {"digits": 1797, "synthetic": 2048}  # scikit-learn's digits; ours
TRAIN_SHARE = 0.8             # the rest is the test set (models.dataset)


def train_samples(data: str) -> int:
    """Samples in a dataset's training split (testbed/workloads/models.py splits them)."""
    return int(TRAIN_SHARE * DATASET_SAMPLES[data])


def iterations(epochs: float, data: str, global_batch: int) -> int:
    """Iterations (each one synchronisation of a data-parallel job) that `epochs` passes
    over the training split take at `global_batch` samples an iteration."""
    return max(1, math.ceil(epochs * train_samples(data) / global_batch))


def learning_rate(it: int, lr: float, scale: float, warmup_iters: int) -> float:
    """The rate of iteration `it` (from 0) under the linear scaling rule: the target is
    `lr` x `scale` (scale = k: the global batch over the one `lr` was tuned at), reached by
    gradual warm-up from `lr` in equal steps over `warmup_iters` iterations, then held."""
    target = lr * scale
    if it >= warmup_iters:
        return target
    return lr + (target - lr) * it / warmup_iters


def lars_ratio(weight_norm: float, grad_norm: float, trust: float = LARS_TRUST,
               weight_decay: float = LARS_WEIGHT_DECAY) -> float:
    """LARS's local learning rate of a layer, eta ||w|| / (||grad|| + beta ||w||); 1 where
    either norm is 0 (a layer at zero, or one that got no gradient), as the common
    implementations do."""
    if weight_norm <= 0 or grad_norm <= 0:
        return 1.0
    return trust * weight_norm / (grad_norm + weight_decay * weight_norm)


def lamb_ratio(weight_norm: float, update_norm: float) -> float:
    """LAMB's trust ratio of a layer, phi(||x||) / ||r + lambda x|| with phi the identity;
    1 where either norm is 0."""
    if weight_norm <= 0 or update_norm <= 0:
        return 1.0
    return weight_norm / update_norm
