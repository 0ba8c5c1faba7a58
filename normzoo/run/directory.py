"""The run directory: where a run lives, one process at a time, and what a run finds in it.

Layout::

    recipe.yaml          the resolved recipe (overrides applied)
    tokenizer.json       the tokenizer the model was trained with
    checkpoints/         best-N, step-N and last.ckpt
    logs/csv/            metrics.csv (Lightning CSVLogger)
    logs/tb/             TensorBoard events
    summary.json         final metrics, wall time, test scores
    .lock                held by the live ``normzoo train`` (:class:`RunLock`)

:class:`RunDirectory` is the folder as one ``normzoo train`` uses it, from claiming it to letting
it go. One process per run directory: rank 0 holds ``fcntl.flock`` on ``.lock`` for as long as it
runs, so a second ``train`` on the same directory (``--resume auto`` while the run is alive,
``--force``, a duplicate job) is refused with the holder's PID, host and command instead of
deleting or rewriting files under the live run. The kernel releases the lock when the holder
exits in any way, SIGKILL included, so a dead run never leaves a stale lock behind: the file may
remain, but an unlocked file locks nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from normzoo.errors import NormzooError
from normzoo.io.atomic import atomic_write_text, not_a_folder
from normzoo.recipe import Recipe
from normzoo.run.inputs import run_directory

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


# The descriptors of the run locks this process holds. A forked child (a DataLoader worker)
# closes its copies at once: a flock belongs to the open file, so a worker that outlives a
# SIGKILLed run (it notices its parent is gone only seconds later) would otherwise keep the run
# locked, and the resume that follows would be refused, naming the dead process.
_HELD: set[int] = set()


def _close_held_in_child() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


class RunLock:
    """Exclusive, non-blocking lock on a run directory, held until :meth:`release` or exit (by
    this process alone: forked children let go of it, :data:`_HELD`)."""

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
        _HELD.add(fd)
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
        _HELD.discard(self._fd)
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


class RunDirectoryExists(NormzooError):
    """A run directory already holds a run (or has none to resume); refuse to guess."""


def _contents(run_dir: Path) -> list[Path]:
    """What ``run_dir`` holds besides the lock of the process that is looking."""
    if not run_dir.is_dir():
        return []
    return [p for p in run_dir.iterdir() if p.name != LOCK_NAME]


def refuse_existing_run(run_dir: Path, force: bool) -> bool:
    """Whether ``run_dir`` holds a run; raise unless ``force`` allows overwriting it."""
    holds_run = bool(_contents(run_dir))
    if holds_run and not force:
        raise RunDirectoryExists(
            f"run directory {run_dir} already holds a run{_unfinished(run_dir)}; pass --force "
            "to overwrite it, or choose another with run.dir=PATH"
        )
    return holds_run


def run_summary(run_dir: Path) -> dict:
    """The run's ``summary.json``, or an empty dict where there is none (or none readable)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _unfinished(run_dir: Path) -> str:
    """For a run that stopped before its end with a checkpoint, the way on that keeps its
    steps: the refusal's only advice was --force, which threw them away."""
    from normzoo.checkpoints.rolling import newest_checkpoint

    if run_summary(run_dir).get("status") == "completed":
        return ""
    newest = newest_checkpoint(run_dir / "checkpoints")
    if newest is None:
        return ""
    return (f" that stopped at step {newest.step} with a checkpoint: continue it with "
            "--resume auto (the same command and overrides)")


def prepare_run_dir(run_dir: Path, force: bool) -> Path:
    """``run_dir`` ready for a new run: made, or emptied of an old run (``force``) but for the
    lock, which keeps others out while the run starts."""
    if refuse_existing_run(run_dir, force):
        for path in _contents(run_dir):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def run_directory_override(run_dir: Path, recipe_path: str | Path) -> bool:
    """Whether ``run_dir`` is not the recipe's default (so a resume command must name it)."""
    return Path(run_dir) != Path("runs") / Path(recipe_path).stem


def refuse_missing_run(run_dir: Path, resume: str | None, recipe_path: str | Path) -> None:
    """``--resume auto`` of a run directory that does not exist (a mistyped ``run.dir``, or
    the recipe's default when the run was started with another): say so before anything
    (the run's lock) creates it."""
    if resume != "auto" or run_dir.exists():
        return
    parent = run_dir.parent
    siblings = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    close = difflib.get_close_matches(run_dir.name, siblings, n=3, cutoff=0.6)
    hint = (" (did you mean " + " or ".join(str(parent / name) for name in close) + "?)"
            if close else "")
    default = "" if run_directory_override(run_dir, recipe_path) else (
        f"; it is {Path(recipe_path).name}'s default run directory: a run started with "
        "run.dir=PATH resumes with the same run.dir=PATH")
    raise RunDirectoryExists(f"cannot resume: the run directory {run_dir} does not exist"
                             f"{hint}{default}")


class RunDirectory:
    """One run's folder as ``normzoo train`` uses it: where it is, rank 0's lock on it, the
    refusals that protect a run already in it, clearing it for a new run, the run's files
    written into it, and letting it go."""

    def __init__(self, recipe: Recipe, recipe_path: str | Path, rank: int) -> None:
        self.path = run_directory(recipe, recipe_path)
        self.recipe_path = recipe_path
        self.rank = rank
        self.lock: RunLock | None = None  # rank 0's, from claim() to release()

    def claim(self, resume: str | None) -> None:
        """Rank 0 takes the lock, refusing first a path a file stands in the way of, and
        ``--resume auto`` of a run that does not exist (before the lock creates it)."""
        if self.rank == 0:
            if (why := not_a_folder(self.path)) is not None:
                raise RunDirectoryExists(f"run directory {self.path} {why}; choose another "
                                         "with run.dir=PATH")
            refuse_missing_run(self.path, resume, self.recipe_path)
            self.lock = RunLock(self.path).acquire()

    def refuse_existing(self, force: bool) -> None:
        """A new run (rank 0) in a folder that holds a run: refused unless ``force``."""
        if self.rank == 0:
            refuse_existing_run(self.path, force)

    def start(self, files: dict[str, tuple[str, str]], *, new: bool, force: bool) -> None:
        """The run's ``files`` (name: text and what it is) written into its folder by rank 0,
        each whole or not at all; a ``new`` run's folder first emptied (``force``) of an old
        run but for the lock."""
        if self.rank != 0:
            return
        if new:
            prepare_run_dir(self.path, force)
        for name, (text, what) in files.items():
            atomic_write_text(self.path / name, text, what)

    def write(self, name: str, text: str, what: str) -> None:
        """``name`` in the folder, whole or not at all (rank 0 alone)."""
        if self.rank == 0:
            atomic_write_text(self.path / name, text, what)

    def release(self) -> None:
        """Let go of the lock; a run that failed before it wrote anything leaves no folder."""
        if self.lock is not None:
            self.lock.release(remove_dir_if_empty=True)
