# Copyright 2026 The hf-unified-mt authors. Licensed under the Apache License, Version 2.0.
"""The Hub folder on disk and on the Hub: built, put in place, uploaded.

* `check_output_dir`: whether the folder may be built at `--output_dir` (never the checkpoint or a folder containing
  it; an existing folder only if empty, or built earlier by `hub_upload.py` and `--overwrite` is given).
* `stage_hub_folder`: the folder written into a new folder of its own beside `--output_dir` (the checkpoint's files,
  `test_results.json`, `README.md`, and a marker listing them), every file through `hf_unified_mt.utils.files` (a
  temporary file renamed into place, never through a link); a failing build removes it.
* `install_hub_folder`: the complete folder moved to `--output_dir`, so that a run that fails leaves `--output_dir` as
  it was.
* `require_token` (`HF_TOKEN` or the cached login) and `upload_folder` (`create_repo(exist_ok=True)`, then one
  commit of the folder), through huggingface_hub.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..deployment.tokenizer_files import clean_tokenizer_config
from ..utils.files import atomic_write, write_json, write_text
from . import HubUploadError
from .checkpoint import TEST_RESULTS_NAME, Checkpoint


# Written into every folder this tool builds, listing the files it wrote: `--overwrite` replaces only such a folder,
# and removes only those files. Never uploaded.
MARKER_NAME = ".hub_upload_folder.json"
# The folder is built in a new folder beside --output_dir, named `.<name>.<random>` + this, and moved into place once
# complete; a failed run removes it.
STAGING_SUFFIX = ".hub_upload.partial"


def require_token() -> str:
    """The Hub token from `HF_TOKEN` or the cached login, or a `HubUploadError` saying how to provide one."""
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise HubUploadError(
            "no Hugging Face token found. Set the HF_TOKEN environment variable to a token with write access "
            "(https://huggingface.co/settings/tokens) or log in once with `hf auth login`; "
            "or pass --dry-run to only build the folder."
        )
    return token


def _built_files(output_dir: Path) -> list[str] | None:
    """The files that hub_upload.py wrote into `output_dir` (from its marker), or None if it did not build it."""
    marker = output_dir / MARKER_NAME
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        files = json.loads(marker.read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, list) or not all(
        isinstance(name, str) and "/" not in name and "\\" not in name and name not in ("", ".", "..") for name in files
    ):
        return None
    return files


def check_output_dir(
    output_dir: Path, checkpoint_path: Path, overwrite: bool, staging: Path | None = None
) -> list[str]:
    """Check that the folder can be built at `output_dir`; return the files `--overwrite` will replace or remove
    (those that hub_upload.py wrote there itself). Nothing is changed here. `staging`, the folder being built, is not
    counted where it lies inside `output_dir`."""
    target, source = output_dir.resolve(), checkpoint_path.resolve()
    if target == source or target in source.parents:
        raise HubUploadError(
            f"--output_dir {output_dir} is the checkpoint directory {checkpoint_path}"
            + (" itself" if target == source else " or a folder containing it")
            + ": choose another folder (by default a dry run builds CHECKPOINT-hub next to it)"
        )
    if output_dir.is_symlink() and not output_dir.exists():
        raise HubUploadError(f"--output_dir {output_dir} is a symbolic link to nothing: remove it or choose another")
    if output_dir.exists() and not output_dir.is_dir():
        raise HubUploadError(f"--output_dir {output_dir} is a file, not a folder")
    if not output_dir.exists():
        return []
    present = sorted(p.name for p in output_dir.iterdir() if staging is None or p.name != staging.name)
    if not present:
        return []
    built = _built_files(output_dir)
    if not overwrite:
        hint = " (pass --overwrite to replace it)" if built is not None else ""
        raise HubUploadError(f"output directory {output_dir} is not empty{hint}")
    if built is None:
        raise HubUploadError(
            f"refusing to replace {output_dir}: it does not look like a Hub folder built by hub_upload.py (it has no "
            f"{MARKER_NAME}); --overwrite only replaces folders this tool built. Choose an empty or new --output_dir"
        )
    foreign = [name for name in present if name not in built and name != MARKER_NAME]
    if foreign:
        raise HubUploadError(
            f"refusing to replace {output_dir}: besides the files hub_upload.py wrote it holds "
            f"{', '.join(foreign)}, which it did not create. Move them away or choose another --output_dir"
        )
    return [name for name in present if name in built] + ([MARKER_NAME] if MARKER_NAME in present else [])


def _copy_file(source: Path, target: Path) -> None:
    """`source` copied to `target` through `atomic_write` (a new file renamed into place, never through a link)."""
    with open(source, "rb") as reader, atomic_write(target, "wb") as writer:
        shutil.copyfileobj(reader, writer, 1 << 20)


def _move_file(source: Path, target: Path) -> None:
    """Renames `source` to `target` (a link at `target` is replaced, never written through); copied through
    `atomic_write` where the two lie on different file systems."""
    try:
        os.replace(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        _copy_file(source, target)
        source.unlink()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, outermost first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing[::-1]


def _folder_mode() -> int:
    """The permissions `mkdir` gives a new folder (0o777 less the umask)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def stage_hub_folder(checkpoint: Checkpoint, card_text: str, output_dir: Path | None) -> Path:
    """Writes the Hub folder into a new folder of its own and returns it: beside `output_dir` (inside it where its
    parent cannot be written), or in the system's temporary folder without one. Every file goes through
    `hf_unified_mt.utils.files` (a temporary file renamed into place); on any failure the new folder is removed, so
    that nothing of the user's is touched until `install_hub_folder`."""
    if output_dir is None:
        staging = Path(tempfile.mkdtemp(prefix="hub_upload_"))
    else:
        staging = None
        for parent in (output_dir.parent, output_dir):
            try:
                staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", suffix=STAGING_SUFFIX, dir=parent))
                break
            except (PermissionError, FileNotFoundError):
                continue
        if staging is None:
            raise HubUploadError(f"cannot write the Hub folder beside or inside --output_dir {output_dir}")
    try:
        copied = checkpoint.files_to_copy()
        written = [*copied, TEST_RESULTS_NAME, "README.md"]
        write_json(staging / MARKER_NAME, {"built_by": "hub_upload.py", "files": written}, indent=2)
        for name in copied:  # file names of the checkpoint folder itself (inspect_checkpoint checked them)
            _copy_file(checkpoint.path / name, staging / name)
        clean_tokenizer_config(staging)  # without transformers' load options (`is_local`, ...)
        write_json(staging / TEST_RESULTS_NAME, checkpoint.test_scores, indent=2, ensure_ascii=False)
        write_text(staging / "README.md", card_text, newline="")  # as huggingface_hub's ModelCard.save writes it
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise HubUploadError(f"cannot build the Hub folder: {error}") from error
        raise
    return staging


