"""``normzoo generate``: sample continuations from a causal-LM checkpoint or export, printed as
the tokens come.

The model loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import (
    device_option,
    finite,
    input_warnings,
    interactive,
    read_inputs,
    typed_lines,
    user_errors,
)


@user_errors
def generate(
    checkpoint: Path = typer.Argument(..., metavar="CHECKPOINT",
                                      help="A causal-LM .ckpt file or export directory."),
    prompt: str = typer.Option(None, "--prompt", "-p", metavar="TEXT",
                               help="The prompt to continue."),
    input: Path = typer.Option(None, "--input", "-i", metavar="FILE",
                               help="Continue each line of FILE (default: stdin lines)."),
    max_new_tokens: int = typer.Option(50, min=1, metavar="N",
                                       help="Tokens to sample at most per prompt."),
    temperature: float = typer.Option(1.0, min=0.0, metavar="T", callback=finite,
                                      help="Softmax temperature; 0: greedy."),
    top_k: int = typer.Option(None, min=1, metavar="K",
                              help="Sample from the k most likely tokens."),
    top_p: float = typer.Option(None, max=1.0, metavar="P", callback=finite,
                                help="Nucleus sampling: the smallest set reaching p (0 < p <= 1)."),
    seed: int = typer.Option(None, metavar="S",
                             help="Seed of the sampling (reproducible output)."),
    batch_size: int = typer.Option(32, min=1, metavar="N",
                                   help="Prompts sampled together (from a file or a pipe)."),
    device: str = device_option(),
) -> None:
    """Sample a continuation of each prompt from a causal LM, one line per prompt.

    Prompts come from --prompt, --input FILE or the lines of stdin. From a file or a pipe
    they are sampled --batch-size at a time, each batch's lines printed when it is done; at a
    terminal (and for --prompt) each continuation is printed as its tokens come. An empty line
    gets an empty line; a prompt longer than the model's positions is cut to its end, with a
    warning that names it. With --seed, line i (from 0) is sampled from its own generator
    seeded SEED + i, so the lines equal the Python API's
    normzoo.load(CKPT).generate(prompts, seed=SEED), whatever the batch size.
    """
    from normzoo.errors import NormzooError
    from normzoo.inference.load import load

    if prompt is not None and input is not None:
        raise NormzooError("give --prompt or --input, not both")
    if top_p is not None and top_p <= 0:
        raise NormzooError(f"--top-p {top_p}: must be above 0 (and at most 1)")
    live = prompt is None and interactive(input)
    prompts = None if prompt is not None or live else read_inputs(input)
    loaded = load(checkpoint, device)
    positions = loaded.model.config.max_positions
    if max_new_tokens >= positions:  # a prompt takes a position at least (BOS)
        typer.echo(f"warning: --max-new-tokens {max_new_tokens:,}: the model holds "
                   f"{positions:,} positions, prompt included, so each continuation stops "
                   f"there (at most {positions - 1:,} new tokens)", err=True)
    settings = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k,
                "top_p": top_p}
    out = typer.get_text_stream("stdout")

    def stream(text: str, number: int) -> None:
        generator = None if seed is None else loaded.generator(seed + number - 1)
        for piece in loaded.stream(text, generator=generator, line=number, **settings):
            typer.echo(piece, nl=False)
            out.flush()
        typer.echo("")

    with input_warnings():
        if prompt is not None:
            stream(prompt, 1)
        elif prompts is None:  # at a terminal
            for number, text in typed_lines():
                stream(text, number)
        else:
            _batches(loaded, prompts, batch_size, seed, settings)


def _batches(loaded, prompts: list[str], batch_size: int, seed: int | None,
             settings: dict) -> None:
    """The continuations of ``prompts``, ``batch_size`` at a time, each batch's lines printed
    as soon as it is done; prompt i's generator is seeded ``seed + i`` as in one API call."""
    out = typer.get_text_stream("stdout")
    for start in range(0, len(prompts), batch_size):
        lines = loaded.generate(prompts[start : start + batch_size],
                                seed=None if seed is None else seed + start,
                                batch_size=batch_size, first_line=start + 1, **settings)
        typer.echo("\n".join(lines))
        out.flush()
