"""The permutation experiment's models, pure: what a non-blocking switch gives a pattern's
flows, and what the fabric and its routing's plan give them in theory, beside which each
measured phase is drawn."""
from __future__ import annotations

from controllers import trace
from controllers.flowsched import estimate_demands
from testbed.config.units import tcp_payload_fraction
from testbed.results.stats import percentile, round_or_none
from topologies.fairshare import proportional, sampled_totals
from topologies.graph import host_rate_sum
from topologies.model import Topology


def maxmin_model(pairs, hosts: int, mtu_bytes: int) -> float:
    """What a non-blocking switch gives these flows, as a fraction of the hosts' summed
    rate: their max-min fair shares limited only by the NICs (Hedera's natural demands:
    every flow's TCP fills what its sender and receiver leave it), counted as TCP payload.
    The reference the measured non-blocking column is checked against, pattern by
    pattern (all NICs at one rate)."""
    return sum(estimate_demands(pairs)) / hosts * tcp_payload_fraction(mtu_bytes)


MODEL_SAMPLES = 200  # hash draws per pattern for a hashed routing's max-min model
PF_SAMPLES = 50  # ... and for its proportionally fair model (a convex program per draw)
UNMODELLED = ("hedera", "hedera_sa", "cthrough")  # routings whose paths change as they run


def routed_model(topo: Topology, plan, pairs, mtu_bytes: int,
                 seed: int) -> tuple[float, float, float, float | None] | None:
    """What this fabric and its routing `plan` give these flows in theory, as fractions of
    the hosts' summed rate: the flows' max-min fair shares on the paths the plan gives them
    (controllers/trace.py), counted as TCP payload; for a hashed routing, over
    MODEL_SAMPLES draws of every flow's path (its shares of the hash), the mean and the
    10th and 90th percentiles (one run is one draw: its hash outcome lands in that range).
    Last, the mean of the proportionally fair shares on the same paths (PF_SAMPLES draws):
    where TCP settles when flows cross different numbers of busy links (None if the
    solver fails on a draw). None without a plan (a scheduler whose paths change while it runs: UNMODELLED)."""
    if plan is None:
        return None
    choices = [trace.paths(topo, plan, src, dst) for src, dst in pairs]
    fraction = tcp_payload_fraction(mtu_bytes)
    totals = sampled_totals(topo, choices, MODEL_SAMPLES, seed, rate_of=lambda r: r * fraction)
    try:
        fair = sampled_totals(topo, choices, PF_SAMPLES, seed, rate_of=lambda r: r * fraction,
                              share=proportional)
    except ValueError:  # the solver's failure: no proportional model, the rest stands
        fair = []
    ideal = host_rate_sum(topo)
    return (sum(totals) / len(totals) / ideal, percentile(totals, 10) / ideal,
            percentile(totals, 90) / ideal, sum(fair) / len(fair) / ideal if fair else None)


def model_cells(model: tuple[float | None, ...] | None) -> list[float | None]:
    """routed_model's four CSV cells (empty without a model)."""
    return [round_or_none(x, 4) for x in model] if model else [None] * 4
