"""``normzoo translate``: decoding sentences from standard input or a file with a trained model.

The model loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import read_inputs, user_errors


@user_errors
def translate(
    checkpoint: Path = typer.Argument(..., help="A .ckpt file or an export directory."),
    input: Path = typer.Option(None, "--input", "-i", help="Read sentences from FILE, not stdin."),
    beam: int = typer.Option(None, min=1, help="Beam size (default: the recipe's eval.beam)."),
    lenpen: float = typer.Option(None, min=0.0, help="Length penalty exponent."),
    batch_tokens: int = typer.Option(4096, min=1, help="Source tokens per decoding batch."),
) -> None:
    """Translate sentences (one per line, stdin or --input) and print one translation per line."""
    from normzoo.checkpoint import load

    lines = read_inputs(input)
    loaded = load(checkpoint)
    for line in loaded.translate(lines, beam=beam, lenpen=lenpen, max_tokens=batch_tokens):
        typer.echo(line)
