"""``normzoo list``: what norms, residual schemes and tasks are installed, and which plugins
are broken.

Not wrapped in the user-error guard: it reports its one user error (an unknown kind) itself.
Third-party plugins are imported (whether they import is part of the answer); normzoo's own
entries are described from their source without importing torch, so the listing is quick.
"""

from __future__ import annotations

import typer

from normzoo.cli.common import fail
from normzoo.errors import NormzooError


def list_plugins(
    kind: str = typer.Argument("all", metavar="[all|norms|residuals|tasks]",
                               help="What to list (norm, residual and task work too)."),
    check: bool = typer.Option(
        False, "--check",
        help="Exit 1 if any entry is BROKEN or CONFLICT (for a plugin's CI, like pip check)."),
) -> None:
    """List every registered norm, residual scheme and task, with its distribution and version.

    Plugins that fail to import (BROKEN), and names that two distributions claim or that a plugin
    takes from a built-in (CONFLICT), are flagged; with --check they make the exit code 1.
    """
    from normzoo import registry
    from normzoo.registry import first_doc_line
    from normzoo.registry.entry import builtin_doc_line, is_builtin
    from normzoo.registry.options import close_match

    groups = {"norms": [registry.norms], "residuals": [registry.residuals],
              "tasks": [registry.tasks]}
    groups["all"] = groups["norms"] + groups["residuals"] + groups["tasks"]
    aliases = {"norm": "norms", "residual": "residuals", "task": "tasks"}
    kind = aliases.get(kind, kind)
    if kind not in groups:
        hint = close_match(kind, list(groups))
        raise fail(NormzooError(f"unknown kind '{kind}'{hint}; use all, norms, residuals or tasks"))
    broken = 0
    for reg in groups[kind]:
        # A refused entry (a plugin taking a built-in's name) is listed below the built-in.
        described = {e.info.name: builtin_doc_line(e.target) for e in reg.entries(load=False)
                     if is_builtin(e.info) and not e.loaded}
        for entry in reg.entries(load=False):
            if described.get(entry.info.name) is None:
                reg.load(entry)
        entries = sorted([*reg.entries(load=False), *reg.refused()],
                         key=lambda e: (e.info.name, e.reserved is not None))
        typer.secho(f"{reg.kind}s ({reg.group})", bold=True)
        width = max((len(e.info.name) for e in entries), default=4)
        sources = [f"{e.info.distribution} {e.info.version}" for e in entries]
        source_width = max((len(source) for source in sources), default=4)
        for e, source in zip(entries, sources, strict=True):
            if e.conflict is not None:
                broken += 1
                status = typer.style(f"CONFLICT: {e.conflict}", fg="red")
            elif e.error is not None:
                broken += 1
                status = typer.style(f"BROKEN: {e.error}", fg="red")
            elif e.loaded:
                status = first_doc_line(e.obj)
            else:
                status = described.get(e.info.name) or ""
            typer.echo(f"  {e.info.name:<{width}}  {source:<{source_width}}  {status}")
        typer.echo("")
    if broken:
        typer.echo(f"{broken} plugin(s) cannot be used until fixed; the others work.")
        if check:
            raise typer.Exit(1)
