# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""What an ONNX export folder holds, shared by the exporter (`onnx_export.py`, which writes it) and the runtime
(`onnx_runtime.py`, which reads it); neither imports the other:

* the file names (`encoder.onnx`, `decoder_step.onnx`, the cache layout `onnx_cache.json`, the manifest
  `onnx_export.json`) and their format versions;
* the decoder cache layout (`CacheLayout`, `LayerLayout`), from which the graphs' input and output names follow;
* the int8 modes, their graphs' file names and how each is quantised (`INT8_QUANTIZATION`, recorded in the manifest);
* the manifest: reading and writing it, the sha256 of the files it records, and the command that exports a model
  again (`reexport_command`);
* writing into an export folder: one process at a time (`folder_lock`), each building in a folder of its own
  (`build_folder`), and a complete export moved into place so that a kill at any moment leaves the earlier export or
  the new one (`replace_export`, `finish_interrupted_export`);
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
import shlex
import shutil
import tempfile
import time
from pathlib import Path

from ..utils.files import write_json


logger = logging.getLogger(__name__)


ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"
LAYOUT_FILE = "onnx_cache.json"
LAYOUT_FORMAT = 1
# Written into every export folder: what the graphs were exported from and which files the exporter wrote.
MANIFEST_FILE = "onnx_export.json"
MANIFEST_FORMAT = 1
# Each export (and each int8 quantisation at load) is built in a new folder of its own inside the export folder, named
# `.onnx_export.partial.XXXXXXXX` (`build_folder`), and moved into place once complete (earlier versions used
# `.onnx_export.partial` itself).
BUILD_FOLDER = ".onnx_export.partial"
# Held (`fcntl.flock`) by the one process writing into an export folder (`folder_lock`); removed when it is done.
LOCK_FILE = ".onnx_export.lock"
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


def _file_name(name, manifest: Path, folder: Path) -> str:
    """`name`, a file name listed in `manifest`, or a `ValueError` unless it names a file directly inside `folder`."""
    if isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\x00"):
        return name
    if isinstance(name, str) and (name.startswith(("/", "\\")) or ".." in re.split(r"[/\\]", name)):
        raise ValueError(f"{manifest} lists {name!r}, a file outside {folder}")
    raise ValueError(f"{manifest} lists {name!r}, which is not the name of a file in {folder}")


def read_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest `export_onnx` wrote into `folder`, or None if there is none. A `ValueError` says what is wrong
    with one that is there but is not a manifest: it cannot be read, is not JSON, was not written by onnx_export, or
    lists a file outside the folder."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not os.path.lexists(path):
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not JSON: it is not UTF-8 text ({error.reason} at byte {error.start})") from error
    except OSError as error:
        raise ValueError(f"{path} cannot be read ({error.strerror or error})") from error
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise ValueError(f"{path} is not JSON ({error})") from error
    if not isinstance(manifest, dict) or manifest.get("built_by") != BUILT_BY:
        raise ValueError(f'{path} was not written by onnx_export (it has no "built_by": "{BUILT_BY}")')
    files = manifest.get("files")
    if not isinstance(files, list):
        raise ValueError(f'{path} has no list of the files onnx_export wrote ("files")')
    for name in files:
        _file_name(name, path, folder)
    moving = manifest.get("moving_in")
    if moving is not None:
        if not isinstance(moving, dict) or not all(isinstance(moving.get(k), list) for k in ("files", "removing")):
            raise ValueError(f'{path} has a "moving_in" record that is not the one onnx_export writes')
        build = _file_name(moving.get("folder"), path, folder)
        if not build.startswith(BUILD_FOLDER + "."):
            raise ValueError(f"{path} names {build!r} as the folder an export was built in, which is not one")
        for name in [*moving["files"], *moving["removing"]]:
            _file_name(name, path, folder)
    return manifest


def write_manifest(folder: str | os.PathLike, manifest: dict) -> None:
    """Writes the manifest in one step (`utils.files.write_json`: a reader sees the old one or the new one, and a link
    is never written through)."""
    write_json(Path(folder) / MANIFEST_FILE, manifest, indent=2, sort_keys=True)


def reexport_command(manifest: dict | None, folder: str | os.PathLike, int8: bool | str = False) -> str:
    """The command that exports the model of `folder` again (the model folder recorded in its manifest; where none
    is, MODEL stands for it), with the int8 graphs of `int8` (a mode, or True for "dynamic")."""
    source = ((manifest or {}).get("source") or {}).get("path")
    mode = int8_mode(int8)
    options = {None: "", "dynamic": " --int8"}.get(mode, f" --int8 --int8_mode {mode}")
    command = f"{EXPORT_COMMAND} {shlex.quote(source) if source else 'MODEL'} {shlex.quote(str(folder))} --overwrite"
    return command + options + ("" if source else ", MODEL being the saved model it was exported from")


