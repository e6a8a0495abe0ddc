"""What the trainer experiments' load models for `testbed plan` share: a real training
step's compute on one core of this machine, timed once per model and size. Only a spec
whose trainers have real compute asks for it, and only then is torch loaded (the plan is
otherwise as offline as `testbed validate`)."""
from __future__ import annotations

_STEPS: dict[tuple, tuple[float, int]] = {}


def step_time(model: str, width: int, depth: int, batch: int, data: str) -> tuple[float, int]:
    """A training step's compute on one core here, and the gradient's bytes (timed once)."""
    key = (model, width, depth, batch, data)
    if key not in _STEPS:
        from testbed.workloads.models import step_seconds
        _STEPS[key] = step_seconds(model, width, depth, batch, data)
    return _STEPS[key]
