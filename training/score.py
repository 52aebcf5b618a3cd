#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Score a saved model on a split: sacreBLEU BLEU and chrF with signatures, and BLEU by source length.

    python training/score.py outputs/mt                          # test split of the embedded corpus
    python training/score.py outputs/mt --split validation --num_beams 5
    python training/score.py outputs/mt --test_file data/test.tsv --source_field de --target_field en
    python training/score.py outputs/mt --source_file test.es --reference_file test.en

Plain-text files are split on `\\n` only (a `\\r\\n` ending is accepted): sources and references must have the same
number of lines, or nothing is scored. Problems with the options or files are reported on one line
(`score.py: error: ...`, exit status 2) before the model is loaded.

Prints the scores, then writes `eval_<split>.json` (scores, signatures, BLEU per source-length bucket),
`hypotheses_<split>.txt` and, if matplotlib is installed, `bleu_by_length_<split>.png` to `--output_dir` (default: the
model directory; one that cannot be written is refused before anything is translated). Each file is written to a
temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import logging
import os
import sys

import datasets
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.deployment.inference import (
    add_threads_argument,
    model_length_limit,
    quantize_int8,
    split_lines,
    translate,
    use_threads,
)
from hf_unified_mt.deployment.onnx_backend import add_shortlist_argument, load_onnx_model, shortlist_problem
from hf_unified_mt.deployment.onnx_export import add_int8_mode_argument, int8_option
from hf_unified_mt.deployment.onnx_runtime import onnx_backend_problem, torch_backend_problem
from hf_unified_mt.training.data import DEFAULT_CORPUS, DataValidationError, describe_binary_start, load_parallel_data
from hf_unified_mt.training.metrics import (
    DEFAULT_LENGTH_BUCKETS,
    bleu_by_source_length,
    compute_translation_scores,
    format_scores,
)
from hf_unified_mt.utils.files import atomic_write, write_json, write_text


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
    data.add_argument("--encoding", default="utf-8", help="Text encoding of the local files (default utf-8).")
    data.add_argument("--max_samples", type=int, default=None, help="Score only the first N pairs.")
    gen = parser.add_argument_group("generation")
    gen.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the model's).")
    gen.add_argument("--batch_size", type=int, default=32, help="Most sentences per batch.")
    gen.add_argument("--max_new_tokens", type=int, default=None, help="Most generated tokens per sentence.")
    gen.add_argument("--max_source_length", type=int, default=None, help="Truncate longer sources (tokens).")
    gen.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available).")
    gen.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    gen.add_argument(
        "--backend",
        choices=["torch", "onnx"],
        default="torch",
        help="torch (default), or onnx: ONNX Runtime on CPU (the model exported for the run unless it is an "
        "export_onnx folder).",
    )
    gen.add_argument(
        "--int8",
        action="store_true",
        help="Dynamic int8 quantisation of the linear layers (CPU; with --backend onnx, of the ONNX graphs: see "
        "--int8_mode).",
    )
    add_int8_mode_argument(gen)
    add_shortlist_argument(gen)
    add_threads_argument(gen)
    out = parser.add_argument_group("output")
    out.add_argument(
        "--output_dir", default=None, help="Where to write the results (default: the model directory; created if new)."
    )
    out.add_argument(
        "--buckets",
        type=int,
        nargs="+",
        default=list(DEFAULT_LENGTH_BUCKETS),
        help="Upper bounds (in source words) of the length buckets; the last bucket is open.",
    )
    out.add_argument("--tokenize", default=None, help="sacreBLEU tokenizer for BLEU (default 13a).")
    out.add_argument("--no_progress", action="store_true", help="Hide the progress bars (data, loading, translating).")
    return parser


class UsageError(Exception):
    """A problem with the options or files that the user can fix; printed as one line, without traceback."""


