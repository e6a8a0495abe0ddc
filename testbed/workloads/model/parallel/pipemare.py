"""PipeMare's two corrections for an asynchronous pipeline (Yang et al., "PipeMare:
Asynchronous Pipeline Parallel DNN Training", MLSys 2021), pure. Without a flush, stage s
computes a micro-batch's forward with weights some updates older than those its gradient
is applied to (`schedule.staleness`); the two techniques make that delay harmless:

- learning-rate rescheduling (T1): stage s's step at update k is lr / tau_s^(1 - k/K) for
  the first K updates, then lr, where tau_s is the stage's delay: early steps, when the
  weights move fastest, are shortened where the gradients are most out of date;
- discrepancy correction (T2): the backward pass should use the weights the forward used,
  but keeping them (PipeDream's weight stashing) costs memory; PipeMare predicts them
  instead, today's weights less the updates since the forward, each estimated by a moving
  average of the stage's recent updates: u = w - lag * delta, delta <- gamma delta +
  (1 - gamma)(w_new - w_old), with gamma = decay^(1/tau_s).

The backward pass may also use today's weights (plain asynchronous pipelining) or the
weights the forward used, kept per micro-batch in flight (PipeDream's weight stashing):
the exact answer T2 approximates, at the memory T2 saves.
"""
from __future__ import annotations

from dataclasses import dataclass

from .schedule import staleness

# the weights a backward pass uses: today's, predicted (T2), or kept from the forward
BACKWARD_WEIGHTS = ("current", "predicted", "stashed")


@dataclass(frozen=True, kw_only=True)
class PipeMare:
    """The corrections of an asynchronous pipeline (`schedule: pipemare`): `lr_steps` is
    K, the updates over which T1's rescheduling anneals (0: off); `backward` the weights
    the backward pass uses (`predicted`: T2); `decay` is how much of an update T2's moving
    average keeps after the stage's delay."""
    lr_steps: int = 200
    backward: str = "predicted"
    decay: float = 0.1

    def label(self) -> str:
        """What the job label adds: nothing with the defaults, else what differs."""
        default = PipeMare()
        parts = (["no-lr"] if self.lr_steps <= 0 else [] if self.lr_steps == default.lr_steps
                 else [f"lr{self.lr_steps}"])
        if self.backward != default.backward:
            parts.append(f"{self.backward}-weights")
        if self.decay != default.decay:
            parts.append(f"decay{self.decay:g}")
        return "-".join(parts)


def mean_staleness(stages: int, micro: int) -> float:
    """The mean delay over the stages and micro-batches: (p-1)/(2m)."""
    return sum(sum(staleness(s, stages, micro)) for s in range(stages)) / (stages * micro)


def tau(stage: int, stages: int, micro: int) -> int:
    """The stage's delay in updates (the most of its micro-batches'; at least 1)."""
    return max(1, max(staleness(stage, stages, micro)))


def lr_scale(step: int, delay: int, steps: int) -> float:
    """T1: the factor on the learning rate at the stage's `step`-th update."""
    if steps <= 0 or step >= steps:
        return 1.0
    return float(delay) ** -(1 - step / steps)


def gamma(decay: float, delay: int) -> float:
    """T2: the moving average's factor per update, so that `decay` is left after `delay`."""
    return decay ** (1 / delay)
