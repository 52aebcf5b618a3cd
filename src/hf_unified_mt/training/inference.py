# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Batched translation with any `AutoModelForSeq2SeqLM`, and generation-config hygiene for saved checkpoints."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from .batching import token_batches_for_inference


logger = logging.getLogger(__name__)

# Generation settings worth keeping in a saved `generation_config.json`; everything else is left to the defaults.
GENERATION_KEYS_TO_KEEP = (
    "decoder_start_token_id",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "num_beams",
    "max_new_tokens",
    "length_penalty",
    "early_stopping",
    "no_repeat_ngram_size",
    "bad_words_ids",
)


def make_generation_config(
    source: GenerationConfig | None = None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    **token_ids,
) -> GenerationConfig:
    """A minimal `GenerationConfig`: the token ids and beam/length settings from `source`, updated by the arguments.

    `Seq2SeqTrainer.prediction_step` fills the model's generation config with legacy defaults (`max_length=20`,
    ...); saving those makes every later `generate(max_new_tokens=...)` warn. Call this
    before saving to keep only what matters.
    """
    values = {}
    if source is not None:
        legacy_defaults = GenerationConfig()._get_default_generation_params()
        for key in GENERATION_KEYS_TO_KEEP:
            value = getattr(source, key, None)
            if value is not None and not (key in legacy_defaults and legacy_defaults[key] == value):
                values[key] = value
    values.update({key: value for key, value in token_ids.items() if value is not None})
    if num_beams is not None:
        values["num_beams"] = num_beams
    if max_new_tokens is not None:
        values["max_new_tokens"] = max_new_tokens
    return GenerationConfig(**values)


def clean_generation_config(model, num_beams: int | None = None, max_new_tokens: int | None = None) -> GenerationConfig:
    """Replace `model.generation_config` by [`make_generation_config`] of itself and return it."""
    model.generation_config = make_generation_config(
        model.generation_config, num_beams=num_beams, max_new_tokens=max_new_tokens
    )
    return model.generation_config


@torch.inference_mode()
def translate(
    model,
    tokenizer,
    texts: Sequence[str],
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    batch_size: int = 32,
    max_tokens: int | None = None,
    max_source_length: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` with beam search, batching sentences of similar length; outputs are in input order.

    Args:
        model: a seq2seq model with `generate` (e.g. from `AutoModelForSeq2SeqLM.from_pretrained`).
        tokenizer: its tokenizer.
        texts: the sentences. Empty (or whitespace-only) lines translate to empty lines.
        num_beams: beam size; defaults to the model's generation config.
        max_new_tokens: the most tokens to generate per sentence; defaults to the model's generation config, or else
            to `2 * longest source + 10` per batch.
        batch_size: the most sentences per batch.
        max_tokens: also cap the padded source tokens per batch.
        max_source_length: truncate longer sources to this many tokens (with a warning).
        device: where to run; defaults to the model's device.
        progress: show a tqdm progress bar (on stderr).
        **generate_kwargs: passed to `model.generate` (e.g. `length_penalty`).
    """
    model.eval()
    device = torch.device(device) if device is not None else next(model.parameters()).device
    outputs = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if text.strip()]
    if not todo:
        return outputs
    encoded = tokenizer([texts[i].strip() for i in todo])["input_ids"]
    if max_source_length is not None:
        truncated = sum(len(ids) > max_source_length for ids in encoded)
        if truncated:
            logger.warning(
                "Truncated %d source sentence(s) to max_source_length=%d tokens", truncated, max_source_length
            )
            eos = tokenizer.eos_token_id
            encoded = [
                ids if len(ids) <= max_source_length else ids[: max_source_length - 1] + [eos] for ids in encoded
            ]
    lengths = [len(ids) for ids in encoded]
    batches = token_batches_for_inference(lengths, max_sentences=batch_size, max_tokens=max_tokens)
    configured_max_new_tokens = getattr(model.generation_config, "max_new_tokens", None)

    with tqdm(total=len(todo), desc="Translating", unit="sent", disable=not progress, file=sys.stderr) as bar:
        for batch in batches:
            features = tokenizer.pad({"input_ids": [encoded[i] for i in batch]}, return_tensors="pt")
            features = {key: value.to(device) for key, value in features.items()}
            limit = max_new_tokens or configured_max_new_tokens or 2 * max(lengths[i] for i in batch) + 10
            if num_beams is not None:
                generate_kwargs["num_beams"] = num_beams
            generated = model.generate(**features, max_new_tokens=limit, **generate_kwargs)
            decoded = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for position, text in zip(batch, decoded):
                outputs[todo[position]] = text.strip()
            bar.update(len(batch))
    return outputs
