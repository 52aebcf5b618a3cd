# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""An ONNX export folder on disk, read by the runtime (`onnx_runtime.py`) and written by the exporter
(`onnx_export.py`), neither of which imports the other; what its files are called and hold is `onnx_format.py`'s.

* reading: the manifest (`read_manifest`, `write_manifest`, the sha256 of the files it records, the command that
  exports a model again, `reexport_command`), the check of a folder against it (`check_export`) and the one pass a
  load makes over a folder (`open_export`: finish an interrupted export, check, quantise the int8 graphs on first use,
  read the cache layout);
* writing: one process at a time (`folder_lock`), each building in a folder of its own (`build_folder`), and a complete
  export moved into place so that a kill at any moment leaves the earlier export or the new one (`replace_export`,
  `finish_interrupted_export`); which folders an export may write (`check_output_dir`: never a saved model);
* the int8 graphs beside the float ones, under the folder's lock and recorded in the manifest (`add_int8_graphs`,
  quantised by `onnx_int8.py`): the exporter adds them with `--int8`, a load on first use of a mode.
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
from .onnx_format import (
    BUILD_FOLDER,
    BUILT_BY,
    CONFIG_FILES,
    DECODER_FILE,
    ENCODER_FILE,
    INT8_QUANTIZATION,
    LAYOUT_FILE,
    LOCK_FILE,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    CacheLayout,
    int8_file_name,
    int8_mode,
    is_onnx_export,
)
from .onnx_int8 import quantize_onnx_int8


logger = logging.getLogger(__name__)

EXPORT_COMMAND = "python -m hf_unified_mt.deployment.onnx_export"
_WEIGHTS_NAME = re.compile(r".+\.safetensors|pytorch_model.*\.bin|.+\.(safetensors|bin)\.index\.json|tf_model\.h5")


# ---------------------------------------------------------------------------------------------------- the manifest


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


def manifest_stamp(path: str | os.PathLike) -> bytes | None:
    """The manifest of the export in `path` as it is on disk now (None if there is none or it cannot be read): every
    change of the export's files goes with a new manifest (`replace_export`, `add_int8_graphs`), so a load that finds
    the same stamp after reading the folder as before read one export, whole."""
    try:
        return (Path(path) / MANIFEST_FILE).read_bytes()
    except OSError:
        return None


# ------------------------------------------------------------------------------------------- reading an export folder


