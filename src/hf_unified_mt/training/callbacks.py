# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Trainer callbacks that act on the model being trained, kept out of the modeling code so that no checkpoint carries
training machinery and building a model changes no process-wide state.

The Multi-Unit Transformer (Yan, Meng and Zhou 2020, "Multi-Unit Transformers for Neural Machine Translation"):

* `AutoShuffleProjectionCallback` projects the AutoShuffle matrices after every optimizer step of a `Trainer`;
* `project_auto_shuffle_after_steps` does the same for a plain training loop, as a hook on that one optimizer;
* `MultiUnitLossLoggingCallback` logs the two parts of the MUTE training loss.

Checkpoint averaging (`--average_weights_fraction`):

* `WeightAveragingCallback` trains with the uniform average of the weights over the last part of training and ends
  with it;
* `save_weight_average` / `load_weight_average`: the running average saved with a checkpoint (`AVERAGE_NAME`), which a
  resumed run goes on averaging into.

The time budget (`--max_train_minutes`), whose clock the averaging window reads, is `budget.py`.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import safetensors
import safetensors.torch
import torch
from torch.optim.swa_utils import AveragedModel
from torch.utils.hooks import RemovableHandle
from transformers.trainer_callback import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_unified_mt.utils.files import write_bytes


if TYPE_CHECKING:
    from hf_unified_mt.training.budget import TimeBudgetCallback


logger = logging.getLogger("train")  # the training run's logger (`run.setup_logging` sets its level)


# ---------------------------------------------------------------------------------------------------------------------
# The Multi-Unit Transformer
# ---------------------------------------------------------------------------------------------------------------------


