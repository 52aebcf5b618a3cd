# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What an ONNX export folder holds, shared by the exporter (`onnx_export.py`, which writes it) and the runtime
(`onnx_runtime.py`, which reads it); neither imports the other:

* the file names (`encoder.onnx`, `decoder_step.onnx`, the cache layout `onnx_cache.json`, the manifest
  `onnx_export.json`) and their format versions;
* the decoder cache layout (`CacheLayout`, `LayerLayout`), from which the graphs' input and output names follow;
* the int8 modes, their graphs' file names and how each is quantised (`INT8_QUANTIZATION`, recorded in the manifest);
* the manifest: reading and writing it, the sha256 of the files it records, and the command that exports a model
  again (`reexport_command`);
* the int8 graphs beside the float ones (`add_int8_graphs`, ONNX Runtime's quantisers, imported when called): the
  exporter writes them with `--int8`, the runtime on first use of a mode.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path


ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"
LAYOUT_FILE = "onnx_cache.json"
LAYOUT_FORMAT = 1
# Written into every export folder: what the graphs were exported from and which files the exporter wrote.
MANIFEST_FILE = "onnx_export.json"
MANIFEST_FORMAT = 1
# An export is built in this folder inside the output folder, and moved into place once it is complete and verified.
BUILD_FOLDER = ".onnx_export.partial"
CONFIG_FILES = ("config.json", LAYOUT_FILE)
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")
EXPORT_COMMAND = "python -m hf_unified_mt.deployment.onnx_export"


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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CacheLayout:
        if data.get("format") != LAYOUT_FORMAT:
            raise ValueError(f"{LAYOUT_FILE} has format {data.get('format')!r}; this version reads {LAYOUT_FORMAT}")
        return cls(**{**data, "layers": [LayerLayout(**layer) for layer in data["layers"]]})


# How the int8 graphs are quantised (`quantize_onnx_int8`), recorded with each int8 graph in the manifest:
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


# The manifest's mark of its writer. A file-format identifier, not a module path: it keeps the value it had when the
# exporter lived in `hf_unified_mt.training`, so that the exports written then stay readable.
BUILT_BY = "hf_unified_mt.training.onnx_export"
_WEIGHTS_NAME = re.compile(r".+\.safetensors|pytorch_model.*\.bin|.+\.(safetensors|bin)\.index\.json|tf_model\.h5")


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_files(folder: str | os.PathLike) -> list[str]:
    """The model weights files in `folder`: `model.safetensors`, shards and their index, `pytorch_model.bin`, ..."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(path.name for path in folder.iterdir() if path.is_file() and _WEIGHTS_NAME.fullmatch(path.name))


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest `export_onnx` wrote into `folder`, or None if there is none (or it is not one)."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("built_by") != BUILT_BY:
        return None
    files = manifest.get("files")
    if not isinstance(files, list) or not all(
        isinstance(name, str) and "/" not in name and "\\" not in name and name not in ("", ".", "..") for name in files
    ):
        return None
    return manifest


def write_manifest(folder: str | os.PathLike, manifest: dict) -> None:
    """Writes the manifest in one step (a reader sees the old one or the new one)."""
    path = Path(folder) / MANIFEST_FILE
    temporary = path.with_name(MANIFEST_FILE + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def reexport_command(manifest: dict | None, folder: str | os.PathLike, int8: bool | str = False) -> str:
    """The command that exports the model of `folder` again (the model folder recorded in its manifest, if any), with
    the int8 graphs of `int8` (a mode, or True for "dynamic")."""
    source = ((manifest or {}).get("source") or {}).get("path") or "MODEL"
    mode = int8_mode(int8)
    options = {None: "", "dynamic": " --int8"}.get(mode, f" --int8 --int8_mode {mode}")
    return f"{EXPORT_COMMAND} {source} {folder} --overwrite{options}"


def is_onnx_export(path: str | os.PathLike) -> bool:
    """Whether `path` holds an export of `export_onnx` (its manifest, or the cache layout of an earlier version's)."""
    return (Path(path) / MANIFEST_FILE).is_file() or (Path(path) / LAYOUT_FILE).is_file()


# ------------------------------------------------------------------------------------------------ the int8 graphs


@contextlib.contextmanager
def _quiet_quantizers():
    """ONNX Runtime's quantisers log a notice at INFO for every tensor or node they leave in float (integer and boolean
    tensors, matmuls without constant weights) to the root logger, held at ERROR here; and `matmul_nbits_quantizer`
    calls `logging.basicConfig(level=INFO)` when it is imported, which would print every later INFO record of the
    process: while nothing handles the root logger, a placeholder handler makes that call do nothing."""
    root = logging.getLogger()
    level = root.level
    placeholder = logging.NullHandler() if not root.handlers else None
    if placeholder is not None:
        root.addHandler(placeholder)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
        if placeholder is not None:
            root.removeHandler(placeholder)


def quantize_onnx_int8(source: str | os.PathLike, target: str | os.PathLike, mode: str = "dynamic") -> None:
    """ONNX Runtime's int8 quantisation of a graph, in `mode` (`INT8_QUANTIZATION`): "dynamic", the weight matrices
    of the matmuls in int8 and their inputs quantised per tensor on the fly (the ONNX counterpart of
    `inference.quantize_int8`), or "per_row", `MatMulNBits` with 8-bit weights and inputs quantised per row. The graph
    is first optimised by ONNX Runtime (`quant_pre_process`), which folds the exporter's weight transposes into the
    initialisers that the quantisers look for."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    mode = int8_mode(mode)
    with _quiet_quantizers(), tempfile.TemporaryDirectory() as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        if mode == "dynamic":
            quantize_dynamic(str(prepared), str(target), weight_type=QuantType.QInt8)
            return
        from onnxruntime.quantization.matmul_nbits_quantizer import (
            DefaultWeightOnlyQuantConfig,
            MatMulNBitsQuantizer,
        )

        settings = INT8_QUANTIZATION[mode]
        config = DefaultWeightOnlyQuantConfig(
            bits=settings["bits"], block_size=settings["block_size"], accuracy_level=settings["accuracy_level"]
        )
        quantizer = MatMulNBitsQuantizer(str(prepared), algo_config=config)
        quantizer.process()
        quantizer.model.save_model_to_file(str(target))


def add_int8_graphs(
    folder: str | os.PathLike, target: str | os.PathLike | None = None, mode: str = "dynamic"
) -> list[Path]:
    """Quantises the float graphs of the export in `folder` to int8 in `mode` (`quantize_onnx_int8`) where that mode's
    int8 graphs are missing, and records them in the manifest with the float graph each was quantised from and how.
    With `target` (a folder the export's own cannot be written), they are written there instead and not recorded.
    Returns the int8 graphs."""
    folder = Path(folder)
    graphs = [(folder / name, int8_file_name(name, mode)) for name in (ENCODER_FILE, DECODER_FILE)]
    if target is not None:
        for source, name in graphs:
            quantize_onnx_int8(source, Path(target) / name, mode)
        return [Path(target) / name for _, name in graphs]
    build = folder / BUILD_FOLDER
    missing = [(source, name) for source, name in graphs if not (folder / name).is_file()]
    if missing:
        build.mkdir(exist_ok=True)
        try:
            manifest = read_manifest(folder)
            for source, name in missing:
                quantize_onnx_int8(source, build / name, mode)
                manifest["graphs"][name] = {
                    "sha256": file_sha256(build / name),
                    "quantized_from": manifest["graphs"][source.name]["sha256"],
                    "int8_mode": int8_mode(mode),
                    "quantization": INT8_QUANTIZATION[int8_mode(mode)],
                }
                os.replace(build / name, folder / name)
                manifest["files"] = sorted({*manifest["files"], name})
                write_manifest(folder, manifest)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return [folder / name for _, name in graphs]