def install_hub_folder(staging: Path, output_dir: Path, checkpoint_path: Path, overwrite: bool) -> Path:
    """Puts the folder built by `stage_hub_folder` at `output_dir` and returns `output_dir`. A new `output_dir` is the
    staged folder renamed; an existing one (empty, or built earlier by hub_upload.py, with `--overwrite`) gets each
    new file renamed over the old one, then loses the files of the earlier build that the new one lacks. Its marker
    lists the files of both builds meanwhile, so that a run stopped half-way leaves a folder `--overwrite` replaces."""
    earlier = check_output_dir(output_dir, checkpoint_path, overwrite, staging)  # again: it may have changed since
    files = json.loads((staging / MARKER_NAME).read_text(encoding="utf-8"))["files"]
    try:
        if not output_dir.exists() and not output_dir.is_symlink():
            os.chmod(staging, _folder_mode())
            try:
                os.rename(staging, output_dir)
                return output_dir
            except OSError:  # created meanwhile, or on another file system: file by file, once checked again
                earlier = check_output_dir(output_dir, checkpoint_path, overwrite, staging)
        if earlier:
            print(
                f"Replacing the Hub folder {output_dir} built earlier by hub_upload.py: replacing or removing "
                f"{', '.join(earlier)}",
                file=sys.stderr,
            )
        earlier_files = [name for name in earlier if name != MARKER_NAME]
        marker = {"built_by": "hub_upload.py", "files": sorted(set(earlier_files) | set(files))}
        write_json(output_dir / MARKER_NAME, marker, indent=2)
        for name in files:
            target = output_dir / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            _move_file(staging / name, target)
        for name in earlier_files:
            if name not in files:
                _remove(output_dir / name)
        write_json(output_dir / MARKER_NAME, {"built_by": "hub_upload.py", "files": files}, indent=2)
    except OSError as error:
        raise HubUploadError(f"cannot write the Hub folder into {output_dir}: {error}") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def upload_folder(
    folder: Path,
    repo_id: str,
    token: str,
    commit_message: str,
    private: bool = False,
    endpoint: str | None = None,
    revision: str | None = None,
):
    """Create the model repository if needed and commit the folder to it; returns the `CommitInfo`."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    # private=None keeps the namespace's default visibility; an existing repository keeps its own.
    repo = api.create_repo(repo_id, repo_type="model", private=True if private else None, exist_ok=True)
    return api.upload_folder(
        repo_id=repo.repo_id,
        repo_type="model",
        folder_path=folder,
        commit_message=commit_message,
        revision=revision,
        ignore_patterns=[MARKER_NAME],
    )
