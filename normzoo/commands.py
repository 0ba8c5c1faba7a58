"""The commands behind ``normzoo train`` and ``normzoo recipe``; :mod:`normzoo.cli` wires them.

Each imports torch and Lightning only when it runs. User mistakes (a bad recipe, missing data)
raise :class:`~normzoo.errors.NormzooError`, which the CLI prints without a traceback.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import typer

OVERRIDES_HELP = "key=value settings applied on top of the recipe, e.g. optim.lr=3e-4"


@contextlib.contextmanager
def file_system_failures() -> Iterator[None]:
    """An OS error from the file system (a read-only folder, a full disk, a path through a
    file) as :class:`~normzoo.errors.RuntimeFailure`: exit 1 and the path, not a traceback."""
    try:
        yield
    except OSError as error:
        from normzoo.atomic import os_reason
        from normzoo.errors import RuntimeFailure

        where = f" {error.filename}" if error.filename else ""
        raise RuntimeFailure(f"could not write{where}: {os_reason(error)}") from None


def train(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing run directory."),
    resume: str = typer.Option(
        None, help="Continue a run: 'auto' (its checkpoints/last.ckpt) or a checkpoint path."
    ),
) -> None:
    """Train a model from RECIPE; writes a run directory with checkpoints, logs and a summary."""
    from normzoo import recipe as recipes

    resolved = recipes.load(recipe, overrides or [], machine=True)
    from normzoo.train import run

    with file_system_failures():
        summary = run(resolved, recipe, force=force, resume=resume)
    if summary is None:  # another process of a multi-process run: rank 0 reports
        return
    typer.echo(json.dumps(summary, indent=2))
    test = summary.get("test", {})
    if "bleu" in test:
        typer.secho(
            f"test BLEU {test['bleu']:.2f} on {test['split']} ({test['sentences']} sentences; "
            f"copying the source scores {test['copy_source_bleu']:.2f})  {test['signature']}",
            bold=True,
        )
    typer.echo(f"run directory: {summary['run_dir']}")


def prepare(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Encode RECIPE's data once into the memory-mapped cache that `train` reads: trains or
    loads the tokenizer, encodes every split, and prints what it wrote."""
    import sys

    from normzoo import recipe as recipes

    resolved = recipes.load(recipe, overrides or [])
    if resolved.data.streaming:
        from normzoo.errors import NormzooError

        raise NormzooError("data.streaming is set: the training split is streamed while "
                           "training, not prepared; train directly")
    from normzoo.data.prepare import describe
    from normzoo.data.prepare import prepare as build

    with file_system_failures():
        prepared, _, report = build(resolved, show=sys.stderr.isatty())
    for line in describe(prepared, report):
        typer.echo(line)


recipe_app = typer.Typer(help="Inspect recipes: print them resolved, or validate them.",
                         no_args_is_help=True)


