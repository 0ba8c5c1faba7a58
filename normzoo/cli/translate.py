"""``normzoo translate``: decoding sentences from standard input or a file with a trained model.

The model loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import (
    batch_tokens_option,
    beam_option,
    device_option,
    input_warnings,
    interactive,
    lenpen_option,
    read_inputs,
    typed_lines,
    user_errors,
)

# Lines decoded together, and printed (in order) once done: a file's translations appear as
# they are made, so a stopped run keeps what it finished (29,000 lines were all held to the end,
# and Ctrl-C after 7 s left none). Within a chunk, batches are still formed by length.
CHUNK_LINES = 256


@user_errors
def translate(
    checkpoint: Path = typer.Argument(..., metavar="CHECKPOINT",
                                      help="A .ckpt file or an export directory."),
    input: Path = typer.Option(None, "--input", "-i", metavar="FILE",
                               help="Read sentences from FILE, not stdin."),
    beam: int = beam_option(),
    lenpen: float = lenpen_option(),
    batch_tokens: int = batch_tokens_option(),
    device: str = device_option(),
) -> None:
    """Translate sentences (one per line, stdin or --input) and print one translation per line.

    From a file or a pipe the sentences are decoded in batches of about --batch-tokens source
    tokens, 256 lines at a time, each line printed once those before it are; at a terminal each
    line is translated as soon as it is typed. An empty line gets
    an empty line; a line longer than the model's positions is cut to fit, with a warning that
    names it."""
    from normzoo.inference.load import load

    live = interactive(input)
    lines = None if live else read_inputs(input)
    loaded = load(checkpoint, device)
    with input_warnings():
        if lines is not None:
            out = typer.get_text_stream("stdout")
            for start in range(0, len(lines), CHUNK_LINES):
                for line in loaded.translate(lines[start : start + CHUNK_LINES], beam=beam,
                                             lenpen=lenpen, max_tokens=batch_tokens,
                                             first_line=start + 1):
                    typer.echo(line)
                out.flush()
            return
        for number, line in typed_lines():
            typer.echo(loaded.translate([line], beam=beam, lenpen=lenpen,
                                        max_tokens=batch_tokens, first_line=number)[0])
