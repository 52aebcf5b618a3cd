# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Batched translation with any `AutoModelForSeq2SeqLM`, and generation-config hygiene for saved checkpoints."""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig


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


def add_threads_argument(parser) -> None:
    """`--threads` of translate.py and score.py (applied with `use_threads`)."""
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of PyTorch and of ONNX Runtime's sessions (default: PyTorch's, one per core). On small "
        "machines one thread can decode small batches faster than two: see docs/deployment.md.",
    )


def use_threads(threads: int | None) -> None:
    """Run PyTorch's CPU work, and the ONNX Runtime sessions created afterwards, on `threads` threads (None: as is)."""
    if threads is not None:
        torch.set_num_threads(threads)


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation for CPU inference, for every architecture of the package (and MarianMT): each
    `nn.Linear` keeps its weights in int8 and quantises its input on the fly (PyTorch's `quantize_dynamic`);
    embeddings, LayerNorms, convolutions' kernel mixing and the papers' other parameters stay float32. Returns a
    quantised copy in eval mode; `model` is untouched. Prime layers with quantised projections run unfused.

    PyTorch announces that `torch.ao.quantization` moves to torchao; its two notices are silenced here (the function
    is the one place that calls it)."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 dynamic quantisation runs on CPU: move the model with `.to('cpu')` first")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor", category=UserWarning)
        quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False)
    # PyTorch's dynamic int8 layers keep their weights as packed parameters that safetensors cannot store:
    # `save_pretrained` failed deep in transformers after writing the config and code. Refused before anything is
    # written (and `push_to_hub` before any network call).
    quantized.save_pretrained = _refuse_to_save_int8
    quantized.push_to_hub = _refuse_to_save_int8
    return quantized.eval()


INT8_SAVE_MESSAGE = (
    "an int8 model (quantize_int8) cannot be saved: PyTorch's dynamic int8 layers have no safetensors form. "
    "To get an int8 model from disk, save the float model and quantise after loading: "
    "`quantize_int8(AutoModelForSeq2SeqLM.from_pretrained(path))` (what `translate.py --int8` does), "
    "or export an int8 ONNX graph (`onnx_export ... --int8`)"
)


def _refuse_to_save_int8(*args, **kwargs):
    raise ValueError(INT8_SAVE_MESSAGE)


def make_generation_config(
    source: GenerationConfig | None = None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    **settings,
) -> GenerationConfig:
    """A minimal `GenerationConfig`: the token ids and beam/length settings from `source`, updated by the arguments
    (`settings`: token ids and other kept settings, e.g. `no_repeat_ngram_size`; None leaves a value as it is).

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
    values.update({key: value for key, value in settings.items() if value is not None})
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


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split on `\\n` only (a `\\r` before it is dropped); other Unicode line separators (U+2028,
    U+0085, form feed, ...) stay inside their line, unlike `str.splitlines()`. A final `\\n` does not start a line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def one_line(text: str) -> str:
    """`text` with line breaks (`\\r`, `\\n`) replaced by spaces, so that it stays one line of an output file."""
    return text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def model_length_limit(model) -> int | None:
    """The longest source the model accepts, in tokens (`config.max_position_embeddings`), or None."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return limit if isinstance(limit, int) and limit > 0 else None


def _describe_lines(indices: list[int], lengths: list[int], limit: int = 5) -> str:
    shown = ", ".join(f"line {i + 1} ({n} tokens)" for i, n in zip(indices[:limit], lengths[:limit]))
    return shown + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


