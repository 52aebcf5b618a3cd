# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The native search loop of `ORTModelForSeq2SeqLM`: greedy and beam search that run the decoder step graph over
ONNX Runtime buffers bound once per step (`IOBinding`), without transformers' per-step machinery (model inputs,
cache objects, output dataclasses, logits copies).

`generate()` still prepares a call (the generation config, the encoder run, the expansion of the encoder output
with the beams, the logits processors and stopping criteria), then hands it to its decoding method, `_sample` or
`_beam_search`; `ORTModelForSeq2SeqLM` overrides both and runs the loops below when the prepared call is one they
take (`unsupported_options`), and transformers' own loop otherwise. The loops reproduce transformers' (5.x)
`_sample` without sampling and its vectorised `_beam_search` step by step (top-k over beams x vocabulary with
`max(2, 1 + eos) * num_beams` candidates, the length penalty on the generated length, the early-stopping heuristic,
padding after </s>), so their tokens are `generate()`'s.

What the loop keeps per call, instead of per step: the encoder attention mask and the cross-attention keys and
values (computed once per sentence by the encoder graph, and shared by its beams) are bound once; the logits are
written into one preallocated buffer; each step's states are written into arrays allocated for them and bound as the
next step's inputs without a copy; beam search reorders them with one gather along the rows (`np.take`), skipped
when no beam moved. Why not ONNX Runtime's `com.microsoft.BeamSearch` operator (docs/deployment.md): its hypotheses
are scored with the length penalty on a length that counts the decoder start token, where transformers counts
generated tokens only, so its beams would differ from `generate()`'s.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers.generation.logits_process import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    LogitsProcessorList,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

from .onnx_format import CacheLayout


# Logits processors that read only the tokens so far and the scores, so the native loops apply them as
# `generate()` does (`LogitsProcessorList.__call__` on the same sequences and scores).
NATIVE_LOGITS_PROCESSORS = (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    NoBadWordsLogitsProcessor,
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    SuppressTokensLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
)


def unsupported_options(
    generation_config,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    synced_gpus: bool,
    streamer,
    model_kwargs: dict,
) -> list[str]:
    """What in a call prepared by `generate()` the native loops do not take (empty: they take it all)."""
    reasons = []
    if generation_config.do_sample:
        reasons.append("do_sample")
    if generation_config.return_dict_in_generate:
        reasons.append("return_dict_in_generate")
    if getattr(generation_config, "low_memory", None):
        reasons.append("low_memory")
    if synced_gpus:
        reasons.append("synced_gpus")
    if streamer is not None or model_kwargs.get("streamer") is not None:
        reasons.append("streamer")
    reasons += sorted(
        {type(item).__name__ for item in logits_processor if not isinstance(item, NATIVE_LOGITS_PROCESSORS)}
    )
    criteria = (MaxLengthCriteria, EosTokenCriteria)
    reasons += sorted({type(item).__name__ for item in stopping_criteria if type(item) not in criteria})
    if not any(isinstance(item, MaxLengthCriteria) for item in stopping_criteria):
        reasons.append("no max_length")
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    if cache is not None and cache.get_seq_length() > 0:
        reasons.append("a cache passed in")
    return reasons


# `generate()` options that only choose among the prepared logits processors, stopping criteria and search settings:
# a call with only these (and `input_ids`, `attention_mask`) repeats a call prepared before with the same values
# (`ORTModelForSeq2SeqLM.generate`'s plans).
PLANNED_OPTIONS = frozenset(
    {
        "max_new_tokens",
        "min_new_tokens",
        "max_length",
        "min_length",
        "num_beams",
        "num_return_sequences",
        "length_penalty",
        "early_stopping",
        "do_sample",
        "no_repeat_ngram_size",
        "repetition_penalty",
        "use_cache",
        "decoder_start_token_id",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    }
)


class BlockEnd:
    """Forbids the </s> ids while a sequence (prompt included) is shorter than `min_length`: what transformers'
    `MinLengthLogitsProcessor` and `MinNewTokensLengthLogitsProcessor` do (their `torch.where` over the vocabulary),
    in one indexed write."""

    def __init__(self, min_length: int, eos: torch.Tensor):
        self.min_length = min_length
        self.eos = torch.as_tensor(eos).view(-1)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[-1] < self.min_length:
            scores = scores.clone()
            scores[:, self.eos] = -float("inf")
        return scores


