"""The recipes shipped with normzoo, by name (issue 60, item 1): ``normzoo recipe list`` and
``recipe copy``; ``train``, ``recipe show|validate``, ``sweep`` and a study's ``recipe`` taking
a shipped name where no such file is (a path always wins; the first line says which was read);
a recipe's ``base:`` naming one; an unknown name refused (exit 2) with the names.

Run from a temporary folder, as a user outside a clone would: the names resolve all the same
(normzoo.recipe.shipped reads the checkout's recipes/ here, the wheel's normzoo/recipes/ once
installed; tests/test_packaging.py runs the wheel).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.recipe import load, shipped

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
NAMES = sorted(p.relative_to(RECIPES).with_suffix("").as_posix() for p in RECIPES.rglob("*.yaml"))
# The tiny model of tests/tiny.py as overrides of the quick start: a run in seconds.
TINY = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.max_positions=64", "data.train_limit=60",
        "data.valid_limit=4", "data.max_tokens=512", "data.tokenizer.vocab_size=120",
        "data.tokenizer.min_frequency=1", "trainer.max_steps=1", "trainer.val_every_steps=1",
        "trainer.progress_bar=false", "trainer.log_every_steps=1", "eval.valid_bleu=false"]

runner = CliRunner()


@pytest.fixture(autouse=True)
def _outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in an empty folder, outside the repository."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_every_recipe_of_the_repository_is_shipped_by_name():
    assert sorted(shipped.names()) == NAMES
    assert "quickstart" in NAMES and "studies/llama_schemes" in NAMES
    assert shipped.folder().resolve() == RECIPES  # a checkout: the one copy, not another


@pytest.mark.parametrize("name", NAMES)
def test_each_shipped_recipe_says_what_it_is_for_in_its_first_line(name: str):
    first = (RECIPES / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# ") and first.rstrip().endswith((".", ")")), first
    assert len(first) <= 110, f"{name}: keep the first line to one line of `recipe list`"


@pytest.mark.parametrize("name", NAMES)
def test_each_shipped_recipe_loads_by_name_and_from_a_copy(name: str, tmp_path: Path):
    """By name, and as `recipe copy` writes it to another folder (no relative base left
    behind): the same recipe."""
    copied = invoke("recipe", "copy", name, str(tmp_path / "mine" / "r.yaml"))
    assert copied.exit_code == 0, copied.output
    assert load(name) == load(tmp_path / "mine" / "r.yaml") == load(RECIPES / f"{name}.yaml")


def test_recipe_list_prints_each_recipe_s_name_task_model_data_and_purpose():
    result = invoke("recipe", "list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["NAME", "TASK", "MODEL", "DATA"]
    rows = {line.split()[0]: line for line in lines[1:] if line and not line.startswith(" ")}
    for name in NAMES:
        assert name in rows, name
    quick = rows["quickstart"].split()
    assert quick == ["quickstart", "translation", "encoder_decoder", "pre/layernorm", "builtin"]
    assert rows["wmt_deepnorm"].split()[1:] == ["translation", "encoder_decoder",
                                                "deepnorm/layernorm", "hub:wmt/wmt14", "(de-en)"]
    assert rows["gpt_llama"].split()[1:4] == ["causal_lm", "decoder", "pre/rmsnorm"]
    assert rows["multi30k_prenorm"].split()[-1] == "files:data/multi30k"
    purpose = lines[lines.index(rows["quickstart"]) + 1]
    assert purpose == "    Quick start: the built-in toy En->XX corpus, a small Pre-LN " \
                      "encoder-decoder, 2-core CPU."
    assert f"{len(NAMES)} recipes shipped with normzoo" in result.output


def test_recipe_copy_writes_the_recipe_as_shipped_and_keeps_an_existing_file(tmp_path: Path):
    shipped_text = (RECIPES / "quickstart.yaml").read_text(encoding="utf-8")
    result = invoke("recipe", "copy", "quickstart")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "quickstart.yaml").read_text(encoding="utf-8") == shipped_text
    assert "wrote quickstart.yaml" in result.output

    (tmp_path / "quickstart.yaml").write_text("seed: 5\n", encoding="utf-8")
    again = invoke("recipe", "copy", "quickstart")
    assert again.exit_code == 2
    assert "quickstart.yaml exists; --force overwrites it" in again.output
    assert (tmp_path / "quickstart.yaml").read_text(encoding="utf-8") == "seed: 5\n"
    forced = invoke("recipe", "copy", "quickstart", "--force")
    assert forced.exit_code == 0, forced.output
    assert (tmp_path / "quickstart.yaml").read_text(encoding="utf-8") == shipped_text
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # written atomically


def test_recipe_copy_into_a_folder_or_a_named_file(tmp_path: Path):
    (tmp_path / "mine").mkdir()
    assert invoke("recipe", "copy", "studies/llama_schemes", "mine").exit_code == 0
    assert (tmp_path / "mine" / "llama_schemes.yaml").is_file()
    assert invoke("recipe", "copy", "recipes/wmt_prenorm.yaml", "new/wmt.yaml").exit_code == 0
    assert (tmp_path / "new" / "wmt.yaml").read_text() == (RECIPES / "wmt_prenorm.yaml"
                                                           ).read_text()
    assert invoke("recipe", "copy", "classify", "made/").exit_code == 0  # a folder to make
    assert (tmp_path / "made" / "classify.yaml").is_file()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    blocked = invoke("recipe", "copy", "classify", "file/c.yaml")
    assert blocked.exit_code == 2 and "file is a file, not a folder" in blocked.output


def test_an_unknown_name_exits_2_with_the_shipped_names():
    for command in (["recipe", "copy", "quickstrat"], ["train", "quickstrat"],
                    ["recipe", "show", "quickstrat"], ["recipe", "validate", "quickstrat"],
                    ["sweep", "quickstrat", "--set", "seed=1,2"]):
        result = invoke(*command)
        assert result.exit_code == 2, (command, result.output)
        assert "(did you mean 'quickstart'?)" in result.output, command
        assert "the shipped recipes (normzoo recipe list): bert_postnorm," in result.output
        assert "studies/multi30k_papers" in result.output
        assert "Traceback" not in result.output
    assert "recipe file not found: quickstrat" in invoke("train", "quickstrat").output
    assert "no recipe shipped with normzoo is named quickstrat" in invoke(
        "recipe", "copy", "quickstrat").output


def test_show_and_validate_take_a_shipped_name_and_say_so_first():
    for given in ("quickstart", "quickstart.yaml", "recipes/quickstart.yaml"):
        result = invoke("recipe", "show", given, "seed=4")
        assert result.exit_code == 0, result.output
        first, _, rest = result.output.partition("\n")
        assert first == (f"recipe: {given} (shipped with normzoo {shipped.version()}: "
                         f"{RECIPES / 'quickstart.yaml'})")
        assert yaml.safe_load(rest) == load(RECIPES / "quickstart.yaml", ["seed=4"]).to_dict()
        assert yaml.safe_load(result.stdout) == yaml.safe_load(rest)  # the note is on stderr
    valid = invoke("recipe", "validate", "studies/llama_schemes")
    assert valid.exit_code == 0, valid.output
    assert f"studies/llama_schemes: ok (built on {RECIPES / 'gpt_llama.yaml'})" in valid.output


def test_a_file_of_a_shipped_name_wins_and_the_first_line_says_so(tmp_path: Path):
    (tmp_path / "quickstart.yaml").write_text("base: quickstart\nseed: 77\n", encoding="utf-8")
    result = invoke("recipe", "show", "quickstart.yaml")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == ("recipe: quickstart.yaml (this file; normzoo also "
                                             "ships a recipe named quickstart: normzoo recipe "
                                             "show quickstart)")
    assert yaml.safe_load(result.stdout)["seed"] == 77
    # The bare name is no path: the shipped recipe, and the line says the file is not read.
    by_name = invoke("recipe", "show", "quickstart")
    assert yaml.safe_load(by_name.stdout)["seed"] == 1
    assert "; quickstart.yaml is not read: give its path to use it" in by_name.output
    # train reads the file too: this one's problem is reported, nothing trains.
    (tmp_path / "quickstart.yaml").write_text("task: translation\nmodel: {d_model: 130}\n",
                                              encoding="utf-8")
    trained = invoke("train", "quickstart.yaml")
    assert trained.exit_code == 2
    assert "model.d_model" in trained.output and not (tmp_path / "runs").exists()


def test_a_file_at_the_shipped_path_in_a_clone_is_read_without_a_note(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    result = invoke("recipe", "show", "recipes/quickstart.yaml")
    assert result.exit_code == 0
    assert result.output == result.stdout  # nothing to say: the file is the shipped one


def test_a_base_may_name_a_shipped_recipe(tmp_path: Path):
    """The README's ablation.yaml (`base: quickstart.yaml`) works in any folder, and so does a
    bare name; a file beside the recipe still wins."""
    (tmp_path / "ablation.yaml").write_text(
        "base: quickstart.yaml\nmodel: {residual: deepnorm}\n", encoding="utf-8")
    (tmp_path / "named.yaml").write_text("base: quickstart\nseed: 9\n", encoding="utf-8")
    assert load("ablation.yaml").model.residual.name == "deepnorm"
    assert load("ablation.yaml").optim == load("quickstart").optim
    assert load("named.yaml").seed == 9
    valid = invoke("recipe", "validate", "named.yaml")
    assert valid.exit_code == 0, valid.output
    assert valid.output.strip() == f"named.yaml: ok (built on {RECIPES / 'quickstart.yaml'})"
    (tmp_path / "quickstart.yaml").write_text("task: translation\nseed: 11\n", encoding="utf-8")
    assert load("named.yaml").seed == 9 and load("ablation.yaml").seed == 11
    (tmp_path / "gone.yaml").write_text("base: quickstrat\n", encoding="utf-8")
    missing = invoke("recipe", "show", "gone.yaml")
    assert missing.exit_code == 2
    assert ("base: gone.yaml builds on quickstrat, but there is no recipe file quickstrat, nor "
            "a recipe shipped with normzoo of that name (did you mean 'quickstart'?)"
            ) in missing.output


def test_train_by_name_from_outside_the_repository(tmp_path: Path):
    result = invoke("train", "quickstart", *TINY)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].startswith("recipe: quickstart (shipped with normzoo")
    summary = yaml.safe_load((tmp_path / "runs" / "quickstart" / "summary.json").read_text())
    assert summary["recipe"] == "quickstart" and summary["status"] == "completed"
    assert "test BLEU" in result.output


def test_sweep_takes_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The cells read the shipped file (they may run in other processes); the sweep's folder
    is named after the recipe."""
    seen = {}

    def fake_sweep(path, settings, overrides, folder, *args, **kwargs):
        seen["path"] = path
        folder.mkdir(parents=True)
        (folder / "results.md").write_text("| cell |\n", encoding="utf-8")
        return []

    monkeypatch.setattr("normzoo.sweep.runner.sweep", fake_sweep)
    result = invoke("sweep", "quickstart", "--set", "seed=1,2", "--steps", "1")
    assert result.exit_code == 0, result.output
    assert seen["path"] == RECIPES / "quickstart.yaml"
    assert result.output.startswith("recipe: quickstart (shipped with normzoo")
    assert (tmp_path / "runs" / "sweep-quickstart" / "results.md").is_file()