def check_export(path: str | os.PathLike, int8: bool | str = False) -> dict:
    """Checks an export folder against its manifest (`onnx_export.json`) before anything is loaded, and returns the
    manifest: `config.json` and `onnx_cache.json` must be the files the graphs were exported with, the graphs the
    ones `export_onnx` wrote, model weights beside them (a model saved or trained into the folder) the weights they
    were exported from, and, with `int8` (True or "dynamic", or "per_row"), each int8 graph of that mode quantised
    from the float graph beside it, in that mode. A `ValueError` (one line) names what differs and the command that
    exports the model again."""
    path = Path(path)
    mode = int8_mode(int8)
    weights = weights_files(path)
    try:
        manifest = read_manifest(path)
    except ValueError as error:  # there, but unreadable, not JSON, not onnx_export's, or naming files outside
        raise ValueError(
            f"{error}, so nothing tells which model the graphs in {path} are: export the model again into a new or "
            f"empty folder ({EXPORT_COMMAND} MODEL NEW_FOLDER, MODEL being the saved model they were exported from)"
        ) from error
    if manifest is None:
        if weights:
            raise ValueError(
                f"{path} holds ONNX graphs beside the model weights {', '.join(weights)} but no {MANIFEST_FILE} "
                "recording what the graphs were exported from, so they may be another model's: export the model "
                f"into a new folder ({EXPORT_COMMAND} {path} NEW_FOLDER) and use that"
            )
        raise ValueError(
            f"{path} has no {MANIFEST_FILE}: it was exported by an earlier version of hf-unified-mt, or not by "
            f"onnx_export, so nothing tells which model its graphs are; export the model again into a new or empty "
            f"folder ({EXPORT_COMMAND} MODEL NEW_FOLDER, MODEL being the saved model they were exported from)"
        )
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(
            f"{path}/{MANIFEST_FILE} has format {manifest.get('format')!r}; this version reads {MANIFEST_FORMAT}: "
            f"export the model again ({reexport_command(manifest, path)})"
        )
    if not manifest.get("complete"):
        if manifest.get("moving_in"):
            ended = f"the export into {path} ended while its files were being moved into place"
            if not (path / manifest["moving_in"]["folder"]).is_dir():
                raise ValueError(
                    f"{ended}, and the folder they were moved from is gone: export the model again "
                    f"({reexport_command(manifest, path)})"
                )
            raise ValueError(
                f"{ended}, which a process that can write {path} finishes when it loads the folder; or export the "
                f"model again ({reexport_command(manifest, path)})"
            )
        raise ValueError(
            f"the export into {path} did not finish (it is still running, or was interrupted); export the model "
            f"again ({reexport_command(manifest, path)})"
        )
    again = reexport_command(manifest, path)
    exported_from = (manifest.get("source") or {}).get("weights") or {}
    for name in weights:
        if exported_from.get(name) != file_sha256(path / name):
            raise ValueError(
                f"{path}/{name} is not the weights the ONNX graphs beside it were exported from (a model saved or "
                "trained into the export folder?), so they would not translate like it: export that model into a "
                f"new folder ({EXPORT_COMMAND} {path} NEW_FOLDER)"
            )
    for name in CONFIG_FILES:
        if not (path / name).is_file():
            raise ValueError(f"{path} has no {name}, which its graphs were exported with: export again ({again})")
        if (manifest.get("config") or {}).get(name) != file_sha256(path / name):
            raise ValueError(
                f"{path}/{name} is not the {name} the graphs were exported with (its sha256 differs from "
                f"{MANIFEST_FILE}'s): it was changed or replaced since; export the model again ({again})"
            )
    graphs = manifest.get("graphs") or {}
    for name in (ENCODER_FILE, DECODER_FILE):
        if not (path / name).is_file():
            raise ValueError(f"{path} has no {name}: export the model again ({again})")
        if graphs.get(name, {}).get("sha256") != file_sha256(path / name):
            raise ValueError(
                f"{path}/{name} is not the graph onnx_export wrote there (its sha256 differs from {MANIFEST_FILE}'s): "
                f"it was changed or replaced since; export the model again ({again})"
            )
    for name in (ENCODER_FILE, DECODER_FILE) if mode else ():
        quantized = int8_file_name(name, mode)
        if not (path / quantized).is_file():
            continue  # quantised at load
        entry = graphs.get(quantized)
        again = reexport_command(manifest, path, int8=mode)
        if entry is None or entry.get("quantized_from") != graphs[name]["sha256"]:
            raise ValueError(
                f"{path}/{quantized} is not recorded in {MANIFEST_FILE} as quantised from this {name} (left by an "
                f"earlier export?): it is not quantised from {path}/{name}; remove it, or export again ({again})"
            )
        # entries without a mode were written before the modes, by the dynamic quantiser
        recorded = entry.get("int8_mode", "dynamic")
        if recorded != mode:
            raise ValueError(
                f"{path}/{quantized} was quantised in {recorded} mode, not {mode}: remove it, or export again ({again})"
            )
        if entry.get("quantization", INT8_QUANTIZATION["dynamic"]) != INT8_QUANTIZATION[mode]:
            raise ValueError(
                f"{path}/{quantized} was quantised with {entry.get('quantization')}, not as this version quantises in "
                f"{mode} mode ({INT8_QUANTIZATION[mode]}): remove it, or export again ({again})"
            )
        if entry.get("sha256") != file_sha256(path / quantized):
            raise ValueError(
                f"{path}/{quantized} is not the int8 graph quantised from {name} (its sha256 differs from "
                f"{MANIFEST_FILE}'s): remove it, or export again ({again})"
            )
    return manifest


@dataclasses.dataclass
class ExportFiles:
    """What a load of an export folder runs (`open_export`): the encoder and step graphs (the float ones, or the int8
    ones of the mode asked for), the cache layout they were exported with, and the scratch folder holding int8 graphs
    quantised for a folder that cannot be written (kept with the model that runs them; None otherwise)."""

    encoder: Path
    decoder: Path
    layout: CacheLayout
    scratch: tempfile.TemporaryDirectory | None = None