def direct_processors(logits_processor: LogitsProcessorList) -> list:
    """The processors as plain calls (`LogitsProcessorList.__call__` inspects every processor's signature at every
    step, a quarter of a millisecond per step at batch 1), the minimum-length ones as `BlockEnd`."""
    direct = []
    for processor in logits_processor:
        if type(processor) is MinNewTokensLengthLogitsProcessor:
            minimum = processor.prompt_length_to_skip + processor.min_new_tokens
            direct.append(BlockEnd(minimum, processor.eos_token_id))
        elif type(processor) is MinLengthLogitsProcessor:
            direct.append(BlockEnd(processor.min_length, processor.eos_token_id))
        else:
            direct.append(processor)
    return direct


def process(processors: list, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    for processor in processors:
        scores = processor(input_ids, scores)
    return scores


def plan_key(generation_config, options: dict):
    """What a `generate()` call with `options` prepares from, as a dictionary key, or None where the call is not one
    a plan may repeat (another option, or a value that is not a plain scalar)."""
    if not set(options) <= PLANNED_OPTIONS:
        return None
    if not all(value is None or isinstance(value, (bool, int, float, str)) for value in options.values()):
        return None
    return tuple(sorted(options.items())), repr(sorted(vars(generation_config).items()))


def stopping_limits(stopping_criteria: StoppingCriteriaList) -> tuple[int, torch.Tensor | None]:
    """The maximum length (prompt included) and the </s> ids of `generate()`'s stopping criteria."""
    max_length = min(item.max_length for item in stopping_criteria if isinstance(item, MaxLengthCriteria))
    eos = [item.eos_token_id for item in stopping_criteria if isinstance(item, EosTokenCriteria)]
    return max_length, (torch.cat([torch.as_tensor(ids).view(-1) for ids in eos]) if eos else None)


class StepRunner:
    """The decoder step graph run over bound buffers, for one batch of rows (sentences x beams): the static inputs
    (encoder attention mask, cross-attention keys and values) bound once, the cache states carried from one step's
    outputs to the next step's inputs, reordered along the rows by `reorder`."""

    def __init__(
        self,
        session,
        layout: CacheLayout,
        attention_mask: np.ndarray,
        cross: list[np.ndarray],
        max_positions: int,
        rows_per_sentence: int = 1,
    ):
        """`attention_mask` and `cross` hold one row per sentence, each shared by its `rows_per_sentence` consecutive
        rows (its beams) where the graph takes them so (`CacheLayout.beams_share_cross_attention`), else one per
        row (`rows_per_sentence` 1). Nothing is bound before the first step (a search graph reads `static` and
        `shapes` only)."""
        self.session = session
        self.max_positions = max_positions
        self.rows = attention_mask.shape[0] * rows_per_sentence
        self.static = [np.ascontiguousarray(attention_mask, dtype=np.int64), *cross]  # kept alive while bound
        # The state shapes per row, and which axis grows by one position per step (keys and values: axis 2).
        self.shapes, self.grows = [], []
        for spec in layout.layers:
            if spec.keys:
                self.shapes += [[spec.heads, 0, spec.head_dim]] * 2
                self.grows += [True, True]
            self.shapes += [list(shape) for shape in spec.states.values()]
            self.grows += [False] * len(spec.states)
        self.binding = None
        self.length = 0
        self.blocked = None  # ids whose logits are set to -inf (those outside a shortlist's candidates)

    def _bind(self) -> None:
        """Binds the static inputs and allocates the first step's states and the logits buffer."""
        session = self.session
        names = [node.name for node in session.get_inputs()]
        self.token_name, mask_name, self.positions_name = names[:3]
        cross_names = names[3 : 2 + len(self.static)]
        self.past_names = names[2 + len(self.static) :]
        self.logits_name, *self.present_names = [node.name for node in session.get_outputs()]
        if len(self.shapes) != len(self.past_names):
            raise ValueError(
                f"the decoder step graph takes {len(self.past_names)} cache inputs but its layout lists "
                f"{len(self.shapes)}: export the model again"
            )
        self.binding = session.io_binding()
        for name, array in zip([mask_name, *cross_names], self.static):
            self.binding.bind_cpu_input(name, array)
        self.states = [np.zeros((self.rows, *shape), dtype=np.float32) for shape in self.shapes]
        vocab = session.get_outputs()[0].shape[-1]
        self.logits = None if not isinstance(vocab, int) else np.empty((self.rows, vocab), dtype=np.float32)
        self.positions = np.arange(self.max_positions, dtype=np.int64)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Runs one position for every row (`tokens`: `[rows, 1]`) and returns the logits `[rows, vocab]`, a view of
        a buffer the next step overwrites."""
        if self.length + 1 > self.max_positions:
            raise ValueError(
                f"The target sequence has {self.length + 1} positions but the model supports at most "
                f"`max_position_embeddings`={self.max_positions}; generate fewer tokens"
            )
        if self.binding is None:
            self._bind()
        binding = self.binding
        token = np.ascontiguousarray(tokens.numpy(), dtype=np.int64)
        binding.bind_cpu_input(self.token_name, token)
        binding.bind_cpu_input(self.positions_name, self.positions[: self.length])
        for name, state in zip(self.past_names, self.states):
            binding.bind_cpu_input(name, state)
        presents = []
        for name, state, grows in zip(self.present_names, self.states, self.grows):
            shape = list(state.shape)
            if grows:
                shape[2] += 1
            present = np.empty(shape, dtype=np.float32)
            binding.bind_output(name, "cpu", 0, np.float32, shape, present.ctypes.data)
            presents.append(present)
        if self.logits is not None:
            binding.bind_output(self.logits_name, "cpu", 0, np.float32, self.logits.shape, self.logits.ctypes.data)
        else:
            binding.bind_output(self.logits_name, "cpu")
        self.session.run_with_iobinding(binding)
        self.states = presents
        self.length += 1
        self._token = token  # bound until the next step
        logits = self.logits if self.logits is not None else binding.get_outputs()[0].numpy()
        if self.blocked is not None:
            logits[:, self.blocked] = -np.inf
        return torch.from_numpy(logits)

    def reorder(self, rows: torch.Tensor) -> None:
        """Row `i` of every state becomes row `rows[i]` of before (beam search's cache reordering), one gather per
        state; nothing moves when no beam did."""
        index = rows.numpy()
        if np.array_equal(index, np.arange(self.rows)):
            return
        self.states = [np.take(state, index, axis=0) for state in self.states]


def run_prompt(runner: StepRunner, input_ids: torch.Tensor) -> None:
    """Feeds all but the last position of the decoder prompt (the last one is the first step of the search)."""
    for position in range(input_ids.shape[1] - 1):
        runner.step(input_ids[:, position : position + 1])


def greedy_search(
    runner: StepRunner,
    input_ids: torch.Tensor,
    logits_processor: LogitsProcessorList,
    max_length: int,
    eos: torch.Tensor | None,
    pad: torch.Tensor | None,
) -> torch.Tensor:
    """transformers' `_sample` without sampling: the argmax of the processed logits, pad after </s>, until every
    row has ended or `max_length` (prompt included) is reached. Returns the prompt and the new tokens."""
    run_prompt(runner, input_ids)
    processors = direct_processors(logits_processor)
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.bool)
    while True:
        scores = process(processors, input_ids, runner.step(input_ids[:, -1:]))
        tokens = torch.argmax(scores, dim=-1)
        if eos is not None:
            tokens = torch.where(unfinished, tokens, pad)
        input_ids = torch.cat([input_ids, tokens[:, None]], dim=-1)
        if input_ids.shape[1] >= max_length:
            return input_ids
        if eos is not None:
            unfinished &= ~is_end(tokens, eos)
            if not bool(unfinished.any()):
                return input_ids


def is_end(tokens: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
    """`torch.isin(tokens, eos)`, in a few microseconds rather than tens."""
    return (tokens[..., None] == eos).any(dim=-1)


def unwritten_fill(pad, eos):
    """The id beam search writes after a hypothesis' end, as transformers does (`pad or eos[0]`: a pad id of 0 gives
    the first </s> id; -1 without </s>)."""
    return (pad or eos[0]) if eos is not None else -1


def _gather(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """`tensor[b, indices[b, k], ...]` (transformers' `_gather_beams`)."""
    while indices.ndim < tensor.ndim:
        indices = indices.unsqueeze(-1)
    return torch.take_along_dim(tensor, indices, dim=1)


def beam_search(
    runner: StepRunner,
    input_ids: torch.Tensor,
    logits_processor: LogitsProcessorList,
    max_length: int,
    eos: torch.Tensor | None,
    pad: torch.Tensor | None,
    num_beams: int,
    length_penalty: float,
    early_stopping: bool | str,
    num_return_sequences: int,
) -> torch.Tensor:
    """transformers' vectorised `_beam_search` without sampling, step for step (see the module docstring): the rows
    of `input_ids` are `num_beams` per sentence; returns `num_return_sequences` per sentence, best first."""
    rows, cur_len = input_ids.shape
    batch, prompt = rows // num_beams, cur_len
    beams_to_keep = max(2, 1 + (eos.shape[0] if eos is not None else 0)) * num_beams
    top_num_beams = torch.arange(beams_to_keep) < num_beams
    fill = unwritten_fill(pad, eos)
    running = torch.full((batch, num_beams, max_length), fill_value=fill, dtype=torch.int64)
    running[:, :, :cur_len] = input_ids.view(batch, num_beams, cur_len)
    sequences = running.clone()
    running_scores = torch.zeros((batch, num_beams))
    running_scores[:, 1:] = -1e9
    scores = torch.full((batch, num_beams), -1e9)
    finished = torch.zeros((batch, num_beams), dtype=torch.bool)
    improvable = torch.ones((batch, 1), dtype=torch.bool)
    running_origins = torch.full((batch, num_beams, max_length - cur_len), -1, dtype=torch.int32)
    origins = running_origins.clone()
    offsets = torch.arange(batch).view(-1, 1) * num_beams
    run_prompt(runner, input_ids)
    processors = direct_processors(logits_processor)
    while True:
        flat = running[:, :, :cur_len].reshape(rows, cur_len)
        log_probs = process(processors, flat, nn.functional.log_softmax(runner.step(flat[:, -1:]), dim=-1))
        vocab = log_probs.shape[-1]
        log_probs = (log_probs.reshape(batch, num_beams, vocab) + running_scores[:, :, None]).view(batch, -1)

        # the best `beams_to_keep` continuations over all beams of a sentence
        top_log_probs, top_indices = torch.topk(log_probs, k=beams_to_keep)
        from_beam = top_indices // vocab
        top_origins = _gather(running_origins, from_beam)
        top_running = _gather(running, from_beam)
        top_tokens = top_indices % vocab
        top_running[:, :, cur_len] = top_tokens
        top_origins[:, :, cur_len - prompt] = from_beam + offsets
        ends = is_end(top_tokens, eos) if eos is not None else torch.zeros_like(top_tokens, dtype=torch.bool)
        if cur_len + 1 >= max_length:
            ends = torch.ones_like(ends)

        # the unfinished ones continue
        continuing = top_log_probs + ends.to(torch.float32) * -1.0e9
        chosen = torch.topk(continuing, k=num_beams)[1]
        running = _gather(top_running, chosen)
        running_scores = _gather(continuing, chosen)
        running_origins = _gather(top_origins, chosen)

        # the finished ones among the top `num_beams` enter the hypotheses if they score better
        just_finished = ends & top_num_beams[None, :]
        finished_scores = top_log_probs / ((cur_len + 1 - prompt) ** length_penalty)
        full = torch.all(finished, dim=-1, keepdim=True) & (early_stopping is True)
        finished_scores += full.to(torch.float32) * -1.0e9
        finished_scores += (~improvable).to(torch.float32) * -1.0e9
        finished_scores += (~just_finished) * -1.0e9
        merged_scores = torch.cat((scores, finished_scores), dim=1)
        best = torch.topk(merged_scores, k=num_beams)[1]
        sequences = _gather(torch.cat((sequences, top_running), dim=1), best)
        scores = _gather(merged_scores, best)
        origins = _gather(torch.cat((origins, top_origins), dim=1), best)
        finished = _gather(torch.cat((finished, just_finished), dim=1), best)

        runner.reorder(running_origins[..., cur_len - prompt].reshape(rows))
        cur_len += 1
        # can a running beam still beat the worst finished hypothesis? (transformers' heuristic)
        if early_stopping == "never" and length_penalty > 0.0:
            best_length = max_length - prompt
        else:
            best_length = cur_len - prompt
        best_possible = running_scores[:, :1] / (best_length**length_penalty)
        worst = torch.where(finished, torch.min(scores, dim=1, keepdim=True)[0], -1.0e9)
        improvable = improvable & torch.any(best_possible > worst, dim=-1, keepdim=True)
        done_early = bool(torch.all(finished)) and early_stopping is True
        if not bool(torch.any(improvable)) or done_early or bool(torch.all(ends)):
            break

    sequences = sequences[:, :num_return_sequences].reshape(batch * num_return_sequences, max_length)
    origins = origins[:, :num_return_sequences].reshape(batch * num_return_sequences, -1)
    generated = int((origins + 1).bool().sum(dim=1).max())
    return sequences[:, : prompt + generated]
