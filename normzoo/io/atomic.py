"""Crash-safe file writes: a file is either its old complete self or its new complete self.

Every file of a run directory that a later command reads back (checkpoints, summary, logs) is
written to a temporary file in the same directory, flushed to disk, then renamed over the target.
A rename within one directory is atomic on POSIX filesystems, so a process killed mid-write (or a
disk that fills up) leaves at most a stray ``.*.tmp-*`` file, never a truncated checkpoint that a
resume would pick up. :func:`remove_stale_temporaries` clears the strays of a killed run.

A folder written whole (an export) is built the same way, in a hidden staging folder beside it
(:func:`staging_folder`) renamed into place when complete; :func:`remove_stale_staging` clears
those of killed writers, leaving alone the ones still being written.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from normzoo.errors import RuntimeFailure

TMP_MARK = ".tmp-"
STAGING_MARK = ".staging-"


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


def _marked(directory: str | Path, mark: str) -> list[Path]:
    """The hidden entries of ``directory`` whose name holds ``mark``: a writer's temporaries,
    never a user's file (those are not hidden, or do not carry the mark)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [p for p in directory.iterdir() if p.name.startswith(".") and mark in p.name]


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete the temporary files a killed process left in ``directory``; return them.

    For a run's own folders, which one process writes at a time: every temporary there is a
    killed process's."""
    stale = _marked(directory, TMP_MARK)
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _host() -> str:
    # A host name as it can stand in a file name, and be split off again at its last dashes.
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def staging_folder(path: Path) -> Path:
    """A new, empty hidden folder beside ``path`` in which to build ``path``'s contents before
    renaming it to ``path``: ``.NAME.staging-HOST-PID-XXXXXXXX``. The writer's host and process
    id in the name let :func:`remove_stale_staging` tell a killed writer's folder from one
    still being written by another process (two exports side by side)."""
    prefix = f".{path.name}{STAGING_MARK}{_host()}-{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))


def _writer_gone(name: str) -> bool:
    """Whether the writer named in a staging folder's name is certainly not running: it ran on
    this host and no process has its id. One on another host (a shared file system) cannot be
    asked, and a name not of :func:`staging_folder`'s making is not ours: both are kept."""
    host, _, rest = name.rpartition(STAGING_MARK)[2].rpartition("-")[0].rpartition("-")
    if os.name != "posix" or host != _host() or not rest.isdigit() or int(rest) <= 0:
        return False
    try:
        os.kill(int(rest), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists, under another user
        return False
    return False


def remove_stale_staging(directory: str | Path) -> list[Path]:
    """Delete the staging folders (:func:`staging_folder`) that killed writers left in
    ``directory``; return them. A folder whose writer may still be running is left alone, and
    so is anything else hidden there."""
    stale = [p for p in _marked(directory, STAGING_MARK)
             if p.is_dir() and not p.is_symlink() and _writer_gone(p.name)]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
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


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, an output file that is a directory or whose folder is missing."""
    from normzoo.errors import NormzooError

    if path.is_dir():
        raise NormzooError(f"{option} {path} is a directory; give a file name")
    folder = path.absolute().parent
    if not folder.is_dir():
        state = "is not a directory" if folder.exists() else "does not exist"
        raise NormzooError(f"{option} {path}: its folder {folder} {state}")

