"""Every ``normzoo ...`` line in a shell block of the README and the docs parses against the
command line as it is now: a renamed command or option, or a value of the wrong type, fails
here rather than in a reader's terminal. Parsing only: nothing is run, no file is read."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from normzoo.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", ROOT / "studies" / "README.md",
         *sorted((ROOT / "docs").glob("**/*.md"))]


def documented_commands() -> list[tuple[str, str]]:
    """``(page, command line)`` for each ``normzoo`` line in a fenced block (continuation
    lines joined; a trailing comment, pipe, redirection or ``&&`` cut off)."""
    found = []
    for page in PAGES:
        lines, fenced, i = page.read_text(encoding="utf-8").splitlines(), False, 0
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith("```"):
                fenced = not fenced
            elif fenced and re.match(r"(\$ )?normzoo ", line):
                text = line.removeprefix("$ ")
                while text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text[:-1] + " " + lines[i].strip()
                text = re.split(r" #| \| | > | && ", text)[0]
                found.append((str(page.relative_to(ROOT)), text))
            i += 1
    return found


def parse(line: str) -> str | None:
    """Parse ``line`` as the CLI would, down to its subcommand, without running anything: None
    if it parses, else the CLI's own message. (Recent typer releases carry their own copy of
    click, so its classes are recognised by what they do, not imported.)"""
    args = shlex.split(line)[1:]
    command = typer.main.get_command(app)
    try:
        context = command.make_context("normzoo", args)
        while hasattr(command, "resolve_command"):  # a group: on to its subcommand
            rest = [*getattr(context, "_protected_args", getattr(context, "protected_args", [])),
                    *context.args]
            if not rest:
                return None
            name, command, rest = command.resolve_command(context, rest)
            context = command.make_context(name, rest, parent=context)
    except Exception as error:
        if type(error).__name__ == "Exit":  # --help, --version
            return None
        if hasattr(error, "format_message"):
            return error.format_message()
        raise
    return None


COMMANDS = documented_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20, COMMANDS  # the scan found the blocks


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_a_documented_command_line_parses(page: str, line: str):
    assert parse(line) is None, f"{page}: `{line}` does not parse: {parse(line)}"


@pytest.mark.parametrize(("line", "says"), [
    ("normzoo train recipes/quickstart.yaml --resum auto", "No such option: --resum"),
    ("normzoo evaluate ckpt --beam five", "Invalid value for '--beam'"),
    ("normzoo recipe shwo recipes/quickstart.yaml", "No such command 'shwo'"),
    ("normzoo sweep recipes/quickstart.yaml", "Missing option '--set'"),
])
def test_a_stale_command_line_is_caught(line: str, says: str):
    assert says in (parse(line) or "")