def recipe_show(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Print the resolved recipe (defaults filled in, overrides applied) as YAML."""
    from normzoo import recipe as recipes

    # Not checked against this machine: a recipe for a bigger one is shown as well.
    typer.echo(recipes.load(recipe, overrides or []).to_yaml(), nl=False)


def recipe_validate(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
) -> None:
    """Check a recipe against the schema, the installed plugins and what this machine can run
    (memory, CPU cores); exit 2 with every error."""
    from normzoo import recipe as recipes

    recipes.load(recipe, overrides or [], machine=True)
    typer.echo(f"{recipe}: ok")


def _read_inputs(path: Path | None) -> list[str]:
    import sys

    from normzoo.data.sources import decode_lines, read_lines
    from normzoo.errors import NormzooError

    if path is not None:
        lines = read_lines(path)
    else:  # bytes, checked as a file's are: the text layer would pass on undecodable ones
        stdin = getattr(sys.stdin, "buffer", None)
        lines = (decode_lines(stdin.read(), "standard input") if stdin is not None
                 else sys.stdin.read().splitlines())
    if not lines or not any(line.strip() for line in lines):
        raise NormzooError("no input sentences (the input is empty)")
    return lines


def _check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, an output file that is a directory or whose folder is missing."""
    from normzoo.errors import NormzooError

    if path.is_dir():
        raise NormzooError(f"{option} {path} is a directory; give a file name")
    folder = path.absolute().parent
    if not folder.is_dir():
        state = "is not a directory" if folder.exists() else "does not exist"
        raise NormzooError(f"{option} {path}: its folder {folder} {state}")


def evaluate(
    checkpoint: Path = typer.Argument(..., help="A .ckpt file or an export directory."),
    split: str = typer.Option(None, help="Split of the recipe's data, e.g. test (default)."),
    src: Path = typer.Option(None, help="Source sentences, one per line (instead of --split)."),
    ref: Path = typer.Option(None, help="Raw references, line-aligned with --src."),
    data_dir: Path = typer.Option(None, help="Where the recipe's data files are now."),
    beam: int = typer.Option(None, min=1, help="Beam size (default: the recipe's eval.beam)."),
    lenpen: float = typer.Option(None, min=0.0, help="Length penalty exponent."),
    batch_tokens: int = typer.Option(4096, min=1, help="Source tokens per decoding batch."),
    hyps: Path = typer.Option(None, help="Where to write hypotheses (default hyps.SPLIT.txt)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Score a checkpoint or export: BLEU and chrF (sacreBLEU) for translation, MLM accuracy or
    perplexity for language models."""
    from normzoo.atomic import atomic_write_text
    from normzoo.checkpoint import load
    from normzoo.data.sources import DataError, load_parallel, load_text, read_lines
    from normzoo.errors import NormzooError
    from normzoo.evaluate import language_model_metrics

    if hyps is not None:
        _check_output_file(hyps, "--hyps")
    loaded = load(checkpoint)
    if (src is None) != (ref is None) and loaded.recipe.task == "translation":
        raise NormzooError("--src and --ref go together")
    data = loaded.recipe.data
    if data_dir is not None:
        data = data.model_copy(update={"dir": str(data_dir), "source": "files"})
    name = split or data.test_split
    if loaded.recipe.task != "translation":
        lines = read_lines(src) if src is not None else load_text(data, name)
        result = {"checkpoint": str(checkpoint), "split": str(src or name),
                  **language_model_metrics(loaded, lines, batch_tokens)}
        typer.echo(json.dumps(result, indent=2) if as_json else
                   "  ".join(f"{k}={v}" for k, v in result.items()))
        return
    if src is not None:
        sources, references = read_lines(src), read_lines(ref)
        if len(sources) != len(references):
            raise DataError(f"{src} has {len(sources)} lines but {ref} has {len(references)}")
        name = src.stem
    else:
        sources, references = load_parallel(data, name)
    from normzoo.scoring import score

    config = loaded.eval_config(beam, lenpen)
    hypotheses = loaded.translate(sources, beam=config.beam, lenpen=config.lenpen,
                                  max_tokens=batch_tokens)
    out = hyps or Path(f"hyps.{name}.txt")
    _check_output_file(out, "--hyps")
    atomic_write_text(out, "\n".join(hypotheses) + "\n", "hypotheses")  # whole or not at all
    result = score(hypotheses, references)
    report = {"checkpoint": str(checkpoint), "split": name, "beam": config.beam,
              "lenpen": config.lenpen, "hypotheses": str(out), **result.as_dict()}
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(f"BLEU = {result.bleu:.2f}  chrF = {result.chrf:.2f}  "
                   f"({result.sentences} sentences, beam {config.beam}, hypotheses in {out})")
        typer.echo(f"BLEU signature: {result.bleu_signature}")
        typer.echo(f"chrF signature: {result.chrf_signature}")


def translate(
    checkpoint: Path = typer.Argument(..., help="A .ckpt file or an export directory."),
    input: Path = typer.Option(None, "--input", "-i", help="Read sentences from FILE, not stdin."),
    beam: int = typer.Option(None, min=1, help="Beam size (default: the recipe's eval.beam)."),
    lenpen: float = typer.Option(None, min=0.0, help="Length penalty exponent."),
    batch_tokens: int = typer.Option(4096, min=1, help="Source tokens per decoding batch."),
) -> None:
    """Translate sentences (one per line, stdin or --input) and print one translation per line."""
    from normzoo.checkpoint import load

    lines = _read_inputs(input)
    loaded = load(checkpoint)
    for line in loaded.translate(lines, beam=beam, lenpen=lenpen, max_tokens=batch_tokens):
        typer.echo(line)


def export(
    checkpoint: Path = typer.Argument(..., help="A .ckpt file written by normzoo train."),
    out: Path = typer.Option(..., "--out", help="Directory to create."),
    average: int = typer.Option(1, min=1, help="Average the N most recent checkpoints first."),
) -> None:
    """Export a checkpoint to a self-contained directory (safetensors, config, tokenizer)."""
    from normzoo.export import export as run_export

    typer.echo(f"exported to {run_export(checkpoint, out, average)}")


def diagnose(
    target: Path = typer.Argument(..., help="A recipe (measured at initialisation) or a .ckpt."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    vary: str = typer.Option(
        None, help="Compare variants on the same batch: KEY=V1,V2,... e.g. "
        "model.residual=post,pre,deepnorm"),
    out: Path = typer.Option(Path("diagnostics"), help="Folder for the table and PNG plots."),
    data_dir: Path = typer.Option(None, help="Where the recipe's data files are now."),
) -> None:
    """Measure gradient norms, stream norms, branch ratios and norm inputs by depth on one
    training batch; print a table and save plots."""
    from normzoo import recipe as recipes
    from normzoo.diagnostics.diagnose import Variant, first_batch, measure, plot, table
    from normzoo.errors import NormzooError
    from normzoo.machine import check_machine

    def resolve(data: dict) -> recipes.Recipe:  # measured on the CPU: it must fit there
        return check_machine(recipes.from_dict(data), training=False)

    if target.suffix in (".yaml", ".yml"):
        base = recipes.read_yaml(target)
        data = recipes.apply_overrides(base, overrides or [])
        variants = []
        if vary:
            key, _, values = vary.partition("=")
            if not values:
                raise NormzooError("--vary must look like KEY=V1,V2")
            for value in values.split(","):
                resolved = resolve(recipes.apply_overrides(data, [f"{key}={value}"]))
                variants.append(Variant(f"{key.split('.')[-1]}={value}", resolved))
        else:
            variants.append(Variant(target.stem, resolve(data)))
        from normzoo.data.prepare import recipe_tokenizer

        tokenizer = recipe_tokenizer(variants[0].recipe)
    else:
        from normzoo.checkpoint import load

        loaded = load(target)
        recipe = loaded.recipe
        state = {f"model.{k}": v for k, v in loaded.model.state_dict().items()}
        variants = [Variant(target.stem, recipe, state)]
        tokenizer = loaded.tokenizer
    if data_dir is not None:
        for v in variants:
            v.recipe = v.recipe.model_copy(update={"data": v.recipe.data.model_copy(
                update={"dir": str(data_dir), "source": "files"})})
    batch = first_batch(variants[0].recipe, tokenizer)
    results = {v.label: measure(v, tokenizer, batch) for v in variants}
    report = table(results)
    typer.echo(report)
    from normzoo.atomic import atomic_write_text

    with file_system_failures():  # each file whole or not at all
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "diagnostics.md", report + "\n", "diagnostics table")
        for path in plot(results, out):
            typer.echo(f"wrote {path}")


def sweep(
    recipe: Path = typer.Argument(..., help="Recipe YAML file."),
    overrides: list[str] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    set_: list[str] = typer.Option(..., "--set", help="A grid axis KEY=V1,V2,... (repeatable)."),
    steps: int = typer.Option(None, min=1, help="trainer.max_steps for every cell."),
    out: Path = typer.Option(None, help="Sweep folder (default runs/sweep-<recipe>)."),
) -> None:
    """Train every combination of the --set values; finished cells are skipped on a re-run.
    Writes results.csv/.md (final loss, metric, diverged and when) and loss/stability plots."""
    from normzoo.diagnostics.sweep import sweep as run_sweep

    folder = out or Path("runs") / f"sweep-{recipe.stem}"
    with file_system_failures():
        rows = run_sweep(recipe, set_, overrides or [], folder, steps)
    typer.echo((folder / "results.md").read_text(encoding="utf-8"))
    diverged = sum(r["status"] == "diverged" for r in rows)
    typer.echo(f"{len(rows)} cells, {diverged} diverged; results in {folder}")
