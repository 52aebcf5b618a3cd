# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The command that publishes a checkpoint: `hub_upload.py` (at the top of the repository) and `python -m
hf_unified_mt.publishing.cli` run `cli`. Its steps:

1. Check `--repo_id` with huggingface_hub's validator. Unless `--dry-run`: find the token (`HF_TOKEN`, or the login
   cached by `hf auth login`) and stop at once, with a clear message, if there is none.
2. Check the checkpoint (`checkpoint.inspect_checkpoint`): everything missing is reported in one error.
3. Build the Hub folder (`repository.stage_hub_folder`): the checkpoint's files, `test_results.json` and the
   `README.md` model card (`card.render_card`), in a new folder beside `--output_dir`, moved there only once complete
   (`repository.install_hub_folder`), so a failing run leaves `--output_dir` as it was.
4. Unless `--dry-run`: `create_repo(exist_ok=True)` and `upload_folder` with the commit message
   (`repository.upload_folder`); then the folder is moved to `--output_dir`, if one was given.

`main(argv)` returns the Hub folder and raises `HubUploadError` for a problem the user can fix; `cli(argv)` prints
such a problem on one line, `hub_upload.py: error: ...`, and exits with status 2 (a bad option exits 2 through
argparse in both).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from ..utils.options import read_option_file
from . import HubUploadError
from .card import DEFAULT_CORPUS, DEFAULT_LICENSE, MODEL_CARDS_DIR, render_card
from .checkpoint import RESULTS_NAME, inspect_checkpoint
from .repository import (
    MARKER_NAME,
    check_output_dir,
    install_hub_folder,
    missing_folders,
    require_token,
    stage_hub_folder,
    upload_folder,
)


def repo_id_argument(value: str) -> str:
    """`--repo_id`, checked by huggingface_hub's own validator (`validate_repo_id`) before anything is built."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
    except HFValidationError as error:
        reason = re.sub(r"\s*Use `repo_type` argument if needed\.", "", str(error)).strip()
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Hub repository id: {reason} Give NAME or NAMESPACE/NAME, e.g. "
            "my-name/unified-transformer-es-en"
        ) from None
    return value


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hub_upload.py",
        description="Build the Hugging Face Hub folder of a checkpoint trained with training/train.py (model, code, "
        "tokenizer, translation pipeline, model card) and upload it.",
    )
    parser.add_argument("checkpoint", help="Checkpoint directory (the output_dir of training/train.py).")
    parser.add_argument(
        "--repo_id", type=repo_id_argument, help="Hub repository, e.g. my-name/unified-transformer-es-en."
    )
    parser.add_argument(
        "--dry-run",
        "--dry_run",
        dest="dry_run",
        action="store_true",
        help="Build the folder and stop (no token needed, nothing is sent).",
    )
    parser.add_argument(
        "--output_dir",
        help="Where to build the folder (default: CHECKPOINT-hub with --dry-run, a temporary directory otherwise).",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"Replace a folder this script built earlier (recognised by its {MARKER_NAME}; the files it removes are "
        "listed). Any other folder is left alone.",
    )
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--commit_message", help="Commit message (default: names the architecture and test BLEU).")
    parser.add_argument("--revision", help="Branch to commit to (default: main).")
    parser.add_argument("--endpoint", help="Hub endpoint (default: $HF_ENDPOINT or https://huggingface.co).")
    parser.add_argument("--license", default=DEFAULT_LICENSE, help="Licence of the weights (default: apache-2.0).")
    parser.add_argument("--dataset", help="Hub id of the training dataset, if not the recorded/default corpus.")
    parser.add_argument("--dataset_config", help="Its configuration, e.g. de-en.")
    parser.add_argument("--source_lang", help="Source language code for the card metadata (e.g. es).")
    parser.add_argument("--target_lang", help="Target language code (e.g. en).")
    parser.add_argument(
        "--training_args",
        help="JSON/YAML file with the training options (e.g. the config file "
        "given to train.py), if results.json does not record them.",
    )
    return parser.parse_args(argv)


def _read_training_args(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        return read_option_file(path)
    except (OSError, ValueError) as error:
        raise HubUploadError(f"--training_args {error}") from error


def main(argv: list[str] | None = None, cards_dir: Path = MODEL_CARDS_DIR) -> Path:
    """Run the command; returns the Hub folder (which is deleted after an upload without --output_dir). A run that
    fails leaves `--output_dir` as it was: the folder is built beside it and moved into place only once it is complete
    (and, for an upload, once the upload succeeded). `cards_dir` is the folder of the model card templates."""
    options = parse_arguments(argv)  # --repo_id is checked here, before anything else
    # 1. Token and repository first: no work is done for an upload that cannot happen.
    token = None
    if not options.dry_run:
        token = require_token()
        if not options.repo_id:
            raise HubUploadError("--repo_id is required to upload (e.g. --repo_id my-name/my-model)")

    # 2. Checkpoint.
    checkpoint = inspect_checkpoint(options.checkpoint, cards_dir)
    repo_id = options.repo_id or f"your-username/{Path(options.checkpoint).resolve().name}"
    training_arguments = _read_training_args(options.training_args)

    # 3. Folder (checked before anything is built: it is never the checkpoint or a folder that contains it, and an
    # existing one is replaced only if hub_upload.py built it).
    if options.output_dir:
        output_dir = Path(options.output_dir)
    elif options.dry_run:
        output_dir = Path(str(Path(options.checkpoint).resolve()) + "-hub")
    else:
        output_dir = None  # an upload without --output_dir keeps no folder
    if output_dir is not None:
        check_output_dir(output_dir, checkpoint.path, options.overwrite)
    card, dataset = render_card(checkpoint, repo_id, options, training_arguments, cards_dir)
    if dataset.assumed:
        print(
            f"warning: {checkpoint.path / RESULTS_NAME} does not record the training data; the card assumes the "
            f"default corpus {DEFAULT_CORPUS} (pass --dataset/--source_lang/--target_lang if that is wrong)",
            file=sys.stderr,
        )

    created = missing_folders(output_dir.parent) if output_dir is not None else []
    staging = None
    try:
        if created:
            created[-1].mkdir(parents=True)
        staging = stage_hub_folder(checkpoint, str(card), output_dir)
        files = sorted(p.name for p in staging.iterdir() if p.name != MARKER_NAME)
        print(f"Hub folder {output_dir or '(temporary)'}: {len(files)} files ({', '.join(files)})")
        print(
            f"{checkpoint.model_type}, {checkpoint.num_parameters:,} parameters, test BLEU "
            f"{checkpoint.test_scores['bleu']:.2f}, chrF {checkpoint.test_scores['chrf']:.2f}"
        )
        if options.dry_run:
            folder = install_hub_folder(staging, output_dir, checkpoint.path, options.overwrite)
            print("Dry run: nothing uploaded.")
            return folder

        # 4. Upload, then keep the folder at --output_dir if one was given.
        message = options.commit_message or (
            f"Upload {checkpoint.config.get('architectures', [checkpoint.model_type])[0]} "
            f"(test BLEU {checkpoint.test_scores['bleu']:.2f}) with hub_upload.py"
        )
        endpoint = options.endpoint or os.environ.get("HF_ENDPOINT") or None
        commit = upload_folder(
            staging, repo_id, token, message, private=options.private, endpoint=endpoint, revision=options.revision
        )
        print(f"Uploaded to {commit.repo_url}: {commit.commit_url}")
        if output_dir is None:
            return staging
        return install_hub_folder(staging, output_dir, checkpoint.path, options.overwrite)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        for folder in reversed(created):  # the parents this run created, if it left them empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    finally:
        if staging is not None and output_dir is None:
            shutil.rmtree(staging, ignore_errors=True)


def cli(argv: list[str] | None = None, cards_dir: Path = MODEL_CARDS_DIR) -> None:
    """The command line: `main`, with a `HubUploadError` (a problem the user can fix, already described in full)
    printed on one line without a traceback, exit status 2."""
    try:
        main(argv, cards_dir)
    except HubUploadError as error:
        print(f"hub_upload.py: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