def is_onnx_export(path: str | os.PathLike) -> bool:
    """Whether `path` holds an export of `export_onnx` (its manifest, or the cache layout of an earlier version's)."""
    return (Path(path) / MANIFEST_FILE).is_file() or (Path(path) / LAYOUT_FILE).is_file()


# ------------------------------------------------------------------------------------------- writing an export folder


def _holder(descriptor: int) -> str:
    """Who holds the lock file open as `descriptor`, as its holder wrote it ("pid 123, exporting ...")."""
    text = os.pread(descriptor, 400, 0).decode("utf-8", errors="replace").strip()
    return text or "a process that has just taken it"


def _busy(folder: Path, holder: str) -> str:
    return f"another process is writing into {folder} ({holder}): wait for it to finish, or use another folder"


def check_not_busy(folder: str | os.PathLike) -> None:
    """A `ValueError` naming the process that holds the lock of `folder` (`folder_lock`), if one does; nothing is
    written."""
    import fcntl

    folder = Path(folder)
    try:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return  # no lock file (or not one): nobody holds it
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(_busy(folder, _holder(descriptor))) from None
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, doing: str, wait: bool = True):
    """Holds the lock of the export folder `folder` while the block runs, so that one process at a time writes into
    it (an export, int8 graphs quantised at a first load): `fcntl.flock` on `LOCK_FILE`, which the operating system
    releases when its holder ends, however it ends. The holder writes its pid and `doing` into the file for the
    others' messages. Where another process holds it: with `wait`, this one waits for it (saying for whom, at INFO
    level); without, a `ValueError` names the holder. The file is opened without following a link of its name (a link
    is replaced, its target left alone) and removed when the block ends."""
    import fcntl

    folder = Path(folder)
    path = folder / LOCK_FILE
    said = False
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as error:
            if os.path.islink(path):  # not ours: the lock file is never a link
                os.unlink(path)
                continue
            raise ValueError(f"cannot open the lock file {path}: {error.strerror or error}") from error
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(descriptor)
                if not wait:
                    raise ValueError(_busy(folder, holder)) from None
                if not said:
                    logger.info("Waiting for %s to finish writing into %s", holder, folder)
                    said = True
                time.sleep(0.1)
                os.close(descriptor)
                continue
            # its last holder may have removed the file (and another process made a new one) while this one waited
            with contextlib.suppress(OSError):
                on_disk, held = os.stat(path, follow_symlinks=False), os.fstat(descriptor)
                if (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino):
                    break
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)
    try:
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"pid {os.getpid()}, {doing}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(descriptor)


def build_folder(folder: str | os.PathLike) -> Path:
    """A new, empty folder inside the export folder `folder` that only the calling process writes into
    (`BUILD_FOLDER` and a random suffix): an export, or int8 graphs, are built there and then moved into place."""
    return Path(tempfile.mkdtemp(dir=folder, prefix=BUILD_FOLDER + "."))


