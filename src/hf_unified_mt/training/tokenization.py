# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Shared source/target subword tokenizers trained with the `tokenizers` library.

[`train_tokenizer`] learns one vocabulary for both languages (BPE or Unigram, SentencePiece-style `▁` word markers),
with the special tokens `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3, and a post-processor that appends `</s>` to every
encoded sequence (sources and targets alike). It returns a [`transformers.PreTrainedTokenizerFast`], which
`save_pretrained` writes as `tokenizer.json` + `tokenizer_config.json`, and which `AutoTokenizer.from_pretrained`
reloads offline.

Training is deterministic: the same texts and settings give the same vocabulary. [`train_tokenizer_on_corpus`] reads
a `datasets.Dataset` a batch of rows at a time (at most `max_pairs` of them, a random sample, like SentencePiece's
`input_sentence_size`), and can keep the result in the dataset's cache folder for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_unified_mt.deployment.tokenizer_files import forget_load_options
from hf_unified_mt.utils.files import write_text


logger = logging.getLogger(__name__)


PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN = "<pad>", "<s>", "</s>", "<unk>"
# Order defines the ids: <pad>=0, <s>=1, </s>=2, <unk>=3.
SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN]
PAD_TOKEN_ID, BOS_TOKEN_ID, EOS_TOKEN_ID, UNK_TOKEN_ID = range(4)

TokenizerType = Literal["bpe", "unigram"]


def _batched(texts: Iterable[str], batch_size: int = 1000) -> Iterator[list[str]]:
    batch = []
    for text in texts:
        batch.append(text)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def build_tokenizer_trainer(
    tokenizer_type: TokenizerType, vocab_size: int, min_frequency: int = 2, show_progress: bool = False
) -> tuple[Tokenizer, trainers.Trainer]:
    """Create an untrained `tokenizers.Tokenizer` pipeline and the matching trainer.

    Both types use NFKC normalization and the `Metaspace` pre-tokenizer/decoder (spaces become `▁`, so decoding
    restores the original spacing), like SentencePiece.
    """
    if tokenizer_type == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=SPECIAL_TOKENS,
            show_progress=show_progress,
        )
    elif tokenizer_type == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL_TOKENS,
            unk_token=UNK_TOKEN,
            show_progress=show_progress,
        )
    else:
        raise ValueError(f"tokenizer_type must be 'bpe' or 'unigram', not {tokenizer_type!r}")
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    return tokenizer, trainer


def add_eos_post_processor(tokenizer: Tokenizer) -> None:
    """Append `</s>` to every single sequence (and once after a pair), as MT encoders and labels expect."""
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A $B {EOS_TOKEN}",
        special_tokens=[(EOS_TOKEN, eos_id)],
    )


def wrap_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a trained `tokenizers.Tokenizer` as a `PreTrainedTokenizerFast` with the MT special tokens."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        padding_side="right",
        # Seq2seq models take no token_type_ids.
        model_input_names=["input_ids", "attention_mask"],
        # The space clean-up of decode() is meant for WordPiece and strips real spaces before punctuation from BPE /
        # Unigram output (transformers ignores it for BPE, with a warning at every first decode); saved explicitly so
        # that every reload decodes the same way, silently.
        clean_up_tokenization_spaces=False,
    )


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    tokenizer_type: TokenizerType = "bpe",
    min_frequency: int = 2,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a shared-vocabulary subword tokenizer on `texts` (source and target sentences together).

    Args:
        texts: the training sentences of both languages.
        vocab_size: the vocabulary size, special tokens included. BPE may end up smaller if the text has fewer
            merges above `min_frequency`.
        tokenizer_type: `"bpe"` or `"unigram"`.
        min_frequency: BPE only: the minimum count of a pair to be merged.
        show_progress: show the `tokenizers` progress bar.

    Returns:
        A `PreTrainedTokenizerFast` with `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 that appends `</s>` to each encoded
        sequence.
    """
    return wrap_tokenizer(_train_backend(texts, vocab_size, tokenizer_type, min_frequency, show_progress, length=None))


def _train_backend(
    texts: Iterable[str],
    vocab_size: int,
    tokenizer_type: TokenizerType,
    min_frequency: int,
    show_progress: bool,
    length: int | None,
) -> Tokenizer:
    """The trained `tokenizers.Tokenizer`, with the `</s>` post-processor."""
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    tokenizer, trainer = build_tokenizer_trainer(tokenizer_type, vocab_size, min_frequency, show_progress)
    # One ordered iterator of batches; `length` (the number of texts) only sizes the progress bar.
    tokenizer.train_from_iterator(_batched(texts), trainer=trainer, length=length)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual_id = tokenizer.token_to_id(token)
        if actual_id != expected_id:
            raise RuntimeError(f"special token {token} got id {actual_id}, expected {expected_id}")
    add_eos_post_processor(tokenizer)
    return tokenizer


def training_sample(num_rows: int, max_pairs: int | None, seed: int = 0) -> np.ndarray | None:
    """The rows a tokenizer trains on: None (all of them) when there are at most `max_pairs`, else `max_pairs` row
    indices drawn at random without replacement (by `seed`), in increasing order."""
    if max_pairs is not None and max_pairs <= 0:
        raise ValueError(f"max_pairs must be positive, got {max_pairs}")
    if max_pairs is None or num_rows <= max_pairs:
        return None
    return np.sort(np.random.default_rng(seed).choice(num_rows, size=max_pairs, replace=False))


def tokenizer_cache_file(dataset, settings: dict) -> Path | None:
    """Where a tokenizer trained on `dataset` with `settings` is kept: beside the dataset's cache files, named by the
    dataset's fingerprint, the settings, the untrained pipeline and the versions. None for an in-memory dataset."""
    from datasets.fingerprint import Hasher

    import hf_unified_mt

    cache_files = getattr(dataset, "cache_files", None)
    if not cache_files:
        return None
    untrained, _ = build_tokenizer_trainer(
        settings["tokenizer_type"], settings["vocab_size"], settings["min_frequency"]
    )
    key = Hasher.hash(
        [dataset._fingerprint, settings, untrained.to_str(), hf_unified_mt.__version__, tokenizers.__version__]
    )
    return Path(cache_files[0]["filename"]).parent / f"tokenizer-{key}.json"


