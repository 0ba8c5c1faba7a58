"""``init.from``: a new run from trained weights, with a fresh optimizer and schedule at step 0
(issue 25, 4; fairseq's ``--restore-file`` with ``--reset-optimizer``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app

runner = CliRunner()
# The model of conftest's tiny_checkpoint, on its data; the tokenizer settings differ on
# purpose: a run from its weights trains on its tokenizer, whatever the recipe says.
RECIPE = tiny(data={"train_limit": 200, "valid_limit": 8}, trainer={"max_steps": 1})


@pytest.fixture
def recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(RECIPE), encoding="utf-8")
    return path


def train(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["train", "tiny.yaml", *args])
    return result.exit_code, result.output


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_init_from_loads_the_weights_and_starts_at_step_0_with_a_fresh_optimizer(
        recipe: Path, tiny_checkpoint: Path):
    code, output = train("run.dir=run", f"init.from={tiny_checkpoint}", "optim.lr=1e-9")
    assert code == 0, output
    assert f"init: loaded 39 weights from {tiny_checkpoint} (trained 2 steps)" in output
    run = recipe.parent / "run"
    new, old = load(run / "checkpoints" / "last.ckpt"), load(tiny_checkpoint)
    assert new["global_step"] == 1  # step 0 + the one step of this run, not 2 + 1
    (state,) = new["optimizer_states"]
    assert {int(s["step"]) for s in state["state"].values()} == {1}  # a fresh AdamW
    assert new["lr_schedulers"][0]["last_epoch"] == 1  # and a fresh schedule
    for name, tensor in old["state_dict"].items():  # one step at lr 1e-9 moves nothing
        assert torch.allclose(new["state_dict"][name], tensor, atol=1e-6), name
    assert new["normzoo"]["tokenizer"] == old["normzoo"]["tokenizer"]
    saved = yaml.safe_load((run / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["init"] == {"from": str(tiny_checkpoint), "strict": True}
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["steps"] == 1
    assert summary["init"] | {"missing": [], "reshaped": []} == {
        "from": str(tiny_checkpoint), "step": 2, "strict": True, "loaded": 39,
        "missing": [], "unexpected": [], "reshaped": []}


def test_a_relative_init_from_is_stored_resolved(recipe: Path, tiny_checkpoint: Path):
    (recipe.parent / "weights").mkdir()
    (recipe.parent / "weights" / "w.ckpt").hardlink_to(tiny_checkpoint)
    code, output = train("run.dir=run", "init.from=weights/w.ckpt")
    assert code == 0, output
    saved = yaml.safe_load((recipe.parent / "run" / "recipe.yaml").read_text(encoding="utf-8"))
    assert saved["init"]["from"] == str(recipe.parent / "weights" / "w.ckpt")


def test_strict_init_names_every_misfit_before_writing_anything(recipe: Path,
                                                                tiny_checkpoint: Path):
    code, output = train("run.dir=run", f"init.from={tiny_checkpoint}", "model.ffn_dim=48")
    assert code == 2, output
    assert "Traceback" not in output and output.count("error:") == 1
    assert f"init.from={tiny_checkpoint} does not fit the model this recipe builds" in output
    assert "6 of another shape" in output
    assert "encoder.layers.0.ffn.ffn_in.weight (file [64, 32], model [48, 32])" in output
    assert "init.strict=false" in output
    assert not (recipe.parent / "run").exists()


def test_non_strict_init_loads_what_fits_and_says_what_it_skipped(recipe: Path,
                                                                  tiny_checkpoint: Path):
    code, output = train("run.dir=run", f"init.from={tiny_checkpoint}", "init.strict=false",
                         "model.ffn_dim=48")
    assert code == 0, output
    assert "init: loaded 33 weights" in output
    assert "init: not loaded (init.strict=false): 6 of another shape" in output
    summary = json.loads((recipe.parent / "run" / "summary.json").read_text(encoding="utf-8"))
    assert summary["init"]["loaded"] == 33 and len(summary["init"]["reshaped"]) == 6
    new = load(recipe.parent / "run" / "checkpoints" / "last.ckpt")["state_dict"]
    old = load(tiny_checkpoint)["state_dict"]
    fitting = [name for name in old if old[name].shape == new[name].shape]
    assert len(fitting) == 33
    for name in fitting:  # loaded, then one step in warm-up (lr 5e-4 / 4000): barely moved
        assert torch.allclose(new[name], old[name], atol=1e-5), name


def test_init_from_an_export_folder(recipe: Path, tiny_checkpoint: Path):
    exported = runner.invoke(app, ["export", str(tiny_checkpoint), "--out", "exported"])
    assert exported.exit_code == 0, exported.output
    code, output = train("run.dir=run", "init.from=exported")
    assert code == 0, output
    assert f"init: loaded 39 weights from {recipe.parent / 'exported'};" in output


@pytest.mark.parametrize("command", [["train", "tiny.yaml", "run.dir=run"],
                                     ["recipe", "validate", "tiny.yaml"]])
def test_a_missing_init_from_is_refused(recipe: Path, command: list[str]):
    result = runner.invoke(app, [*command, "init.from=nowhere.ckpt"])
    assert result.exit_code == 2, result.output
    assert "init.from: no checkpoint or export folder at nowhere.ckpt" in result.output
    assert "Traceback" not in result.output and not (recipe.parent / "run").exists()


def test_a_damaged_init_from_is_refused_cleanly(recipe: Path):
    (recipe.parent / "bad.ckpt").write_bytes(b"not a checkpoint")
    code, output = train("run.dir=run", "init.from=bad.ckpt")
    assert code == 2 and "init.from: " in output and "bad.ckpt" in output, output
    assert "Traceback" not in output and not (recipe.parent / "run").exists()


def test_init_from_is_refused_with_resume_of_a_run_it_did_not_start(recipe: Path,
                                                                    tiny_checkpoint: Path):
    assert train("run.dir=plain")[0] == 0
    code, output = train("run.dir=plain", f"init.from={tiny_checkpoint}", "--resume", "auto")
    assert code == 2, output
    assert f"init.from: checkpoint null, recipe {tiny_checkpoint}" in output
    assert "--resume continues the run from its own checkpoint and init.from starts a new" \
        in output
    # A run started from those weights resumes with the same init.from (the command repeated):
    # its own checkpoint, not the file, gives the weights.
    assert train("run.dir=tuned", f"init.from={tiny_checkpoint}")[0] == 0
    code, output = train("run.dir=tuned", f"init.from={tiny_checkpoint}",
                         "trainer.max_steps=2", "--resume", "auto")
    assert code == 0, output
    assert "init: loaded" not in output and "resume: trainer.max_steps 1 -> 2" in output
    assert load(recipe.parent / "tuned" / "checkpoints" / "last.ckpt")["global_step"] == 2


def test_force_may_restart_a_run_from_its_own_checkpoint(recipe: Path):
    """init.from inside the run directory that --force clears: read before it is cleared."""
    assert train("run.dir=run", "trainer.max_steps=2")[0] == 0
    own = recipe.parent / "run" / "checkpoints" / "last.ckpt"
    weights = load(own)["state_dict"]
    code, output = train("run.dir=run", f"init.from={own}", "optim.lr=1e-9", "--force")
    assert code == 0, output
    new = load(own)
    assert new["global_step"] == 1
    assert all(torch.allclose(new["state_dict"][k], v, atol=1e-6) for k, v in weights.items())


def test_a_misfit_is_refused_before_the_data_is_prepared(recipe: Path, tiny_checkpoint: Path):
    """A task whose model does not wait on its data (all but the classifier, whose head the
    label set sizes) fits ``init.from`` first: a misfit costs no tokenizer or data preparation
    (minutes on WMT14)."""
    code, output = train("run.dir=run", f"init.from={tiny_checkpoint}", "model.ffn_dim=48")
    assert code == 2 and "does not fit the model this recipe builds" in output
    assert "data:" not in output
    assert not (recipe.parent / "cache").exists() or not any(
        (recipe.parent / "cache").rglob("*.json"))


def test_init_from_into_a_scheme_with_a_weight_constraint_applies_it_before_the_first_forward(
        recipe: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch):
    """nGPT keeps every matrix row at unit length (its ``after_step``, applied at build and
    after each update); weights loaded from a Pre-LN run, whose rows are not unit, are put on
    the sphere as they are loaded, not at the first update (issue 59, 6)."""
    from torch import nn

    from normzoo.residual.ngpt import _WRITES
    from normzoo.run.init_weights import InitWeights

    old = load(tiny_checkpoint)["state_dict"]
    ffn_in = old["model.encoder.layers.0.ffn.ffn_in.weight"]
    assert (ffn_in.norm(dim=1) - 1).abs().max() > 0.1  # the source's rows are far from unit

    def off_unit(model: nn.Module) -> dict[str, float]:
        rows = {}
        for name, module in model.named_modules():
            role_weights = getattr(module, "role_weights", None)
            if callable(role_weights):
                for role, weight in role_weights().items():
                    norms = weight.norm(dim=0 if role in _WRITES else 1)
                    rows[f"{name}:{role}"] = (norms - 1).abs().max().item()
            elif isinstance(module, nn.Embedding):
                rows[name] = (module.weight.norm(dim=1) - 1).abs().max().item()
        return rows

    seen: list[dict[str, float]] = []
    load_into = InitWeights.load_into

    def spy(self: InitWeights, model: nn.Module) -> None:
        load_into(self, model)
        model.register_forward_pre_hook(
            lambda module, args: None if seen else seen.append(off_unit(module)))

    monkeypatch.setattr(InitWeights, "load_into", spy)
    code, output = train("run.dir=run", f"init.from={tiny_checkpoint}", "init.strict=false",
                         "model.residual=ngpt")
    assert code == 0, output
    assert "init: loaded" in output and "init: not loaded (init.strict=false)" in output
    (first,) = seen  # the first forward pass, before any update
    assert len(first) > 10 and any(":ffn_in" in name for name in first)
    assert max(first.values()) < 1e-5, {k: v for k, v in first.items() if v >= 1e-5}
