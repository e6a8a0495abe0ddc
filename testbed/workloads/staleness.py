"""Staleness-aware learning rates at a parameter server, pure: the weight of a push under
DynSGD's rule (Jiang et al., "Heterogeneity-aware Distributed Parameter Servers", SIGMOD
2017: an update computed on parameters tau updates old counts 1/(tau+1)), normalised to the
n-1 updates that a lockstep round of n workers puts between a read and a push, so that a
push no staler than that keeps its whole weight. Under SSP it is the survey's DynSSP.
"""
from __future__ import annotations

LR_STALENESS = ("none", "dynsgd")


def staleness_weight(staleness: float, workers: int) -> float:
    """A push's weight, `staleness` updates after its read, among `workers` workers:
    min(1, workers / (staleness + 1))."""
    return min(1.0, workers / (staleness + 1))


def expected_weight(workers: int, slowdown: float, iters: int | None = None) -> float:
    """The mean weight of the pushes of a worker `slowdown` times slower than the others'
    pace. While the others run, each pushes `slowdown` times between its read and its push,
    so tau = (workers - 1) x slowdown; under SSP the bound holds them to its pace (slowdown
    1: weight 1), under ASP they run at their own. With `iters` each, the others are done
    after its first iters / slowdown pushes, and the rest are fresh (weight 1)."""
    running = staleness_weight((workers - 1) * slowdown, workers)
    if iters is None or slowdown <= 1:
        return running
    shared = iters / slowdown
    return (shared * running + (iters - shared)) / iters
