# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Token-based batching for translation training (the fairseq `--max-tokens` habit) on top of `Seq2SeqTrainer`.

[`MaxTokensBatchSampler`] groups sentence pairs of similar length into batches whose *padded* size,
`n_sentences * (longest source + longest target)`, stays within `max_tokens`. Under distributed training each rank gets
a disjoint, equally long list of batches (the order is shuffled by `seed + epoch`, identically on every rank, then dealt
out round-robin), so no collective communication is needed and no rank waits for another at the end of an epoch.

[`TokenBatchSeq2SeqTrainer`] is a `Seq2SeqTrainer` that uses the sampler for its training dataloader when `max_tokens`
is set. Accelerate would normally wrap a batch sampler in a `BatchSamplerShard` and deal its batches out to the ranks a
second time; the trainer turns that wrapper into a pass-through, the way `Trainer` itself does for its
`BatchRebalanceSampler` (transformers 5.23, `Trainer._get_dataloader`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np
import torch
from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher
from torch.utils.data import DataLoader, Sampler
from transformers import Seq2SeqTrainer
from transformers.trainer_pt_utils import LabelSmoother
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, seed_worker

from ..utils.files import write_json, write_text
from .data import sequence_lengths
from .schedules import BUDGET_SCHEDULES, budget_schedule


logger = logging.getLogger(__name__)

# Written into each checkpoint: the training loss summed over every step up to it, so that a resumed run reports the
# whole run's mean training loss.
LOSS_SUM_NAME = "train_loss_sum.json"


def logged_loss_sum(log_history: list[dict], until_step: int) -> float | None:
    """An estimate of the training loss summed over steps 1..`until_step` from the logged losses (each the mean over
    its logging interval), for checkpoints saved without [`LOSS_SUM_NAME`]; None if nothing was logged."""
    total, covered, previous = 0.0, 0, 0
    for entry in log_history:
        if "loss" in entry and "step" in entry and previous < entry["step"] <= until_step:
            total += entry["loss"] * (entry["step"] - previous)
            covered += entry["step"] - previous
            previous = entry["step"]
    return total / covered * until_step if covered else None


class ExampleTooLongError(ValueError):
    """An example does not fit in a batch of `max_tokens` tokens even on its own."""


def _round_up(length: int, multiple: int | None) -> int:
    if not multiple:
        return length
    return int(math.ceil(length / multiple) * multiple)


class MaxTokensBatchSampler(Sampler[list[int]]):
    """Batch sampler that fills batches up to a number of padded tokens instead of a number of sentences.

    Examples are sorted by source length, then target length (ties broken at random, by `seed + epoch`), and cut
    greedily into batches whose padded token count `n * (max_source_len + max_target_len)` is at most `max_tokens`.
    The batch order is then shuffled (by `seed + epoch`) and the batches are dealt out to the ranks round-robin.

    The number of batches does not depend on the epoch: the sorted length sequence is the same in every epoch, only
    the identity of equally long examples changes. If the number of batches is not a multiple of `num_replicas`, the
    batches with the most sentences are split in two until it is (no example is dropped or repeated); only when every
    batch holds a single sentence are the first batches repeated (or, with `drop_last`, the last ones dropped).

    Args:
        source_lengths (`Sequence[int]`): length in tokens of each source (the encoder input).
        target_lengths (`Sequence[int]`, *optional*): length in tokens of each target (the labels).
        max_tokens (`int`): the most padded source + target tokens in one batch.
        max_sentences (`int`, *optional*): also cap the number of sentences per batch.
        num_replicas (`int`, defaults to 1): number of data-parallel ranks.
        rank (`int`, defaults to 0): this rank.
        shuffle (`bool`, defaults to `True`): shuffle the tie-breaking and the batch order each epoch.
        seed (`int`, defaults to 0): the seed; the same on every rank.
        pad_to_multiple_of (`int`, *optional*): the collator's `pad_to_multiple_of`, used when counting padded tokens.
        drop_last (`bool`, defaults to `False`): drop batches to make the count divisible by `num_replicas` instead of
            splitting batches (only used when splitting is impossible).

    Raises:
        [`ExampleTooLongError`] if one example alone has more than `max_tokens` padded tokens.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int] | None = None,
        max_tokens: int = 4096,
        max_sentences: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        pad_to_multiple_of: int | None = None,
        drop_last: bool = False,
    ):
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if max_sentences is not None and max_sentences <= 0:
            raise ValueError(f"max_sentences must be positive, got {max_sentences}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.source_lengths = np.asarray(source_lengths, dtype=np.int64)
        self.target_lengths = (
            np.asarray(target_lengths, dtype=np.int64)
            if target_lengths is not None
            else np.zeros_like(self.source_lengths)
        )
        if self.source_lengths.shape != self.target_lengths.shape:
            raise ValueError("source_lengths and target_lengths must have the same length")
        if len(self.source_lengths) == 0:
            raise ValueError("cannot batch an empty dataset")
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.pad_to_multiple_of = pad_to_multiple_of
        self.drop_last = drop_last
        self.epoch = 0

        padded = np.array(
            [
                _round_up(s, pad_to_multiple_of) + _round_up(t, pad_to_multiple_of)
                for s, t in zip(self.source_lengths.tolist(), self.target_lengths.tolist())
            ]
        )
        too_long = np.flatnonzero(padded > max_tokens)
        if len(too_long):
            index = int(too_long[0])
            padded_note = f" (padded to {padded[index]})" if pad_to_multiple_of else ""
            raise ExampleTooLongError(
                f"{len(too_long)} example(s) do not fit in a batch of max_tokens={max_tokens}: e.g. example {index} "
                f"has {self.source_lengths[index]} source + {self.target_lengths[index]} target tokens{padded_note}. "
                "Raise max_tokens, or lower max_source_length/max_target_length and skip longer pairs "
                "(--overlong skip)."
            )
        self._num_batches = len(self._global_batches(epoch=0))

    # -- construction --------------------------------------------------------------------------------------------

    def _sorted_indices(self, rng: np.random.Generator | None) -> np.ndarray:
        """Indices sorted by source length, then target length, then a random (or index) tie-break."""
        tie_break = (
            rng.permutation(len(self.source_lengths)) if rng is not None else np.arange(len(self.source_lengths))
        )
        # np.lexsort sorts by the last key first.
        return np.lexsort((tie_break, self.target_lengths, self.source_lengths))

    def _greedy_batches(self, order: np.ndarray) -> list[list[int]]:
        batches: list[list[int]] = []
        batch: list[int] = []
        longest_source = longest_target = 0
        multiple = self.pad_to_multiple_of
        for index in order.tolist():
            source = max(longest_source, _round_up(int(self.source_lengths[index]), multiple))
            target = max(longest_target, _round_up(int(self.target_lengths[index]), multiple))
            size = len(batch) + 1
            too_many_tokens = size * (source + target) > self.max_tokens
            too_many_sentences = self.max_sentences is not None and size > self.max_sentences
            if batch and (too_many_tokens or too_many_sentences):
                batches.append(batch)
                batch = []
                source = _round_up(int(self.source_lengths[index]), multiple)
                target = _round_up(int(self.target_lengths[index]), multiple)
            batch.append(index)
            longest_source, longest_target = source, target
        if batch:
            batches.append(batch)
        return batches

    def _make_divisible(self, batches: list[list[int]]) -> list[list[int]]:
        """Split the largest batches (or, if impossible, repeat/drop batches) until every rank gets as many."""
        remainder = len(batches) % self.num_replicas
        if remainder == 0:
            return batches
        batches = list(batches)
        for _ in range(self.num_replicas - remainder):
            largest = max(range(len(batches)), key=lambda i: (len(batches[i]), -i))
            if len(batches[largest]) < 2:
                break
            batch = batches[largest]
            half = len(batch) // 2
            batches[largest : largest + 1] = [batch[:half], batch[half:]]
        remainder = len(batches) % self.num_replicas
        if remainder:
            if self.drop_last:
                batches = batches[: len(batches) - remainder]
            else:
                batches = batches + batches[: self.num_replicas - remainder]
        return batches

    def _global_batches(self, epoch: int) -> list[list[int]]:
        """All batches of one epoch, in the order they are dealt out; identical on every rank."""
        rng = np.random.default_rng(self.seed + epoch) if self.shuffle else None
        batches = self._make_divisible(self._greedy_batches(self._sorted_indices(rng)))
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    # -- Sampler API ---------------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of `epoch` (call before iterating, the same value on every rank)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._global_batches(self.epoch)
        if len(batches) != self._num_batches:  # cannot happen: the sorted length sequence is epoch-independent
            raise RuntimeError(f"epoch {self.epoch} has {len(batches)} batches instead of {self._num_batches}")
        yield from batches[self.rank :: self.num_replicas]

    def __len__(self) -> int:
        return self._num_batches // self.num_replicas

    def statistics(self) -> dict[str, float]:
        """Batch count and padding efficiency of the current epoch (useful to choose `max_tokens`)."""
        batches = self._global_batches(self.epoch)
        real = sum(int(self.source_lengths[b].sum() + self.target_lengths[b].sum()) for b in batches)
        multiple = self.pad_to_multiple_of
        padded = sum(
            len(b)
            * (
                _round_up(int(self.source_lengths[b].max()), multiple)
                + _round_up(int(self.target_lengths[b].max()), multiple)
            )
            for b in batches
        )
        return {
            "batches": len(batches),
            "batches_per_rank": len(batches) // self.num_replicas,
            "mean_sentences_per_batch": float(np.mean([len(b) for b in batches])),
            "mean_padded_tokens_per_batch": padded / len(batches),
            "padding_efficiency": real / padded if padded else 1.0,
        }


class TokenBatchSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-based training batches, token-level loss normalization, and distributed
    evaluation that returns exactly one prediction per evaluation example.

    Args:
        max_tokens (`int`, *optional*):
            If set, training batches are built by [`MaxTokensBatchSampler`] with at most this many padded source +
            target tokens per batch and per device (`per_device_train_batch_size` is then ignored for training).
            Evaluation and prediction keep `per_device_eval_batch_size`.
        max_sentences (`int`, *optional*):
            With `max_tokens`, also cap the sentences per batch.
        time_budget (*optional*):
            An object whose `fraction_used()` gives the share of a training time budget used so far (e.g.
            `TimeBudgetCallback`). With it, `lr_scheduler_type` `linear` or `cosine` decays over the budget's clock
            (or `max_steps`, whichever ends first) instead of over `max_steps` alone (`schedules.budget_schedule`).
        normalize_loss_by_tokens (`bool`, defaults to `True`):
            If the model accepts loss kwargs (its `forward` takes `**kwargs`), compute the loss with the Trainer's
            `LabelSmoother` (epsilon = `label_smoothing_factor`, possibly 0) so that it is always divided by the number
            of target tokens of the whole accumulated, all-device batch (`num_items_in_batch`). Batches of different
            sizes and gradient accumulation then weigh every token equally, and models whose own loss is a per-batch
            mean that ignores `num_items_in_batch` (e.g. `MarianMTModel` in transformers 5.23) no longer get updates
            scaled by the number of accumulation steps.
        *args, **kwargs: passed to `Seq2SeqTrainer`.
    """

    def __init__(
        self,
        *args,
        max_tokens: int | None = None,
        max_sentences: int | None = None,
        time_budget=None,
        normalize_loss_by_tokens: bool = True,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.time_budget = time_budget
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self._token_batch_sampler: MaxTokensBatchSampler | None = None
        # Models of this package already normalise their loss by `num_items_in_batch` (exact gradient accumulation)
        # and may add terms of their own to it (e.g. MUTE's AutoShuffle penalty): they keep their labels.
        model_loss_is_exact = getattr(self.model, "loss_uses_num_items_in_batch", False)
        if (
            normalize_loss_by_tokens
            and not model_loss_is_exact
            and self.label_smoother is None
            and self.compute_loss_func is None
            and self.model_accepts_loss_kwargs
        ):
            self.label_smoother = LabelSmoother(epsilon=0.0)

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """transformers' schedule, except that under a time budget `linear` and `cosine` decay over the budget's
        clock (`schedules.budget_schedule`): a budget that ends long before `max_steps` still ends at a zero rate."""
        shape = getattr(self.args.lr_scheduler_type, "value", self.args.lr_scheduler_type)
        if self.lr_scheduler is None and self.time_budget is not None and shape in BUDGET_SCHEDULES:
            self.lr_scheduler = budget_schedule(
                self.optimizer if optimizer is None else optimizer,
                shape,
                warmup_steps=self.args.get_warmup_steps(num_training_steps),
                max_steps=num_training_steps,
                budget_used=self.time_budget.fraction_used,
            )
            self._created_lr_scheduler = True
        return super().create_scheduler(num_training_steps, optimizer)

    # ---- the whole run's training loss, also across a resume
    # transformers reports `train_loss` as the mean over the steps of the current `train()` call only: after a resume,
    # the steps before the checkpoint are left out. Each checkpoint records the loss summed over all its steps
    # (`LOSS_SUM_NAME`), and the final `train_loss` adds it back in.

    _loss_sum_before_resume: float | None = 0.0

    def _init_training_state(
        self, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
    ):
        result = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        self._loss_sum_before_resume = 0.0
        step = self.state.global_step
        if resume_from_checkpoint is not None and step > 0:
            recorded = None
            path = os.path.join(resume_from_checkpoint, LOSS_SUM_NAME)
            if os.path.isfile(path):
                try:
                    with open(path, encoding="utf-8") as handle:
                        recorded = json.load(handle)
                except (OSError, ValueError):
                    recorded = None
            if isinstance(recorded, dict) and recorded.get("global_step") == step:
                self._loss_sum_before_resume = float(recorded["loss_sum"])
            else:
                self._loss_sum_before_resume = logged_loss_sum(self.state.log_history, step)
        return result

    def _save_checkpoint(self, model, trial):
        if self.args.should_save and self._loss_sum_before_resume is not None and hasattr(self, "_tr_loss"):
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            os.makedirs(folder, exist_ok=True)
            loss_sum = self._loss_sum_before_resume + self._total_loss_scalar + self._tr_loss.item()
            write_json(
                os.path.join(folder, LOSS_SUM_NAME), {"global_step": self.state.global_step, "loss_sum": loss_sum}
            )
        super()._save_checkpoint(model, trial)

    def _finalize_training(self, trial, num_train_samples, start_time):
        resumed_at = getattr(self, "_initial_global_step", 0)
        if resumed_at and self._loss_sum_before_resume is not None and self.state.global_step > 0:
            steps_now = self.state.global_step - resumed_at
            whole_sum = self._loss_sum_before_resume + self._total_loss_scalar + self._tr_loss.item()
            # The parent divides the loss summed over this call's steps by their number; hand it the sum that makes
            # the quotient the whole run's mean (its speed metrics still count this call's steps only).
            self._total_loss_scalar = whole_sum * max(steps_now, 0.001) / self.state.global_step - self._tr_loss.item()
        return super()._finalize_training(trial, num_train_samples, start_time)

    def _load_callback_state(self):
        # With `restore_callback_states_from_checkpoint`, transformers restores a stateful callback by putting a new
        # instance in its place; the budget schedule and the callbacks that read the time budget would keep the old
        # one. The time budget restores its clock itself (`on_train_begin`), in place.
        name = type(self.time_budget).__name__ if self.time_budget is not None else None
        saved = self.state.stateful_callbacks.pop(name, None) if name is not None else None
        try:
            super()._load_callback_state()
        finally:
            if saved is not None:
                self.state.stateful_callbacks[name] = saved

    def save_metrics(self, split, metrics, combined=True):
        """`Trainer.save_metrics` (`{split}_results.json`, and `all_results.json` updated with `metrics`), each file
        written to a temporary file and renamed into place (`hf_unified_mt.utils.files`)."""
        if not self.is_world_process_zero():
            return
        write_json(os.path.join(self.args.output_dir, f"{split}_results.json"), metrics, indent=4, sort_keys=True)
        if combined:
            path = os.path.join(self.args.output_dir, "all_results.json")
            all_metrics = {}
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as handle:
                    all_metrics = json.load(handle)
            write_json(path, {**all_metrics, **metrics}, indent=4, sort_keys=True)

    def save_state(self):
        """`Trainer.save_state` (`trainer_state.json` in `output_dir`), written to a temporary file and renamed into
        place (`hf_unified_mt.utils.files`)."""
        if self.is_world_process_zero():
            state = json.dumps(dataclasses.asdict(self.state), indent=2, sort_keys=True) + "\n"
            write_text(os.path.join(self.args.output_dir, "trainer_state.json"), state)

    def _padding_multiple(self) -> int | None:
        return getattr(self.data_collator, "pad_to_multiple_of", None)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        """`Seq2SeqTrainer.prediction_step`, leaving `model.generation_config` as it was: the parent fills it with
        transformers' legacy defaults (`max_length=20`, ...) after each generation to size its padding, so that the
        next batch's `generate(max_new_tokens=...)` warns that both `max_new_tokens` and `max_length` are set, and a
        checkpoint saved afterwards would carry them."""
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config

    def build_token_batch_sampler(self, dataset) -> MaxTokensBatchSampler:
        """The training batch sampler for `dataset` (a tokenized dataset with `input_ids` and `labels`)."""
        source_lengths = sequence_lengths(dataset, "input_ids")
        target_lengths = sequence_lengths(dataset, "labels") if "labels" in dataset.column_names else None
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return MaxTokensBatchSampler(
            source_lengths,
            target_lengths,
            max_tokens=self.max_tokens,
            max_sentences=self.max_sentences,
            num_replicas=max(1, self.args.world_size),
            rank=self.args.process_index if self.args.world_size > 1 else 0,
            shuffle=self.args.train_sampling_strategy != "sequential",
            seed=seed,
            pad_to_multiple_of=self._padding_multiple(),
            drop_last=self.args.dataloader_drop_last,
        )

    def get_train_dataloader(self) -> DataLoader:
        """The training dataloader: token-based batches when `max_tokens` is set, else `Seq2SeqTrainer`'s."""
        if self.max_tokens is None:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        if self.args.train_sampling_strategy not in ("random", "sequential"):
            logger.warning(
                "train_sampling_strategy=%r is ignored: max_tokens batching sorts by length itself.",
                self.args.train_sampling_strategy,
            )
        accelerator_config = self.args.accelerator_config
        if getattr(accelerator_config, "split_batches", False) or getattr(
            accelerator_config, "dispatch_batches", False
        ):
            raise ValueError(
                "max_tokens batching gives every rank its own batches; it cannot be combined with accelerator_config "
                "split_batches=True or dispatch_batches=True."
            )

        dataset = self.train_dataset
        sampler = self.build_token_batch_sampler(dataset)
        self._token_batch_sampler = sampler

        data_collator = self.data_collator
        try:
            import datasets

            is_hf_dataset = isinstance(dataset, datasets.Dataset)
        except ImportError:
            is_hf_dataset = False
        if is_hf_dataset:
            dataset = self._remove_unused_columns(dataset, description="Training")
        else:
            data_collator = self._get_collator_with_removed_columns(data_collator, description="Training")

        dataloader_params = {
            "batch_sampler": sampler,
            "collate_fn": data_collator,
            "num_workers": self.args.dataloader_num_workers,
            "pin_memory": self.args.dataloader_pin_memory,
            "persistent_workers": self.args.dataloader_persistent_workers,
            "multiprocessing_context": self.args.dataloader_multiprocessing_context,
            "prefetch_factor": self.args.dataloader_prefetch_factor,
            "in_order": self.args.dataloader_in_order,
            "worker_init_fn": partial(
                seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
            ),
        }
        dataloader = self.accelerator.prepare(DataLoader(dataset, **dataloader_params))
        if isinstance(dataloader, DataLoaderDispatcher):
            raise ValueError("max_tokens batching cannot be used with Accelerate's dispatch_batches.")

        # The sampler already gives this rank its own share of the batches. `accelerator.prepare` wraps it in a
        # `BatchSamplerShard` that would deal those batches out again (rank r keeping every n-th), losing
        # (n-1)/n of them: make that wrapper a pass-through.
        wrapper = getattr(dataloader, "batch_sampler", None)
        if isinstance(wrapper, BatchSamplerShard) and wrapper.batch_sampler is sampler:
            wrapper.num_processes = 1
            wrapper.process_index = 0
        if len(dataloader) != len(sampler):
            raise RuntimeError(f"train dataloader has {len(dataloader)} batches, the sampler {len(sampler)}")

        if self.args.should_log:
            stats = sampler.statistics()
            logger.info(
                "Token batching: max_tokens=%d per device, %d batches per epoch (%d per rank), %.1f sentences and "
                "%.0f padded tokens per batch on average, padding efficiency %.1f%%",
                self.max_tokens,
                stats["batches"],
                stats["batches_per_rank"],
                stats["mean_sentences_per_batch"],
                stats["mean_padded_tokens_per_batch"],
                100 * stats["padding_efficiency"],
            )
        return dataloader

    def evaluation_loop(self, *args, **kwargs):
        # `Seq2SeqTrainer.evaluate`/`predict` switch `gather_function` to `accelerator.gather` (transformers 5.23,
        # trainer_seq2seq.py; huggingface/transformers#27025), which keeps the samples Accelerate repeats to give every
        # rank full batches: with 2 processes, 8 test pairs and batch size 32, `predict` returns 64 rows.
        # `gather_for_metrics` drops them, so predictions line up one-to-one, in order, with the evaluation set. That
        # truncation counts one row per example, so keep `gather` when generating several sequences per example.
        gen_kwargs = getattr(self, "_gen_kwargs", {}) or {}
        generation_config = gen_kwargs.get("generation_config") or getattr(self.model, "generation_config", None)
        num_return_sequences = gen_kwargs.get("num_return_sequences") or getattr(
            generation_config, "num_return_sequences", None
        )
        if (num_return_sequences or 1) == 1:
            self.gather_function = self.accelerator.gather_for_metrics
            if "use_gather_object" in inspect.signature(self.gather_function).parameters:
                self.gather_function = partial(self.gather_function, use_gather_object=self.args.eval_use_gather_object)
        return super().evaluation_loop(*args, **kwargs)

    def _run_epoch(self, *args, **kwargs):
        # `Trainer` sets the epoch of a sampler wrapped in `BatchSamplerShard`, but not after `skip_first_batches` has
        # wrapped it once more when resuming in the middle of an epoch. Set it here, for every epoch.
        if self._token_batch_sampler is not None:
            epoch = kwargs["epoch"] if "epoch" in kwargs else args[1]
            self._token_batch_sampler.set_epoch(epoch)
        return super()._run_epoch(*args, **kwargs)
