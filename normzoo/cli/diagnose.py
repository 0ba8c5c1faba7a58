"""``normzoo diagnose``: measuring what a residual scheme and norm do to gradients and the
residual stream, by depth, on one batch.

Torch and matplotlib load inside the command, never at import.
"""

from __future__ import annotations

from pathlib import Path

import typer

from normzoo.cli.common import (
    OVERRIDES_HELP,
    check_output_folder,
    file_system_failures,
    user_errors,
)


@user_errors
def diagnose(
    target: Path = typer.Argument(..., metavar="RECIPE_OR_CKPT",
                                  help="A recipe (measured at initialisation) or a .ckpt."),
    overrides: list[str] = typer.Argument(None, metavar="[KEY=VALUE]...", help=OVERRIDES_HELP,
                                          show_default=False),
    vary: list[str] = typer.Option(
        None, "--vary", metavar="KEY=V1,V2,...", show_default=False,
        help="Compare variants on the same batch, e.g. model.residual=post,pre,deepnorm; a "
        "value may be a mapping ({name: admin, init: profiled}). Repeat for more axes: every "
        "combination is measured. Recipes only."),
    out: Path = typer.Option(Path("diagnostics"), metavar="DIR",
                             help="Folder for the table and PNG plots."),
    data_dir: Path = typer.Option(None, metavar="DIR",
                                  help="Where the recipe's data files are now."),
) -> None:
    """Measure gradient norms, stream norms, branch ratios and norm inputs by depth on one
    training batch; print a table and save plots."""
    from normzoo import recipe as recipes
    from normzoo.diagnostics.diagnose import (
        Variant,
        first_batch,
        measure,
        plot,
        recipe_variants,
        table,
    )
    from normzoo.errors import NormzooError
    from normzoo.run.machine import check_machine

    check_output_folder(out, "--out")

    def resolve(data: dict) -> recipes.Recipe:  # measured on the CPU: it must fit there
        return check_machine(recipes.from_dict(data), training=False)

    if target.suffix in (".yaml", ".yml"):
        data = recipes.apply_overrides(recipes.read_recipe(target), overrides or [])
        variants = recipe_variants(data, vary or [], target.stem, resolve)
        from normzoo.data.prepare import recipe_tokenizer

        tokenizer = recipe_tokenizer(variants[0].recipe)
    else:
        if vary or overrides:  # a checkpoint is measured as it was trained
            given = "--vary" if vary else f"the override {overrides[0]!r}"
            raise NormzooError(f"{given} applies to a recipe, not to the checkpoint {target}: "
                               "its weights were trained with its own recipe; diagnose the "
                               "recipe (at initialisation) to compare variants")
        from normzoo.inference.load import load

        loaded = load(target)
        recipe = loaded.recipe
        state = {f"model.{k}": v for k, v in loaded.model.state_dict().items()}
        variants = [Variant(target.stem, recipe, state)]
        tokenizer = loaded.tokenizer
    if data_dir is not None:
        for v in variants:
            v.recipe = v.recipe.model_copy(update={"data": v.recipe.data.model_copy(
                update={"dir": str(data_dir), "source": "files"})})
    from normzoo.io.atomic import atomic_write_text

    with file_system_failures():  # before measuring, which may take minutes, not after
        out.mkdir(parents=True, exist_ok=True)
    batch = first_batch(variants[0].recipe, tokenizer, variants)
    results = {v.label: measure(v, tokenizer, batch) for v in variants}
    report = table(results)
    typer.echo(report)
    with file_system_failures():  # each file whole or not at all
        atomic_write_text(out / "diagnostics.md", report + "\n", "diagnostics table")
        for path in plot(results, out):
            typer.echo(f"wrote {path}")
