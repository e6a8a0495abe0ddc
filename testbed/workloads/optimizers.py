"""The training worker's optimizers: momentum SGD (torch's), LARS and LAMB, each applied
to every parameter tensor as a layer of its own (the ratios and the papers' defaults:
largebatch.py). torch ships neither LARS nor LAMB; timm's would bring torchvision and
other packages into every worker for two short loops.
"""
from __future__ import annotations

import torch

from .largebatch import (
    LAMB_BETAS,
    LAMB_EPS,
    LAMB_WEIGHT_DECAY,
    LARS_TRUST,
    LARS_WEIGHT_DECAY,
    lamb_ratio,
    lars_ratio,
)


class Lars(torch.optim.Optimizer):
    """LARS (Algorithm 1): v = m v + lr * local_lr * (g + beta w); w = w - v, with
    local_lr = lars_ratio(||w||, ||g||) per tensor."""

    def __init__(self, params, lr: float, momentum: float = 0.9,
                 weight_decay: float = LARS_WEIGHT_DECAY, trust: float = LARS_TRUST):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust=trust))

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            decay, momentum = group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                local = lars_ratio(p.norm().item(), p.grad.norm().item(), group["trust"],
                                   decay)
                update = p.grad.add(p, alpha=decay).mul_(group["lr"] * local)
                buf = self.state[p].get("momentum")
                if buf is None:
                    buf = self.state[p]["momentum"] = update
                else:
                    buf.mul_(momentum).add_(update)
                p.sub_(buf)
        return None


class Lamb(torch.optim.Optimizer):
    """LAMB (Algorithm 2): Adam's bias-corrected moments give r = m / (sqrt(v) + eps); the
    step is lr * lamb_ratio(||x||, ||r + lambda x||) * (r + lambda x) per tensor."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = LAMB_BETAS,
                 eps: float = LAMB_EPS, weight_decay: float = LAMB_WEIGHT_DECAY):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        for group in self.param_groups:
            (b1, b2), eps, decay = group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                m, v, t = state["m"], state["v"], state["t"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                r = (m / (1 - b1 ** t)).div_((v / (1 - b2 ** t)).sqrt_().add_(eps))
                r.add_(p, alpha=decay)
                p.sub_(r.mul_(group["lr"] * lamb_ratio(p.norm().item(), r.norm().item())))
        return None


def build(name: str, params, lr: float, momentum: float = 0.9,
          weight_decay: float | None = None) -> torch.optim.Optimizer:
    """The worker's optimizer `name` (largebatch.OPTIMIZERS); `weight_decay` None: the
    optimizer's paper's (plain SGD: none, as the worker always ran it)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum,
                               weight_decay=weight_decay or 0.0)
    if name == "lars":
        return Lars(params, lr, momentum, LARS_WEIGHT_DECAY if weight_decay is None
                    else weight_decay)
    if name == "lamb":
        return Lamb(params, lr, weight_decay=LAMB_WEIGHT_DECAY if weight_decay is None
                    else weight_decay)
    raise ValueError(f"unknown optimizer {name!r}")


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr
