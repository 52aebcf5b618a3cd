# Copyright 2025 The hf-unified-mt authors.
# Licensed under the Apache License, Version 2.0.
"""The tokenizer files of a model folder as this package writes them (`tokenizer.json` + `tokenizer_config.json`),
shared by whatever saves a tokenizer beside a model: training (its checkpoints, `training/average_checkpoints.py`),
the ONNX exporter and `hub_upload.py`. Nothing here depends on the training extras."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..utils.files import write_json


# What transformers 5 writes into the `tokenizer_config.json` of a tokenizer it loaded from a folder: how that tokenizer
# was loaded, not what it is (a model published with them says `"is_local": true`). Saved tokenizers leave them out.
LOAD_OPTIONS = ("is_local", "local_files_only")


def forget_load_options(tokenizer):
    """Removes `LOAD_OPTIONS` from `tokenizer.init_kwargs`, which `save_pretrained` writes out, so that every later
    save of it (the Trainer's included) writes a clean `tokenizer_config.json`. Returns the tokenizer."""
    init_kwargs = getattr(tokenizer, "init_kwargs", None)
    for key in LOAD_OPTIONS if isinstance(init_kwargs, dict) else ():
        init_kwargs.pop(key, None)
    return tokenizer


def clean_tokenizer_config(folder: str | os.PathLike) -> None:
    """Removes `LOAD_OPTIONS` from the `tokenizer_config.json` in `folder`, if it has them (a file saved or copied as
    it was); the rest is kept, written as `save_pretrained` writes it, in one step and never through a link
    (`utils.files.write_json`)."""
    path = Path(folder) / "tokenizer_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(config, dict) and set(LOAD_OPTIONS) & config.keys():
        for key in LOAD_OPTIONS:
            config.pop(key, None)
        write_json(path, config, indent=2, sort_keys=True, ensure_ascii=False)


def save_tokenizer(tokenizer, folder: str | os.PathLike) -> None:
    """`tokenizer.save_pretrained(folder)` without `LOAD_OPTIONS` in its `tokenizer_config.json`; the tokenizer itself
    is left as it is."""
    tokenizer.save_pretrained(folder)
    clean_tokenizer_config(folder)
