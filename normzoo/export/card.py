"""The model card (``README.md``) every export directory carries, as the Hugging Face hub shows it.

Everything on it is read from what the export came from: the recipe saved in the checkpoint, the
checkpoint's step, the run's ``summary.json`` (test scores and their sacreBLEU signature), the
plugins that built the model and, for ``--format hf``, what was folded and the measured logit
difference. Nothing is typed in by hand, so a card cannot claim what the run did not do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normzoo import __version__
from normzoo.contract import task_of


def _run_summary(checkpoint: Path) -> dict[str, Any] | None:
    """The run's ``summary.json`` (``RUN/checkpoints/x.ckpt`` -> ``RUN/summary.json``)."""
    path = checkpoint.parent.parent / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("status") == "completed" else None


def _formula(kind: str, name: str) -> str:
    """The registry entry's first docstring line, which states its formula."""
    from normzoo.models.resolve import norm_factory, scheme_class
    from normzoo.registry import first_doc_line

    try:
        return first_doc_line(scheme_class(name) if kind == "residual" else norm_factory(name))
    except Exception:  # a plugin that is not importable here: the card still says its name
        return "(description unavailable)"


def _scores(summary: dict[str, Any] | None, checkpoint: Path) -> list[str]:
    if summary is None:
        return ["No test scores: the checkpoint's run has no completed `summary.json`."]
    test = summary.get("test") or {}
    best = summary.get("best_checkpoint")
    which = (f"the run's best checkpoint (`{Path(best).name}`)" if best
             else "the run's final weights")
    lines = [f"Measured by `normzoo train` on {which}, split `{test.get('split', '?')}`"
             + ("" if not best or Path(best).name == checkpoint.name
                else f"; this export is of `{checkpoint.name}`") + ":", ""]
    lines += ["| metric | value |", "|---|---|"]
    for key, value in test.items():
        if key not in ("split", "signature"):
            lines.append(f"| {key} | {value} |")
    if test.get("signature"):
        lines += ["", f"sacreBLEU signature: `{test['signature']}`"]
    return lines


def _data(recipe: Any) -> str:
    data = recipe.data
    where = {"builtin": "normzoo's built-in synthetic corpus",
             "files": f"local files in `{data.dir}`",
             "hub": f"the Hugging Face dataset `{data.path}`"
                    + (f" (`{data.name}`)" if data.name else "")}[data.source]
    pair = task_of(recipe).card(recipe, None).data_note
    tok = data.tokenizer
    tokenizer = (f"the tokenizer file `{Path(tok.path or '').name}`" if tok.type == "file"
                 else f"{tok.type.upper()} tokenizer, {tok.vocab_size:,} entries")
    return (f"{where}{pair}; splits `{data.train_split}` / `{data.valid_split}` / "
            f"`{data.test_split}`; examples longer than {data.max_len} tokens dropped; "
            f"{tokenizer}")


def _how_to_load(recipe: Any, hf: Any | None) -> list[str]:
    card = task_of(recipe).card(recipe, hf)
    if hf is None:
        commands = "`normzoo evaluate THIS_DIRECTORY`" + (
            f" or `normzoo {card.command} THIS_DIRECTORY`" if card.command else "")
        return ["```python", "import normzoo", "", 'model = normzoo.load("THIS_DIRECTORY")',
                card.python, "```", "", f"On the command line: {commands}."]
    return ["```python", f"from transformers import AutoTokenizer, {hf.auto_class}", "",
            'tokenizer = AutoTokenizer.from_pretrained("THIS_DIRECTORY")',
            f'model = {hf.auto_class}.from_pretrained("THIS_DIRECTORY")', *card.transformers,
            "```"]