def check_arguments(args) -> None:
    """Every option and path, before any data or model is loaded."""
    try:
        int8_option(args.int8, args.int8_mode, args.backend)
    except ValueError as error:
        raise UsageError(str(error)) from error
    if args.int8 and (args.device or "cpu") != "cpu":
        raise UsageError("--int8 quantises the model for CPU: leave --device at its default")
    if shortlist_problem(args.backend, args.shortlist, args.model) is not None:
        raise UsageError(shortlist_problem(args.backend, args.shortlist, args.model))
    if args.backend == "onnx":
        problem = onnx_backend_problem(args.int8, args.device)
        if problem is not None:
            raise UsageError(problem)
    elif torch_backend_problem(args.model) is not None:
        raise UsageError(torch_backend_problem(args.model))
    for name, least in (
        ("num_beams", 1),
        ("batch_size", 1),
        ("max_new_tokens", 1),
        ("max_source_length", 2),
        ("max_samples", 1),
        ("threads", 1),
    ):
        value = getattr(args, name)
        if value is not None and value < least:
            raise UsageError(f"--{name} must be at least {least}, not {value}")
    if any(bound < 1 for bound in args.buckets) or list(args.buckets) != sorted(set(args.buckets)):
        raise UsageError(f"--buckets must be increasing positive word counts, not {args.buckets}")
    try:
        codecs.lookup(args.encoding)
    except LookupError as error:
        raise UsageError(f"unknown encoding {args.encoding!r} (--encoding)") from error
    if bool(args.source_file) != bool(args.reference_file):
        raise UsageError("--source_file and --reference_file go together")
    for option in ("source_file", "reference_file", "test_file"):
        path = getattr(args, option)
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"--{option} {path}: no such file")
    if not os.path.isdir(args.model):
        raise UsageError(f"model directory {args.model} does not exist")
    check_output_dir(args.output_dir, args.model)


def check_output_dir(output_dir: str | None, model: str) -> None:
    """The results are written after every sentence is translated: a folder that cannot take them (`output_dir`, or
    the model directory by default) is refused before."""
    folder = output_dir or model
    named = f"--output_dir {folder}" if output_dir else f"the model directory {folder} (where results go by default)"
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"{named} is a file, not a folder")
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UsageError(f"cannot create {named}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        problem = (
            f"cannot write the results to {named}: it is not writable"
            if existing == os.path.abspath(folder)
            else f"cannot create {named}: {existing} is not writable"
        )
        raise UsageError(f"{problem}; pass --output_dir with a folder you can write")


