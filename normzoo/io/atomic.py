"""Crash-safe file writes: a file is either its old complete self or its new complete self.

Every file of a run directory that a later command reads back (checkpoints, summary, logs) is
written to a temporary file in the same directory, flushed to disk, then renamed over the target.
A rename within one directory is atomic on POSIX filesystems, so a process killed mid-write (or a
disk that fills up) leaves at most a stray ``.*.tmp-*`` file, never a truncated checkpoint that a
resume would pick up. :func:`remove_stale_temporaries` clears the strays of a killed run.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from normzoo.errors import RuntimeFailure

TMP_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    # Hidden and without the target's suffix: globbing for *.ckpt never sees a half-written file.
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")


def fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (the directory entry), where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def os_reason(error: BaseException) -> str:
    """What went wrong, in the user's words: "the disk is full" for ENOSPC (also as the Rust
    libraries, safetensors among them, spell it: "(os error 28)"), else the OS's own reason,
    without the name of whatever temporary file it was about."""
    if getattr(error, "errno", None) == errno.ENOSPC or f"(os error {errno.ENOSPC})" in str(
            error):
        return "the disk is full"
    return getattr(error, "strerror", None) or str(error)


def not_a_folder(folder: str | Path) -> str | None:
    """The file standing where ``folder``, or a folder above it, would have to be, worded to
    follow the folder's name ("is a file, not a folder" or "is under F, a file, not a folder"):
    making the folder would fail with only "File exists" or "Not a directory", so a command
    says this before it starts work, in the same words everywhere. None when the way is clear."""
    folder = Path(folder).absolute()
    in_the_way = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if in_the_way is None or in_the_way.is_dir():
        return None
    if in_the_way == folder:
        return "is a file, not a folder"
    return f"is under {in_the_way}, a file, not a folder"


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any], what: str = "file") -> None:
    """Write ``path`` through ``write(binary_file)`` so that it appears whole or not at all.

    A full disk or another OS error removes the temporary file and raises :class:`RuntimeFailure`
    (exit code 1) naming ``what`` and the path; the previous version of ``path`` is untouched.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as error:
        _discard(tmp)
        raise RuntimeFailure(
            f"could not save the {what} {path}: {os_reason(error)}; the previous version, if "
            "any, is intact"
        ) from error
    except BaseException:
        _discard(tmp)
        raise
    fsync_directory(path.parent)


def _discard(tmp: Path) -> None:
    """Delete a temporary if there is one. On a read-only file system even deleting a missing
    file fails (EROFS): that must not hide the error being reported."""
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str, what: str = "file") -> None:
    """:func:`atomic_write` for a UTF-8 text file."""
    data = text.encode("utf-8")
    atomic_write(path, lambda f: f.write(data), what)


def save_figure(figure: Any, path: str | Path) -> None:
    """A matplotlib ``figure`` as a PNG at ``path``, through :func:`atomic_write`."""
    atomic_write(path, lambda f: figure.savefig(f, format="png", dpi=110), "plot")


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete the temporary files a killed process left in ``directory``; return them."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    stale = [p for p in directory.iterdir() if p.name.startswith(".") and TMP_MARK in p.name]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def save_checkpoint_atomically(checkpoint: dict[str, Any], path: str | Path) -> None:
    """``torch.save`` ``checkpoint`` to ``path`` through :func:`atomic_write`.

    The checkpoint is serialised in memory first, so a failure while pickling never touches the
    disk, and the file write is one flat copy.
    """
    import torch

    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    atomic_write(path, lambda f: f.write(buffer.getbuffer()), "checkpoint")

