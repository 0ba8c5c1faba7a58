"""Real data, minutes per run: deselected by default, run with ``python -m pytest -m slow``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from normzoo import recipe
from normzoo.run import training as train

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")]

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k")
def test_multi30k_prenorm_learns_on_real_data(tmp_path: Path, monkeypatch):
    """600 steps of the Multi30k recipe: BLEU well above copying the source, loss falling."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    overrides = [f"data.dir={MULTI30K}", f"run.dir={tmp_path / 'run'}", "trainer.max_steps=600",
                 "trainer.val_every_steps=300", "trainer.progress_bar=false",
                 "eval.beam=1", "data.valid_limit=200"]
    summary = train.run(recipe.load("recipes/multi30k_prenorm.yaml", overrides), "m30k.yaml")
    test = summary["test"]
    assert test["bleu"] > 5.0 > test["copy_source_bleu"] + 2.0
    with open(tmp_path / "run" / "logs" / "csv" / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r["train/loss"]]
    assert losses[-1] < losses[0] - 2.0

    # Exported for transformers, the model translates test2016 as normzoo does (greedy).
    import transformers

    import normzoo
    from normzoo.export.writer import export
    from normzoo.inference.decoding import max_target_lengths

    checkpoint = Path(summary["best_checkpoint"])
    result = export(checkpoint, tmp_path / "hf", fmt="hf")
    assert result.architecture == "BlenderbotForConditionalGeneration"
    assert result.max_abs_logit_diff <= 1e-4
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    sentences = (MULTI30K / "test2016.en").read_text(encoding="utf-8").splitlines()[:100]
    loaded = normzoo.load(checkpoint)
    ours = loaded.translate(sentences, beam=1)
    theirs = []
    for sentence in sentences:
        inputs = tokenizer([sentence], return_tensors="pt")
        limit = max_target_lengths(inputs["input_ids"], loaded.recipe.eval.max_len_a,
                                   loaded.recipe.eval.max_len_b,
                                   loaded.model.config.max_positions - 1)
        ids = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=int(limit[0]))
        theirs.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    assert theirs == ours