def train_tokenizer_on_corpus(
    dataset,
    vocab_size: int = 8000,
    tokenizer_type: TokenizerType = "bpe",
    min_frequency: int = 2,
    source_column: str = "source",
    target_column: str = "target",
    show_progress: bool = False,
    max_pairs: int | None = None,
    cache: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a shared tokenizer on the source and target columns of a `datasets.Dataset` (usually the train split),
    read 10,000 rows at a time (no list of all its sentences), with a progress bar.

    Args:
        max_pairs: train on at most this many pairs: a split with more gives a random sample of this many (the same
            one in every run, [`training_sample`]), like SentencePiece's `input_sentence_size`. None: every pair.
        cache: keep the trained tokenizer beside the dataset's cache files ([`tokenizer_cache_file`]) and load it
            from there when a previous run trained it on the same split with the same settings.
        Others: as [`train_tokenizer`].
    """
    from datasets.utils import tqdm as hf_tqdm

    from .data import PROGRESS_DELAY_S

    settings = dict(
        vocab_size=vocab_size,
        tokenizer_type=tokenizer_type,
        min_frequency=min_frequency,
        source_column=source_column,
        target_column=target_column,
        max_pairs=max_pairs if max_pairs is not None and len(dataset) > max_pairs else None,
    )
    cache_file = tokenizer_cache_file(dataset, settings) if cache else None
    if cache_file is not None and cache_file.is_file():
        try:
            cached = Tokenizer.from_file(str(cache_file))
        except Exception as error:  # the tokenizers library raises a bare Exception for a file it cannot read
            logger.warning("Cannot read the cached tokenizer %s (%s); training it again", cache_file, error)
        else:
            logger.info("Loading the tokenizer trained on these pairs with these settings from %s", cache_file)
            return wrap_tokenizer(cached)

    indices = training_sample(len(dataset), max_pairs)
    total = len(dataset) if indices is None else len(indices)

    def texts() -> Iterator[str]:
        # contiguous Arrow batches of the memory-mapped table; the sampled rows are taken from each batch
        rows = dataset.with_format("arrow", columns=[source_column, target_column])
        bar = hf_tqdm(
            desc="Training the tokenizer", unit=" pairs", unit_scale=True, total=total, delay=PROGRESS_DELAY_S
        )
        with bar:
            for start, batch in zip(range(0, len(dataset), 10_000), rows.iter(10_000)):
                if indices is not None:
                    first, last = np.searchsorted(indices, [start, start + batch.num_rows])
                    batch = batch.take(indices[first:last] - start)
                yield from batch.column(source_column).to_pylist()
                yield from batch.column(target_column).to_pylist()
                bar.update(batch.num_rows)

    tokenizer = _train_backend(texts(), vocab_size, tokenizer_type, min_frequency, show_progress, length=2 * total)
    if cache_file is not None:
        write_text(cache_file, tokenizer.to_str())
    return wrap_tokenizer(tokenizer)


def load_tokenizer(path: str) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer (a directory with `tokenizer.json`) with `AutoTokenizer`, offline. It saves without
    `LOAD_OPTIONS` (`forget_load_options`): train.py's Trainer writes it into every checkpoint. It pads on the right,
    whatever the saved `padding_side`: the models take right-padded batches only."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, padding_side="right")
    return forget_load_options(tokenizer)
