# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Is system B better than system A on one test set? Paired bootstrap resampling over the test sentences (Koehn 2004,
"Statistical Significance Tests for Machine Translation Evaluation"): each resample draws the test sentences with
replacement, the same draw for both systems, and recomputes corpus BLEU from sacreBLEU's sufficient statistics; the 95%
interval of B - A is the 2.5th and 97.5th percentiles of the resampled differences (the percentile interval of Efron
and Tibshirani's "An Introduction to the Bootstrap", 1993). Several training seeds per system are averaged inside each
resample. Used by the ablation study (`ablation_report`)."""

from __future__ import annotations

import statistics

import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


def paired_bootstrap_delta(
    a_runs: list[list[str]], b_runs: list[list[str]], references: list[str], samples: int, seed: int = 12345
) -> tuple[float, float, float]:
    """Seed-averaged BLEU(B) - BLEU(A) with a 95% interval: each resample draws test verses with replacement (the
    same verses for every seed and both arms) and recomputes corpus BLEU from sacreBLEU's sufficient statistics."""
    metric = BLEU()
    stats = [np.array(metric._extract_corpus_statistics(h, [references])) for h in a_runs + b_runs]
    rng = np.random.default_rng(seed)
    n = len(references)

    def score(rows) -> float:
        return metric._compute_score_from_stats(rows.sum(axis=0).tolist()).score

    def delta(index) -> float:
        scores = [score(s[index]) for s in stats]
        return statistics.fmean(scores[len(a_runs) :]) - statistics.fmean(scores[: len(a_runs)])

    observed = delta(np.arange(n))
    resampled = np.array([delta(rng.integers(0, n, n)) for _ in range(samples)])
    low, high = np.percentile(resampled, [2.5, 97.5])
    return observed, float(low), float(high)


def sacrebleu_paired_tests(a: dict, b: dict, references: list[str], samples: int) -> tuple[dict[int, float], str]:
    """sacreBLEU's paired bootstrap resampling of B against A, one test per seed both arms have."""
    p_values, signature = {}, ""
    for seed in sorted(set(a) & set(b)):
        systems = [("A", a[seed]["hypotheses"]), ("B", b[seed]["hypotheses"])]
        signatures, scores = PairedTest(systems, {"BLEU": BLEU()}, [references], test_type="bs", n_samples=samples)()
        p_values[seed] = float(scores["BLEU"][1].p_value)
        signature = str(signatures["BLEU"])
    return p_values, signature


def verdict(delta: float, low: float, high: float) -> str:
    """ "B better" or "B worse" when the whole interval of B - A lies on one side of 0, else "within noise"."""
    if low > 0:
        return "B better"
    if high < 0:
        return "B worse"
    return "within noise"


def delta_fields(delta: float, low: float, high: float) -> dict:
    """A paired-bootstrap comparison as the benchmarks' JSON records it: ΔBLEU and its 95% interval to two decimals,
    and the verdict."""
    return dict(delta_bleu=round(delta, 2), interval=[round(low, 2), round(high, 2)], verdict=verdict(delta, low, high))
