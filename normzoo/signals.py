"""Stop signals raised as exceptions, for the stretches of work that have no step to finish.

A training step ends with a checkpoint before it stops (:mod:`normzoo.run.preemption`); the rest
of a command (preparing data, decoding, the final test) can stop at once, as long as ``finally``
blocks clean up and the caller can say what was stopped and how to go on. Ctrl-C already raises
KeyboardInterrupt; inside :func:`signals_raise` the signals given raise :class:`StopSignal`.

Standard library only: :mod:`normzoo.cli` uses it, and ``normzoo --help`` must stay quick.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable, Iterator


class StopSignal(BaseException):
    """A stop signal raised where it came. A BaseException, as KeyboardInterrupt is, so that no
    ``except Exception`` on the way swallows it; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise(signums: Iterable[int], *, only_unhandled: bool = False) -> Iterator[None]:
    """While inside, each of ``signums`` raises :class:`StopSignal` in this process (not in the
    data-loader workers it forks with these handlers). An ignored SIGINT stays ignored (a
    shell's background job); with ``only_unhandled``, so does every signal that has a handler
    of its own already (a run's or a sweep's stop). The handlers before are put back. Only the
    main thread may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid = os.getpid()

    def stop(signum: int, _frame: object) -> None:
        if os.getpid() == pid:
            raise StopSignal(signum)

    before = {signum: signal.getsignal(signum) for signum in signums}
    unhandled = (signal.SIG_DFL, signal.default_int_handler)
    taken = [signum for signum, handler in before.items()
             if not (handler is signal.SIG_IGN and signum == signal.SIGINT)
             and not (only_unhandled and handler not in unhandled)]
    for signum in taken:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum in taken:
            handler = before[signum]
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
