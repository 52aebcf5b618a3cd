# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The contract between the ONNX exporter (`onnx_export.py`, which writes an export folder) and the runtime
(`onnx_runtime.py`, which reads it): what the graphs take and return and what the folder's files are called, nothing
that reads or writes them (`onnx_folder.py` does). It imports no other module of the package.

* the names of what an export folder holds (`encoder.onnx`, `decoder_step.onnx`, the cache layout `onnx_cache.json`,
  the manifest `onnx_export.json` and its writer's mark, the build folders and lock file of a write under way) and
  their format versions; `is_onnx_export` recognises an export by them;
* the graphs' inputs and outputs: the fixed names (`ENCODER_INPUTS`, `STEP_INPUTS`, ...) and the decoder cache layout
  (`CacheLayout`, `LayerLayout`), from which the cross-attention and cache names follow;
* the int8 modes, their graphs' file names and how each is quantised (`INT8_QUANTIZATION`, recorded in the manifest).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"
LAYOUT_FILE = "onnx_cache.json"
LAYOUT_FORMAT = 1
# Written into every export folder: what the graphs were exported from and which files the exporter wrote.
MANIFEST_FILE = "onnx_export.json"
MANIFEST_FORMAT = 1
# The manifest's mark of its writer. A file-format identifier, not a module path: it keeps the value it had when the
# exporter lived in `hf_unified_mt.training`, so that the exports written then stay readable.
BUILT_BY = "hf_unified_mt.training.onnx_export"
# Each export (and each int8 quantisation at load) is built in a new folder of its own inside the export folder, named
# `.onnx_export.partial.XXXXXXXX` (`onnx_folder.build_folder`), and moved into place once complete (earlier versions
# used `.onnx_export.partial` itself).
BUILD_FOLDER = ".onnx_export.partial"
# Held (`fcntl.flock`) by the one process writing into an export folder (`onnx_folder.folder_lock`); removed when it
# is done.
LOCK_FILE = ".onnx_export.lock"
CONFIG_FILES = ("config.json", LAYOUT_FILE)
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


# The graphs' fixed inputs and outputs; the cross-attention and cache tensors between them are named by `CacheLayout`.
ENCODER_INPUTS = ("input_ids", "attention_mask")
ENCODER_STATES = "encoder_hidden_states"
STEP_INPUTS = ("decoder_input_ids", "encoder_attention_mask", "cache_positions")
STEP_LOGITS = "logits"


@dataclasses.dataclass
class LayerLayout:
    """What one decoder layer's `StatefulDecoderCacheLayer` holds after a step: self-attention keys/values
    (`keys`, with `heads` x `head_dim`) or only a count of positions, and named states of fixed shape per sentence
    (`states`: name -> shape without the batch dimension)."""

    keys: bool
    heads: int
    head_dim: int
    states: dict[str, list[int]]


@dataclasses.dataclass
class CacheLayout:
    """The decoder cache of a model, layer by layer, and the cross-attention heads; the ONNX graphs' input and output
    names follow from it (`cache_names`)."""

    layers: list[LayerLayout]
    cross_heads: list[int]
    cross_head_dim: int
    max_source_length: int
    encoder_kwargs: dict = dataclasses.field(default_factory=dict)
    # True: the step graph takes the cross-attention keys/values and the source mask once per sentence, and its rows
    # (the sentences' beams, consecutive) share them; False (exports before this field): once per row
    beams_share_cross_attention: bool = False
    format: int = LAYOUT_FORMAT

    def cross_names(self) -> list[str]:
        return [f"cross.{i}.{kind}" for i in range(len(self.layers)) for kind in ("key", "value")]

    def cache_names(self, prefix: str) -> list[str]:
        """`past.{i}.key`, `past.{i}.value` (layers with keys), then `past.{i}.state.{name}`, layer by layer."""
        names = []
        for i, layer in enumerate(self.layers):
            if layer.keys:
                names += [f"{prefix}.{i}.key", f"{prefix}.{i}.value"]
            names += [f"{prefix}.{i}.state.{name}" for name in layer.states]
        return names

    def encoder_output_names(self) -> list[str]:
        """The encoder graph's outputs: its hidden states, then every layer's cross-attention keys and values."""
        return [ENCODER_STATES, *self.cross_names()]

    def step_input_names(self) -> list[str]:
        """The step graph's inputs: the step's tokens, the source mask, the positions decoded so far, the
        cross-attention keys and values, and the cache before the step (`past.*`)."""
        return [*STEP_INPUTS, *self.cross_names(), *self.cache_names("past")]

    def step_output_names(self) -> list[str]:
        """The step graph's outputs: the logits, then the cache after the step (`present.*`), in the inputs' order."""
        return [STEP_LOGITS, *self.cache_names("present")]

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CacheLayout:
        if data.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"{LAYOUT_FILE} has format {data.get('format')!r}; this version reads {LAYOUT_FORMAT}")
        return cls(**{**data, "layers": [LayerLayout(**layer) for layer in data["layers"]]})


# How the int8 graphs are quantised (`onnx_int8.quantize_onnx_int8`), recorded with each int8 graph in the manifest:
# * dynamic: ONNX Runtime's `quantize_dynamic`, int8 weights; each matmul's input is quantised with one scale for the
#   whole tensor, i.e. for all the sentences of the batch together, so a sentence's output depends on its neighbours.
# * per_row: ONNX Runtime's weight-only quantiser (`MatMulNBitsQuantizer`), `MatMulNBits` nodes with 8-bit weights in
#   blocks of 32 along the input dimension; with accuracy level 4 their input is quantised to int8 per row, in blocks,
#   so a sentence's output does not depend on the batch.
INT8_MODES = ("dynamic", "per_row")
INT8_QUANTIZATION = {
    "dynamic": {"quantizer": "quantize_dynamic", "weight_type": "QInt8"},
    "per_row": {"quantizer": "MatMulNBits", "bits": 8, "block_size": 32, "accuracy_level": 4},
}


def int8_mode(int8: bool | str | None) -> str | None:
    """The int8 mode an `int8=` option asks for: None for float32 (False, None), "dynamic" (True or "dynamic") or
    "per_row"; a `ValueError` for anything else."""
    if int8 is None or int8 is False:
        return None
    if int8 is True:
        return "dynamic"
    if isinstance(int8, str) and int8 in INT8_MODES:
        return int8
    raise ValueError(f"int8 must be False, True (= 'dynamic'), 'dynamic' or 'per_row', not {int8!r}")


def int8_file_name(name: str, mode: str = "dynamic") -> str:
    """`encoder.onnx` -> `encoder.int8.onnx` (dynamic), `encoder.int8.per_row.onnx` (per_row): each mode's own
    graphs, so that one mode never runs the other's."""
    return name.removesuffix(".onnx") + (".int8.onnx" if int8_mode(mode) == "dynamic" else f".int8.{mode}.onnx")


def is_onnx_export(path: str | os.PathLike) -> bool:
    """Whether `path` holds an export of `export_onnx` (its manifest, or the cache layout of an earlier version's)."""
    return (Path(path) / MANIFEST_FILE).is_file() or (Path(path) / LAYOUT_FILE).is_file()
