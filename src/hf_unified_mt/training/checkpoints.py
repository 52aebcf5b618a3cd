# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""Finding the checkpoint to resume a training run from."""

import json
import logging
import os
import re

from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR


logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-<step>` folder of `output_dir` that the Trainer finished writing, or None.

    transformers' `get_last_checkpoint` returns the newest folder by step, also one left half-written by a run that
    was killed while saving it (model files but no `trainer_state.json`, which `Trainer._save_checkpoint` writes
    last, before it deletes older checkpoints), or with that file cut short; resuming from that folder fails. Such
    folders are skipped here, each with a warning that names it, and the newest complete one is returned.
    """
    if not os.path.isdir(output_dir):
        return None
    steps = sorted(
        ((int(match.group(1)), name) for name in os.listdir(output_dir) if (match := _CHECKPOINT.match(name))),
        reverse=True,
    )
    for _, name in steps:
        path = os.path.join(output_dir, name)
        if not os.path.isdir(path):
            continue
        state = os.path.join(path, TRAINER_STATE_NAME)
        if not os.path.isfile(state):
            logger.warning(
                "%s is incomplete (no %s: the run stopped while saving it); skipped", path, TRAINER_STATE_NAME
            )
            continue
        try:
            with open(state, encoding="utf-8") as handle:
                json.load(handle)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            logger.warning(
                "%s is incomplete (its %s cannot be read: %s; the run stopped while writing it); skipped",
                path,
                TRAINER_STATE_NAME,
                error,
            )
            continue
        return path
    return None
