"""``normzoo generate``: sample continuations from a causal-LM checkpoint or export, printed as
the tokens come.

The model loads inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import read_inputs, user_errors


@user_errors
def generate(
    checkpoint: Path = typer.Argument(..., help="A causal-LM .ckpt file or export directory."),
    prompt: str = typer.Option(None, "--prompt", "-p", help="The prompt to continue."),
    input: Path = typer.Option(None, "--input", "-i",
                               help="Continue each line of FILE (default: stdin lines)."),
    max_new_tokens: int = typer.Option(50, min=1, help="Tokens to sample at most per prompt."),
    temperature: float = typer.Option(1.0, min=0.0, help="Softmax temperature; 0: greedy."),
    top_k: int = typer.Option(None, min=1, help="Sample from the k most likely tokens."),
    top_p: float = typer.Option(None, max=1.0,
                                help="Nucleus sampling: the smallest set reaching p (0 < p <= 1)."),
    seed: int = typer.Option(None, help="Seed of the sampling generator (reproducible output)."),
) -> None:
    """Sample a continuation of each prompt from a causal LM, printed as the tokens come.

    Prompts come from --prompt, --input FILE or the lines of stdin; each continuation is one
    line. With --seed the lines equal the Python API's
    ``normzoo.load(CKPT).generate(prompts, seed=SEED)``.
    """
    import torch

    from normzoo.checkpoint import load
    from normzoo.errors import NormzooError

    if prompt is not None and input is not None:
        raise NormzooError("give --prompt or --input, not both")
    if top_p is not None and top_p <= 0:
        raise NormzooError(f"--top-p {top_p}: must be above 0 (and at most 1)")
    prompts = [prompt] if prompt is not None else read_inputs(input)
    loaded = load(checkpoint)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    for text in prompts:
        for piece in loaded.stream(text, max_new_tokens=max_new_tokens,
                                   temperature=temperature, top_k=top_k, top_p=top_p,
                                   generator=generator):
            typer.echo(piece, nl=False)
            typer.get_text_stream("stdout").flush()
        typer.echo("")
