"""What ``gpu_train.py --count-syncs`` counts: the host's waits for the GPU in each training step
of ``normzoo train``.

The same command, ``normzoo train`` run in a process of ``gpu_train.py``'s (``--syncs-child``:
normzoo's command line as ``python -m normzoo`` runs it, with two callbacks added to its
Trainer, :func:`syncs_child`) under torch's CUDA sync detector,
``torch.cuda.set_sync_debug_mode("warn")``, from each training batch's start (the first
callback's hook) to its end (the task's own ``on_train_batch_end``, which Lightning calls after
every callback's), the first batch left out (its FLOPs count and the scheme's data init may
wait); validation, which follows a batch's end, and the next batch's loading and copy to the
device fall outside, as in ``tests/test_host_syncs.py``'s gpu-marked test, which raises where
this counts. Each warning torch emits ("called a synchronizing CUDA operation") is one
synchronisation: their number over the batches watched is ``syncs_per_step``, and
``syncs_where`` the Python lines that made them (the innermost frames, most frequent first). On a
machine without a GPU the run trains and nothing is counted: ``syncs_per_step`` is null,
``syncs_note`` says why. Counting costs a step nothing while it finds none (the detector is a
flag torch checks).
"""

from __future__ import annotations

import json
import sys
import threading
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from common import REPO

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's, in sync debug mode "warn"
FRAMES = 4  # the innermost Python frames kept of where each synchronisation was made
# The counting's own frames (the child's wrappers), left out of where a synchronisation was made.
OWN_FILES = ("warnings.py", "gpu_syncs.py", "gpu_train.py")


def _short(filename: str) -> str:
    """A source file as a report names it: from its package (site-packages) or the repo."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    try:
        return str(Path(filename).resolve().relative_to(REPO))
    except ValueError:
        return Path(filename).name


class SyncLog:
    """torch's synchronisation warnings, each counted with where it was made, between
    :meth:`install` and :meth:`uninstall`: every such warning shown (a filter ``always`` for it
    alone: Python would show one a line), and none printed; other warnings pass as before."""

    def __init__(self) -> None:
        self.syncs = 0
        self.steps = 0  # training batches watched
        self.step: int | None = None  # the global step being watched, None between
        self.where: Counter[tuple[str, ...]] = Counter()
        self.first_step: dict[tuple[str, ...], int | None] = {}
        self._context: Any = None
        self._show: Any = None

    def install(self) -> None:
        self._context = warnings.catch_warnings()
        self._context.__enter__()  # restores the filters and showwarning at uninstall
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        self._show = warnings.showwarning
        warnings.showwarning = self._seen

    def uninstall(self) -> None:
        if self._context is not None:
            self._context.__exit__(None, None, None)
            self._context = None

    def _seen(self, message: Any, category: Any, filename: str, lineno: int, file: Any = None,
              line: Any = None) -> None:
        if SYNC_WARNING not in str(message):
            self._show(message, category, filename, lineno, file, line)
            return
        frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.endswith(OWN_FILES)]
        where = tuple(f"{_short(f.filename)}:{f.lineno} {f.name}"
                      for f in reversed(frames[-FRAMES:]))
        if threading.current_thread() is not threading.main_thread():
            where += (f"thread {threading.current_thread().name}",)
        self.syncs += 1
        self.where[where] += 1
        self.first_step.setdefault(where, self.step)

    def report(self) -> dict[str, Any]:
        return {"syncs": self.syncs, "syncs_steps_counted": self.steps,
                "syncs_per_step": self.syncs / self.steps if self.steps else None,
                "syncs_where": [{"count": n, "first_step": self.first_step[where],
                                 "frames": list(where)}
                                for where, n in self.where.most_common(10)]}


def sync_callbacks(out: Path) -> tuple[Any, Any]:
    """Two Lightning callbacks around each training batch: the first (put first in the
    Trainer's list) turns torch's sync detector to ``warn`` at a batch's start, and back to
    ``default`` after the LightningModule's ``on_train_batch_end`` (which it wraps at the start
    of training), so every callback's hooks, the step, the optimizer and the task's own hooks
    fall inside; the first batch is left out. The second (put last) writes the counts to
    ``out`` at the end of training (or of a failed one). Nothing is counted where the run
    trains on no GPU."""
    import lightning as L
    import torch

    log = SyncLog()
    state: dict[str, Any] = {"cuda": False, "written": False}

    def write(note: str | None = None) -> None:
        if state["written"]:
            return
        state["written"] = True
        report = log.report() if state["cuda"] else {
            "syncs": None, "syncs_steps_counted": 0, "syncs_per_step": None,
            "syncs_where": [], "syncs_note": "no GPU: the run trained on the CPU, no "
            "synchronisation counted"}
        if note:
            report["syncs_note"] = note
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    def stop() -> None:
        if log.step is not None:
            torch.cuda.set_sync_debug_mode("default")
            log.step = None

    class Opens(L.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            state["cuda"] = trainer.strategy.root_device.type == "cuda"
            if not state["cuda"]:
                return
            log.install()
            hook = pl_module.on_train_batch_end  # Lightning calls it after the callbacks'

            def ended(*args: Any, **kwargs: Any) -> Any:
                try:
                    return hook(*args, **kwargs)
                finally:
                    stop()

            pl_module.on_train_batch_end = ended

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                                 batch_idx: int) -> None:
            if state["cuda"] and trainer.global_step > 0:
                log.step, log.steps = trainer.global_step, log.steps + 1
                torch.cuda.set_sync_debug_mode("warn")

    class Closes(L.Callback):
        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            stop()
            log.uninstall()
            write()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            stop()
            log.uninstall()
            write(f"the run failed: {type(exception).__name__}: {exception}")

    return Opens(), Closes()


def syncs_child(out: Path, command: list[str]) -> None:
    """``normzoo COMMAND...`` in this process, as ``python -m normzoo`` runs it, with
    :func:`sync_callbacks` added to its Trainer; ends the process as the command does."""
    import runpy

    import normzoo.run.training as training

    original = training.build_trainer
    opens, closes = sync_callbacks(out)

    def counting(*args: Any, **kwargs: Any) -> Any:
        trainer = original(*args, **kwargs)
        trainer.callbacks.insert(0, opens)
        trainer.callbacks.append(closes)
        return trainer

    training.build_trainer = counting
    sys.argv = ["normzoo", *command]
    runpy.run_module("normzoo", run_name="__main__", alter_sys=True)


def syncs_path(out: Path) -> Path:
    """Where the child writes its counts: beside ``--out``."""
    return out.with_name(f"{out.stem}-syncs.json")


def child_can_count(out: Path) -> bool:
    """The dry run's check: that normzoo has the Trainer factory :func:`syncs_child` adds its
    callbacks to, said with where the counts will go (``out``: ``--out``); False, and why on
    stderr, where it has none."""
    import normzoo.run.training as training

    if not callable(getattr(training, "build_trainer", None)):
        print("--count-syncs: normzoo.run.training has no build_trainer to add its "
              "callbacks to", file=sys.stderr)
        return False
    print("host syncs counted: the same command line run by gpu_train.py "
          "--syncs-child, its callbacks added to normzoo.run.training.build_trainer's "
          f"Trainer -> {syncs_path(out)}")
    return True


def read_syncs(path: Path) -> dict[str, Any]:
    """The child's counts, or nulls that say why there are none."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"syncs": None, "syncs_steps_counted": 0, "syncs_per_step": None,
                "syncs_where": [], "syncs_note": f"no counts written ({path.name})"}
