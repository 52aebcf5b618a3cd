#!/usr/bin/env python
# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Publish a checkpoint trained with `training/train.py` to the Hugging Face Hub.

    python hub_upload.py outputs/unified-small --repo_id my-name/unified-transformer-es-en --private
    python hub_upload.py outputs/unified-small --repo_id my-name/unified-transformer-es-en --dry-run

The command is the library `hf_unified_mt.publishing`: `cli` (this command's `main`, its steps and options; `--help`
lists them), `checkpoint` (what a checkpoint must hold, checked before anything is built), `card` (the model card,
rendered from `model_cards/<model_type>.md` beside this script) and `repository` (the folder, built beside
`--output_dir` and moved there once complete; the token; the upload). It needs the package and its `[train]` extra
(Jinja2 for the card, PyYAML for a YAML `--training_args`). Importing the package imports torch and transformers (it
registers the models), but no model is loaded: the files are copied from the checkpoint and the parameter count is
read from the safetensors headers. The Hub folder is self-contained: `AutoModelForSeq2SeqLM.from_pretrained(folder,
trust_remote_code=True)`, `AutoModel` (the base model) and `pipeline("translation", model=folder,
trust_remote_code=True)` work where `hf_unified_mt` is not installed.
"""

from pathlib import Path

from hf_unified_mt.publishing.cli import cli


if __name__ == "__main__":
    # The templates beside this script: the package may be installed anywhere, the templates are not package data.
    cli(cards_dir=Path(__file__).resolve().parent / "model_cards")
