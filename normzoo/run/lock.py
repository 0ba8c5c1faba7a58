"""One process per run directory: an advisory lock that dies with its process.

``normzoo train`` (rank 0) holds ``fcntl.flock`` on ``RUN_DIR/.lock`` for as long as it runs. A
second ``train`` on the same directory (``--resume auto`` while the run is alive, ``--force``,
a duplicate job) is refused with the holder's PID, host and command, instead of deleting or
rewriting files under the live run. The kernel releases the lock when the holder exits in any way,
SIGKILL included, so a dead run never leaves a stale lock behind: the file may remain, but an
unlocked file locks nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from normzoo.errors import NormzooError

LOCK_NAME = ".lock"


class RunDirectoryBusy(NormzooError):
    """Another live process holds the run directory."""


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["started"]))
        return (f"process {info['pid']} on {info['host']} ({info['command']}, started "
                f"{started})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


class RunLock:
    """Exclusive, non-blocking lock on a run directory, held until :meth:`release` or exit."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.created: list[Path] = []  # the folders acquire() made, deepest first
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock or raise :class:`RunDirectoryBusy` naming the process that holds it."""
        folder = self.run_dir.absolute()
        while not folder.exists():
            self.created.append(folder)
            folder = folder.parent
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirectoryBusy(
                f"run directory {self.run_dir} is in use by {_holder(self.path)}; wait for it "
                "to finish, or stop it first (kill -TERM saves a checkpoint to resume from)"
            ) from None
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                "command": " ".join(["normzoo", *sys.argv[1:]])[:300]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        self._fd = fd
        return self

    def release(self, *, remove_dir_if_empty: bool = False) -> None:
        """Let go of the lock; with ``remove_dir_if_empty``, also remove the folders this lock
        created and nothing else wrote to (a run that failed before it started leaves nothing)."""
        if self._fd is None:
            return
        if (remove_dir_if_empty and self.created
                and [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]):
            self.path.unlink(missing_ok=True)
            for folder in self.created:
                try:
                    folder.rmdir()
                except OSError:  # something else was put there meanwhile: keep it
                    break
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None
