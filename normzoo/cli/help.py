"""How ``normzoo COMMAND --help`` reads: as ``git`` and ``pip`` help does.

Typer writes each option's Python type where a value's name belongs (``--hyps <path>``,
``--force <bool>``, ``OVERRIDES <list[str]>``), range conditions in maths (``[x>=1]``), and
keeps a docstring's line breaks where the list of commands shows it, so sentences break in the
middle. Here, for every command the CLI wires (:mod:`normzoo.cli`):

- a flag has no value name (``--force``), and an option's value is named by its ``metavar``
  (``--hyps FILE``), else by its choices (``--format [normzoo|hf]``), else by its own name in
  capitals (``--resume RESUME``);
- an argument is named in capitals or by its ``metavar`` (``CHECKPOINT``, ``[KEY=VALUE]...``),
  with no type beside it, and an optional one is bracketed in the usage line as click does;
- docstring paragraphs are joined into one line each, for the terminal to wrap;
- defaults are shown as Typer shows them (``[default: 4096]``); ranges are left to the help
  text and to the error a value out of range gets.

Only typer is imported: ``normzoo --help`` stays quick.
"""

from __future__ import annotations

import inspect
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


def reflow(text: str | None) -> str | None:
    """Each paragraph of ``text`` on one line (a paragraph starting with ``\\b`` is kept as
    written, as click keeps it)."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        paragraph if paragraph.startswith("\b")
        else " ".join(line.strip() for line in paragraph.splitlines())
        for paragraph in paragraphs)


class ReadableOption(TyperOption):
    """An option whose value is named by its metavar, its choices or its name; none for a flag."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return ""
        if self.metavar is not None:
            return self.metavar
        if self.type_descriptor.is_choice:  # Typer writes <a|b>; click's convention is [a|b]
            return "[" + self.display_type(ctx).strip("<>") + "]"
        return (self.name or "value").upper()

    def _get_number_range_help_str(self) -> str | None:
        return None


class ReadableArgument(TyperArgument):
    """An argument named in capitals (or by its metavar), without its Python type beside it."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "arg").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        if self.metavar is None and self.nargs != 1:
            name += "..."
        if self.required or name.startswith("["):  # a metavar may bracket itself
            return name
        return f"[{name}]"

    def _get_number_range_help_str(self) -> str | None:
        return None


_READABLE: dict[type, type] = {TyperOption: ReadableOption, TyperArgument: ReadableArgument}


def _readable(params: list[Any]) -> list[Any]:
    """``params`` shown as the module docstring says: the same objects, their class swapped
    for the subclass that only changes how they are shown."""
    for param in params:
        readable = _READABLE.get(type(param))
        if readable is not None:
            param.__class__ = readable
    return params


class ReadableCommand(TyperCommand):
    """A Typer command whose help reads as the module docstring says."""

    def __init__(self, name: str | None, *, help: str | None = None,
                 short_help: str | None = None, **kwargs: Any) -> None:
        super().__init__(name, help=reflow(help), short_help=reflow(short_help), **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:  # --help included, made when first asked for
        return _readable(super().get_params(ctx))


class ReadableGroup(TyperGroup):
    """A Typer group (``normzoo``, ``normzoo recipe``) whose own options read the same way."""

    def __init__(self, *args: Any, help: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, help=reflow(help), **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        return _readable(super().get_params(ctx))
