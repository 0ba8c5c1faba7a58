"""The Python API's arguments (``normzoo.load``, :class:`~normzoo.inference.model.Loaded`'s
methods), checked before any work: a bad one is a ``ValueError`` or ``TypeError`` that names the
argument and what it accepts ("beam must be an integer >= 1, got 0").

Unchecked, each failed far from the call and in another library's words: pydantic's
``ValidationError`` about the internal ``EvalConfig``, torch's "probability tensor contains inf,
nan" for ``temperature=nan``, a ``str + int`` TypeError for ``seed="x"``, or no error at all
(``max_new_tokens=-1`` returned empty continuations). Non-finite floats are refused everywhere.

The errors are also :class:`~normzoo.errors.NormzooError`: where a command passes a value on,
the CLI shows the message with exit code 2, never a traceback.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

from normzoo.errors import NormzooError

# What torch.Generator.manual_seed takes.
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1


class ArgumentValueError(NormzooError, ValueError):
    """An argument of the right type with a value the API does not accept."""


class ArgumentTypeError(NormzooError, TypeError):
    """An argument of a type the API does not accept."""


class WrongModelError(NormzooError, ValueError):
    """A method the loaded model's task does not have (``translate`` on a language model,
    ``classify`` on a translation model): the message names the methods it has."""


def _got(value: Any) -> str:
    """The value as the caller wrote it; its type too where that is the mistake."""
    if value is None or isinstance(value, numbers.Number):
        return repr(value)
    return f"{type(value).__name__} {value!r}"


def _bounds(minimum: float | None, maximum: float | None, above: float | None) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None:
        parts.append(f">= {minimum:g}" if isinstance(minimum, float) else f">= {minimum}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}" if isinstance(maximum, float) else f"<= {maximum}")
    return (" " + " and ".join(parts)) if parts else ""


def integer(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
            optional: bool = False) -> int | None:
    """``value`` as an int in ``[minimum, maximum]`` (or None where ``optional``). A bool or a
    float is refused, not rounded: ``beam=2.5`` or ``beam=True`` is a mistake, not a beam."""
    accepted = f"an integer{_bounds(minimum, maximum, None)}" + (" or None" if optional else "")
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name} must be {accepted}, got {_got(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ArgumentValueError(f"{name} must be {accepted}, got {_got(value)}")
    return value


def number(name: str, value: Any, *, minimum: float | None = None,
           maximum: float | None = None, above: float | None = None,
           optional: bool = False) -> float | None:
    """``value`` as a finite float within the bounds (``above``: strictly), or None where
    ``optional``. nan and inf are refused: a bound such as ``>= 0`` lets inf through, which
    then fails in torch's sampling or turns every score into nan."""
    accepted = (f"a finite number{_bounds(minimum, maximum, above)}"
                + (" or None" if optional else ""))
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be {accepted}, got {_got(value)}")
    given, value = value, float(value)
    if (not math.isfinite(value) or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)
            or (above is not None and value <= above)):
        raise ArgumentValueError(f"{name} must be {accepted}, got {_got(given)}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool: ``bf16="no"`` would otherwise be true."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {_got(value)}")
    return value


def seed(name: str, value: Any, count: int = 1, *, optional: bool = True) -> int | None:
    """A seed for ``count`` generators seeded ``value``, ``value + 1``, ...: each within what
    torch's ``manual_seed`` takes."""
    return integer(name, value, minimum=SEED_MIN, maximum=SEED_MAX - max(count - 1, 0),
                   optional=optional)


def path(name: str, value: Any) -> Path:
    """A checkpoint file or export folder's path: a str or an ``os.PathLike``, not empty
    (``Path("")`` is the current folder, which would be read as an export)."""
    if isinstance(value, bytes) or not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(f"{name} must be a str or os.PathLike naming a checkpoint file "
                                f"or an export folder, got {_got(value)}")
    if not os.fspath(value):
        raise ArgumentValueError(f"{name} must name a checkpoint file or an export folder, "
                                 "got ''")
    return Path(value)


def file(name: str, value: Any, *, optional: bool = True) -> Path | None:
    """A file's (or folder's) path: a str or an ``os.PathLike``, not empty; None where
    ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bytes) or not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(f"{name} must be a str or os.PathLike"
                                + (" or None" if optional else "") + f", got {_got(value)}")
    if not os.fspath(value):
        raise ArgumentValueError(f"{name} must name a file, got ''")
    return Path(value)


def text(name: str, value: Any, *, optional: bool = True) -> str | None:
    """A name (a split's): a non-empty str, or None where ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} must be a str" + (" or None" if optional else "")
                                + f", got {_got(value)}")
    if not value.strip():
        raise ArgumentValueError(f"{name} must not be empty, got {value!r}")
    return value
