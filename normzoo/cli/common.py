"""What every command shares: the guard that turns a user's mistake (or a Ctrl-C) into a one-line
message, and the small checks several commands make on their inputs and outputs.

Kept apart from the command modules so that each of those holds one command and nothing else;
like them, it imports only typer and the standard library at module level (plus the light
:mod:`normzoo.errors`), so ``normzoo --help`` stays quick.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

from normzoo.cli.ending import get_current_context, interrupted, sigterm_raises
from normzoo.errors import NormzooError
from normzoo.run.preemption import StopSignal

OVERRIDES_HELP = "key=value settings applied on top of the recipe, e.g. optim.lr=3e-4"


def fail(error: NormzooError) -> typer.Exit:
    """Print a user error without a traceback and return the exit to raise."""
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    return typer.Exit(error.exit_code)


def debug_requested() -> bool:
    """Whether ``normzoo --debug`` was given: read from the root command's parsed options, so
    no module-level state carries it from the root callback to the commands."""
    context = get_current_context(silent=True)
    return context is not None and bool(context.find_root().params.get("debug"))


def user_errors(command: Callable[..., None]) -> Callable[..., None]:
    """Run ``command``, turning a user mistake into a message and exit code 2, no traceback;
    and a Ctrl-C or SIGTERM into one line saying what was stopped (:func:`interrupted`)."""

    @functools.wraps(command)
    def guarded(*args, **kwargs) -> None:
        try:
            with sigterm_raises():
                command(*args, **kwargs)
        except NormzooError as error:
            if debug_requested():
                raise
            raise fail(error) from None
        except (KeyboardInterrupt, StopSignal) as stop:
            raise interrupted(command.__name__, stop) from None

    return guarded


@contextlib.contextmanager
def file_system_failures() -> Iterator[None]:
    """An OS error from the file system (a read-only folder, a full disk, a path through a
    file) as :class:`~normzoo.errors.RuntimeFailure`: exit 1 and the path, not a traceback."""
    try:
        yield
    except NormzooError:  # a user error that is also an OSError (a checkpoint not found)
        raise
    except OSError as error:
        from normzoo.errors import RuntimeFailure
        from normzoo.io.atomic import os_reason

        where = f" {error.filename}" if error.filename else ""
        raise RuntimeFailure(f"could not write{where}: {os_reason(error)}") from None


DEVICE_HELP = "Where the model runs: cpu, cuda, cuda:N (the Nth GPU), mps or auto (a GPU if any)."


def finite(value: float | None) -> float | None:
    """A float option's value, refused (exit 2) unless finite: a bound such as ``min=0`` lets
    ``inf`` through, which then failed deep in a config or in torch with a traceback."""
    import math

    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


class Launcher(str, enum.Enum):
    """Where a sweep's or a study's cells run."""

    local = "local"
    slurm = "slurm"


def jobs_option() -> typer.models.OptionInfo:
    return typer.Option(1, "--jobs", "-j", min=1, metavar="N", help="Cells running at once "
                        "(local: the CPU cores shared among them, and one GPU each where there "
                        "are GPUs; slurm: the array's parallelism).")


def launcher_option() -> typer.models.OptionInfo:
    return typer.Option(Launcher.local, help="Where cells run: this machine, or SLURM jobs "
                        "(through submitit).")


def slurm_partition_option() -> typer.models.OptionInfo:
    return typer.Option(None, metavar="NAME", help="SLURM partition of each cell's job.")


def slurm_time_option() -> typer.models.OptionInfo:
    return typer.Option(24 * 60, min=1, metavar="MINUTES", help="SLURM time limit per cell.")


def slurm_gpus_option() -> typer.models.OptionInfo:
    return typer.Option(0, min=0, metavar="N", help="GPUs per cell's SLURM job.")


def slurm_cpus_option() -> typer.models.OptionInfo:
    return typer.Option(4, min=1, metavar="N", help="CPUs per cell's SLURM job.")


def beam_option() -> typer.models.OptionInfo:
    return typer.Option(None, min=1, metavar="K",
                        help="Beam size (default: the recipe's eval.beam).")


def lenpen_option() -> typer.models.OptionInfo:
    return typer.Option(None, min=0.0, metavar="A", callback=finite,
                        help="Length penalty exponent (default: the recipe's eval.lenpen).")


def batch_tokens_option() -> typer.models.OptionInfo:
    return typer.Option(4096, min=1, metavar="N", help="Source tokens per decoding batch.")


def device_option() -> typer.models.OptionInfo:
    """``--device``, as ``evaluate``, ``translate`` and ``generate`` take it."""
    return typer.Option("cpu", "--device", metavar="DEVICE", help=DEVICE_HELP)


def read_inputs(path: Path | None) -> list[str]:
    """Input lines from ``path``, or from standard input when it is None. Every line counts,
    empty ones too (each gets an empty output line); no line at all (no bytes) is an error."""
    import sys

    from normzoo.data.sources import DataError, decode_lines

    if path is not None:  # a pipe counts: --input <(cmd) hands over /dev/fd/N, no file
        if path.is_dir() or not path.exists():
            state = "is a directory" if path.is_dir() else "not found"
            raise DataError(f"input file {path} {state}")
        lines = decode_lines(path.read_bytes(), str(path))
    else:  # bytes, checked as a file's are: the text layer would pass on undecodable ones
        stdin = getattr(sys.stdin, "buffer", None)
        lines = (decode_lines(stdin.read(), "standard input") if stdin is not None
                 else sys.stdin.read().splitlines())
    if not lines:
        raise DataError(f"no input lines ({path or 'standard input'} is empty)")
    return lines


def interactive(path: Path | None) -> bool:
    """Whether the lines come from a person at a terminal (no file given, standard input a
    terminal): then each is answered as soon as it is typed, not after the end of input."""
    import sys

    try:
        return path is None and sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # a replaced stream without isatty, or a closed one
        return False


def typed_lines() -> Iterator[tuple[int, str]]:
    """Lines typed at the terminal, numbered from 1, each after a ``> `` prompt on standard
    error (standard output holds only the answers), until end of input (Ctrl-D)."""
    import sys

    typer.echo("one line at a time; end with Ctrl-D", err=True)
    stdin = getattr(sys.stdin, "buffer", None)
    number = 0
    while True:
        typer.echo("> ", nl=False, err=True)
        # Bytes, decoded leniently: a mistyped byte must not end the session.
        line = (stdin.readline().decode("utf-8", "replace") if stdin is not None
                else sys.stdin.readline())
        if not line:  # end of input
            typer.echo("", err=True)
            return
        number += 1
        yield number, line.rstrip("\n").rstrip("\r")


@contextlib.contextmanager
def input_warnings() -> Iterator[None]:
    """An input line cut to fit the model (:class:`normzoo.inference.translate.InputCut`) as a
    ``warning: line N: ...`` line on standard error, when it happens (every one, not once)."""
    import warnings

    from normzoo.inference.translate import InputCut

    with warnings.catch_warnings():
        warnings.simplefilter("always", InputCut)
        shown = warnings.showwarning

        def show(message, category, *args, **kwargs) -> None:
            if issubclass(category, InputCut):
                typer.secho(f"warning: {message}", fg=typer.colors.YELLOW, err=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show  # put back by catch_warnings
        yield


def check_output_folder(path: Path, option: str) -> None:
    """Refuse, before any work, an output folder that is a file or lies under one (making it
    would fail with only "File exists" or "Not a directory", after the work)."""
    from normzoo.errors import NormzooError
    from normzoo.io.atomic import not_a_folder

    if (why := not_a_folder(path)) is not None:
        raise NormzooError(f"{option} {path} {why}")
