"""Writing files so that nothing a user had is lost, and reading paths from files so that nothing escapes its folder.

Two rules every file the package writes follows:

* A file is written to a new temporary file in its own folder (created exclusively, so never through a link that
  happens to carry the temporary name) and renamed over its destination only once it is complete: a reader sees the
  old file or the new one, never half of one; a write that fails (an encoding error, a full disk, a kill) leaves the
  destination as it was; a destination that is a symbolic link is replaced by the file, its target left untouched.
* A path read from a file (a config's `auto_map`, a manifest, a weights index) names a file inside its folder:
  `contained_path` refuses absolute paths, `..` and links that lead out.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def _default_mode() -> int:
    """The permissions `open(path, "w")` would give a new file (0o666 less the umask)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None):
    """Opens a temporary file beside `path` for writing and renames it to `path` when the block ends without an
    exception; on an exception the temporary file is removed and `path` is left as it was.

        with atomic_write(output, encoding="latin-1") as handle:
            handle.write(text)
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes a whole file: mode must be 'w' or 'wb', not {mode!r}")
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"cannot write {path}: it is a folder")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(descriptor, _default_mode())
        if mode == "wb":
            handle = os.fdopen(descriptor, "wb")
        else:
            handle = os.fdopen(descriptor, "w", encoding=encoding, newline=newline)
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8", newline: str | None = None) -> None:
    """`Path.write_text`, written atomically (`atomic_write`)."""
    with atomic_write(path, encoding=encoding, newline=newline) as handle:
        handle.write(text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """`Path.write_bytes`, written atomically (`atomic_write`)."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def write_json(path: str | os.PathLike, value, **dumps_options) -> None:
    """`value` as JSON (`json.dumps(value, **dumps_options)` and a final newline), written atomically."""
    write_text(path, json.dumps(value, **dumps_options) + "\n")


def contained_path(folder: str | os.PathLike, name: str, what: str = "a file name") -> Path:
    """`folder / name` for a `name` read from a file of `folder`, refused with a `ValueError` naming `what` unless it
    is a relative path that stays inside `folder` (no absolute path, no `..` part, no link leading out)."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"{what} {name!r} is not a file name")
    relative = Path(name)
    if relative.is_absolute() or name.startswith(("/", "\\")) or ".." in relative.parts or "\\" in name:
        raise ValueError(f"{what} {name!r} is not a path inside {folder}: absolute paths and '..' are refused")
    folder = Path(folder)
    path = folder / relative
    if not path.resolve().is_relative_to(folder.resolve()):
        raise ValueError(f"{what} {name!r} leads out of {folder} through a symbolic link")
    return path
