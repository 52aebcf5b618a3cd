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

import bisect
import copy
import dataclasses
import inspect
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher
from torch.utils.data import DataLoader, Sampler
from transformers import Seq2SeqTrainer, TrainerCallback
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


class BatchShape(NamedTuple):
    """The padded shape of a length bucket's batches: `rows` sentences, `source_length` and `target_length` tokens."""

    rows: int
    source_length: int
    target_length: int


def choose_length_buckets(
    source_lengths: Sequence[int],
    target_lengths: Sequence[int],
    count: int,
    pad_to_multiple_of: int | None = None,
) -> list[int]:
    """The at most `count` bucket lengths (ascending, the last one holding every pair) that pad the pairs least.

    A pair goes to the shortest bucket that holds both its source and its target (lengths rounded up to
    `pad_to_multiple_of`), and a bucket pads its pairs to its longest source and its longest target; the lengths are
    chosen by exact dynamic programming over the distinct pair lengths, for the fewest padded tokens in all."""
    if count < 1:
        raise ValueError(f"the number of length buckets must be at least 1, got {count}")
    sources = _round_up_array(np.asarray(source_lengths, dtype=np.int64), pad_to_multiple_of)
    targets = _round_up_array(np.asarray(target_lengths, dtype=np.int64), pad_to_multiple_of)
    values, where, counts = np.unique(np.maximum(sources, targets), return_inverse=True, return_counts=True)
    if len(values) == 0:
        raise ValueError("cannot choose length buckets for no lengths")
    size, count = len(values), min(count, len(values))
    longest_source, longest_target = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    np.maximum.at(longest_source, where, sources)
    np.maximum.at(longest_target, where, targets)
    # cost[j, k]: the padded tokens of the pairs of lengths values[j..k] in one bucket
    below = np.concatenate([[0], np.cumsum(counts)])
    cost = np.full((size, size), np.inf)
    for j in range(size):
        widest = np.maximum.accumulate(longest_source[j:]) + np.maximum.accumulate(longest_target[j:])
        cost[j, j:] = widest * (below[j + 1 :] - below[j])
    # best[k]: the least padding of the pairs up to values[k] in m buckets, the last one ending at k (starting at
    # starts[m][k])
    best, starts = cost[0], []
    for _ in range(1, count):
        total = np.concatenate([[np.inf], best[:-1]])[:, None] + cost
        start = np.argmin(total, axis=0)
        best = total[start, np.arange(size)]
        starts.append(start)
    ends, end = [], size - 1
    for start in reversed(starts):
        ends.append(end)
        end = int(start[end]) - 1
    ends.append(end)
    return [int(values[index]) for index in reversed(ends)]