def read_lines(path: str, encoding: str) -> list[str]:
    """The `\\n`-separated lines of a plain-text file (see `split_lines`)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        hint = describe_binary_start(raw[:8], path, encoding)
        if hint is not None:
            raise UsageError(hint) from error
        line = raw[: error.start].count(b"\n") + 1
        raise UsageError(
            f"{path}, line {line}: bytes {raw[error.start : error.end]!r} cannot be decoded as {encoding} "
            f"({error.reason}); pass the file's encoding with --encoding"
        ) from error
    return split_lines(text)


def read_pairs(args) -> tuple[str, list[str], list[str]]:
    """Return `(name, sources, references)` from plain-text files, a local file, a Hub dataset or the corpus."""
    if args.source_file or args.reference_file:
        if not (args.source_file and args.reference_file):
            raise UsageError("--source_file and --reference_file go together")
        sources = read_lines(args.source_file, args.encoding)
        references = read_lines(args.reference_file, args.encoding)
        if len(sources) != len(references):
            raise UsageError(
                f"{args.source_file} has {len(sources)} lines but {args.reference_file} has {len(references)}: "
                "each source line needs its reference on the same line"
            )
        if not sources:
            raise UsageError(f"{args.source_file} is empty: nothing to score")
        name = os.path.splitext(os.path.basename(args.source_file))[0]
    else:
        try:
            corpus = load_parallel_data(
                corpus=args.corpus,
                test_file=args.test_file,
                dataset_name=args.dataset_name,
                dataset_config_name=args.dataset_config_name,
                source_field=args.source_field,
                target_field=args.target_field,
                encoding=args.encoding,
            )
        except DataValidationError as error:
            raise UsageError(str(error)) from error
        split = "test" if args.test_file else args.split
        if split not in corpus:
            raise UsageError(f"no {split!r} split; available: {list(corpus.splits)}")
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
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120)
    plt.close(figure)
    return True


def check_max_new_tokens(max_new_tokens: int | None, model) -> None:
    """Once the model is loaded, before anything is translated: a --max_new_tokens its decoder cannot reach."""
    limit = model_length_limit(model)
    if max_new_tokens is not None and limit is not None and max_new_tokens > limit:
        raise UsageError(
            f"--max_new_tokens {max_new_tokens} is more than the model can generate: its decoder has "
            f"max_position_embeddings={limit} positions (give at most {limit}, or leave it out)"
        )


@contextlib.contextmanager
def progress_bars(shown: bool):
    """Unless `shown`, the progress bars of transformers, the Hub and datasets (preparing the data, loading the
    weights) are off for the block."""
    switches = []
    if not shown and transformers_logging.is_progress_bar_enabled():
        switches.append((transformers_logging.disable_progress_bar, transformers_logging.enable_progress_bar))
    if not shown and datasets.is_progress_bar_enabled():
        switches.append((datasets.disable_progress_bars, datasets.enable_progress_bars))
    for disable, _ in switches:
        disable()
    try:
        yield
    finally:
        for _, enable in switches:
            enable()


def write_results(output_dir: str, name: str, results: dict, hypotheses: list[str], title: str) -> bool:
    """`eval_<name>.json`, `hypotheses_<name>.txt` and the plot (if matplotlib is installed; returns whether it was
    drawn) in `output_dir`, each renamed into place once complete."""
    try:
        os.makedirs(output_dir, exist_ok=True)
        write_json(os.path.join(output_dir, f"eval_{name}.json"), results, indent=2)
        write_text(os.path.join(output_dir, f"hypotheses_{name}.txt"), "".join(h + "\n" for h in hypotheses))
        return plot_buckets(
            results["bleu_by_source_length"], os.path.join(output_dir, f"bleu_by_length_{name}.png"), title
        )
    except OSError as error:
        raise UsageError(
            f"cannot write the results to {output_dir}: {error.strerror or error} (the scores are printed above)"
        ) from error


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s - %(name)s - %(message)s")
    check_arguments(args)
    with progress_bars(not args.no_progress):
        name, sources, references = read_pairs(args)
        use_threads(args.threads)
        try:
            if args.backend == "onnx":
                int8 = int8_option(args.int8, args.int8_mode, args.backend)
                model, tokenizer = load_onnx_model(args.model, int8, args.trust_remote_code, shortlist=args.shortlist)
            else:
                device = "cpu" if args.int8 else args.device or ("cuda" if torch.cuda.is_available() else "cpu")
                tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
                model = AutoModelForSeq2SeqLM.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
                model = model.to(device)
        except (OSError, ValueError) as error:
            raise UsageError(f"cannot load the model {args.model}: {str(error).splitlines()[0]}") from error
    if args.int8 and args.backend == "torch":
        model = quantize_int8(model)
    check_max_new_tokens(args.max_new_tokens, model)
    try:
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
    except ValueError as error:  # an over-long source (named), or a max_source_length the model cannot take
        raise UsageError(f"{name}: {error}") from error
    assert len(hypotheses) == len(sources) == len(references)

    scores = compute_translation_scores(hypotheses, references, tokenize=args.tokenize)
    buckets = bleu_by_source_length(sources, hypotheses, references, buckets=args.buckets, tokenize=args.tokenize)
    num_beams = args.num_beams or model.generation_config.num_beams or 1
    results = {"model": args.model, "split": name, "num_beams": num_beams, **scores, "bleu_by_source_length": buckets}

    print(f"{name}: {len(hypotheses)} pairs, beam {num_beams}")
    print(format_scores(scores))
    print("BLEU by source length (words):")
    for bucket in buckets:
        print(
            f"  {bucket['bucket']:>8}  n={bucket['num_sentences']:<5d} "
            f"BLEU {bucket['bleu']:6.2f}  chrF {bucket['chrf']:6.2f}"
        )
    sys.stdout.flush()
    output_dir = args.output_dir or args.model
    plotted = write_results(output_dir, name, results, hypotheses, f"BLEU by source length ({name}, beam {num_beams})")
    where = os.path.join(output_dir, f"eval_{name}.json")
    print(f"Wrote {where}" + (" and the plot" if plotted else " (install matplotlib for the plot)"))
    return results


if __name__ == "__main__":
    try:
        main()
    except UsageError as error:
        print(f"score.py: error: {error}", file=sys.stderr)
        sys.exit(2)
