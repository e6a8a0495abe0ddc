"""The analytical model of a parallel job (pure): what each rank sends per iteration, by
collective type, and how long an iteration should take on an idle network.

Collectives are priced as rings (what Gloo runs, and what the worker's own reduce-scatter
does), with the bandwidth a rank gets in its group and a per-step latency alpha:
- allreduce of S bytes over n ranks: 2(n-1)/n S sent per rank, 2(n-1) steps;
- all-gather / reduce-scatter (S the full tensor): (n-1)/n S, n-1 steps;
- all-to-all: (n-1)/n S, all pairs at once, one step;
- send/recv (pipeline): S, one step.
A data-parallel step allreduces the stage's gradients once per iteration (after the last
micro-batch; no overlap with backward). ZeRO-1/2 reduce-scatter the gradients and
all-gather the updated parameters (the same volume as plain data parallel); ZeRO-3 / FSDP
all-gathers every layer's parameters before its forward and again before its backward (for
every micro-batch) and reduce-scatters the gradients once: 3(n-1)/n P with one micro-batch,
1.5x plain data parallel.

Compute is FLOPs times `s_per_flop` (the emulated device's speed and the time scale). The
pipeline is replayed by `schedule.simulate` with per-stage forward and backward times
(compute plus the TP, EP and FSDP collectives inside each layer, which are on the critical
path) and the activation transfer between stages.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from testbed.workloads.model.parallel.desc import (
    LayerWork,
    ModelDesc,
    layer_work,
    mlp_work,
    stage_layers,
)
from testbed.workloads.model.parallel.layout import Layout
from testbed.workloads.model.parallel.schedule import ASYNC, bubble_fraction, simulate

KINDS = ("tp", "pp", "dp", "ep", "fsdp")  # collective types, one process group (DSCP) each


def ring_allreduce_sent(size: float, n: int) -> float:
    return 2 * (n - 1) / n * size if n > 1 else 0.0


def ring_gather_sent(size: float, n: int) -> float:
    """all-gather, reduce-scatter or all-to-all of a `size`-byte (full) tensor."""
    return (n - 1) / n * size if n > 1 else 0.0


@dataclass(frozen=True)
class JobShape:
    """A job's shape: the model (a described transformer, or the real-compute MLP as
    (width, depth, micro-batch samples)), the layout, and how the iteration runs."""
    model: ModelDesc | None
    layout: Layout
    schedule: str = "1f1b"
    micro_batches: int = 1
    zero: int = 0                   # 0: plain DP allreduce; 1, 2: ZeRO-1/2; 3: ZeRO-3 / FSDP
    scale: float = 1.0
    mlp: tuple[int, int, int] | None = None

    def layers(self) -> list[LayerWork]:
        if self.model is None:
            if self.mlp is None:
                raise ValueError("a plan needs a model description or an MLP")
            return mlp_work(*self.mlp, self.layout)
        return layer_work(self.model, self.layout, self.scale)

    @property
    def dtype_bytes(self) -> int:
        return self.model.dtype_bytes if self.model is not None else 4

    def stage_of(self, rank: int) -> int:
        return self.layout.coords(rank)[1]

    def stage_work(self, stage: int) -> list[LayerWork]:
        work = self.layers()
        return [work[i] for i in stage_layers(len(work), self.layout.pp)[stage]]


def sent_bytes(plan: JobShape, rank: int) -> dict[str, float]:
    """Payload bytes this rank sends per iteration, by collective type."""
    lay, m, nb = plan.layout, plan.micro_batches, plan.dtype_bytes
    work = plan.stage_work(plan.stage_of(rank))
    stage = plan.stage_of(rank)
    edp = lay.dp // lay.ep
    dense = sum(w.params for w in work) * nb
    expert = sum(w.expert_params for w in work) * nb
    out = dict.fromkeys(KINDS, 0.0)
    out["tp"] = sum(w.tp_allreduces * m * (ring_allreduce_sent(w.tp_elems * nb, lay.tp)
                                           + ring_allreduce_sent(w.tp_elems_bwd * nb, lay.tp))
                    for w in work)
    out["ep"] = sum(4 * m * ring_gather_sent(w.a2a_elems * nb, lay.ep) for w in work)
    neighbours = (stage > 0) + (stage < lay.pp - 1)
    out["pp"] = neighbours * m * work[-1].act_elems * nb if neighbours else 0.0
    if neighbours and stage > 0:  # the gradient sent back is the previous stage's output
        prev = plan.stage_work(stage - 1)[-1].act_elems * nb
        out["pp"] = m * prev + (m * work[-1].act_elems * nb if stage < lay.pp - 1 else 0.0)
    if plan.zero == 0:
        out["dp"] = ring_allreduce_sent(dense, lay.dp) + ring_allreduce_sent(expert, edp)
    elif plan.zero in (1, 2):
        out["fsdp"] = (2 * ring_gather_sent(dense, lay.dp) + 2 * ring_gather_sent(expert, edp))
    else:
        out["fsdp"] = ((2 * m + 1) * (ring_gather_sent(dense, lay.dp)
                                      + ring_gather_sent(expert, edp)))
    return out


@dataclass(frozen=True)
class Network:
    """What a rank gets from the fabric, per collective type: bytes/s (its host link rate
    over the load its group's traffic puts on the busiest link) and the one-way latency of
    a step between two members (half the ping RTT between them: a TP pair inside an edge
    switch is nearer than a DP pair across the core)."""
    bandwidth: dict[str, float]
    latency_s: dict[str, float] = field(default_factory=dict)

    def ring(self, kind: str, sent: float, steps: int) -> float:
        if sent <= 0:
            return 0.0
        return sent / self.bandwidth[kind] + steps * self.latency_s.get(kind, 0.0)


def predict(plan: JobShape, net: Network, s_per_flop: float) -> dict:
    """The model's iteration: per-stage forward/backward times per micro-batch, the pipeline
    (replayed), the synchronisation after it, each collective type's time on the critical
    path of the slowest rank, and the bubble."""
    lay, m, nb = plan.layout, plan.micro_batches, plan.dtype_bytes
    edp = lay.dp // lay.ep
    fwd, bwd, comm_stage = [], [], []
    for s in range(lay.pp):
        f = b = 0.0
        comm = dict.fromkeys(KINDS, 0.0)
        for w in plan.stage_work(s):
            tp = w.tp_allreduces * net.ring("tp", ring_allreduce_sent(w.tp_elems * nb, lay.tp),
                                            2 * (lay.tp - 1))
            tp_b = w.tp_allreduces * net.ring(
                "tp", ring_allreduce_sent(w.tp_elems_bwd * nb, lay.tp), 2 * (lay.tp - 1))
            ep = 2 * net.ring("ep", ring_gather_sent(w.a2a_elems * nb, lay.ep), 1)
            ag = 0.0
            if plan.zero == 3:
                ag = (net.ring("fsdp", ring_gather_sent(w.params * nb, lay.dp), lay.dp - 1)
                      + net.ring("fsdp", ring_gather_sent(w.expert_params * nb, edp), edp - 1))
            f += w.fwd_flops * s_per_flop + tp + ep + ag
            b += w.bwd_flops * s_per_flop + tp_b + ep + ag
            comm["tp"] += m * (tp + tp_b)
            comm["ep"] += 2 * m * ep
            comm["fsdp"] += 2 * m * ag
        fwd.append(f)
        bwd.append(b)
        comm_stage.append(comm)
    syncs = []
    for s in range(lay.pp):
        work = plan.stage_work(s)
        dense = sum(w.params for w in work) * nb
        expert = sum(w.expert_params for w in work) * nb
        if plan.zero == 0:
            t = (net.ring("dp", ring_allreduce_sent(dense, lay.dp), 2 * (lay.dp - 1))
                 + net.ring("dp", ring_allreduce_sent(expert, edp), 2 * (edp - 1)))
            comm_stage[s]["dp"] = t
        else:
            rounds = 2 if plan.zero in (1, 2) else 1  # reduce-scatter (+ all-gather)
            t = rounds * (net.ring("fsdp", ring_gather_sent(dense, lay.dp), lay.dp - 1)
                          + net.ring("fsdp", ring_gather_sent(expert, edp), edp - 1))
            comm_stage[s]["fsdp"] += t
        syncs.append(t)
    act = max(w.act_elems for w in plan.layers()) * nb
    transfer = net.ring("pp", act, 1) if lay.pp > 1 else 0.0
    # without a flush (PipeMare) each stage synchronises at its own update, inside the
    # pipeline's steady period; after the flush otherwise
    steady = plan.schedule in ASYNC
    pipe = simulate(plan.schedule, lay.pp, m, fwd, bwd, transfer, syncs if steady else None)
    sync = max(syncs)
    slowest = max(range(lay.pp), key=lambda s: pipe["busy_s"][s] + syncs[s])
    comm = dict(comm_stage[slowest])
    comm["pp"] = 2 * m * transfer if lay.pp > 1 else 0.0
    compute = m * sum(w.fwd_flops + w.bwd_flops for w in plan.stage_work(slowest)) * s_per_flop
    if steady:  # the period holds each stage's own sync: the slowest stage's is its share
        sync = syncs[slowest]
    iteration = pipe["iteration_s"] if steady else pipe["iteration_s"] + sync
    pipeline = iteration - sync
    return {"iteration_s": iteration, "pipeline_s": pipeline, "sync_s": sync,
            "compute_s": compute, "fwd_s": fwd, "bwd_s": bwd,
            "transfer_s": transfer, "comm_s": comm, "bubble": pipe["bubble"],
            "bubble_ideal": 0.0 if steady else bubble_fraction(lay.pp, m)}
