"""Analytical communication models put beside every training measurement: the
time a synchronisation step should take on an idle network with per-host bandwidth B and
per-message latency alpha. Pure functions, seconds."""
from __future__ import annotations

import math


def ring_allreduce_s(size_bytes: float, workers: int, bandwidth_bps: float,
                     latency_s: float = 0.0, buckets: int = 1) -> float:
    """Ring allreduce (reduce-scatter + allgather): every worker sends and receives
    2(p-1)/p of the gradient; 2(p-1) steps per bucket, each paying the latency once."""
    if workers < 2:
        return 0.0
    p = workers
    return 2 * (p - 1) / p * size_bytes * 8 / bandwidth_bps + 2 * (p - 1) * latency_s * buckets


def parameter_server_s(size_bytes: float, workers: int, shards: int, bandwidth_bps: float,
                       latency_s: float = 0.0, pull_bytes: float | None = None,
                       worker_bandwidth_bps: float | None = None) -> float:
    """Push then pull with S bytes per worker split over k shards: each shard's link carries
    n*S/k bytes each way, so one direction takes n*S/(k*B); colocated or dedicated shards
    alike, the shard's link is the bottleneck when n > k. `pull_bytes`: when the pull
    differs from the push (a compressed push, a dense pull). `worker_bandwidth_bps`: the
    slowest worker's link when it differs (a straggler), which must carry all of its own S."""
    if workers < 1 or shards < 1:
        raise ValueError("workers and shards must be >= 1")
    pull = size_bytes if pull_bytes is None else pull_bytes
    worker_bps = worker_bandwidth_bps or bandwidth_bps
    push_s = workers * size_bytes * 8 / (shards * bandwidth_bps)
    pull_s = workers * pull * 8 / (shards * bandwidth_bps)
    push_s = max(push_s, size_bytes * 8 / worker_bps)
    pull_s = max(pull_s, pull * 8 / worker_bps)
    return push_s + pull_s + 2 * latency_s


def allgather_s(payload_bytes: float, workers: int, bandwidth_bps: float,
                latency_s: float = 0.0) -> float:
    """Ring allgather of one payload per worker (sparse or quantised gradients, which cannot
    be summed on the way): every worker receives the p-1 others' payloads."""
    if workers < 2:
        return 0.0
    return (workers - 1) * (payload_bytes * 8 / bandwidth_bps + latency_s)


def ratio(measured_s: float, model_s: float) -> float | None:
    """measured / model (None when the model predicts no communication)."""
    return measured_s / model_s if model_s > 0 and math.isfinite(measured_s) else None
