"""Make writes under one folder fail as a read-only or a full file system would, even as root.

``chmod`` stops nobody running as root (CI containers often do), so the failures are injected
where Python writes: ``open``/``os.open`` for writing, ``os.mkdir``, ``os.replace``/``rename``,
``os.unlink``/``rmdir`` and ``os.fsync``, for paths inside the chosen folder only. Everything
outside it works as usual, so the command under test really runs up to the failing write.

* :func:`read_only` — every such call under the folder raises ``PermissionError`` (EACCES), as
  in a folder without write permission; with ``filesystem=True`` it raises EROFS, as on a
  file system mounted read-only, where even deleting a missing file fails so.
* :func:`full_disk` — the folder holds ``budget`` more bytes: a Python write that goes past
  them writes what fits, then raises ENOSPC (a half-written file, as on a real disk), and once
  nothing is left every ``fsync`` there raises ENOSPC too (that also catches files written by
  native code, e.g. safetensors, when the writer flushes them to disk).

In-process use (context managers)::

    with hazards.read_only(folder): ...

Subprocess use, like ``tests/crash.py``::

    python tests/hazards.py read-only FOLDER normzoo-args...
    python tests/hazards.py read-only-fs FOLDER normzoo-args...
    python tests/hazards.py full FOLDER BUDGET normzoo-args...
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _absolute(path: Any, dir_fd: int | None = None) -> str:
    if isinstance(path, int):  # a file descriptor
        return os.readlink(f"/proc/self/fd/{path}")
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    return os.path.abspath(path)


class _Hazard:
    def __init__(self, root: Any) -> None:
        self.root = os.path.realpath(os.fsdecode(root))

    def inside(self, path: Any, dir_fd: int | None = None) -> bool:
        try:
            absolute = os.path.realpath(_absolute(path, dir_fd))
        except OSError:
            return False
        return absolute == self.root or absolute.startswith(self.root + os.sep)


class _Filling:
    """A file whose writes stop with ENOSPC when the disk's remaining bytes are used up."""

    def __init__(self, file: Any, disk: _Full) -> None:
        self._file, self._disk = file, disk

    def write(self, data: Any) -> int:
        size = len(data) if not isinstance(data, memoryview) else data.nbytes
        if size > self._disk.left:
            fits = max(self._disk.left, 0)
            if fits:
                chunk = data.cast("B")[:fits] if isinstance(data, memoryview) else data[:fits]
                self._file.write(chunk)
                self._file.flush()
            self._disk.left = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._disk.left -= size
        return self._file.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._file.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._file)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


class _Full(_Hazard):
    def __init__(self, root: Any, budget: int) -> None:
        super().__init__(root)
        self.left = budget


def _writing(mode: str) -> bool:
    return any(c in mode for c in "wax+")


@contextlib.contextmanager
def _patched(replacements: dict[tuple[Any, str], Any]) -> Iterator[None]:
    saved = {key: getattr(*key) for key in replacements}
    try:
        for (owner, name), value in replacements.items():
            setattr(owner, name, value)
        yield
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _denied(path: Any, code: int) -> OSError:
    return OSError(code, os.strerror(code), os.fsdecode(path) if not isinstance(path, int)
                   else None)


@contextlib.contextmanager
def read_only(root: Any, filesystem: bool = False) -> Iterator[None]:
    """Inside ``root`` nothing can be created, written, renamed or deleted: EACCES, or EROFS
    with ``filesystem`` (a read-only mount)."""
    hazard = _Hazard(root)
    code = errno.EROFS if filesystem else errno.EACCES
    real_open, real_os_open = builtins.open, os.open
    real = {name: getattr(os, name) for name in
            ("mkdir", "replace", "rename", "unlink", "remove", "rmdir")}

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if _writing(mode) and not isinstance(file, int) and hazard.inside(file):
            raise _denied(file, code)
        return real_open(file, mode, *args, **kwargs)

    def guarded_os_open(path: Any, flags: int, *args: Any, dir_fd: int | None = None,
                        **kwargs: Any) -> int:
        if flags & _WRITE_FLAGS and hazard.inside(path, dir_fd):
            raise _denied(path, code)
        return real_os_open(path, flags, *args, dir_fd=dir_fd, **kwargs)

    def guard(name: str, *checked: int) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            # As the kernel does: mkdir of an existing path fails with EEXIST; in a folder
            # without permission, deleting or renaming a missing path fails with ENOENT.
            fd = kwargs.get("src_dir_fd" if len(checked) == 2 else "dir_fd")
            exists = os.path.lexists(_absolute(args[0], fd))
            if (exists and name == "mkdir") or not (exists or filesystem or name == "mkdir"):
                return real[name](*args, **kwargs)
            for i in checked:
                fd = kwargs.get(("src_dir_fd", "dst_dir_fd")[i] if len(checked) == 2
                                else "dir_fd")
                if hazard.inside(args[i], fd):
                    raise _denied(args[i], code)
            return real[name](*args, **kwargs)
        return call

    with _patched({(builtins, "open"): guarded_open, (io, "open"): guarded_open,
                   (os, "open"): guarded_os_open, (os, "mkdir"): guard("mkdir", 0),
                   (os, "replace"): guard("replace", 0, 1), (os, "rename"): guard("rename", 0, 1),
                   (os, "unlink"): guard("unlink", 0), (os, "remove"): guard("remove", 0),
                   (os, "rmdir"): guard("rmdir", 0)}):
        yield


@contextlib.contextmanager
def full_disk(root: Any, budget: int = 0) -> Iterator[None]:
    """Files written inside ``root`` hold ``budget`` more bytes in all, then ENOSPC."""
    disk = _Full(root, budget)
    real_open, real_fsync = builtins.open, os.fsync

    def filling_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        if _writing(mode) and not isinstance(file, int) and disk.inside(file):
            return _Filling(handle, disk)
        return handle

    def fsync(fd: Any) -> None:
        number = fd if isinstance(fd, int) else fd.fileno()
        if disk.left <= 0 and disk.inside(number):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(number)

    with _patched({(builtins, "open"): filling_open, (io, "open"): filling_open,
                   (os, "fsync"): fsync}):
        yield


if __name__ == "__main__":
    mode, root, *rest = sys.argv[1:]
    if mode == "full":
        budget, *rest = rest
        hazard = full_disk(root, int(budget))
    else:
        hazard = read_only(root, filesystem=mode == "read-only-fs")
    from normzoo.cli import main

    sys.argv = ["normzoo", *rest]
    with hazard:
        main()