def open_export(path: str | os.PathLike, int8: bool | str = False) -> ExportFiles | None:
    """One reading of the export folder `path` for a load: refused where it is no export (saying why); an export
    whose move into place was interrupted finished first, where the folder can be written
    (`finish_interrupted_export`); checked against its manifest (`check_export`); with `int8` (True or "dynamic", or
    "per_row"), that mode's graphs, quantised on first use (`add_int8_graphs`): into the folder, under its lock, where
    it can be written, and then None is returned, the folder and its manifest having changed (read it again); into a
    scratch folder where it cannot. The caller reads the config beside the graphs and compares `manifest_stamp` before
    and after, so that a folder another process replaced meanwhile is read again."""
    path = Path(path)
    mode = int8_mode(int8)
    if not is_onnx_export(path):
        if path.is_dir() and any(name.startswith(BUILD_FOLDER) for name in os.listdir(path)):
            raise ValueError(
                f"{path} has no {MANIFEST_FILE} yet: an export into it has not finished (it is still running, or "
                "was interrupted; export the model again)"
            )
        raise ValueError(f"{path} is not an ONNX export of this package: it has no {MANIFEST_FILE}")
    writable = os.access(path, os.W_OK)
    if writable:
        finish_interrupted_export(path)
    check_export(path, int8=mode)
    files = [path / ENCODER_FILE, path / DECODER_FILE]
    scratch = None
    if mode:  # quantised next to the graphs, or in a scratch folder when that one is read-only
        present = [path / int8_file_name(file.name, mode) for file in files]
        if all(f.is_file() for f in present):
            files = present
        elif writable:  # under the folder's lock: processes loading it at once quantise it once
            add_int8_graphs(path, mode=mode)
            return None
        else:
            scratch = tempfile.TemporaryDirectory()
            files = add_int8_graphs(path, scratch.name, mode)
    layout = CacheLayout.from_json(json.loads((path / LAYOUT_FILE).read_text()))
    return ExportFiles(encoder=files[0], decoder=files[1], layout=layout, scratch=scratch)


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
    (`finish_interrupted_export`, which a load calls first, `open_export`)."""
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


# ------------------------------------------------------------------------------- which folders an export may write


def _leftover(name: str, own: set[str]) -> bool:
    """Whether `name` in an export folder is what an export or int8 quantisation that was interrupted left there: the
    lock file, a build folder, earlier versions' pending manifest, or the temporary file of an atomic write of one of
    the folder's files (`own`: the manifest and the files it lists)."""
    if name in (LOCK_FILE, BUILD_FOLDER, MANIFEST_FILE + ".tmp") or name.startswith(BUILD_FOLDER + "."):
        return True
    return name.endswith(".tmp") and any(name.startswith(f".{own_name}.") for own_name in own)


def export_folder_contents(output_dir: Path, overwrite: bool) -> tuple[list[str], list[str]]:
    """`check_output_dir`, returning also what interrupted exports left there (`_leftover`)."""
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"the output folder {output_dir} is a file, not a folder")
    if not output_dir.exists():
        ancestor = output_dir.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise ValueError(f"cannot create the output folder {output_dir}: {ancestor} is a file")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise ValueError(f"cannot create the output folder {output_dir}: {ancestor} is not writable")
        return [], []
    if not os.access(output_dir, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write into the output folder {output_dir}: it is not writable")
    present = sorted(path.name for path in output_dir.iterdir())
    if not present:
        return [], []
    weights = weights_files(output_dir)
    if weights:
        raise ValueError(
            f"refusing to export into {output_dir}: it holds a saved model ({', '.join(weights)}), whose config and "
            "tokenizer the export would overwrite; choose a new or empty folder"
        )
    try:
        manifest = read_manifest(output_dir)
    except ValueError as error:
        raise ValueError(
            f"refusing to export into {output_dir}: {error}, so nothing tells which of its files onnx_export wrote; "
            "move the folder away or choose a new or empty one"
        ) from error
    own = {MANIFEST_FILE, *(manifest["files"] if manifest is not None else ())}
    leftovers = [name for name in present if _leftover(name, own)]
    if manifest is None:
        if len(leftovers) == len(present):  # only what an interrupted first export left: as good as empty
            return [], leftovers
        raise ValueError(
            f"refusing to export into {output_dir}: it is not empty and not a folder onnx_export made (it has no "
            f"{MANIFEST_FILE}); choose a new or empty folder"
        )
    if not overwrite:
        raise ValueError(
            f"{output_dir} holds an ONNX export already: pass --overwrite (export_onnx(..., overwrite=True)) to "
            "replace it"
        )
    foreign = [name for name in present if name not in own and name not in leftovers]
    if foreign:
        raise ValueError(
            f"refusing to replace the ONNX export in {output_dir}: besides the files onnx_export wrote it holds "
            f"{', '.join(foreign)}, which it did not write; move them away or choose another folder"
        )
    earlier = [name for name in present if name in own and name != MANIFEST_FILE and name not in leftovers]
    return earlier, leftovers


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool = False) -> list[str]:
    """Whether an export may be written to `output_dir`; returns the files of an earlier export there that it will
    replace. An export writes a new or empty folder (or one holding only what an interrupted export left), or, with
    `overwrite`, a folder `export_onnx` made itself (its manifest lists the files it wrote, and nothing else may be
    there); never a saved model. A `ValueError` names what stands against it. Nothing is changed here."""
    return export_folder_contents(Path(output_dir), overwrite)[0]


# ------------------------------------------------------------------------------------------------ the int8 graphs


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
