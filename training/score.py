#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Score a saved model on a split: sacreBLEU BLEU and chrF with signatures, and BLEU by source length.

    python training/score.py outputs/mt                          # test split of the embedded corpus
    python training/score.py outputs/mt --split validation --num_beams 5
    python training/score.py outputs/mt --test_file data/test.tsv --source_field de --target_field en
    python training/score.py outputs/mt --source_file test.es --reference_file test.en

Writes `eval_<split>.json` (scores, signatures, BLEU per source-length bucket), `hypotheses_<split>.txt` and, if
matplotlib is installed, `bleu_by_length_<split>.png` to `--output_dir` (default: the model directory).
"""

from __future__ import annotations

import argparse
import json
import logging
import os

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.training.data import DEFAULT_CORPUS, load_parallel_data
from hf_unified_mt.training.inference import translate
from hf_unified_mt.training.metrics import (
    DEFAULT_LENGTH_BUCKETS,
    bleu_by_source_length,
    compute_translation_scores,
    format_scores,
)


logger = logging.getLogger("score")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="Directory of a saved model and tokenizer.")
    data = parser.add_argument_group("data (default: the test split of the embedded corpus)")
    data.add_argument("--corpus", default=DEFAULT_CORPUS, help="Embedded corpus name.")
    data.add_argument("--split", default="test", choices=["train", "validation", "test"], help="Split to score.")
    data.add_argument("--test_file", default=None, help="A local .tsv/.csv/.json(l) file to score instead.")
    data.add_argument("--dataset_name", default=None, help="A Hub dataset to score instead.")
    data.add_argument("--dataset_config_name", default=None, help="Its configuration.")
    data.add_argument("--source_field", default=None, help="Source column (corpus default: es).")
    data.add_argument("--target_field", default=None, help="Target column (corpus default: en).")
    data.add_argument("--source_file", default=None, help="Plain-text sources, one per line (with --reference_file).")
    data.add_argument("--reference_file", default=None, help="Plain-text references, one per line.")
    data.add_argument("--max_samples", type=int, default=None, help="Score only the first N pairs.")
    gen = parser.add_argument_group("generation")
    gen.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the model's).")
    gen.add_argument("--batch_size", type=int, default=32, help="Most sentences per batch.")
    gen.add_argument("--max_new_tokens", type=int, default=None, help="Most generated tokens per sentence.")
    gen.add_argument("--max_source_length", type=int, default=None, help="Truncate longer sources (tokens).")
    gen.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
    gen.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    out = parser.add_argument_group("output")
    out.add_argument("--output_dir", default=None, help="Where to write results (default: the model directory).")
    out.add_argument(
        "--buckets",
        type=int,
        nargs="+",
        default=list(DEFAULT_LENGTH_BUCKETS),
        help="Upper bounds (in source words) of the length buckets; the last bucket is open.",
    )
    out.add_argument("--tokenize", default=None, help="sacreBLEU tokenizer for BLEU (default 13a).")
    out.add_argument("--no_progress", action="store_true", help="Hide the progress bar.")
    return parser


def read_pairs(args) -> tuple[str, list[str], list[str]]:
    """Return `(name, sources, references)` from plain-text files, a local file, a Hub dataset or the corpus."""
    if args.source_file or args.reference_file:
        if not (args.source_file and args.reference_file):
            raise SystemExit("--source_file and --reference_file go together")
        with open(args.source_file, encoding="utf-8") as handle:
            sources = handle.read().splitlines()
        with open(args.reference_file, encoding="utf-8") as handle:
            references = handle.read().splitlines()
        if len(sources) != len(references):
            raise SystemExit(
                f"{args.source_file} has {len(sources)} lines but {args.reference_file} has {len(references)}"
            )
        name = os.path.splitext(os.path.basename(args.source_file))[0]
    else:
        corpus = load_parallel_data(
            corpus=args.corpus,
            test_file=args.test_file,
            dataset_name=args.dataset_name,
            dataset_config_name=args.dataset_config_name,
            source_field=args.source_field,
            target_field=args.target_field,
        )
        split = "test" if args.test_file else args.split
        if split not in corpus:
            raise SystemExit(f"no {split!r} split; available: {list(corpus.splits)}")
        dataset = corpus[split]
        sources, references = dataset["source"], dataset["target"]
        name = split
    if args.max_samples is not None:
        sources, references = sources[: args.max_samples], references[: args.max_samples]
    return name, sources, references


def plot_buckets(buckets: list[dict], path: str, title: str) -> bool:
    """Bar chart of BLEU per source-length bucket; returns False if matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(6, 3.5))
    labels = [bucket["bucket"] for bucket in buckets]
    bars = axis.bar(labels, [bucket["bleu"] for bucket in buckets], color="#4c72b0")
    for bar, bucket in zip(bars, buckets):
        axis.annotate(
            f"n={bucket['num_sentences']}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    axis.set_xlabel("source length (words)")
    axis.set_ylabel("BLEU")
    axis.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s - %(name)s - %(message)s")
    name, sources, references = read_pairs(args)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=args.trust_remote_code).to(device)
    hypotheses = translate(
        model,
        tokenizer,
        sources,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        max_source_length=args.max_source_length,
        progress=not args.no_progress,
    )

    scores = compute_translation_scores(hypotheses, references, tokenize=args.tokenize)
    buckets = bleu_by_source_length(sources, hypotheses, references, buckets=args.buckets, tokenize=args.tokenize)
    num_beams = args.num_beams or model.generation_config.num_beams or 1
    results = {"model": args.model, "split": name, "num_beams": num_beams, **scores, "bleu_by_source_length": buckets}

    output_dir = args.output_dir or args.model
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, f"eval_{name}.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    with open(os.path.join(output_dir, f"hypotheses_{name}.txt"), "w", encoding="utf-8") as handle:
        handle.write("".join(h + "\n" for h in hypotheses))
    plotted = plot_buckets(
        buckets,
        os.path.join(output_dir, f"bleu_by_length_{name}.png"),
        f"BLEU by source length ({name}, beam {num_beams})",
    )

    print(f"{name}: {len(hypotheses)} pairs, beam {num_beams}")
    print(format_scores(scores))
    print("BLEU by source length (words):")
    for bucket in buckets:
        print(
            f"  {bucket['bucket']:>8}  n={bucket['num_sentences']:<5d} "
            f"BLEU {bucket['bleu']:6.2f}  chrF {bucket['chrf']:6.2f}"
        )
    where = os.path.join(output_dir, f"eval_{name}.json")
    print(f"Wrote {where}" + (" and the plot" if plotted else " (install matplotlib for the plot)"))
    return results


if __name__ == "__main__":
    main()
