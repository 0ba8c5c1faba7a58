"""How a command ends when a stop signal comes: Ctrl-C (SIGINT) or SIGTERM.

While a command works, Ctrl-C raises KeyboardInterrupt and SIGTERM
:class:`~normzoo.run.preemption.StopSignal`
(:func:`sigterm_raises`), so that ``finally`` blocks clean up on the way out, and the guard in
:mod:`normzoo.cli.common` prints :func:`interrupted`'s line (what was stopped, what it leaves,
what to do next) and exits 128 + the signal (130, 143). Every file normzoo writes is whole or
absent (:mod:`normzoo.io.atomic`), so a stop leaves nothing half-written. A run that is
training has its own stop, at the end of a step with a checkpoint
(:mod:`normzoo.run.preemption`), and a sweep its own (:mod:`normzoo.sweep.local`); each puts
these handlers back when done.

Once the work is done (a run's summary says completed), a signal can stop nothing: from
:func:`work_done` on it is noted, not raised, and answered with one line and the command's own
exit code, not 130 or 143. :class:`Ending`, which :func:`normzoo.cli.main` holds for a process
that is the command's, goes on doing so while Python exits (threads joined, the libraries'
exit hooks, then the modules freed: a second or so after a run), after any command.

Like every module of :mod:`normzoo.cli`, this one imports only typer and the standard library.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

import typer

from normzoo.run.preemption import signals_raise

try:  # recent typer releases carry their own copy of click, with its own context stack
    from typer._click.globals import get_current_context
except ImportError:  # older ones run on click itself
    from click import get_current_context

STOPS = (signal.SIGINT, signal.SIGTERM)


def _main_thread() -> bool:
    """Whether this is the main thread, the only one that may set a signal handler."""
    return threading.current_thread() is threading.main_thread()


def _name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`~normzoo.run.preemption.StopSignal` in this
    process, where it would end it without a word (or a cleanup). Left alone where SIGTERM
    already has a handler or is ignored."""
    with signals_raise((signal.SIGTERM,), only_unhandled=True):
        yield


# What a command stopped by Ctrl-C or SIGTERM was doing, what it leaves, and what to do next.
# A training run gives the exception a note of its own where this is not all (normzoo.run.endings).
AGAIN = ": run the same command again"
INTERRUPTED = {
    "prepare": "while preparing the data; nothing half-built was kept (a tokenizer trained to "
               "its end is cached and used again)" + AGAIN,
    "train": "before training started (reading the data or building the model); no "
             "checkpoint was written" + AGAIN,
    "evaluate": "while evaluating; no hypotheses file was written" + AGAIN,
    "translate": "while translating; the lines printed before it are whole" + AGAIN,
    "generate": "while generating; the lines printed before it are whole" + AGAIN,
    "sweep": "while the sweep ran; the cells that finished are kept, and a stopped cell "
             "resumes from its checkpoint" + AGAIN,
}


def interrupted(command: str, stop: BaseException) -> typer.Exit:
    """Say on standard error what a Ctrl-C or SIGTERM stopped and what to do next (the
    command's :data:`INTERRUPTED` line, or the ``note`` it gave the exception); return the exit
    to raise: 128 + the signal, as a shell reports a program a signal ended."""
    signum = getattr(stop, "signum", signal.SIGINT)
    what = getattr(stop, "note", None) or INTERRUPTED.get(
        command, f"before normzoo {command} finished; nothing half-written was left" + AGAIN)
    typer.secho(f"\ninterrupted by {_name(signum)} {what}", fg=typer.colors.YELLOW, err=True)
    return typer.Exit(128 + signum)


class Ending:
    """The end of a ``normzoo`` process: the stop signals noted rather than acted on once the
    command's work is done (:meth:`hold_signals`), and answered when the command has returned
    (:meth:`exiting`): with its exit code, and a line saying that the work was done.

    ``owned``: the process is the command's (:func:`normzoo.cli.main` called by a program's
    top level), so that the handlers may stay until it is gone; else they are put back."""

    def __init__(self, owned: bool = False) -> None:
        self.owned = owned
        self.done = ""  # what the command had done when it said so (work_done)
        self.signum = 0  # a stop signal that came since
        self.code: int | None = None  # the command's exit code, once it has returned

    def hold_signals(self) -> None:
        """Note the stop signals from now on (an ignored SIGINT stays ignored: a shell's
        background job)."""
        if _main_thread():
            for signum in STOPS:
                if signal.getsignal(signum) not in (signal.SIG_IGN, self._note):
                    signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum
        if self.code is not None:
            self._leave()

    def late(self) -> str:
        """The line that answers a signal that came once the work was done."""
        done = self.done or "normzoo's work was done"
        return f"{_name(self.signum)} came after {done}: nothing is lost"

    def exiting(self, code: int) -> None:
        """The command has returned ``code``: a signal noted since its work was done ends the
        process now, and one while Python exits ends it at once, with that code."""
        self.code = code
        self.hold_signals()
        if self.signum:
            self._leave()

    def _leave(self) -> NoReturn:
        if self.code == 0:
            os.write(2, f"\n{self.late()}\n".encode())
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a write it interrupted, or a closed stream
                stream.flush()
        os._exit(self.code or 0)  # from a handler: an exception would print a traceback

    def ignore_signals(self) -> None:
        """The last exit hook: after it Python runs no handler (it puts back the system's
        default, which would end the process by the signal) while it frees the modules, torch's
        the longest; the stop signals are ignored then.

        A signal that came just before (its C handler had run, the Python one not yet) finds
        the handler ignored, and Python reports it as an unraisable "OSError: Signal 2 ignored
        due to race condition" with a traceback; that report is dropped, as the signal is."""
        if _main_thread():
            sys.unraisablehook = _drop_ignored_stops(sys.unraisablehook)
            for signum in STOPS:
                signal.signal(signum, signal.SIG_IGN)


def _drop_ignored_stops(previous: Any) -> Any:
    """``sys.unraisablehook`` that drops Python's report of a stop signal it found ignored,
    and passes everything else to ``previous``."""
    ignored = {f"Signal {int(signum)} ignored due to race condition" for signum in STOPS}

    def hook(unraisable: Any) -> None:
        value = unraisable.exc_value
        if isinstance(value, OSError) and str(value) in ignored:
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def work_done(what: str, signum: int = 0) -> Iterator[None]:
    """From here to the end of the command, its work is done (``what``, e.g. "the run had
    completed (RUN/summary.json)"): a stop signal is noted, not raised (``signum``: one that
    came already), and answered with one line, the exit code unchanged. In a process that is
    the command's, its :class:`Ending` goes on so until the process is gone; elsewhere (a
    test calling the CLI) the handlers are put back when the command ends."""
    context = get_current_context(silent=True)
    held = context.find_root().obj if context is not None else None
    ending = held if isinstance(held, Ending) and held.owned else Ending()
    ending.done, ending.signum = what, ending.signum or signum
    before: dict[int, Any] = {s: signal.getsignal(s) for s in STOPS} if _main_thread() else {}
    ending.hold_signals()
    try:
        yield
    finally:
        if not ending.owned:
            for stop, handler in before.items():
                signal.signal(stop, signal.SIG_DFL if handler is None else handler)
            if ending.signum:
                typer.echo(ending.late(), err=True)
