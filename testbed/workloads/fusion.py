"""When a data-parallel worker sends its gradients, pure: which layers' gradients go in one
message, and what the overlap of backward and communication then costs.

Layers are the model's parameter tensors in forward order 0..L-1; backward produces them
from L-1 down to 0 (`tb[l]` seconds each, from the start of backward). A message (an
allreduce) of M bytes takes a + b M seconds (`CommModel`), one at a time, in the order
they are started. This is the timing model of wait-free backpropagation in Shi, Chu and Li,
"MG-WFBP: Efficient Data Communication for Distributed Synchronous SGD Algorithms"
(INFOCOM 2019), whose merge of consecutive layers is `mgwfbp_groups`; `wfbp_groups` sends
each layer alone as soon as it is ready, `one_group` everything after backward, and
`fusion` what Horovod's tensor fusion sends (a fusion buffer threshold and a cycle
time: testbed/workloads/fusionsync.py runs it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

MODES = ("one", "wfbp", "mgwfbp", "optimal", "horovod")
PROFILED = ("mgwfbp", "optimal")  # planned from a profile of the first iterations
PROFILE_ITERS = 3                 # profiled iterations, after a first one left out
HOROVOD_FUSION_THRESHOLD = 128 * 1024 * 1024  # bytes: Horovod's defaults since v0.21
HOROVOD_CYCLE_S = 0.001                       # (HOROVOD_FUSION_THRESHOLD, _CYCLE_TIME)


@dataclass(frozen=True)
class CommModel:
    """T(M) = a + b M: a message's start-up `a` (s) and its time per byte `b` (s/B)."""
    a: float
    b: float

    def time(self, nbytes: int) -> float:
        return self.a + self.b * nbytes if nbytes > 0 else 0.0


@dataclass(frozen=True)
class Overlap:
    """The timing of one iteration's backward and messages, from the start of backward:
    each message's (first layer ready, start, end), backward's end and the last message's."""
    messages: list[tuple[float, float, float]]
    backward_s: float
    end_s: float

    @property
    def exposed_s(self) -> float:
        """Communication not hidden behind backward."""
        return max(0.0, self.end_s - self.backward_s)


def ready_times(tb: list[float]) -> list[float]:
    """When each layer's gradient is ready, from the start of backward (L-1 first)."""
    ready = [0.0] * len(tb)
    t = 0.0
    for layer in reversed(range(len(tb))):
        t += tb[layer]
        ready[layer] = t
    return ready


def overlap(groups: list[list[int]], sizes: list[int], tb: list[float],
            comm: CommModel) -> Overlap:
    """The model's timing of `groups` (each a list of layers sent as one message when all
    of them are ready; messages go in the order their last layer became ready, one at a
    time): the recurrence tau_c = max(previous end, ready) of the paper."""
    ready = ready_times(tb)
    order = sorted(groups, key=lambda g: max(ready[layer] for layer in g))
    t, messages = 0.0, []
    for group in order:
        at = max(ready[layer] for layer in group)
        start = max(t, at)
        t = start + comm.time(sum(sizes[layer] for layer in group))
        messages.append((at, start, t))
    backward = ready[0] if tb else 0.0
    return Overlap(messages, backward, max(t, backward))


def one_group(n_layers: int) -> list[list[int]]:
    """Every gradient in one message after backward."""
    return [list(range(n_layers))] if n_layers else []


def wfbp_groups(n_layers: int) -> list[list[int]]:
    """Wait-free backpropagation: each layer's gradient alone, as soon as it is ready."""
    return [[layer] for layer in reversed(range(n_layers))]


def mgwfbp_groups(sizes: list[int], tb: list[float], comm: CommModel) -> list[list[int]]:
    """MG-WFBP's merge: from the last layer down, layer l's gradient waits for layer l-1's
    and goes with it when the wait, ready(l-1) - tau_c(l), is shorter than the start-up a
    the merge saves (the authors' code, with tau_c kept up to date as the pass goes, which
    makes the same decisions in O(L))."""
    n = len(sizes)
    if n == 0:
        return []
    ready = ready_times(tb)
    groups: list[list[int]] = []
    group = [n - 1]
    pending = sizes[n - 1]         # the bytes of the open group
    free_at = 0.0                  # when the messages before the open group are done
    start = max(free_at, ready[n - 1])  # the open group's start if it went now
    for layer in range(n - 1, 0, -1):
        if ready[layer - 1] - start < comm.a:
            group.append(layer - 1)
            pending += sizes[layer - 1]
            start = max(free_at, ready[layer - 1])
        else:
            groups.append(group)
            free_at = start + comm.time(pending)
            group, pending = [layer - 1], sizes[layer - 1]
            start = max(free_at, ready[layer - 1])
    groups.append(group)
    return groups