def project_auto_shuffle_after_steps(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> RemovableHandle:
    """Registers a post-step hook on `optimizer` (only on it) that projects `model`'s AutoShuffle matrices M onto the
    doubly stochastic matrices after each of its steps (Eq. 17-18 of Yan et al., "after each optimization step").
    Returns the handle; `handle.remove()` uninstalls it."""
    return optimizer.register_step_post_hook(lambda *_: model.project_auto_shuffle_())


class AutoShuffleProjectionCallback(TrainerCallback):
    """Projects the AutoShuffle matrices (Eq. 17-18 of Yan et al.) after every optimizer step of a `Trainer`, through
    `model.project_auto_shuffle_()`. Harmless for a model without that method; `training/train.py` always adds it."""

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        project = getattr(model, "project_auto_shuffle_", None)
        if project is not None:
            project()


class MultiUnitLossLoggingCallback(TrainerCallback):
    """Adds the two parts of the training loss to the Trainer's logs, next to `loss`:

    * `cross_entropy`: per optimizer step, on the same scale as the logged `loss`;
    * `shuffle_penalty`: Σ_k L_p^k (unweighted), mean over the forward passes since the last log.

    `Seq2SeqTrainer(..., callbacks=[MultiUnitLossLoggingCallback()])` shows both in the printed logs and in
    `trainer.state.log_history`. Reporting integrations (`report_to`) run before user callbacks; to have them log both
    too, use `MultiUnitLossLoggingCallback.add_to(trainer)`, which puts the callback first. The values are read from
    the model outputs (`cross_entropy`, `shuffle_penalty`) by a forward hook during training."""

    def __init__(self):
        self._hook = None
        self._sums: torch.Tensor | None = None
        self._forwards = 0
        self._has_penalty = False
        self._last_logged_step = 0

    @classmethod
    def add_to(cls, trainer) -> MultiUnitLossLoggingCallback:
        callback = cls()
        trainer.callback_handler.callbacks.insert(0, callback)
        return callback

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._last_logged_step = state.global_step
        if self._hook is None and model is not None:
            self._hook = model.register_forward_hook(self._record)

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _record(self, module, args, output) -> None:
        cross_entropy = getattr(output, "cross_entropy", None)
        if not module.training or cross_entropy is None:
            return
        penalty = getattr(output, "shuffle_penalty", None)
        self._has_penalty = self._has_penalty or penalty is not None
        if penalty is None:
            penalty = torch.zeros_like(cross_entropy)
        values = torch.stack([cross_entropy.detach().float(), penalty.detach().float()])
        self._sums = values if self._sums is None else self._sums + values
        self._forwards += 1

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs or not self._forwards:
            return
        steps = max(state.global_step - self._last_logged_step, 1)
        cross_entropy, penalty = self._sums.tolist()
        extra = {"cross_entropy": cross_entropy / steps}
        if self._has_penalty:
            extra["shuffle_penalty"] = penalty / self._forwards
        logs.update(extra)
        if state.log_history and state.log_history[-1].get("loss") == logs["loss"]:
            state.log_history[-1].update(extra)  # the Trainer stored a copy of the logs before calling back
        self._sums, self._forwards, self._last_logged_step = None, 0, state.global_step


# ---------------------------------------------------------------------------------------------------------------------
# Checkpoint averaging
# ---------------------------------------------------------------------------------------------------------------------


AVERAGE_NAME = "weight_average.safetensors"


class WeightAveragingCallback(TrainerCallback):
    """Averages the weights uniformly over the last `fraction` of training, one sample after each update, and puts
    the average into the model when training stops, before the final checkpoint and evaluation (Vaswani et al. 2017
    average their last checkpoints; here every update of the window counts). Progress is the time budget's clock
    (which a resumed run continues) or `global_step / max_steps`, whichever is further (so the window always ends at
    the update that stops training). The average (a copy of the weights, `torch.optim.swa_utils.AveragedModel`) is
    saved with each checkpoint inside the window (`AVERAGE_NAME`), and a run resumed from that checkpoint
    (`resume_from`) goes on averaging into it."""

    def __init__(self, fraction: float, time_budget: TimeBudgetCallback | None = None, resume_from: str | None = None):
        self.fraction = fraction
        self.time_budget = time_budget
        self.resume_from = resume_from
        self.averaged = None
        self.first_step = None

    def progress(self, state) -> float:
        steps = state.global_step / state.max_steps if state.max_steps > 0 else 0.0
        return max(steps, self.time_budget.fraction_used()) if self.time_budget is not None else steps

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.averaged = None
        if state.global_step == 0:
            return
        path = os.path.join(self.resume_from, AVERAGE_NAME) if self.resume_from is not None else None
        if path is not None and os.path.isfile(path):
            self.averaged, self.first_step = load_weight_average(path, model)
            if self.averaged is not None:
                logger.info(
                    "Resumed at step %d with the weight average of steps %d-%d",
                    state.global_step,
                    self.first_step,
                    state.global_step,
                )
        elif self.progress(state) > 1 - self.fraction:
            logger.warning(
                "Resumed at step %d, inside the weight-averaging window, from a checkpoint without its average (%s): "
                "the average starts anew from here",
                state.global_step,
                AVERAGE_NAME,
            )

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.progress(state) >= 1 - self.fraction:
            if self.averaged is None:
                self.averaged = AveragedModel(model, use_buffers=False)  # a copy; its first update takes the weights
                self.first_step = state.global_step
            self.averaged.update_parameters(model)
        # transformers' flow callback, always first, has decided by now whether this update ends training
        if control.should_training_stop and self.averaged is not None:
            with torch.no_grad():
                for mine, average in zip(model.parameters(), self.averaged.module.parameters(), strict=True):
                    mine.copy_(average)
            logger.info(
                "Weights averaged over %d updates (steps %d-%d)",
                int(self.averaged.n_averaged),
                self.first_step,
                state.global_step,
            )
            self.averaged = None
        return control

    def on_save(self, args, state, control, **kwargs):
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        if self.averaged is not None and args.should_save and os.path.isdir(folder):
            save_weight_average(os.path.join(folder, AVERAGE_NAME), self.averaged, self.first_step)


def save_weight_average(path: str, averaged: AveragedModel, first_step: int) -> None:
    """Writes the running average of [`WeightAveragingCallback`] (its weights, how many updates it holds and the
    first of them) to `path`, a safetensors file."""
    tensors = {name: parameter.detach().cpu().contiguous() for name, parameter in averaged.module.named_parameters()}
    metadata = {"n_averaged": str(int(averaged.n_averaged)), "first_step": str(first_step)}
    write_bytes(path, safetensors.torch.save(tensors, metadata=metadata))


def load_weight_average(path: str, model: torch.nn.Module) -> tuple[AveragedModel, int] | tuple[None, None]:
    """The running average that `save_weight_average` wrote to `path`, for `model`, and its first step; (None, None),
    with a warning, if the file does not hold an average of this model."""
    try:
        with safetensors.safe_open(path, framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        n_averaged, first_step = int(metadata["n_averaged"]), int(metadata["first_step"])
    except (OSError, KeyError, ValueError, safetensors.SafetensorError) as error:
        logger.warning("%s cannot be read (%s): the weight average starts anew from here", path, error)
        return None, None
    averaged = AveragedModel(model, use_buffers=False)
    parameters = dict(averaged.module.named_parameters())
    if set(tensors) != set(parameters) or any(tensors[name].shape != p.shape for name, p in parameters.items()):
        logger.warning("%s is not a weight average of this model: the average starts anew from here", path)
        return None, None
    with torch.no_grad():
        for name, parameter in parameters.items():
            parameter.copy_(tensors[name])
        averaged.n_averaged.fill_(n_averaged)
    return averaged, first_step
