#!/usr/bin/env python
# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""Translate a file (or stdin) line by line with a saved model: beam search, length-sorted batches, output in order.

    python training/translate.py outputs/mt --input source.es --output output.en --num_beams 5
    echo "En el principio era el Verbo." | python training/translate.py outputs/mt
    python training/translate.py outputs/mt --backend onnx --int8 -i source.es    # ONNX Runtime (the onnx extra)
    python training/translate.py outputs/mt --backend onnx --int8 --int8_mode per_row -i source.es   # batch-independent

Each input line gives one output line (empty lines stay empty). Lines are separated by `\\n` (a `\\r\\n` ending is
accepted); other Unicode line separators are part of the text. A source longer than the model accepts stops the
command before anything is translated, naming its line, unless `--max_source_length` truncates it (with a warning
naming the lines). Problems with the options or files are reported on one line (`translate.py: error: ...`, exit
status 2) before the model is loaded. The output (a file or stdout) is written in `--encoding` once every line is
translated: a translation that `--encoding` cannot represent stops the command, naming its line, before anything is
written, and an output file is written to a temporary file and renamed into place, so the input may be the output
and a failed run leaves the file as it was. The progress bars go to stderr (`--no_progress` hides them all).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import logging
import os
import sys

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
from hf_unified_mt.training.data import describe_binary_start
from hf_unified_mt.utils.files import write_bytes


class UsageError(Exception):
    """A problem with the options, input or model that the user can fix; printed as one line, without traceback."""


DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="Directory of a saved model and tokenizer (e.g. train.py's output_dir).")
    parser.add_argument("--input", "-i", default="-", help="Input file, one sentence per line ('-' = stdin).")
    parser.add_argument("--output", "-o", default="-", help="Output file ('-' = stdout).")
    parser.add_argument("--encoding", default="utf-8", help="Text encoding of the input and output (default utf-8).")
    parser.add_argument("--num_beams", type=int, default=None, help="Beam size (default: the model's, else 1).")
    parser.add_argument("--batch_size", type=int, default=32, help="Most sentences per batch.")
    parser.add_argument("--max_tokens", type=int, default=None, help="Most padded source tokens per batch.")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="Most generated tokens per sentence.")
    parser.add_argument("--max_source_length", type=int, default=None, help="Truncate longer sources (tokens).")
    parser.add_argument("--length_penalty", type=float, default=None, help="Beam-search length penalty.")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if available).")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="Weights dtype for inference.")
    parser.add_argument(
        "--backend",
        choices=["torch", "onnx"],
        default="torch",
        help="torch (default), or onnx: ONNX Runtime on CPU; the model is an export_onnx folder or a saved model, "
        "exported for the run.",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="Dynamic int8 quantisation of the linear layers (CPU; with --backend onnx, of the ONNX graphs: see "
        "--int8_mode).",
    )
    add_int8_mode_argument(parser)
    add_shortlist_argument(parser)
    add_threads_argument(parser)
    parser.add_argument("--trust_remote_code", action="store_true", help="Allow custom code saved with the model.")
    parser.add_argument("--no_progress", action="store_true", help="Hide the progress bars (loading, translating).")
    return parser


