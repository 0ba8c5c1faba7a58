"""``--resume`` says what it changes and refuses what it cannot honestly continue (issue 25, 2).

A resume compares the recipe with the one the run was trained with: the keys that may change
(its length, cadence, loggers...) are printed one per line, any other difference refuses the
resume with the old and new value of each. The hint printed after SIGTERM repeats the command's
overrides; ``--resume auto`` of a mistyped run directory says it does not exist; a damaged
checkpoint that is skipped is reported on a plain ``warning:`` line.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app

HERE = Path(__file__).parent
runner = CliRunner()
RECIPE = tiny(trainer={"max_steps": 2, "keep_checkpoints": 2})


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with tiny.yaml, the data cache, and a finished two-step run in runs/base."""
    folder = tmp_path_factory.mktemp("honesty")
    (folder / "tiny.yaml").write_text(yaml.safe_dump(RECIPE), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(folder / "cache"))
        mp.chdir(folder)
        result = runner.invoke(app, ["train", "tiny.yaml", "run.dir=runs/base"])
        assert result.exit_code == 0, result.output
        yield folder


@pytest.fixture
def run(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the base run, to resume."""
    monkeypatch.chdir(root)
    monkeypatch.setenv("NORMZOO_CACHE", str(root / "cache"))
    copy = tmp_path / "run"
    shutil.copytree(root / "runs" / "base", copy)
    (copy / ".lock").unlink(missing_ok=True)
    return copy


def train(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["train", "tiny.yaml", *args])
    return result.exit_code, result.output


def step_of(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


def test_resume_prints_each_change_it_accepts(run: Path):
    code, output = train(f"run.dir={run}", "trainer.max_steps=3", "trainer.log_every_steps=1",
                         "trainer.loggers=[csv]", "--resume", "auto")
    assert code == 0, output
    assert "resume: trainer.max_steps 2 -> 3\n" in output
    assert "resume: trainer.log_every_steps 50 -> 1\n" in output
    assert "resume: trainer.loggers [csv, tensorboard] -> [csv]\n" in output
    assert step_of(run / "checkpoints" / "last.ckpt") == 3
    assert yaml.safe_load((run / "recipe.yaml").read_text())["trainer"]["max_steps"] == 3


def test_resume_refuses_a_new_learning_rate_with_old_and_new_values(run: Path):
    before = (run / "checkpoints" / "last.ckpt").stat().st_mtime_ns
    code, output = train(f"run.dir={run}", "optim.lr=0.1", "optim.warmup_steps=10",
                         "trainer.max_steps=3", "--resume", "auto")
    assert code == 2, output
    assert "Traceback" not in output and output.count("error:") == 1
    assert "optim.lr: checkpoint 0.0005, recipe 0.1" in output
    assert "optim.warmup_steps: checkpoint 4000, recipe 10" in output
    assert "trainer.max_steps" not in output  # accepted: not among the refused
    assert "init.from=" in output  # the way to go on from these weights under a new lr
    assert (run / "checkpoints" / "last.ckpt").stat().st_mtime_ns == before


@pytest.mark.parametrize(("override", "says"), [
    ("trainer.max_steps=1", "trainer.max_steps: checkpoint 2, recipe 1 (below step 2"),
    ("trainer.precision=16-mixed", "trainer.precision: checkpoint 32-true, recipe 16-mixed"),
    ("seed=4", "seed: checkpoint 3, recipe 4"),
    ("data.max_tokens=256", "data.max_tokens: checkpoint 512, recipe 256"),
    ("trainer.patience=2", "trainer.patience: checkpoint null, recipe 2"),
])
def test_resume_refuses_what_would_change_the_experiment(run: Path, override: str, says: str):
    code, output = train(f"run.dir={run}", override, "--resume", "auto")
    assert code == 2, output
    assert says in output and "Traceback" not in output


def test_validation_bleu_decoding_is_refused_while_it_picks_the_best_checkpoint():
    from normzoo.recipe import from_dict
    from normzoo.run.resume import ResumeError, check_resumable

    for valid_bleu in (False, True):
        saved_recipe = from_dict(tiny(eval={"valid_bleu": valid_bleu})).to_dict()
        saved = {"normzoo": {"recipe": saved_recipe}, "loops": {}, "global_step": 2}
        recipe = from_dict(tiny(eval={"valid_bleu": valid_bleu, "beam": 4}))
        if valid_bleu:
            with pytest.raises(ResumeError, match=r"eval\.beam: checkpoint 1, recipe 4 \(it "
                               "decodes validation BLEU"):
                check_resumable(saved, recipe, Path("x.ckpt"))
        else:
            (change,) = check_resumable(saved, recipe, Path("x.ckpt"))
            assert str(change) == "eval.beam 1 -> 4"


def test_a_longer_cosine_schedule_says_the_decay_is_stretched():
    from normzoo.recipe import from_dict
    from normzoo.run.resume import check_resumable

    saved_recipe = from_dict(tiny(optim={"schedule": "cosine", "warmup_steps": 0})).to_dict()
    saved = {"normzoo": {"recipe": saved_recipe}, "loops": {}, "global_step": 1}
    longer = from_dict(tiny(optim={"schedule": "cosine", "warmup_steps": 0},
                            trainer={"max_steps": 9}))
    (change,) = check_resumable(saved, longer, Path("x.ckpt"))
    assert str(change).startswith("trainer.max_steps 1 -> 9 (the cosine decay now ends at step 9")


def test_resume_auto_of_a_mistyped_run_directory_says_it_does_not_exist(root: Path,
                                                                        run: Path):
    mistyped = run.with_name("rnu")
    code, output = train(f"run.dir={mistyped}", "--resume", "auto")
    assert code == 2, output
    assert f"the run directory {mistyped} does not exist (did you mean {run}?)" in output
    assert "no complete checkpoint" not in output and "Traceback" not in output
    assert not mistyped.exists()  # not even for the lock
    code, output = train("--resume", "auto")  # the recipe's default run directory: runs/tiny
    assert code == 2 and "runs/tiny does not exist" in output, output
    assert "run.dir=PATH" in output and not (root / "runs" / "tiny").exists()


def test_a_skipped_damaged_checkpoint_is_a_plain_warning_line(run: Path, root: Path):
    checkpoints = run / "checkpoints"
    (checkpoints / "last.ckpt").unlink()  # at step 2, as step-2.ckpt: the newest is step 1
    (checkpoints / "step-2.ckpt").unlink()
    (checkpoints / "last.ckpt").write_bytes(b"cut short")
    result = subprocess.run(
        [sys.executable, "-m", "normzoo", "train", "tiny.yaml", f"run.dir={run}",
         "--resume", "auto"], cwd=root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NORMZOO_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert (f"warning: skipping {checkpoints / 'last.ckpt'}: it cannot be read as a checkpoint "
            f"(cut short or damaged); resuming from {checkpoints / 'step-1.ckpt'} (step 1) "
            "instead\n") in result.stderr
    assert "UserWarning" not in result.stderr and "resume.py" not in result.stderr
    assert step_of(checkpoints / "last.ckpt") == 2  # redone from step 1


def test_the_sigterm_hint_repeats_the_overrides_and_resumes_the_same_run(root: Path,
                                                                        tmp_path: Path):
    run_dir = tmp_path / "term run"
    args = ["train", "tiny.yaml", f"run.dir={run_dir}", "optim.lr=1e-3", "trainer.max_steps=3",
            "run.name=it's mine"]
    env = {**os.environ, "NORMZOO_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
    stopped = subprocess.run([sys.executable, str(HERE / "crash.py"), "TERM", "1", *args],
                             cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    hint = stopped.stderr.split("continue with: ")[1].splitlines()[0]
    words = shlex.split(hint)
    assert words[:5] == ["normzoo", "train", "tiny.yaml", "--resume", "auto"]
    assert words[5:] == args[2:]  # every override, quoted for the shell
    resumed = subprocess.run([sys.executable, "-m", "normzoo", *words[1:]], cwd=root,
                             capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "resume: " not in resumed.stderr  # nothing changed
    assert step_of(run_dir / "checkpoints" / "last.ckpt") == 3


def test_settings_that_build_the_same_model_resume_and_those_that_do_not_are_refused():
    """``kv_heads`` equal to ``heads`` is multi-head attention as unset is, and ``rope_base``
    without rotary positions is read by nothing: neither stops a resume."""
    from normzoo.recipe import from_dict
    from normzoo.run.resume import ResumeError, check_resumable

    def saved(recipe: dict) -> dict:
        return {"normzoo": {"recipe": recipe}, "loops": {}, "global_step": 2}

    heads = tiny()["model"]["heads"]
    base = from_dict(tiny()).to_dict()
    same = from_dict(tiny(model={"kv_heads": heads, "rope_base": 500000.0}))
    assert check_resumable(saved(base), same, Path("x.ckpt")) == []
    with pytest.raises(ResumeError, match=r"model\.kv_heads: checkpoint null, recipe 1"):
        check_resumable(saved(base), from_dict(tiny(model={"kv_heads": 1})), Path("x.ckpt"))


def test_the_advice_on_a_refused_resume_is_one_that_works():
    """A new width changes every matrix's shape, so init.from would load nothing (and says so):
    the refusal does not offer it. A new depth keeps the layers both have: init.from with
    init.strict=false is offered, and loading the old weights that way takes those that fit
    (issue 37, item 6)."""
    from normzoo.models import assemble
    from normzoo.recipe import from_dict
    from normzoo.run.init_weights import InitWeights
    from normzoo.run.resume import ResumeError, check_resumable

    base = from_dict(tiny()).to_dict()
    saved = {"normzoo": {"recipe": base}, "loops": {}, "global_step": 2}
    wider = from_dict(tiny(model={"d_model": 2 * base["model"]["d_model"]}))
    with pytest.raises(ResumeError) as refused:
        check_resumable(saved, wider, Path("x.ckpt"))
    assert "init.from" not in str(refused.value) and "every matrix changes shape" in str(
        refused.value)
    deeper = from_dict(tiny(model={"encoder_layers": base["model"]["encoder_layers"] + 1}))
    with pytest.raises(ResumeError) as refused:
        check_resumable(saved, deeper, Path("x.ckpt"))
    assert "init.from=x.ckpt init.strict=false with another run.dir" in str(refused.value)
    old = assemble(from_dict(base).model, vocab_size=64).state_dict()
    new = assemble(deeper.model, vocab_size=64).state_dict()
    weights = InitWeights(source="x.ckpt", step=None, tokenizer="", state=dict(old),
                          strict=False)
    weights.fit({name: tensor.shape for name, tensor in new.items()}, [])
    assert 0 < weights.loaded < len(new) and weights.missing  # the new layer stays fresh