def test_a_study_s_recipe_may_be_a_shipped_name(tmp_path: Path):
    from normzoo.study.spec import load_study

    (tmp_path / "s.yaml").write_text(
        "question: q?\nrecipe: quickstart\ngrid: {model.residual: [pre, post]}\n"
        "baseline: {model.residual: pre}\n", encoding="utf-8")
    lines: list[str] = []
    study = load_study(tmp_path / "s.yaml", echo=lines.append)
    assert study.parts["main"].recipe == RECIPES / "quickstart.yaml"
    assert lines == [f"recipe: quickstart (shipped with normzoo {shipped.version()}: "
                     f"{RECIPES / 'quickstart.yaml'})"]
    (tmp_path / "quickstart").write_text("task: translation\n", encoding="utf-8")
    assert load_study(tmp_path / "s.yaml").parts["main"].recipe == tmp_path / "quickstart"


def test_a_study_file_taken_out_of_a_clone_reads_the_shipped_recipe(tmp_path: Path):
    """studies/quickstart-schemes.yaml names ../recipes/quickstart.yaml: beside a clone's
    recipes/ that file, elsewhere the shipped recipe of that name."""
    from normzoo.study.spec import load_study

    (tmp_path / "studies").mkdir()
    study = tmp_path / "studies" / "quickstart-schemes.yaml"
    study.write_text((ROOT / "studies" / "quickstart-schemes.yaml").read_text(encoding="utf-8"),
                     encoding="utf-8")
    assert load_study(study).parts["main"].recipe == RECIPES / "quickstart.yaml"
    in_clone = load_study(ROOT / "studies" / "quickstart-schemes.yaml").parts["main"].recipe
    assert in_clone.resolve() == RECIPES / "quickstart.yaml"
