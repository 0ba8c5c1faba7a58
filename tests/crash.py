"""Run the ``normzoo`` CLI and make it fail at a chosen point, as a real machine would.

    python tests/crash.py step N   normzoo-args...  # SIGKILL as training step N is about to run
    python tests/crash.py write N  normzoo-args...  # SIGKILL half-way through the N-th checkpoint
    python tests/crash.py link N   normzoo-args...  # SIGKILL before last.ckpt's N-th link to step-
    python tests/crash.py enospc N normzoo-args...  # the disk is full at the N-th step-*.ckpt write
    python tests/crash.py full RE  normzoo-args...  # no byte fits in a file whose path matches RE
    python tests/crash.py pause N  normzoo-args...  # at step N write ./paused, wait for ./go
    python tests/crash.py TERM N   normzoo-args...  # SIGTERM (or USR1, ...) as step N starts
    python tests/crash.py test INT normzoo-args...  # SIGINT (or TERM, ...) in the final test

SIGKILL gives the process no chance to clean up: whatever is on disk at that moment is what a
resume has to cope with. Used by tests/test_resume.py.
"""

from __future__ import annotations

import errno
import io
import os
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace


def kill_now() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def at_step(step: int, act) -> None:
    """Call ``act()`` once, as training step ``step`` is about to run."""
    from lightning.pytorch.callbacks import Callback

    from normzoo.run import training as train

    class AtStep(Callback):
        done = False

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step == step and not self.done:
                self.done = True  # once: a signal that only asks to stop lets the step finish
                act()

    build = train.build_trainer

    def build_and_arm(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.callbacks.append(AtStep())
        return trainer

    train.build_trainer = build_and_arm


def kill_before_step(step: int, signum: int = signal.SIGKILL) -> None:
    at_step(step, lambda: os.kill(os.getpid(), signum))


def kill_inside_checkpoint_write(nth: int) -> None:
    from normzoo.io import atomic

    write = atomic.atomic_write
    seen = {"checkpoints": 0}

    def half_write_then_die(path, writer, what="file"):
        if what == "checkpoint":
            seen["checkpoints"] += 1
            if seen["checkpoints"] == nth:
                buffer = io.BytesIO()
                writer(buffer)
                data = buffer.getvalue()
                with open(atomic.temporary_path(Path(path)), "wb") as f:
                    f.write(data[: len(data) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                kill_now()
        return write(path, writer, what)

    atomic.atomic_write = half_write_then_die


def kill_before_linking_last(nth: int) -> None:
    """SIGKILL as the ``nth`` ``step-`` checkpoint is complete and ``last.ckpt`` is about to be
    renamed to it (its hard link made under a temporary name)."""
    from normzoo.checkpoints import rolling

    replace, seen = os.replace, {"links": 0}

    def replace_or_die(source, target, *args, **kwargs):
        if Path(target).name == "last.ckpt":
            seen["links"] += 1
            if seen["links"] == nth:
                kill_now()
        return replace(source, target, *args, **kwargs)

    rolling.os = SimpleNamespace(**{**vars(os), "replace": replace_or_die})


def pause_at_step(step: int) -> None:
    """Stand still at ``step`` (a live run, holding its directory) until ./go appears."""
    import time

    def pause() -> None:
        Path("paused").write_text(str(os.getpid()))
        while not Path("go").exists():
            time.sleep(0.05)

    at_step(step, pause)


def disk_full_at_step_checkpoint(nth: int) -> None:
    from normzoo.io import atomic

    fsync, writes = os.fsync, {"step": 0}

    def fsync_or_full(fd: int) -> None:  # where the kernel reports ENOSPC for buffered writes
        if re.search(r"/\.step-\d+\.ckpt\.tmp-", os.readlink(f"/proc/self/fd/{fd}")):
            writes["step"] += 1
            if writes["step"] == nth:
                raise OSError(errno.ENOSPC, "No space left on device")
        fsync(fd)

    atomic.os = SimpleNamespace(**{**vars(os), "fsync": fsync_or_full})


def disk_full_for(pattern: str) -> None:
    """Every file whose path matches ``pattern`` (``/logs/``: the run's loggers) opened for
    writing takes no byte, as on a full disk: its writes fill the buffer, then its flush or
    close fails with ENOSPC and no file name, as the kernel reports a buffered write."""
    import builtins

    real_open = builtins.open

    class Full(io.FileIO):
        def write(self, data) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    def open_on_a_full_disk(file, mode="r", buffering=-1, encoding=None, errors=None,
                            newline=None, closefd=True, opener=None):
        if not (isinstance(file, str | os.PathLike) and set(mode) & set("wax+")
                and re.search(pattern, str(Path(file).absolute()))):
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        raw = Full(file, next(c for c in mode if c in "rwax") + ("+" if "+" in mode else ""))
        buffered = io.BufferedRandom(raw) if "+" in mode else io.BufferedWriter(raw)
        if "b" in mode:
            return buffered
        return io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors,
                                newline=newline)

    builtins.open = open_on_a_full_disk


def signal_in_final_test(signum: int) -> None:
    """Send ``signum`` to this process in the final test (after fit): as translation's decodes
    the test split, or as ``trainer.test`` starts for a task scored in Lightning's loops
    (after the final ``trainer.validate`` has logged its rows). SIGINT is the default Ctrl-C
    handler's, as in a terminal's foreground program (a test runner in the background has it
    ignored, which this process would inherit)."""
    from lightning.pytorch.callbacks import Callback

    from normzoo.run import training as train
    from normzoo.tasks.translation import final_test

    if signum == signal.SIGINT:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    score = final_test._score_test

    def signal_then_score(*args, **kwargs):
        os.kill(os.getpid(), signum)
        return score(*args, **kwargs)

    final_test._score_test = signal_then_score

    class InTest(Callback):
        def on_test_start(self, trainer, pl_module) -> None:
            os.kill(os.getpid(), signum)

    build = train.build_trainer

    def build_and_arm(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.callbacks.append(InTest())
        return trainer

    train.build_trainer = build_and_arm


if __name__ == "__main__":
    mode, at, *args = sys.argv[1:]
    modes = {"step": kill_before_step, "write": kill_inside_checkpoint_write,
             "enospc": disk_full_at_step_checkpoint, "pause": pause_at_step,
             "link": kill_before_linking_last}
    if mode == "test":
        signal_in_final_test(signal.Signals[f"SIG{at}"])
    elif mode == "full":
        disk_full_for(at)
    elif mode in modes:
        modes[mode](int(at))
    else:
        kill_before_step(int(at), signal.Signals[f"SIG{mode}"])
    from normzoo.cli import main

    sys.argv = ["normzoo", *args]
    main()
