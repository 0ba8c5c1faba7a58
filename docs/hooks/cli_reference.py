"""MkDocs hook: the command-line reference page, generated from the Typer app at every build.

The text is Typer's own (``typer --app app normzoo.cli utils docs``, the documented way to
write a Typer app's docs): every command, argument and option with its help, as
``normzoo COMMAND --help`` has it. The page is added to the site as ``reference/cli.md``; it
is never written into ``docs/``. A failure stops the build.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

PAGE = "reference/cli.md"
INTRO = """\
# Command-line reference

Generated from the Typer app (`normzoo.cli.app`) when the site is built, so it is what
`normzoo COMMAND --help` prints for this version. The README's "Command line" section shows the
commands at work; recipes and `key=value` overrides are described in the
[recipe schema](api/recipe.md).

"""


def typer_docs(root: Path) -> str:
    """Typer's Markdown for the app, as the checkout in ``root`` has it."""
    command = [sys.executable, "-m", "typer", "--app", "app", "normzoo.cli",
               "utils", "docs", "--name", "normzoo"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0 or "## `normzoo train`" not in done.stdout:
        raise PluginError(f"python {' '.join(command[1:])} failed ({done.returncode}):\n"
                          f"{done.stderr.strip()}")
    return done.stdout


def one_level_down(markdown: str) -> str:
    """Every heading one level deeper (the page has its own title), fenced code untouched."""
    lines, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,5} ", line):
            line = "#" + line
        lines.append(line)
    return "".join(lines)


def on_files(files, config):
    markdown = typer_docs(Path(config.config_file_path).parent)
    files.append(File.generated(config, PAGE, content=INTRO + one_level_down(markdown)))
    return files
