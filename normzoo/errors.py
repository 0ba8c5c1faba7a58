"""Errors a user can cause and fix: the CLI prints them without a traceback.

Anything raised from here is the user's input being wrong (a recipe, a name, an option), never a
bug in normzoo; the CLI maps them to exit code 2. :class:`RuntimeFailure` is the exception: the
input was fine but the machine failed the run (a full disk, memory), exit code 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class NormzooError(Exception):
    """Base of every error caused by user input."""

    exit_code = 2


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration, located by its key path (``model.d_model``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(NormzooError):
    """A configuration has one or more problems; all of them are reported at once."""

    def __init__(self, problems: Iterable[Problem], title: str = "invalid configuration") -> None:
        self.problems = list(problems)
        self.title = title
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title}:\n{lines}")

    def prefixed(self, prefix: str) -> ConfigError:
        """The same problems, located under ``prefix`` (e.g. ``model``)."""
        moved = [Problem(f"{prefix}.{p.path}" if p.path else prefix, p.message) for p in self]
        return ConfigError(moved, self.title)

    def __iter__(self):
        return iter(self.problems)


class RegistryError(NormzooError):
    """A name could not be resolved to a norm or residual scheme."""


class RuntimeFailure(NormzooError):
    """The run failed for a reason outside the input (a full disk, out of memory): exit code 1.

    Still reported as a message without a traceback; nothing half-written is left behind.
    """

    exit_code = 1
