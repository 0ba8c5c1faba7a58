"""``normzoo export``: turning a training checkpoint into a self-contained directory that loads
without Lightning.

The export code (torch, safetensors) loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import user_errors


@user_errors
def export(
    checkpoint: Path = typer.Argument(..., help="A .ckpt file written by normzoo train."),
    out: Path = typer.Option(..., "--out", help="Directory to create."),
    average: int = typer.Option(1, min=1, help="Average the N most recent checkpoints first."),
) -> None:
    """Export a checkpoint to a self-contained directory (safetensors, config, tokenizer)."""
    from normzoo.export import export as run_export

    typer.echo(f"exported to {run_export(checkpoint, out, average)}")
