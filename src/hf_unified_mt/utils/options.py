"""Reading an option file: the JSON or YAML mapping of option names to values that `training/train.py` takes as
defaults for its command line and `hub_upload.py --training_args` reads to describe a run."""

from __future__ import annotations

import json
import os
from typing import Any


OPTION_FILE_SUFFIXES = (".json", ".yaml", ".yml")


def read_option_file(path: str | os.PathLike) -> dict[str, Any]:
    """The mapping of option names to values in `path`: YAML for `.yaml`/`.yml`, JSON otherwise.

    Raises:
        `FileNotFoundError` if there is no such file; `ValueError` (naming the file) if it is not valid JSON or YAML
        or does not hold a mapping.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such option file")
    with open(path, encoding="utf-8") as handle:
        if path.endswith((".yaml", ".yml")):
            import yaml

            try:
                values = yaml.safe_load(handle)
            except yaml.YAMLError as error:
                raise ValueError(f"{path}: not valid YAML ({error})") from error
        else:
            try:
                values = json.load(handle)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of option names to values")
    return values