def optimal_groups(sizes: list[int], tb: list[float], comm: CommModel) -> list[list[int]]:
    """The contiguous grouping with the earliest end under the model, by dynamic
    programming over where the groups begin (O(L^2)): the end of the messages that cover
    layers j..L-1 only ever delays what follows, so the earliest such end is all the
    next group needs to know. MG-WFBP's greedy merge is not always this (a merge that pays
    off alone can make later ones wait longer than they save)."""
    n = len(sizes)
    ready = ready_times(tb)
    best = [0.0] * (n + 1)             # best[j]: earliest end having sent layers j..n-1
    cut = [n] * (n + 1)                # cut[i]: where the group that starts at i ends
    for i in range(n - 1, -1, -1):
        best[i] = math.inf
        for j in range(i + 1, n + 1):
            end = max(best[j], ready[i]) + comm.time(sum(sizes[i:j]))
            if end < best[i] - 1e-15:
                best[i], cut[i] = end, j
    groups, i = [], 0
    while i < n:
        groups.append(list(range(i, cut[i])))
        i = cut[i]
    return groups[::-1]


def best_groups(sizes: list[int], tb: list[float], comm: CommModel) -> list[list[int]]:
    """The contiguous grouping with the earliest end, by trying every one (2^(L-1)): what
    a merge plan is checked against on small cases."""
    n = len(sizes)
    best, best_end = one_group(n), overlap(one_group(n), sizes, tb, comm).end_s
    for k in range(n):
        for cuts in combinations(range(1, n), k):
            bounds = [0, *cuts, n]
            groups = [list(range(lo, hi)) for lo, hi in zip(bounds, bounds[1:])]
            end = overlap(groups, sizes, tb, comm).end_s
            if end < best_end - 1e-12:
                best, best_end = groups, end
    return best


def pack(due: list[int], sizes: list[int], threshold: int) -> list[list[int]]:
    """Horovod's fusion buffers: the `due` tensors, in their order, into buffers of at most
    `threshold` bytes of `sizes` (a tensor larger than that alone)."""
    buffers: list[list[int]] = []
    filled = 0
    for i in due:
        if buffers and buffers[-1] and filled + sizes[i] <= threshold:
            buffers[-1].append(i)
            filled += sizes[i]
        else:
            buffers.append([i])
            filled = sizes[i]
    return buffers


def fusion(sizes: list[int], tb: list[float], comm: CommModel,
           threshold: int = HOROVOD_FUSION_THRESHOLD,
           cycle_s: float = HOROVOD_CYCLE_S) -> tuple[list[list[int]], Overlap]:
    """Horovod's tensor fusion, its groups and their timing: a background loop's cycle
    starts every `cycle_s` (or when the last one's work is done, if later) with a
    negotiation (a message of one 4-byte flag per layer) of which gradients every worker
    has ready at the cycle's start; those not yet sent go, in the order they became ready,
    into fusion buffers of at most `threshold` bytes (one larger than that alone), sent one
    after the other."""
    if cycle_s <= 0:
        raise ValueError("cycle_s must be > 0")
    ready = ready_times(tb)
    left = sorted(range(len(sizes)), key=lambda layer: ready[layer])
    groups: list[list[int]] = []
    messages: list[tuple[float, float, float]] = []
    s = 0.0  # a cycle's start, from the start of backward
    while left:
        t = s + comm.time(4 * len(sizes))  # the negotiation, every cycle
        due = [layer for layer in left if ready[layer] <= s + 1e-12]
        left = left[len(due):]
        for buffer in pack(due, sizes, threshold):
            start, t = t, t + comm.time(sum(sizes[i] for i in buffer))
            groups.append(buffer)
            messages.append((max(ready[i] for i in buffer), start, t))
        s = max(s + cycle_s, t)
    backward = ready[0] if tb else 0.0
    end = messages[-1][2] if messages else 0.0
    return groups, Overlap(messages, backward, max(end, backward))