def _hf_section(hf: Any, family: Any) -> list[str]:
    lines = ["## transformers architecture", "",
             f"Exported as `{hf.architecture}`, a plain {hf.placement.capitalize()}-LN model "
             "whose layers compute what normzoo's do."]
    if hf.folded:
        lines += ["", f"Folded into the weights: {hf.folded}."]
    lines += ["", f"Largest |logit difference| from the normzoo model on a probe batch, measured "
              f"when this directory was written: **{hf.max_abs_logit_diff:.2g}**.", "",
              "Greedy decoding with `generate(num_beams=1)` gives normzoo's greedy output; "
              "normzoo's beam search is fairseq's, which `transformers`' beam search is not."]
    if family.cross_attention:  # a translation's length rule
        lines += ["", "normzoo stops a translation at `max_len_a` × source tokens + "
                  "`max_len_b` (both in `generation_config.json`); `transformers` has one "
                  "limit for a whole batch (`max_new_tokens`, the positions' capacity). "
                  "A translation that ends with `</s>` before its limit is the same either way; "
                  "for normzoo's limits exactly, pass `logits_processor=[LengthRule("
                  "model.generation_config, inputs[\"input_ids\"])]` "
                  "(`from normzoo.export.hf import LengthRule`)."]
    if hf.architecture == "MarianMTModel":
        lines += ["", "The position table is normzoo's and is stored in `model.safetensors`; "
                  "Marian's `save_pretrained` leaves it out (it recomputes its own sinusoids), "
                  "so re-save with `model._keys_to_ignore_on_save = None`."]
    return lines


def model_card(loaded: Any, sources: list[Path], hf: Any | None = None) -> str:
    """The ``README.md`` of an export of ``sources`` (one checkpoint, or those averaged)."""
    from normzoo.checkpoints.rolling import checkpoint_step

    recipe, model = loaded.recipe, loaded.model
    config = recipe.model
    checkpoint = sources[0]
    step = checkpoint_step(checkpoint)
    parameters = sum(p.numel() for p in model.parameters())
    layers = " + ".join(str(depth) for depth in config.stack_depths.values())
    plugins = ", ".join(f"{p.get('name')} ({p.get('distribution')} {p.get('version')})"
                        for p in loaded.plugins) or "normzoo's built-ins"
    averaged = (f", the average of {len(sources)} checkpoints ("
                + ", ".join(f"`{s.name}`" for s in sources) + ")") if len(sources) > 1 else ""
    lines = [
        "---", "library_name: " + ("transformers" if hf else "normzoo"),
        f"pipeline_tag: {task_of(recipe).card(recipe, hf).tag}",
        "tags: [normzoo, " + config.residual.name + ", " + config.norm.name + "]", "---", "",
        f"# {recipe.task} model: {config.residual} residuals, {config.norm} norms", "",
        f"Trained with normzoo {__version__}.", "",
        "| | |", "|---|---|",
        f"| task | {recipe.task} |",
        f"| family | {config.family_info.title} |",
        f"| layers | {layers} |",
        f"| d_model / heads / ffn_dim | {config.d_model} / {config.heads} / {config.ffn_dim} "
        f"({config.activation}) |",
        f"| parameters | {parameters:,} |",
        f"| vocabulary | {loaded.tokenizer.vocab_size:,} |",
        f"| positions | {config.positions}, up to {config.max_positions} |",
        f"| residual scheme | `{config.residual}`: {_formula('residual', config.residual.name)} |",
        f"| norm | `{config.norm}`: {_formula('norm', config.norm.name)} |",
        f"| plugins | {plugins} |", "",
        "## Training", "",
        f"- Data: {_data(recipe)}.",
        f"- Steps: {step if step is not None else 'unknown'} of {recipe.trainer.max_steps} "
        f"(checkpoint `{checkpoint.name}`{averaged}); up to {recipe.data.max_tokens:,} tokens "
        f"per batch × {recipe.trainer.accumulate} accumulated.",
        f"- Optimizer: AdamW, lr {recipe.optim.lr:g}, {recipe.optim.schedule} schedule, "
        f"{recipe.optim.warmup_steps} warm-up steps; seed {recipe.seed}.", "",
        "## Test scores", "", *_scores(_run_summary(checkpoint), checkpoint), "",
    ]
    if hf is not None:
        lines += [*_hf_section(hf, config.family_info), ""]
    lines += ["## How to load", "", *_how_to_load(recipe, hf), ""]
    return "\n".join(lines)
