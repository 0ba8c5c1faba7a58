"""MkDocs hook: links from a page to a file of the repository outside ``docs/``.

On GitHub, ``[text](../recipes/gpt_llama.yaml)`` in a page opens the recipe; the site has no
such page, so MkDocs would report the link as broken. Each link that leaves ``docs/`` is checked
against the repository instead: a file that is not there is a warning (``mkdocs build
--strict`` fails on it, as on any broken link), and one that is there is shown as its
repository path in code (no repository URL is configured to link it to). Links inside
``docs/`` are left to MkDocs' own checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from mkdocs.plugins import get_plugin_logger

log = get_plugin_logger(__name__)

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def outside_link(match: re.Match[str], page_dir: Path, docs: Path, root: Path,
                 page: str) -> str:
    """The link as it stays, or as the repository path it names (a warning if it names none)."""
    target = match["target"]
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return match[0]  # a URL, an anchor or a site-absolute path
    resolved = (page_dir / unquote(target.partition("#")[0])).resolve()
    if resolved.is_relative_to(docs):
        return match[0]
    if not resolved.is_relative_to(root) or not resolved.exists():
        log.warning("Doc file '%s' links to '%s', which is not a file of the repository",
                    page, target)
        return match[0]
    path = resolved.relative_to(root).as_posix()
    text = match["text"]
    return f"`{path}`" if text.strip("`") == path else f"{text} (`{path}`)"


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs = Path(config.docs_dir).resolve()
    root = Path(config.config_file_path).parent.resolve()
    page_dir = (docs / page.file.src_path).parent
    lines, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            line = LINK.sub(lambda m: outside_link(m, page_dir, docs, root, page.file.src_path),
                            line)
        lines.append(line)
    return "".join(lines)
