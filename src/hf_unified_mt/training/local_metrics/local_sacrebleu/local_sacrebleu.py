# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""sacreBLEU BLEU and chrF as a local `evaluate` metric module (evaluate 0.4.x API), loadable without the Hub:

    >>> import evaluate
    >>> metric = evaluate.load("path/to/local_metrics/local_sacrebleu")   # or the path of this file
    >>> metric.compute(predictions=["hello there"], references=[["hello there"]])

`evaluate.load("sacrebleu")` needs the Hugging Face Hub to fetch its script; this module gives the same interface
(`score`, `counts`, `totals`, `precisions`, `bp`, `sys_len`, `ref_len`) plus chrF and the sacreBLEU signatures.
"""

import datasets
import evaluate
from sacrebleu.metrics import BLEU, CHRF


_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    publisher = "Association for Computational Linguistics",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
SacreBLEU computes shareable, comparable and reproducible BLEU and chrF scores, and a signature string that records
how each score was computed (number of references, casing, tokenization, smoothing, version). This module runs
sacreBLEU from the installed `sacrebleu` package and needs no network access.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): the system outputs (detokenized text).
    references (`list[list[str]]` or `list[str]`): one or more references per prediction; every prediction must have
        the same number of references.
    smooth_method (`str`): BLEU smoothing, one of `"none"`, `"floor"`, `"add-k"`, `"exp"`. Defaults to `"exp"`.
    smooth_value (`float`, optional): value for `"floor"` (default 0.1) or `"add-k"` (default 1).
    tokenize (`str`, optional): BLEU tokenizer (`"13a"` by default; also `"none"`, `"zh"`, `"intl"`, `"char"`, ...).
    lowercase (`bool`): case-insensitive BLEU. Defaults to `False`.
    force (`bool`): do not complain about tokenized input. Defaults to `False`.
    use_effective_order (`bool`): use the effective n-gram order (for sentence-level BLEU). Defaults to `False`.
Returns:
    score (`float`): corpus BLEU;
    counts, totals (`list[int]`), precisions (`list[float]`), bp (`float`), sys_len, ref_len (`int`);
    signature (`str`): the BLEU signature;
    chrf (`float`): corpus chrF; chrf_signature (`str`).
Examples:
    >>> metric = evaluate.load("local_metrics/local_sacrebleu")
    >>> results = metric.compute(predictions=["hello there"], references=[["hello there"]])
    >>> round(results["score"], 1)
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class LocalSacrebleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            homepage="https://github.com/mjpost/sacrebleu",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://github.com/mjpost/sacrebleu", "https://www.aclweb.org/anthology/W18-6319"],
        )

    def _compute(
        self,
        predictions,
        references,
        smooth_method="exp",
        smooth_value=None,
        force=False,
        lowercase=False,
        tokenize=None,
        use_effective_order=False,
    ):
        # A single reference per prediction may be given as a plain string.
        if references and isinstance(references[0], str):
            references = [[reference] for reference in references]
        references_per_prediction = len(references[0]) if references else 0
        if any(len(refs) != references_per_prediction for refs in references):
            raise ValueError("Every prediction must have the same number of references.")
        # sacrebleu wants one stream per reference position: [[ref 1 of each sentence], [ref 2 of each], ...].
        transformed_references = [[refs[i] for refs in references] for i in range(references_per_prediction)]

        bleu_metric = BLEU(
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            force=force,
            lowercase=lowercase,
            tokenize=tokenize,
            effective_order=use_effective_order,
        )
        bleu = bleu_metric.corpus_score(predictions, transformed_references)
        chrf_metric = CHRF()
        chrf = chrf_metric.corpus_score(predictions, transformed_references)
        return {
            "score": bleu.score,
            "counts": bleu.counts,
            "totals": bleu.totals,
            "precisions": bleu.precisions,
            "bp": bleu.bp,
            "sys_len": bleu.sys_len,
            "ref_len": bleu.ref_len,
            "signature": str(bleu_metric.get_signature()),
            "chrf": chrf.score,
            "chrf_signature": str(chrf_metric.get_signature()),
        }
