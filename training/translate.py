#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Translate a file (or stdin) line by line with a saved model: beam search, length-sorted batches, output in order.

    python training/translate.py outputs/mt --input source.es --output output.en --num_beams 5
    echo "En el principio era el Verbo." | python training/translate.py outputs/mt

Each input line gives one output line (empty lines stay empty). The progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_unified_mt  # noqa: F401  (registers the package's architectures with the Auto classes)
from hf_unified_mt.training.inference import translate


DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="Directory of a saved model and tokenizer (e.g. train.py's output_dir).")
    parser.add_argument("--input", "-i", default="-", help="Input file, one sentence per line ('-' = stdin).")
    parser.add_argument("--output", "-o", default="-", help="Output file ('-' = stdout).")
    parser.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the model's, else 1).")
    parser.add_argument("--batch_size", type=int, default=32, help="Most sentences per batch.")
    parser.add_argument("--max_tokens", type=int, default=None, help="Most padded source tokens per batch.")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="Most generated tokens per sentence.")
    parser.add_argument("--max_source_length", type=int, default=None, help="Truncate longer sources (tokens).")
    parser.add_argument("--length_penalty", type=float, default=None, help="Beam-search length penalty.")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available).")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="Weights dtype for inference.")
    parser.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    parser.add_argument("--no_progress", action="store_true", help="Hide the progress bar.")
    return parser


def load_model(path: str, device: str | None = None, dtype: str = "float32", trust_remote_code: bool = False):
    """Load a saved model and tokenizer for inference, on `device` (default: CUDA if available, else CPU)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    return model.to(device).eval(), tokenizer


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s - %(name)s - %(message)s")
    model, tokenizer = load_model(args.model, args.device, args.dtype, args.trust_remote_code)

    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        with open(args.input, encoding="utf-8") as handle:
            lines = handle.read().splitlines()

    generate_kwargs = {}
    if args.length_penalty is not None:
        generate_kwargs["length_penalty"] = args.length_penalty
    translations = translate(
        model,
        tokenizer,
        lines,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        max_source_length=args.max_source_length,
        progress=not args.no_progress,
        **generate_kwargs,
    )

    text = "".join(translation + "\n" for translation in translations)
    if args.output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
