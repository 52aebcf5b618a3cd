# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""The time budget of a training run (`--max_train_minutes`): a clock of the wall time spent training, which ends
training when the budget is spent and is saved with every checkpoint, so that a resumed run trains only what is left.

* `TimeBudgetCallback`: the clock, a Trainer callback; besides stopping training, it is what the budget learning-rate
  schedules (`schedules.budget_schedule`, through `TokenBatchSeq2SeqTrainer`'s `time_budget`) and the weight-averaging
  window (`callbacks.WeightAveragingCallback`) measure progress by (`fraction_used`);
* `TimeBudgetProgressCallback`: the training progress bar in seconds of the budget instead of steps of `max_steps`;
* `seconds_used`: the seconds a saved Trainer state records; `check_budget_left`: a resume from a checkpoint that has
  used up the budget is refused before any work.
"""

from __future__ import annotations

import logging
import os
import time

from tqdm.auto import tqdm
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState, ProgressCallback, TrainerState
from transformers.trainer_utils import IntervalStrategy

from hf_unified_mt.training.arguments import MTTrainingArguments, UsageError


logger = logging.getLogger("train")  # the training run's logger (`run.setup_logging` sets its level)


class TimeBudgetCallback(TrainerCallback, ExportableState):
    """Ends training once `minutes` of wall time have been spent training, with a final checkpoint and evaluation so
    that best-checkpoint selection sees the last weights (a fixed compute budget, e.g. on a CPU).

    The seconds used are saved with every checkpoint (`trainer_state.json`, under `stateful_callbacks`), and a run
    resumed from one goes on from there: it trains only what is left of the budget, and the budget schedules and the
    weight-averaging window, which read this clock, continue where they stopped."""

    def __init__(self, minutes: float):
        self.seconds = 60.0 * minutes
        self.start = None
        self.seconds_before = 0.0  # used by the run (or runs) before a resume

    def state(self) -> dict:
        return {"args": {"minutes": self.seconds / 60}, "attributes": {"seconds_used": self.elapsed()}}

    def on_train_begin(self, args, state, control, **kwargs):
        self.seconds_before = 0.0
        if state.global_step > 0:
            used = seconds_used(state)
            if used is None:
                logger.warning(
                    "Resumed at step %d from a checkpoint that records no time used: the %.1f-minute budget counts "
                    "from here",
                    state.global_step,
                    self.seconds / 60,
                )
            else:
                self.seconds_before = min(used, self.seconds)
        # transformers updates this entry at each checkpoint: a checkpoint saved without it needs it in place
        state.stateful_callbacks[type(self).__name__] = self.state()
        self.start = time.monotonic()
        logger.info(
            "Time budget: training stops after %.1f minutes, or at max_steps=%d if that comes first",
            self.seconds / 60,
            state.max_steps,
        )
        if self.seconds_before:
            logger.info(
                "Resumed at step %d with %.1f of the %.1f minutes used",
                state.global_step,
                self.seconds_before / 60,
                self.seconds / 60,
            )

    def elapsed(self) -> float:
        """Seconds of the budget used so far, by this run and those before a resume (at most the budget)."""
        running = time.monotonic() - self.start if self.start is not None else 0.0
        return min(self.seconds_before + running, self.seconds)

    def fraction_used(self) -> float:
        """The share of the budget used so far, in [0, 1] (what a budget schedule decays over)."""
        return self.elapsed() / self.seconds

    def on_step_end(self, args, state, control, **kwargs):
        if self.elapsed() >= self.seconds:
            logger.info(
                "Time budget of %.1f minutes reached at step %d: stopping", self.seconds / 60, state.global_step
            )
            control.should_training_stop = True
            control.should_save = True
            if args.eval_strategy != IntervalStrategy.NO:
                control.should_evaluate = True
        return control


def seconds_used(state: TrainerState) -> float | None:
    """The seconds of a time budget used when `state` (a Trainer state, e.g. loaded from a checkpoint's
    `trainer_state.json`) was saved, as [`TimeBudgetCallback`] records them; None if it records none."""
    saved = (state.stateful_callbacks or {}).get(TimeBudgetCallback.__name__)
    try:
        return float(saved["attributes"]["seconds_used"])
    except (KeyError, TypeError, ValueError):
        return None


def check_budget_left(checkpoint: str, training_args: MTTrainingArguments) -> None:
    """Refuses to resume from `checkpoint` under a `--max_train_minutes` that it has already used up."""
    try:
        used = seconds_used(TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)))
    except (OSError, TypeError, ValueError):
        return  # no readable Trainer state: the Trainer says what is wrong with the checkpoint
    if used is not None and used >= 60.0 * training_args.max_train_minutes:
        raise UsageError(
            f"--resume_from_checkpoint {checkpoint}: the run had trained {used / 60:.2f} minutes when it saved this "
            f"checkpoint, the whole --max_train_minutes {training_args.max_train_minutes:g}; nothing is left to "
            "train (pass a larger --max_train_minutes to train on)"
        )


class TimeBudgetProgressCallback(ProgressCallback):
    """The training progress bar measured against a [`TimeBudgetCallback`]: seconds of the budget used out of the
    budget, with the optimizer step as a postfix, instead of steps out of `max_steps`, which the budget ends long
    before (a `max_steps` of 100000 under a 10-minute budget would show 0/100000 and a many-hour ETA). Evaluation
    bars and logs are those of transformers' `ProgressCallback`."""

    def __init__(self, budget: TimeBudgetCallback):
        super().__init__()
        self.budget = budget

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = tqdm(
                total=round(self.budget.seconds),
                initial=self.budget.elapsed(),  # a resumed run's budget was partly used before
                desc=f"Training ({self.budget.seconds / 60:g}-minute budget)",
                unit="s",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total}s [{elapsed}<{remaining}{postfix}]",
                dynamic_ncols=True,
            )
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar.set_postfix_str(f"step {state.global_step}", refresh=False)
            self.training_bar.update(self.budget.elapsed() - self.training_bar.n)
        self.current_step = state.global_step