def _remove(path: Path) -> None:
    """Removes the file, link (not its target) or folder `path`, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def replace_export(folder: str | os.PathLike, build: str | os.PathLike, removing: list[str]) -> None:
    """Moves the complete export in `build` (a `build_folder` of `folder`, its manifest written last) into `folder`,
    in place of the files `removing` (an earlier export's, and what interrupted ones left). The caller holds the
    folder's lock (`folder_lock`).

    First the manifest of `folder` is replaced by one saying that the export in `build` is being moved in, and which
    files go; then those are removed, the new files are moved in one by one (`os.replace`), and the new manifest comes
    last. Killed before that first step, the earlier export is as it was; after it, every name stands either for the
    new file in `folder` or, not yet moved, in `build`, so that the move can be finished from any point
    (`finish_interrupted_export`, which the runtime calls when it loads the folder)."""
    folder, build = Path(folder), Path(build)
    new = read_manifest(build)
    if new is None or not new.get("complete"):
        raise ValueError(f"{build} holds no complete export to move into {folder}")
    files = sorted(new["files"])
    removing = sorted(set(removing) - {*files, MANIFEST_FILE, LOCK_FILE, build.name})
    pending = {
        "built_by": BUILT_BY,
        "format": MANIFEST_FORMAT,
        "complete": False,
        "source": new.get("source"),
        "files": sorted({*removing, *files, build.name}),
        "moving_in": {"folder": build.name, "files": files, "removing": removing},
    }
    write_manifest(folder, pending)
    _move_in(folder, pending)


def _move_in(folder: Path, pending: dict) -> None:
    """Finishes moving in the export that the manifest `pending` of `folder` records as being moved in (from any point
    a kill left it at: each step is done again or skipped)."""
    moving = pending["moving_in"]
    build = folder / moving["folder"]
    for name in moving["removing"]:
        _remove(folder / name)
    for name in moving["files"]:
        if os.path.lexists(build / name):
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                shutil.rmtree(folder / name)
            os.replace(build / name, folder / name)
    os.replace(build / MANIFEST_FILE, folder / MANIFEST_FILE)
    shutil.rmtree(build, ignore_errors=True)


def _can_move_in(folder: Path, manifest: dict | None) -> bool:
    """Whether `manifest` (of `folder`) records an export being moved in whose folder still holds its manifest."""
    moving = (manifest or {}).get("moving_in")
    if manifest is None or manifest.get("complete") or not moving:
        return False
    build = folder / moving["folder"]
    if not build.is_dir() or build.is_symlink():
        return False
    try:
        new = read_manifest(build)
    except ValueError:
        return False
    return bool(new and new.get("complete")) and sorted(new["files"]) == sorted(moving["files"])


def finish_interrupted_export(folder: str | os.PathLike) -> bool:
    """Finishes moving an export into `folder` where the process doing it (`replace_export`) ended before it was done
    (its manifest says so), under the folder's lock: the export is then the new one, complete. Returns whether it did;
    a folder whose manifest says nothing of the kind, or cannot be read, is left to `check_export`'s messages."""
    folder = Path(folder)
    try:
        if not _can_move_in(folder, read_manifest(folder)):
            return False
    except ValueError:
        return False
    with folder_lock(folder, "finishing an interrupted export"):
        manifest = read_manifest(folder)  # as it is now: the process moving it in may have finished meanwhile
        if not _can_move_in(folder, manifest):
            return False
        _move_in(folder, manifest)
    logger.warning("Finished moving the export into %s, which the process exporting it left half done", folder)
    return True


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
    target = Path(target)
    # ONNX Runtime writes its files by name: into a new folder beside `target`, renamed into place when complete
    with _quiet_quantizers(), tempfile.TemporaryDirectory(dir=target.parent, prefix=BUILD_FOLDER + ".") as scratch:
        prepared, quantized = Path(scratch) / "prepared.onnx", Path(scratch) / target.name
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        if mode == "dynamic":
            quantize_dynamic(str(prepared), str(quantized), weight_type=QuantType.QInt8)
        else:
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
            quantizer.model.save_model_to_file(str(quantized))
        os.replace(quantized, target)


def add_int8_graphs(
    folder: str | os.PathLike, target: str | os.PathLike | None = None, mode: str = "dynamic", lock: bool = True
) -> list[Path]:
    """Quantises the float graphs of the export in `folder` to int8 in `mode` (`quantize_onnx_int8`) where that mode's
    int8 graphs are missing, and records them in the manifest with the float graph each was quantised from and how.
    With `target` (a folder the export's own cannot be written), they are written there instead and not recorded.
    Returns the int8 graphs.

    In `folder`, the graphs are quantised under the folder's lock (`folder_lock`; `lock=False`: the caller holds it,
    or the folder is its own), so that processes loading a new export at once quantise it once; in a `build_folder`
    of their own, from float graphs that must be the manifest's; the manifest records them before they are moved into
    place, so that a reader never finds an int8 graph the manifest does not list."""
    folder = Path(folder)
    graphs = [(folder / name, int8_file_name(name, mode)) for name in (ENCODER_FILE, DECODER_FILE)]
    if target is not None:
        for source, name in graphs:
            quantize_onnx_int8(source, Path(target) / name, mode)
        return [Path(target) / name for _, name in graphs]
    if all((folder / name).is_file() for _, name in graphs):
        return [folder / name for _, name in graphs]
    doing = f"quantising its graphs to int8 ({int8_mode(mode)})"
    with folder_lock(folder, doing) if lock else contextlib.nullcontext():
        manifest = read_manifest(folder)
        if manifest is None or not manifest.get("complete"):
            raise ValueError(f"{folder} holds no complete ONNX export whose graphs could be quantised to int8")
        for stale in folder.glob(BUILD_FOLDER + "*"):  # left by a process killed while writing (none writes now)
            _remove(stale)
        missing = [(source, name) for source, name in graphs if not (folder / name).is_file()]
        if missing:
            build = build_folder(folder)
            try:
                for source, name in missing:
                    recorded = (manifest["graphs"].get(source.name) or {}).get("sha256")
                    if file_sha256(source) != recorded:
                        raise ValueError(
                            f"{source} is not the graph onnx_export wrote there (its sha256 differs from "
                            f"{MANIFEST_FILE}'s): export the model again ({reexport_command(manifest, folder, mode)})"
                        )
                    quantize_onnx_int8(source, build / name, mode)
                    manifest["graphs"][name] = {
                        "sha256": file_sha256(build / name),
                        "quantized_from": recorded,
                        "int8_mode": int8_mode(mode),
                        "quantization": INT8_QUANTIZATION[int8_mode(mode)],
                    }
                manifest["files"] = sorted({*manifest["files"], *(name for _, name in missing)})
                write_manifest(folder, manifest)
                for _, name in missing:
                    os.replace(build / name, folder / name)
            finally:
                shutil.rmtree(build, ignore_errors=True)
    return [folder / name for _, name in graphs]
