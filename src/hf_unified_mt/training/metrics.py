# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Translation metrics: sacreBLEU BLEU and chrF with their signatures, for scripts and for `Seq2SeqTrainer`.

Scores are computed with `sacrebleu` directly (the `evaluate` library cannot fetch metric scripts without the Hub).
Every score comes with its sacreBLEU signature (e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`),
which says how it was computed and makes it comparable across papers.

For `evaluate` users, the package also ships a local metric module, loadable offline with
`evaluate.load(local_sacrebleu_path())`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU, CHRF


LOCAL_METRICS_DIR = Path(__file__).resolve().parent / "local_metrics"

# Source-length buckets (in words, upper bounds inclusive) for BLEU by sentence length.
DEFAULT_LENGTH_BUCKETS = (10, 20, 30, 40, 50, 60)


def local_sacrebleu_path() -> str:
    """Path of the local `evaluate` metric module (a directory holding `local_sacrebleu.py`).

    Example:
        ```python
        >>> import evaluate
        >>> from hf_unified_mt.training.metrics import local_sacrebleu_path
        >>> metric = evaluate.load(local_sacrebleu_path())
        >>> metric.compute(predictions=["the cat sat"], references=[["the cat sat"]])["score"]
        100.00000000000004
        ```
    """
    return str(LOCAL_METRICS_DIR / "local_sacrebleu")


def compute_translation_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    tokenize: str | None = None,
    lowercase: bool = False,
) -> dict[str, float | str]:
    """Corpus BLEU and chrF of `hypotheses` against one reference each, with the sacreBLEU signatures.

    Args:
        hypotheses: system outputs, detokenized text.
        references: one reference per hypothesis.
        tokenize: sacreBLEU tokenizer for BLEU (`None` = its default, `13a`).
        lowercase: case-insensitive BLEU.

    Returns:
        `{"bleu", "chrf", "bleu_signature", "chrf_signature", "bleu_precisions", "bleu_brevity_penalty",
        "hyp_len", "ref_len", "num_sentences"}`.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu_metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    chrf_metric = CHRF()
    bleu = bleu_metric.corpus_score(list(hypotheses), [list(references)])
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": bleu.score,
        "chrf": chrf.score,
        "bleu_signature": str(bleu_metric.get_signature()),
        "chrf_signature": str(chrf_metric.get_signature()),
        "bleu_precisions": [float(p) for p in bleu.precisions],
        "bleu_brevity_penalty": float(bleu.bp),
        "hyp_len": int(bleu.sys_len),
        "ref_len": int(bleu.ref_len),
        "num_sentences": len(hypotheses),
    }


def format_scores(scores: dict) -> str:
    """Two lines in the sacreBLEU style: `BLEU = 12.34 (signature)` and `chrF = 45.67 (signature)`."""
    return (
        f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']})\n"
        f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})"
    )


def bleu_by_source_length(
    sources: Sequence[str],
    hypotheses: Sequence[str],
    references: Sequence[str],
    buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
    tokenize: str | None = None,
) -> list[dict]:
    """Corpus BLEU and chrF of the sentences in each source-length bucket (length in whitespace-separated words).

    Bucket `i` holds sources with `buckets[i-1] < words <= buckets[i]`; the last bucket is open-ended.

    Returns:
        One dict per non-empty bucket: `{"bucket", "min_words", "max_words", "num_sentences", "bleu", "chrf"}`
        (`max_words` is `None` for the open bucket).
    """
    if not (len(sources) == len(hypotheses) == len(references)):
        raise ValueError("sources, hypotheses and references must have the same length")
    bounds = list(buckets)
    word_counts = np.array([len(s.split()) for s in sources])
    results = []
    lower = 0
    for upper in bounds + [math.inf]:
        members = np.flatnonzero((word_counts > lower) & (word_counts <= upper))
        if len(members):
            scores = compute_translation_scores(
                [hypotheses[i] for i in members], [references[i] for i in members], tokenize=tokenize
            )
            label = f"{lower + 1}-{upper}" if upper != math.inf else f">{lower}"
            results.append(
                {
                    "bucket": label,
                    "min_words": int(lower + 1),
                    "max_words": None if upper == math.inf else int(upper),
                    "num_sentences": int(len(members)),
                    "bleu": scores["bleu"],
                    "chrf": scores["chrf"],
                }
            )
        lower = upper
    return results


def decode_predictions(predictions, tokenizer) -> list[str]:
    """Decode generated ids (a 2D array, `-100` where the Trainer padded across processes) to stripped text."""
    if isinstance(predictions, tuple):
        predictions = predictions[0]
    predictions = np.asarray(predictions)
    predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
    return [text.strip() for text in tokenizer.batch_decode(predictions, skip_special_tokens=True)]


def build_compute_metrics(tokenizer, references: Sequence[str] | None = None, tokenize: str | None = None) -> Callable:
    """A `compute_metrics` function for `Seq2SeqTrainer(predict_with_generate=True)`.

    It decodes the generated ids (replacing `-100`) and returns `bleu`, `chrf` and `gen_len` (mean generated length
    in tokens). Only numbers are returned, as the Trainer logs them; the signatures do not depend on the data and are
    available from [`compute_translation_scores`] (and are written by `train.py`).

    Args:
        tokenizer: decodes predictions (and labels).
        references: the raw reference texts of the evaluation set, in dataset order. Scoring against them is exact
            sacreBLEU; without them the references are decoded from the labels, which loses whatever the tokenizer
            normalizes (NFKC, characters outside the vocabulary).
        tokenize: sacreBLEU tokenizer for BLEU (`None` = `13a`).
    """

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        hypotheses = decode_predictions(predictions, tokenizer)
        if references is not None:
            if len(references) != len(hypotheses):
                raise ValueError(
                    f"compute_metrics got {len(hypotheses)} predictions for an evaluation set of {len(references)} "
                    "references; pass references=None to score against the decoded labels"
                )
            targets = list(references)
        else:
            targets = decode_predictions(labels, tokenizer)
        scores = compute_translation_scores(hypotheses, targets, tokenize=tokenize)
        predictions = predictions[0] if isinstance(predictions, tuple) else predictions
        generated_lengths = ((np.asarray(predictions) != tokenizer.pad_token_id) & (np.asarray(predictions) >= 0)).sum(
            axis=-1
        )
        return {
            "bleu": round(scores["bleu"], 4),
            "chrf": round(scores["chrf"], 4),
            "gen_len": round(float(np.mean(generated_lengths)), 4),
        }

    return compute_metrics
