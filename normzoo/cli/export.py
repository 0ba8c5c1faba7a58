"""``normzoo export``: turning a training checkpoint into a self-contained directory that loads
without Lightning: normzoo's own format, or one that ``transformers`` loads (``--format hf``).

The export code (torch, safetensors, transformers) loads inside the command, never at import.
"""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from normzoo.cli.common import user_errors


class Format(str, enum.Enum):
    normzoo = "normzoo"
    hf = "hf"


@user_errors
def export(
    checkpoint: Path = typer.Argument(..., metavar="CHECKPOINT",
                                      help="A .ckpt file written by normzoo train."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory to create."),
    average: int = typer.Option(1, min=1, metavar="N",
                                help="Average the N most recent checkpoints first."),
    fmt: Format = typer.Option(
        Format.normzoo, "--format",
        help="normzoo: safetensors, recipe and tokenizer for normzoo.load; hf: a directory "
             "that transformers' Auto classes load (Post-/Pre-LN and what folds into them)."),
) -> None:
    """Export a checkpoint to a self-contained directory with a model card (README.md)."""
    from normzoo.export.writer import export as run_export

    result = run_export(checkpoint, out, average, fmt.value)
    if fmt is Format.hf:
        folded = f"; folded: {result.folded}" if result.folded else ""
        typer.echo(f"exported to {out} as {result.architecture} (plain "
                   f"{result.placement.capitalize()}-LN{folded}); load it with "
                   f"transformers.{result.auto_class}; max |logit difference| from normzoo "
                   f"{result.max_abs_logit_diff:.2g}")
    else:
        typer.echo(f"exported to {result}")
