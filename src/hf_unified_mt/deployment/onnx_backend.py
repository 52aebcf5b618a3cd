# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The `--backend onnx` of `training/translate.py` and `training/score.py`: `load_onnx_model` takes a model folder of
either kind, an export of `onnx_export.py` (run as it is) or a saved PyTorch model (exported on the fly into a
temporary folder), and returns an ONNX Runtime model (`onnx_runtime.py`) and its tokenizer. The one module that uses
both the exporter and the runtime, which import nothing from each other."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from .onnx_export import export_onnx
from .onnx_folder import EXPORT_COMMAND
from .onnx_format import TOKENIZER_FILES, is_onnx_export
from .onnx_runtime import ORTModelForSeq2SeqLM
from .shortlist import SHORTLIST_FILE


logger = logging.getLogger(__name__)


def add_shortlist_argument(parser) -> None:
    """The scripts' `--shortlist [FILE]` (with `--backend onnx`)."""
    parser.add_argument(
        "--shortlist",
        nargs="?",
        const=True,
        default=None,
        metavar="FILE",
        help=f"With --backend onnx: score only a vocabulary shortlist's candidates, from FILE (a vocabulary map, "
        f"python -m hf_unified_mt.deployment.shortlist) or, without FILE, the export folder's own {SHORTLIST_FILE}.",
    )


def shortlist_problem(backend: str, shortlist, path: str | os.PathLike) -> str | None:
    """What stands against `--shortlist` with these options (the scripts' one-line errors), or None."""
    if shortlist is None:
        return None
    if backend != "onnx":
        return "--shortlist works with --backend onnx"
    if shortlist is True and not (Path(path) / SHORTLIST_FILE).is_file():
        return f"--shortlist without a file uses the export folder's {SHORTLIST_FILE}, which {path} does not have"
    if shortlist is not True and not Path(shortlist).is_file():
        return f"the shortlist file {shortlist} does not exist"
    return None


def load_onnx_model(
    path: str | os.PathLike,
    int8: bool | str = False,
    trust_remote_code: bool = False,
    num_threads: int | None = None,
    shortlist=None,
) -> tuple[ORTModelForSeq2SeqLM, object]:
    """The ONNX Runtime model and tokenizer of `path`: an `export_onnx` folder, or a saved PyTorch model, which is then
    exported to a temporary folder first (for repeated use, export it once with `export_onnx`). `int8` and
    `shortlist`: as in `ORTModelForSeq2SeqLM.from_pretrained` (a shortlist file is read in the model's tokens)."""
    if shortlist is not None and shortlist is not True:
        shortlist = Path(shortlist).absolute()
    if is_onnx_export(path):  # checked against its manifest (`onnx_folder.check_export`), weights included
        model = ORTModelForSeq2SeqLM.from_pretrained(path, int8=int8, num_threads=num_threads, shortlist=shortlist)
        if not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
            raise ValueError(
                f"{path} has no tokenizer ({' or '.join(TOKENIZER_FILES)}): it was exported without one; export it "
                f"again with its tokenizer (export_onnx(model, folder, tokenizer), or {EXPORT_COMMAND}, which saves "
                "the model folder's)"
            )
        return model, AutoTokenizer.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    logger.info("Exporting %s to ONNX for this run (export_onnx keeps an export for reuse)", path)
    folder = tempfile.TemporaryDirectory()  # kept with the model, whose search graphs are built from its step graph
    export_onnx(model, folder.name, tokenizer, source=path)
    runtime = ORTModelForSeq2SeqLM.from_pretrained(folder.name, int8=int8, num_threads=num_threads, shortlist=shortlist)
    runtime._scratch = folder
    return runtime, tokenizer