def _round_up_array(lengths: np.ndarray, multiple: int | None) -> np.ndarray:
    """`_round_up` of every length of an integer array."""
    if not multiple:
        return lengths
    return -(-lengths // multiple) * multiple


class MaxTokensBatchSampler(Sampler[list[int]]):
    """Batch sampler that fills batches up to a number of padded tokens instead of a number of sentences.

    Examples are sorted by source length, then target length (ties broken at random, by `seed + epoch`), and cut
    greedily into batches whose padded token count `n * (max_source_len + max_target_len)` is at most `max_tokens`.
    The batch order is then shuffled (by `seed + epoch`) and the batches are dealt out to the ranks round-robin.

    The number of batches does not depend on the epoch: the sorted length sequence is the same in every epoch, only
    the identity of equally long examples changes. If the number of batches is not a multiple of `num_replicas`, the
    batches with the most sentences are split in two until it is (no example is dropped or repeated); only when every
    batch holds a single sentence are the first batches repeated (or, with `drop_last`, the last ones dropped).

    With `length_buckets`, every batch has one of a few fixed shapes, as `torch.compile` with static shapes and CUDA
    graphs need (fairseq's `--num-batch-buckets`): a pair goes to the shortest bucket whose length holds both its
    source and its target, and each bucket's batches are padded to one [`BatchShape`] (its longest source and target,
    rounded up to `pad_to_multiple_of`, and as many rows as fit in `max_tokens`; [`BucketPaddingCollator`] pads them).
    Within a bucket the pairs are shuffled freely (the padding is the same), then cut into batches of the bucket's
    rows; only the last batch of a bucket has rows of padding. `statistics()` reports what the padding costs.

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
        length_buckets (`int` or `Sequence[int]`, *optional*): batch in length buckets: their number (the bucket
            lengths that minimise the padding of this data, [`choose_length_buckets`]) or the bucket lengths
            themselves (the longest must hold every pair; buckets no pair falls in are left out).

    Raises:
        [`ExampleTooLongError`] if one example alone has more than `max_tokens` padded tokens, or a bucket's rows of
        its longest source and longest target do not fit in `max_tokens`.
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
        length_buckets: int | Sequence[int] | None = None,
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

        padded = _round_up_array(self.source_lengths, pad_to_multiple_of) + _round_up_array(
            self.target_lengths, pad_to_multiple_of
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
        self._epoch_batches: tuple[int, list[np.ndarray]] | None = None  # the batches of the last epoch built
        self.bucket_lengths: list[int] | None = None
        self.bucket_shapes: list[BatchShape] | None = None
        if length_buckets is not None:
            self._make_buckets(length_buckets)
        self._num_batches = len(self._global_batches(epoch=0))

    # -- construction --------------------------------------------------------------------------------------------

    def _make_buckets(self, length_buckets: int | Sequence[int]) -> None:
        """Each bucket's length, batch shape and examples (`self._bucket_members`)."""
        longest = np.maximum(self.source_lengths, self.target_lengths)
        if isinstance(length_buckets, (int, np.integer)):
            lengths = choose_length_buckets(
                self.source_lengths, self.target_lengths, int(length_buckets), self.pad_to_multiple_of
            )
        else:
            lengths = sorted({int(length) for length in length_buckets})
            if not lengths or lengths[0] < 1:
                raise ValueError(f"length buckets must be positive lengths, got {list(length_buckets)}")
            if longest.max() > lengths[-1]:
                raise ValueError(
                    f"the longest length bucket ({lengths[-1]} tokens) does not hold every pair: example "
                    f"{int(np.argmax(longest))} has {int(longest.max())} tokens on one side"
                )
        bucket = np.searchsorted(np.asarray(lengths), longest, side="left")
        members = np.split(
            np.argsort(bucket, kind="stable"), np.cumsum(np.bincount(bucket, minlength=len(lengths)))[:-1]
        )
        multiple = self.pad_to_multiple_of
        self.bucket_lengths, self.bucket_shapes, self._bucket_members = [], [], []
        for length, indices in zip(lengths, members):
            if len(indices) == 0:
                continue
            source = _round_up(int(self.source_lengths[indices].max()), multiple)
            target = _round_up(int(self.target_lengths[indices].max()), multiple)
            rows = self.max_tokens // (source + target)
            if self.max_sentences is not None:
                rows = min(rows, self.max_sentences)
            if rows < 1:
                raise ExampleTooLongError(
                    f"the length bucket of {length} tokens pads its pairs to {source} source + {target} target tokens, "
                    f"more than max_tokens={self.max_tokens}: raise max_tokens or use more length buckets"
                )
            self.bucket_lengths.append(length)
            self.bucket_shapes.append(BatchShape(rows, source, target))
            self._bucket_members.append(indices)

    def _sorted_indices(self, rng: np.random.Generator | None) -> np.ndarray:
        """Indices sorted by source length, then target length, then a random (or index) tie-break."""
        tie_break = (
            rng.permutation(len(self.source_lengths)) if rng is not None else np.arange(len(self.source_lengths))
        )
        # np.lexsort sorts by the last key first.
        return np.lexsort((tie_break, self.target_lengths, self.source_lengths))

    def _greedy_batches(self, order: np.ndarray) -> list[np.ndarray]:
        """Cuts `order` into consecutive batches, each grown while its padded size stays within `max_tokens` (and its
        sentences within `max_sentences`); one example at least. Each cut is found with array operations over a
        window of the next examples (twice the last batch, doubled until the cut is inside), not example by example."""
        multiple = self.pad_to_multiple_of
        sources = _round_up_array(self.source_lengths[order], multiple)
        targets = _round_up_array(self.target_lengths[order], multiple)
        most = len(order) if self.max_sentences is None else self.max_sentences
        batches: list[np.ndarray] = []
        start, window = 0, 64
        while start < len(order):
            end = min(start + min(window, most), len(order))
            sizes = np.arange(1, end - start + 1)
            padded = sizes * (np.maximum.accumulate(sources[start:end]) + np.maximum.accumulate(targets[start:end]))
            over = np.flatnonzero(padded > self.max_tokens)
            if len(over):
                stop = start + max(int(over[0]), 1)
            elif end == len(order) or end - start == most:
                stop = end
            else:
                window *= 2
                continue
            batches.append(order[start:stop])
            window = max(64, 2 * (stop - start))
            start = stop
        return batches

    def _make_divisible(self, batches: list[np.ndarray]) -> list[np.ndarray]:
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

    def _bucket_batches(self, rng: np.random.Generator | None) -> list[np.ndarray]:
        """Each bucket's examples (shuffled, or in index order) cut into batches of the bucket's rows."""
        batches: list[np.ndarray] = []
        for shape, indices in zip(self.bucket_shapes, self._bucket_members):
            if rng is not None:
                indices = rng.permutation(indices)
            batches.extend(np.split(indices, range(shape.rows, len(indices), shape.rows)))
        return batches

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        """All batches of one epoch, in the order they are dealt out; identical on every rank. The last epoch's are
        kept: counting, `statistics()` and iterating build them once."""
        if self._epoch_batches is not None and self._epoch_batches[0] == epoch:
            return self._epoch_batches[1]
        rng = np.random.default_rng(self.seed + epoch) if self.shuffle else None
        if self.bucket_shapes is not None:
            batches = self._make_divisible(self._bucket_batches(rng))
        else:
            batches = self._make_divisible(self._greedy_batches(self._sorted_indices(rng)))
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._epoch_batches = (epoch, batches)
        return batches

    # -- Sampler API ---------------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of `epoch` (call before iterating, the same value on every rank)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._global_batches(self.epoch)
        if len(batches) != self._num_batches:  # cannot happen: the sorted length sequence is epoch-independent
            raise RuntimeError(f"epoch {self.epoch} has {len(batches)} batches instead of {self._num_batches}")
        for batch in batches[self.rank :: self.num_replicas]:
            yield batch.tolist()

    def __len__(self) -> int:
        return self._num_batches // self.num_replicas

    def batch_shape(self, batch: Sequence[int]) -> BatchShape:
        """The padded shape of `batch` (indices of this dataset): its bucket's with length buckets, else its own
        longest source and target (rounded up to `pad_to_multiple_of`) in as many rows as it has."""
        index = np.asarray(batch)
        if self.bucket_shapes is not None:
            longest = int(np.maximum(self.source_lengths[index], self.target_lengths[index]).max())
            return self.bucket_shapes[bisect.bisect_left(self.bucket_lengths, longest)]
        multiple = self.pad_to_multiple_of
        return BatchShape(
            len(index),
            _round_up(int(self.source_lengths[index].max()), multiple),
            _round_up(int(self.target_lengths[index].max()), multiple),
        )

    def statistics(self) -> dict[str, float]:
        """Batch count, padding and batch shapes of the current epoch (useful to choose `max_tokens` and
        `length_buckets`): `padded_tokens_per_real_token` is the padding overhead (source + target tokens computed
        per token of the data, rows of padding included), `padding_efficiency` its inverse, `batch_shapes` the number
        of distinct padded batch shapes (each one compilation of a static-shape `torch.compile`)."""
        batches = self._global_batches(self.epoch)
        real = sum(int(self.source_lengths[b].sum() + self.target_lengths[b].sum()) for b in batches)
        shapes = [self.batch_shape(b) for b in batches]
        padded = sum(shape.rows * (shape.source_length + shape.target_length) for shape in shapes)
        return {
            "batches": len(batches),
            "batches_per_rank": len(batches) // self.num_replicas,
            "mean_sentences_per_batch": float(np.mean([len(b) for b in batches])),
            "mean_padded_tokens_per_batch": padded / len(batches),
            "padding_efficiency": real / padded if padded else 1.0,
            "padded_tokens_per_real_token": padded / real if real else 1.0,
            "batch_shapes": len(set(shapes)),
        }


class BucketPaddingCollator:
    """Pads the batches of a [`MaxTokensBatchSampler`] with `length_buckets` to their bucket's [`BatchShape`].

    `collator` (e.g. `DataCollatorForSeq2Seq`) pads a batch to its own longest source and target; this pads the source
    columns (`input_ids`, `attention_mask`) and the target columns (`labels`, `decoder_input_ids`,
    `decoder_attention_mask`) on to the bucket's lengths, and adds rows up to the bucket's: each a copy of the batch's
    first row with every label ignored (-100). Neither changes the loss or its gradients: padded positions are masked
    and ignored, and added rows hold no label (dropout draws its masks over the padded shape, though).

    Args:
        collator (`Callable`): the collator to wrap.
        bucket_lengths (`list[int]`), bucket_shapes (`list[BatchShape]`): the sampler's.
        pad_token_id (`int`): the padding token of `input_ids` and `decoder_input_ids`.
    """

    source_keys = ("input_ids", "attention_mask")
    target_keys = ("labels", "decoder_input_ids", "decoder_attention_mask")

    def __init__(self, collator, bucket_lengths: list[int], bucket_shapes: list[BatchShape], pad_token_id: int):
        self.collator = collator
        self.bucket_lengths = list(bucket_lengths)
        self.bucket_shapes = list(bucket_shapes)
        self.pad_token_id = pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        longest = max(max(len(feature["input_ids"]), len(feature.get("labels", ()))) for feature in features)
        shape = self.bucket_shapes[bisect.bisect_left(self.bucket_lengths, longest)]
        batch = self.collator(features)
        rows = len(features)
        for key, value in list(batch.items()):
            if key in self.source_keys:
                length = shape.source_length
            elif key in self.target_keys:
                length = shape.target_length
            else:
                raise ValueError(
                    f"length buckets pad only {self.source_keys + self.target_keys}; the batch also has {key!r}"
                )
            if value.shape[0] != rows or value.shape[1] > length or rows > shape.rows:
                raise RuntimeError(
                    f"a batch of {tuple(value.shape)} {key!r} does not fit its bucket's shape {tuple(shape)}: the "
                    "collator's pad_to_multiple_of must be the sampler's"
                )
            fill = {"labels": -100, "input_ids": self.pad_token_id, "decoder_input_ids": self.pad_token_id}.get(key, 0)
            padded = value.new_full((shape.rows, length), fill)
            padded[:rows, : value.shape[1]] = value
            if key != "labels":
                padded[rows:] = padded[0]
            batch[key] = padded
        return batch


class CompileReport(TrainerCallback):
    """What `torch.compile` did during one `train()` call, logged once at its end: the graphs TorchDynamo compiled
    (one per batch shape it specialised on, and one per piece a graph break leaves), the seconds spent compiling
    (TorchDynamo's forward and AOTAutograd's backward compilation, `torch._dynamo.utils.calculate_time_spent`) and the
    graph breaks with their reasons (`torch._dynamo.utils.counters`). `statistics` holds the last report."""

    def __init__(self):
        self.statistics: dict | None = None
        self._start: tuple[int, float, dict] | None = None

    @staticmethod
    def _now() -> tuple[int, float, dict]:
        from torch._dynamo.utils import calculate_time_spent, counters

        return (
            counters["stats"]["unique_graphs"],
            calculate_time_spent()["total_wall_time"],
            dict(counters["graph_break"]),
        )

    def on_train_begin(self, args, state, control, **kwargs):
        self._start = self._now()

    def on_train_end(self, args, state, control, **kwargs):
        if self._start is None:
            return
        (graphs, seconds, breaks), (graphs_before, seconds_before, breaks_before) = self._now(), self._start
        reasons = {reason: count - breaks_before.get(reason, 0) for reason, count in breaks.items()}
        reasons = {reason: count for reason, count in reasons.items() if count > 0}
        self.statistics = {
            "compiled_graphs": graphs - graphs_before,
            "compile_seconds": round(max(seconds - seconds_before, 0.0), 3),
            "graph_breaks": sum(reasons.values()),
            "graph_break_reasons": reasons,
        }
        if args.should_log:
            logger.info(
                "torch.compile: %d graphs compiled in %.1f s, %d graph breaks%s",
                self.statistics["compiled_graphs"],
                self.statistics["compile_seconds"],
                self.statistics["graph_breaks"],
                "".join(f"\n  {count} x {reason}" for reason, count in reasons.items()),
            )


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
        length_buckets (`int` or `list[int]`, *optional*):
            With `max_tokens`, batch in length buckets (see [`MaxTokensBatchSampler`]): every training batch is padded
            to one of a few shapes ([`BucketPaddingCollator`]), so that `torch_compile` compiles the step once per
            bucket (static shapes, CUDA graphs) instead of once per batch shape.
        compile_dynamic (`bool`, *optional*):
            With `torch_compile`, `torch.compile`'s `dynamic`: `False` compiles one graph per batch shape (with
            `length_buckets`, one per bucket; the recompilation limit is raised to the number of buckets), `True` a
            graph for any shape (and another when a batch breaks an equality of the first, such as equal source and
            target lengths), `None` (the default) a static graph first and a dynamic one at the second shape.
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
        length_buckets: int | Sequence[int] | None = None,
        compile_dynamic: bool | None = None,
        time_budget=None,
        normalize_loss_by_tokens: bool = True,
        **kwargs,
    ):
        if length_buckets is not None and max_tokens is None:
            raise ValueError("length_buckets needs max_tokens (token-based batches)")
        self.compile_dynamic = compile_dynamic  # read while the parent builds its Accelerator
        super().__init__(*args, **kwargs)
        self.time_budget = time_budget
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.length_buckets = length_buckets
        self._token_batch_sampler: MaxTokensBatchSampler | None = None
        self.compile_report: CompileReport | None = None
        if self.args.torch_compile:
            self.compile_report = CompileReport()
            self.add_callback(self.compile_report)
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

    def _build_accelerator_args(self, **kwargs) -> dict:
        args = super()._build_accelerator_args(**kwargs)
        plugin = args.get("dynamo_plugin")
        if plugin is not None and self.compile_dynamic is not None:
            plugin.dynamic = self.compile_dynamic
        return args

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

    def _pad_token_id(self) -> int:
        pad_token_id = getattr(self.processing_class, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = getattr(getattr(self.model, "config", None), "pad_token_id", None)
        if pad_token_id is None:
            raise ValueError("length_buckets pad batches: the tokenizer or the model config must name a pad token")
        return pad_token_id

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
            length_buckets=self.length_buckets,
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
        if sampler.bucket_shapes is not None:
            data_collator = BucketPaddingCollator(
                data_collator, sampler.bucket_lengths, sampler.bucket_shapes, self._pad_token_id()
            )
            if self.args.torch_compile and self.compile_dynamic is False:
                # one graph per bucket, where dynamo would fall back to eager after `recompile_limit` (8) graphs
                limit = torch._dynamo.config.recompile_limit
                torch._dynamo.config.recompile_limit = max(limit, len(sampler.bucket_shapes))

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
                "%.0f padded tokens per batch on average, padding efficiency %.1f%% (%.3f padded tokens per real "
                "token)%s",
                self.max_tokens,
                stats["batches"],
                stats["batches_per_rank"],
                stats["mean_sentences_per_batch"],
                stats["mean_padded_tokens_per_batch"],
                100 * stats["padding_efficiency"],
                stats["padded_tokens_per_real_token"],
                (
                    f", {stats['batch_shapes']} batch shapes (rows x source x target: "
                    + ", ".join(f"{r}x{s}x{t}" for r, s, t in sampler.bucket_shapes)
                    + ")"
                    if sampler.bucket_shapes is not None
                    else ""
                ),
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