def token_batches_for_inference(
    lengths: Sequence[int], max_sentences: int = 64, max_tokens: int | None = None
) -> list[list[int]]:
    """Group indices by length for translation (longest first), capped by sentences and padded source tokens.

    Used by [`translate`]; the caller restores the input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for index in order:
        candidate = max(longest, lengths[index])
        if batch and (
            len(batch) + 1 > max_sentences or (max_tokens is not None and (len(batch) + 1) * candidate > max_tokens)
        ):
            batches.append(batch)
            batch, candidate = [], lengths[index]
        batch.append(index)
        longest = candidate
    if batch:
        batches.append(batch)
    return batches


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
        max_new_tokens: the most tokens to generate per sentence (at least 1); defaults to the model's generation
            config, or else to `2 * longest source + 10` per batch; the default is capped at the model's
            `max_position_embeddings` (the decoder's positions), and a larger `max_new_tokens` raises a `ValueError`.
        batch_size: the most sentences per batch.
        max_tokens: also cap the padded source tokens per batch.
        max_source_length: truncate longer sources to this many tokens (with a warning naming their lines). Without
            it, a source longer than the model accepts (`max_position_embeddings`) raises a `ValueError` naming its
            line (1-based position in `texts`) before anything is translated.
        device: where to run; defaults to the model's device.
        progress: show a tqdm progress bar (on stderr).
        **generate_kwargs: passed to `model.generate` (e.g. `length_penalty`).
    """
    for name, value, least in (
        ("max_new_tokens", max_new_tokens, 1),
        ("num_beams", num_beams, 1),
        ("batch_size", batch_size, 1),
        ("max_tokens", max_tokens, 1),
        ("max_source_length", max_source_length, 2),
    ):
        if value is not None and value < least:
            raise ValueError(f"{name} must be at least {least}, not {value}")
    model_limit = model_length_limit(model)
    if max_source_length is not None and model_limit is not None and max_source_length > model_limit:
        raise ValueError(
            f"max_source_length={max_source_length} exceeds what the model accepts "
            f"(max_position_embeddings={model_limit})"
        )
    if max_new_tokens is not None and model_limit is not None and max_new_tokens > model_limit:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} is more than the model can generate: its decoder has "
            f"max_position_embeddings={model_limit} positions"
        )
    model.eval()
    device = torch.device(device) if device is not None else model.device
    outputs = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if text.strip()]
    if not todo:
        return outputs
    encoded = tokenizer([texts[i].strip() for i in todo])["input_ids"]
    limit = max_source_length if max_source_length is not None else model_limit
    if limit is not None:
        over = [position for position, ids in enumerate(encoded) if len(ids) > limit]
        described = _describe_lines([todo[p] for p in over], [len(encoded[p]) for p in over])
        if over and max_source_length is None:
            raise ValueError(
                f"{len(over)} source sentence(s) are longer than the model accepts ({model_limit} tokens): "
                f"{described}. Shorten them, or truncate them with max_source_length (--max_source_length "
                f"{model_limit})"
            )
        if over:
            logger.warning(
                "Truncated %d source sentence(s) to max_source_length=%d tokens: %s", len(over), limit, described
            )
            eos = tokenizer.eos_token_id
            encoded = [ids if len(ids) <= limit else ids[: limit - 1] + [eos] for ids in encoded]
    lengths = [len(ids) for ids in encoded]
    batches = token_batches_for_inference(lengths, max_sentences=batch_size, max_tokens=max_tokens)
    configured_max_new_tokens = getattr(model.generation_config, "max_new_tokens", None)

    with tqdm(total=len(todo), desc="Translating", unit="sent", disable=not progress, file=sys.stderr) as bar:
        for batch in batches:
            # on the right whatever the tokenizer's `padding_side`: the models take right-padded batches only
            features = tokenizer.pad(
                {"input_ids": [encoded[i] for i in batch]}, padding_side="right", return_tensors="pt"
            )
            features = {key: value.to(device) for key, value in features.items()}
            new_tokens = max_new_tokens
            if new_tokens is None:
                new_tokens = configured_max_new_tokens or 2 * max(lengths[i] for i in batch) + 10
                if model_limit is not None:  # the decoder's positions; beyond them generate() fails mid-run
                    new_tokens = min(new_tokens, model_limit)
            if num_beams is not None:
                generate_kwargs["num_beams"] = num_beams
            generated = model.generate(**features, max_new_tokens=new_tokens, **generate_kwargs)
            decoded = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for position, text in zip(batch, decoded):
                outputs[todo[position]] = one_line(text).strip()
            bar.update(len(batch))
    return outputs
