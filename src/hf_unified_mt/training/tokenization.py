# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Shared source/target subword tokenizers trained with the `tokenizers` library.

[`train_tokenizer`] learns one vocabulary for both languages (BPE or Unigram, SentencePiece-style `▁` word markers),
with the special tokens `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3, and a post-processor that appends `</s>` to every
encoded sequence (sources and targets alike). It returns a [`transformers.PreTrainedTokenizerFast`], which
`save_pretrained` writes as `tokenizer.json` + `tokenizer_config.json`, and which `AutoTokenizer.from_pretrained`
reloads offline.

Training is deterministic: the same texts and settings give the same vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_unified_mt.deployment.tokenizer_files import forget_load_options


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
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be larger than the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    tokenizer, trainer = build_tokenizer_trainer(tokenizer_type, vocab_size, min_frequency, show_progress)
    # One ordered iterator of batches; `length` is unknown and only used for the progress bar.
    tokenizer.train_from_iterator(_batched(texts), trainer=trainer)
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        actual_id = tokenizer.token_to_id(token)
        if actual_id != expected_id:
            raise RuntimeError(f"special token {token} got id {actual_id}, expected {expected_id}")
    add_eos_post_processor(tokenizer)
    return wrap_tokenizer(tokenizer)


def train_tokenizer_on_corpus(
    dataset,
    vocab_size: int = 8000,
    tokenizer_type: TokenizerType = "bpe",
    min_frequency: int = 2,
    source_column: str = "source",
    target_column: str = "target",
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a shared tokenizer on the source and target columns of a `datasets.Dataset` (usually the train split)."""

    def texts() -> Iterator[str]:
        for start in range(0, len(dataset), 10_000):
            batch = dataset[start : start + 10_000]
            yield from batch[source_column]
            yield from batch[target_column]

    return train_tokenizer(texts(), vocab_size, tokenizer_type, min_frequency, show_progress)


def load_tokenizer(path: str) -> PreTrainedTokenizerFast:
    """Load a saved tokenizer (a directory with `tokenizer.json`) with `AutoTokenizer`, offline. It saves without
    `LOAD_OPTIONS` (`forget_load_options`): train.py's Trainer writes it into every checkpoint. It pads on the right,
    whatever the saved `padding_side`: the models take right-padded batches only."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, padding_side="right")
    return forget_load_options(tokenizer)
