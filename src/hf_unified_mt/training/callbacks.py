# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Trainer callbacks and optimizer hooks for the Multi-Unit Transformer (Yan, Meng and Zhou 2020, "Multi-Unit
Transformers for Neural Machine Translation"), kept out of the modeling code so that no checkpoint carries training
machinery and building a model changes no process-wide state.

* `AutoShuffleProjectionCallback` projects the AutoShuffle matrices after every optimizer step of a `Trainer`;
* `project_auto_shuffle_after_steps` does the same for a plain training loop, as a hook on that one optimizer;
* `MultiUnitLossLoggingCallback` logs the two parts of the MUTE training loss.
"""

import torch
from torch.utils.hooks import RemovableHandle
from transformers.trainer_callback import TrainerCallback


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
    def add_to(cls, trainer) -> "MultiUnitLossLoggingCallback":
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
