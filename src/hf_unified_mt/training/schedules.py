# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Learning-rate schedules that decay over a training *time* budget.

transformers' `linear` and `cosine` schedules decay over `max_steps`. Under `--max_train_minutes` the number of steps
the budget buys is unknown in advance (it is the machine's speed), and `max_steps` only caps it: a schedule decaying
over a cap of 100,000 steps that the budget ends at step 2,000 never decays. Here the same shapes decay over the
budget instead, measured by its clock:

    factor(step) = min(1, step / warmup_steps) · shape(p),   p = max(seconds used / budget, step / max_steps)

with `shape(p) = 1 - p` (`linear`) or `(1 + cos(pi p)) / 2` (`cosine`), so the learning rate reaches zero when the
budget (or `max_steps`, whichever comes first) ends. Without a clock, p = step / max_steps: transformers' schedules
up to the warm-up's own treatment. Decaying to zero at the end of a fixed budget is what Li, Yumer and Ramanan (2020,
"Budgeted Training: Rethinking Deep Neural Network Training Under Resource Constraints") found best for a budget
known in advance.
"""

import math
from collections.abc import Callable

import torch


BUDGET_SCHEDULES = ("linear", "cosine")


def budget_schedule(
    optimizer: torch.optim.Optimizer,
    shape: str,
    warmup_steps: int,
    max_steps: int,
    budget_used: Callable[[], float] | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A `LambdaLR` that warms up linearly over `warmup_steps` and then decays by `shape` (`"linear"` or `"cosine"`)
    over the larger of two progress measures: `step / max_steps`, and `budget_used()` (the fraction of a time budget
    used, in [0, 1]; None for no time budget)."""
    if shape not in BUDGET_SCHEDULES:
        raise ValueError(f"budget schedules are {', '.join(BUDGET_SCHEDULES)}, not {shape!r}")
    if max_steps <= 0:
        raise ValueError(f"max_steps must be positive, not {max_steps}")

    def factor(step: int) -> float:
        progress = step / max_steps
        if budget_used is not None:
            progress = max(progress, budget_used())
        progress = min(max(progress, 0.0), 1.0)
        warmup = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
        decay = 1.0 - progress if shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return warmup * decay

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
