"""``normzoo generate``: continuations of a causal-LM checkpoint or export, streamed as they are
sampled, equal to the Python API's with the same seed; and shell completion."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import tiny, toy_text
from typer.testing import CliRunner

import normzoo
from normzoo.cli import app
from normzoo.export.writer import export
from normzoo.recipe import from_dict
from normzoo.run import training as train

runner = CliRunner()
PROMPTS = ["the dog", "a small cat saw", "the"]


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last.ckpt`` of a few steps of a tiny causal LM on the toy corpus's source side."""
    root = toy_text(tmp_path_factory.mktemp("lm"))
    recipe = from_dict(tiny(task="causal_lm", model={"family": "decoder", "encoder_layers": 0},
                            run={"dir": str(root / "run")},
                            data={"source": "files", "dir": str(root), "train_limit": 300,
                                  "valid_limit": 20},
                            trainer={"max_steps": 4, "val_every_steps": 4}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, "lm.yaml")
    return root / "run" / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize("settings", [
    ["--seed", "0"],
    ["--seed", "7", "--temperature", "0.7", "--top-k", "20"],
    ["--seed", "3", "--top-p", "0.9", "--max-new-tokens", "5"],
    ["--temperature", "0"],  # greedy: no seed needed
])
def test_generate_prints_what_the_python_api_returns(lm_checkpoint: Path, tmp_path: Path,
                                                     settings: list[str]):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["generate", str(lm_checkpoint), "--input", str(prompts),
                                 *settings])
    assert result.exit_code == 0, result.output
    options = dict(zip(settings[::2], settings[1::2], strict=True))
    expected = normzoo.load(lm_checkpoint).generate(
        PROMPTS, seed=int(options["--seed"]) if "--seed" in options else None,
        temperature=float(options.get("--temperature", 1.0)),
        top_k=int(options["--top-k"]) if "--top-k" in options else None,
        top_p=float(options["--top-p"]) if "--top-p" in options else None,
        max_new_tokens=int(options.get("--max-new-tokens", 50)))
    assert result.output.splitlines() == expected
    assert any(expected)  # something was sampled


def test_stream_pieces_join_to_the_continuation(lm_checkpoint: Path):
    import torch

    loaded = normzoo.load(lm_checkpoint)
    pieces = list(loaded.stream("the dog", generator=torch.Generator().manual_seed(5)))
    assert len(pieces) > 1  # shown as it comes, not at the end
    assert "".join(pieces) == loaded.generate(["the dog"], seed=5)[0]


def test_generate_from_an_export_and_from_stdin(lm_checkpoint: Path, tmp_path: Path):
    out = export(lm_checkpoint, tmp_path / "export")
    from_file = runner.invoke(app, ["generate", str(lm_checkpoint), "--prompt", "the dog",
                                    "--seed", "1"])
    from_export = runner.invoke(app, ["generate", str(out), "--seed", "1"], input="the dog\n")
    assert from_file.exit_code == from_export.exit_code == 0, from_export.output
    assert from_file.output == from_export.output


@pytest.mark.parametrize(("args", "says"), [
    (["--prompt", "a", "--input", "x.txt"], "not both"),
    (["--prompt", "a", "--top-p", "0"], "--top-p"),
])
def test_generate_refuses_bad_arguments(lm_checkpoint: Path, args: list[str], says: str):
    result = runner.invoke(app, ["generate", str(lm_checkpoint), *args])
    assert result.exit_code == 2 and says in result.output


def test_the_python_api_refuses_what_is_not_a_list_of_strings(lm_checkpoint: Path,
                                                               tiny_checkpoint: Path):
    """A lone string was translated letter by letter, a number failed with an AttributeError
    in the tokenizer and ``beam=0`` with an IndexError in the search."""
    translator, lm = normzoo.load(tiny_checkpoint), normzoo.load(lm_checkpoint)
    with pytest.raises(TypeError, match=r"not one string .*pass \[text\]"):
        translator.translate("the dog .")
    with pytest.raises(TypeError, match="item 1 is not a string but int"):
        translator.translate(["the dog .", 3])
    with pytest.raises(ValueError, match="beam"):
        translator.translate(["the dog ."], beam=0)
    with pytest.raises(ValueError, match="lenpen"):
        translator.translate(["the dog ."], lenpen=float("nan"))
    with pytest.raises(TypeError, match="generate takes a list of strings"):
        lm.generate("the dog")
    with pytest.raises(TypeError, match="stream: item 0 is not a string but bytes"):
        list(lm.stream(b"the dog"))
    assert translator.translate(("the dog .",)) == translator.translate(["the dog ."])


def test_generate_refuses_a_translation_model(tiny_checkpoint: Path):
    result = runner.invoke(app, ["generate", str(tiny_checkpoint), "--prompt", "a"])
    assert result.exit_code == 2
    assert "not a causal LM" in result.output and "Traceback" not in result.output


def test_shell_completion_is_on(monkeypatch: pytest.MonkeyPatch):
    # Typer detects the user's shell from the process tree, and ignores a shell named after the
    # flag; with detection off (as in Typer's own tests) the flag takes the shell's name, so the
    # test does not depend on which shell started pytest (under `sh` it says "not supported").
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = runner.invoke(app, ["--show-completion", "bash"])
    assert result.exit_code == 0 and "_normzoo_completion" in result.output
    assert "--install-completion" in runner.invoke(app, ["--help"]).output


def test_more_new_tokens_than_the_model_holds_is_said_not_silently_cut(lm_checkpoint: Path,
                                                                       tmp_path: Path):
    """``--max-new-tokens 100000`` was cut to the model's positions without a word."""
    import subprocess
    import sys

    positions = normzoo.load(lm_checkpoint).model.config.max_positions
    done = subprocess.run([sys.executable, "-m", "normzoo", "generate", str(lm_checkpoint),
                           "--prompt", "the dog", "--seed", "1", "--max-new-tokens", "100000"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (f"warning: --max-new-tokens 100,000: the model holds {positions:,} positions, "
            f"prompt included, so each continuation stops there (at most {positions - 1:,} "
            "new tokens)") in done.stderr
    assert len(done.stdout.splitlines()) == 1
