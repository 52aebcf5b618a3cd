"""sacreBLEU scores with signatures, the Trainer compute_metrics, BLEU by length, and the local evaluate module."""

import numpy as np
import pytest
import sacrebleu
from transformers import EvalPrediction

from hf_unified_mt.training.metrics import (
    bleu_by_source_length,
    build_compute_metrics,
    compute_translation_scores,
    format_scores,
    local_sacrebleu_path,
)
from hf_unified_mt.training.tokenization import train_tokenizer


HYPOTHESES = ["the cat sat on the mat", "there is a dog in the garden today"]
REFERENCES = ["the cat is on the mat", "there is a dog in the garden"]


def test_identical_pairs_score_100_with_signatures():
    scores = compute_translation_scores(REFERENCES, REFERENCES)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert "BLEU = 100.00  (nrefs:1" in format_scores(scores)


def test_scores_match_sacrebleu():
    scores = compute_translation_scores(HYPOTHESES, REFERENCES)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert 0 < scores["bleu"] < 100
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        compute_translation_scores(HYPOTHESES, REFERENCES[:1])


def test_local_evaluate_module_offline(monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    metric = evaluate.load(local_sacrebleu_path())
    identical = metric.compute(predictions=REFERENCES, references=[[r] for r in REFERENCES])
    assert identical["score"] == pytest.approx(100.0)
    assert identical["chrf"] == pytest.approx(100.0)
    assert identical["signature"].startswith("nrefs:1|")
    results = metric.compute(predictions=HYPOTHESES, references=REFERENCES)  # plain strings work too
    assert results["score"] == pytest.approx(compute_translation_scores(HYPOTHESES, REFERENCES)["bleu"])
    two_refs = metric.compute(predictions=HYPOTHESES[:1], references=[[REFERENCES[1], HYPOTHESES[0]]])
    assert two_refs["score"] == pytest.approx(100.0) and two_refs["signature"].startswith("nrefs:2|")
    by_file = evaluate.load(local_sacrebleu_path() + "/local_sacrebleu.py")
    assert by_file.compute(predictions=REFERENCES, references=REFERENCES)["score"] == pytest.approx(100.0)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(HYPOTHESES + REFERENCES, vocab_size=120)


def _pad(rows, value):
    width = max(len(r) for r in rows)
    return np.array([r + [value] * (width - len(r)) for r in rows])


def test_compute_metrics_decodes_and_ignores_padding(tokenizer):
    compute_metrics = build_compute_metrics(tokenizer)
    # Generated ids start with the decoder start token and are padded with -100 across processes.
    predictions = _pad([[1] + tokenizer(r)["input_ids"] for r in REFERENCES], -100)
    labels = _pad([tokenizer(text_target=r)["input_ids"] for r in REFERENCES], -100)
    metrics = compute_metrics(EvalPrediction(predictions=predictions, label_ids=labels))
    assert metrics["bleu"] == pytest.approx(100.0) and metrics["chrf"] == pytest.approx(100.0)
    assert set(metrics) == {"bleu", "chrf", "gen_len"}

    wrong = _pad([[1] + tokenizer(h)["input_ids"] for h in HYPOTHESES], -100)
    with_raw_references = build_compute_metrics(tokenizer, references=REFERENCES)
    expected = compute_translation_scores(HYPOTHESES, REFERENCES)["bleu"]
    assert with_raw_references(EvalPrediction(predictions=wrong, label_ids=labels))["bleu"] == pytest.approx(
        expected, abs=1e-3
    )
    with pytest.raises(ValueError, match="1 references"):
        build_compute_metrics(tokenizer, references=REFERENCES[:1])(EvalPrediction(predictions=wrong, label_ids=labels))


def test_bleu_by_source_length_buckets():
    sources = ["uno dos", "a b c d e f g h i j k l", "x " * 25]
    hypotheses = ["one two three four", "the cat sat on the mat", "good"]
    references = ["one two three four", "the cat is on the mat", "bad"]
    buckets = bleu_by_source_length(sources, hypotheses, references, buckets=(10, 20))
    assert [b["bucket"] for b in buckets] == ["1-10", "11-20", ">20"]
    assert [b["num_sentences"] for b in buckets] == [1, 1, 1]
    assert buckets[0]["bleu"] == pytest.approx(100.0)
    assert buckets[2]["max_words"] is None and buckets[2]["bleu"] == 0.0