def load_model(path: str, device: str | None = None, dtype: str = "float32", trust_remote_code: bool = False):
    """Load a saved model and tokenizer for inference, on `device` (default: CUDA if available, else CPU)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    return model.to(device).eval(), tokenizer


def check_model_path(path: str) -> None:
    """A model directory that does not exist is named as such (not as an invalid Hub repository id)."""
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise UsageError(f"{path} is not a saved model: it has no config.json")
        return
    if os.path.exists(path):
        raise UsageError(f"{path} is a file, not a model directory")
    looks_like_repo_id = path.count("/") == 1 and not path.startswith((".", "/", "~")) and os.sep == "/"
    if not looks_like_repo_id or os.path.isdir(os.path.dirname(path) or "."):
        raise UsageError(f"model directory {path} does not exist")


def check_arguments(args) -> None:
    """Every option and path, before the model is loaded."""
    for name, least in (
        ("num_beams", 1),
        ("batch_size", 1),
        ("max_tokens", 1),
        ("max_new_tokens", 1),
        ("max_source_length", 2),
        ("threads", 1),
    ):
        value = getattr(args, name)
        if value is not None and value < least:
            raise UsageError(f"--{name} must be at least {least}, not {value}")
    try:
        codecs.lookup(args.encoding)
    except LookupError as error:
        raise UsageError(f"unknown encoding {args.encoding!r} (--encoding)") from error
    if args.input != "-" and not os.path.isfile(args.input):
        raise UsageError(
            f"input file {args.input} does not exist"
            if not os.path.exists(args.input)
            else f"input {args.input} is not a file"
        )
    if args.output != "-":
        folder = os.path.dirname(os.path.abspath(args.output))
        if os.path.isdir(args.output):
            raise UsageError(f"--output {args.output} is a directory; give a file name")
        if not os.path.isdir(folder):
            raise UsageError(f"cannot write --output {args.output}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise UsageError(f"cannot write --output {args.output}: the folder {folder} is not writable")
    try:
        int8_option(args.int8, args.int8_mode, args.backend)
    except ValueError as error:
        raise UsageError(str(error)) from error
    if args.int8 and (args.dtype != "float32" or (args.device or "cpu") != "cpu"):
        raise UsageError("--int8 quantises a float32 model for CPU: leave --dtype and --device at their defaults")
    if shortlist_problem(args.backend, args.shortlist, args.model) is not None:
        raise UsageError(shortlist_problem(args.backend, args.shortlist, args.model))
    if args.backend == "onnx":
        problem = onnx_backend_problem(args.int8, args.device, args.dtype)
        if problem is not None:
            raise UsageError(problem)
    elif torch_backend_problem(args.model) is not None:
        raise UsageError(torch_backend_problem(args.model))
    check_model_path(args.model)


def decode_input(raw: bytes, name: str, encoding: str) -> str:
    """The text of the input, or a `UsageError` naming the line that does not decode (and a hint for compressed or
    UTF-16 files)."""
    try:
        return raw.decode(encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        hint = describe_binary_start(raw[:8], name, encoding)
        if hint is not None:
            raise UsageError(hint) from error
        line = raw[: error.start].count(b"\n") + 1
        raise UsageError(
            f"{name}, line {line}: bytes {raw[error.start : error.end]!r} cannot be decoded as {encoding} "
            f"({error.reason}); pass the file's encoding with --encoding"
        ) from error


def read_input(args) -> list[str]:
    if args.input == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        text = decode_input(buffer.read(), "stdin", args.encoding) if buffer is not None else sys.stdin.read()
    else:
        with open(args.input, "rb") as handle:
            text = decode_input(handle.read(), args.input, args.encoding)
    return split_lines(text)


@contextlib.contextmanager
def progress_bars(shown: bool):
    """Unless `shown`, transformers' and the Hub's progress bars (loading the weights, exporting) are off for the
    block."""
    if shown or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


def encode_output(translations: list[str], encoding: str) -> bytes:
    """The output, one line per translation, in `encoding`; a `UsageError` names the first line with a character
    that `encoding` cannot represent."""
    text = "".join(translation + "\n" for translation in translations)
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as error:
        line = text.count("\n", 0, error.start) + 1
        character = text[error.start]
        raise UsageError(
            f"output line {line}: the translation contains {character!r} (U+{ord(character):04X}), which {encoding} "
            "cannot encode; nothing was written: pass an --encoding that can (utf-8 encodes every character)"
        ) from error


def write_output(translations: list[str], output: str, encoding: str) -> None:
    """The translations, one per line, in `encoding` (`encode_output`, before anything is written), to stdout (`-`)
    or to the file `output`, which is replaced only once the new one is complete (`write_bytes`)."""
    data = encode_output(translations, encoding)
    if output != "-":
        try:
            write_bytes(output, data)
        except OSError as error:
            raise UsageError(
                f"cannot write --output {output}: {error.strerror or error}; it was left as it was"
            ) from error
        return
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text stream without bytes underneath (an embedding application's): it encodes itself
        sys.stdout.write(data.decode(encoding))
        sys.stdout.flush()
    else:
        buffer.write(data)
        buffer.flush()


def check_max_new_tokens(max_new_tokens: int | None, model) -> None:
    """Once the model is loaded, before anything is translated: a --max_new_tokens its decoder cannot reach."""
    limit = model_length_limit(model)
    if max_new_tokens is not None and limit is not None and max_new_tokens > limit:
        raise UsageError(
            f"--max_new_tokens {max_new_tokens} is more than the model can generate: its decoder has "
            f"max_position_embeddings={limit} positions (give at most {limit}, or leave it out)"
        )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s - %(name)s - %(message)s")
    check_arguments(args)
    lines = read_input(args)
    use_threads(args.threads)
    try:
        with progress_bars(not args.no_progress):
            if args.backend == "onnx":
                int8 = int8_option(args.int8, args.int8_mode, args.backend)
                model, tokenizer = load_onnx_model(args.model, int8, args.trust_remote_code, shortlist=args.shortlist)
            else:
                device = "cpu" if args.int8 else args.device
                model, tokenizer = load_model(args.model, device, args.dtype, args.trust_remote_code)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot load the model {args.model}: {str(error).splitlines()[0]}") from error
    if args.int8 and args.backend == "torch":
        model = quantize_int8(model)
    check_max_new_tokens(args.max_new_tokens, model)

    generate_kwargs = {}
    if args.length_penalty is not None:
        generate_kwargs["length_penalty"] = args.length_penalty
    try:
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
    except ValueError as error:  # an over-long line (named), or a max_source_length the model cannot take
        source = "stdin" if args.input == "-" else args.input
        raise UsageError(f"{source}: {error}") from error
    assert len(translations) == len(lines)

    write_output(translations, args.output, args.encoding)


if __name__ == "__main__":
    try:
        main()
    except UsageError as error:
        print(f"translate.py: error: {error}", file=sys.stderr)
        sys.exit(2)
