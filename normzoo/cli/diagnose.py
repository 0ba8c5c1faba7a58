"""``normzoo diagnose``: measuring what a residual scheme and norm do to gradients and the
residual stream, by depth, on one batch.

Torch and matplotlib load inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import OVERRIDES_HELP, file_system_failures, user_errors


@user_errors
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
