# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The analysis tools' model specs on the command line: `PRESET[:field=value,...]`."""

import json


def parse_value(text: str):
    """`true`/`false`/`none`, numbers and JSON values; anything else stays a string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_model_spec(spec: str) -> tuple[str, dict]:
    """`"deep-12:init_law=xavier,use_cache=false"` -> (`"deep-12"`, {"init_law": "xavier", "use_cache": False})."""
    preset, _, options = spec.partition(":")
    overrides = {}
    for item in filter(None, options.split(",")):
        key, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f"Model spec {spec!r}: expected field=value, got {item!r}")
        overrides[key.strip()] = parse_value(value.strip())
    return preset, overrides
