# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The training loss of every model of this package: the token-level, label-smoothed cross-entropy of the target
tokens (`translation_cross_entropy`), divided by the target tokens of the whole accumulated batch when the Trainer
gives their number (`loss_denominator`). On a CPU it is computed in blocks of rows that stay in the cache, by its own
autograd function (`BlockwiseCrossEntropy`); elsewhere from PyTorch's operators (`composed_cross_entropy`). The same
loss and gradient either way.

`MTForConditionalGeneration.loss_terms` (`modeling_mt_common.py`) calls it; an architecture that adds terms of its
own (MUTE's AutoShuffle penalty) divides them by the same `loss_denominator`.
"""

import torch
from torch import nn
from transformers.utils import is_torchdynamo_compiling


def translation_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level (label-smoothed) cross-entropy of `logits` against `labels` already aligned with them (-100 is
    ignored): summed over tokens and divided by `num_items_in_batch`, the target tokens of the whole accumulated batch,
    when the Trainer passes it (exact gradient accumulation: a mean per micro-batch would weight the tokens of short
    batches up), else by this batch's target tokens. transformers' own loss functions have no label smoothing, hence
    this one."""
    labels = labels.to(logits.device)
    # the CPU's blocks, or the device's fused kernels / the compiler's fusion of the composed operators
    blockwise = logits.device.type == "cpu" and not is_torchdynamo_compiling()
    summed_cross_entropy = BlockwiseCrossEntropy.apply if blockwise else composed_cross_entropy
    summed = summed_cross_entropy(logits.flatten(0, -2), labels.flatten(), float(label_smoothing))
    return summed / loss_denominator(labels, num_items_in_batch)


def composed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """The summed (label-smoothed) cross-entropy of `logits` [N, V] against `labels` [N] (-100 ignored), composed from
    PyTorch's operators on a float32 copy of the logits."""
    return nn.functional.cross_entropy(
        logits.float(), labels, ignore_index=-100, reduction="sum", label_smoothing=label_smoothing
    )


CROSS_ENTROPY_BLOCK_ELEMENTS = 1 << 19  # logits per block of `BlockwiseCrossEntropy`: 2 MiB of float32


class BlockwiseCrossEntropy(torch.autograd.Function):
    """`cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum", label_smoothing=ε)`, computed in
    blocks of rows that stay in the CPU's cache. Per row, with z the logits, y the label, V the vocabulary and
    log p = log_softmax(z):

        loss = -(1 - ε)·log p_y - ε·mean(log p)        d loss / dz = softmax(z) - (1 - ε)·onehot(y) - ε/V

    (the smoothed target puts 1 - ε + ε/V on y and ε/V elsewhere). Nothing of the size of the logits is kept for the
    backward, which recomputes the softmax block by block and writes the gradient in the logits' own dtype. On a CPU
    this avoids what the composed operators cost on a training step's [tokens, V] logits: a float32 copy of them, the
    log-softmax kept for the backward, a zero-filled gradient of the same size, and a cast of it back to bfloat16 (the
    README main job's bf16 step is 1.14x as fast with this, `benchmarks/results/training_step_changes.json`). The
    arithmetic is float32 (or the logits' dtype if wider), as in the composed form; PyTorch's fused (log-)softmax
    kernels read the logits in their own dtype."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float) -> torch.Tensor:
        rows, vocab = logits.shape
        compute = torch.promote_types(logits.dtype, torch.float32)
        keep = labels != -100
        targets = labels.masked_fill(~keep, 0)
        block = max(1, CROSS_ENTROPY_BLOCK_ELEMENTS // max(vocab, 1))
        losses = torch.empty(rows, dtype=compute, device=logits.device)
        for start in range(0, rows, block):
            log_probabilities = torch.log_softmax(logits[start : start + block], dim=-1, dtype=compute)
            loss = (
                log_probabilities.gather(1, targets[start : start + block, None]).squeeze(1).mul_(label_smoothing - 1)
            )
            if label_smoothing:
                loss -= label_smoothing * log_probabilities.mean(dim=-1)
            losses[start : start + block] = loss
        ctx.save_for_backward(logits, targets, keep)
        ctx.label_smoothing, ctx.block, ctx.compute = label_smoothing, block, compute
        return losses.masked_fill(~keep, 0.0).sum()

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        logits, targets, keep = ctx.saved_tensors
        smoothing, block, compute = ctx.label_smoothing, ctx.block, ctx.compute
        grad = torch.empty_like(logits)
        scale = keep.to(compute) * grad_output.to(compute)
        for start in range(0, logits.shape[0], block):
            rows = slice(start, start + block)
            probabilities = torch.softmax(logits[rows], dim=-1, dtype=compute)
            if smoothing:
                probabilities.sub_(smoothing / logits.shape[1])
            probabilities.scatter_add_(
                1, targets[rows, None], probabilities.new_full((probabilities.shape[0], 1), smoothing - 1.0)
            )
            grad[rows] = probabilities.mul_(scale[rows, None])
        return grad, None, None


def loss_denominator(labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None) -> torch.Tensor:
    """The number of target tokens a loss is divided by: `num_items_in_batch` (the whole accumulated batch) when
    given, else the non-ignored labels of this batch; at least 1."""
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum()
    return torch.as_tensor(num_items_in_batch, device=labels.device).clamp_min(1).float()
