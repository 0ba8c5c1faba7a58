"""Recipes that build on others (issue 27): ``base: other.yaml`` merged under the recipe, bases
of bases, cycles and missing files as command-line errors (exit 2), and a run whose stored
``recipe.yaml`` is the whole merged recipe, without ``base``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.errors import ConfigError
from normzoo.recipe import from_dict, load, merge, read_recipe
from normzoo.run.machine import resolve_auto

runner = CliRunner()


def write(path: Path, data: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


# -- merging -------------------------------------------------------------------------------------


def test_mappings_merge_key_by_key_and_lists_and_scalars_replace():
    base = {"task": "causal_lm", "optim": {"lr": 1e-3, "betas": [0.9, 0.98], "eps": 1e-8},
            "trainer": {"loggers": ["csv", "tensorboard"], "max_steps": 10},
            "data": {"tokenizer": {"vocab_size": 100, "lowercase": True}}}
    top = {"optim": {"lr": 2e-3, "betas": [0.9, 0.95]}, "trainer": {"loggers": ["csv"]},
           "data": {"tokenizer": {"vocab_size": 200}}, "seed": 4}
    before = yaml.safe_dump([base, top])
    assert merge(base, top) == {
        "task": "causal_lm", "seed": 4,
        "optim": {"lr": 2e-3, "betas": [0.9, 0.95], "eps": 1e-8},
        "trainer": {"loggers": ["csv"], "max_steps": 10},
        "data": {"tokenizer": {"vocab_size": 200, "lowercase": True}}}
    assert yaml.safe_dump([base, top]) == before  # neither input changes
    # A mapping replaces a scalar and a scalar a mapping (outside a scheme or norm).
    assert merge({"run": "x"}, {"run": {"dir": "r"}}) == {"run": {"dir": "r"}}
    assert merge({"run": {"dir": "r"}}, {"run": None}) == {"run": None}


def test_a_scheme_merges_as_overrides_do():
    def residual(base, top):
        return merge({"model": {"residual": base}}, {"model": {"residual": top}})["model"][
            "residual"]

    # Options add to the base's scheme, named or not.
    assert residual("deepnorm", {"alpha": 2.0}) == {"name": "deepnorm", "alpha": 2.0}
    assert residual({"name": "admin", "init": "profiled"}, {"omega": 1.0}) == {
        "name": "admin", "init": "profiled", "omega": 1.0}
    assert residual({"name": "admin", "init": "profiled"}, {"name": "admin"}) == {
        "name": "admin", "init": "profiled"}
    # Another name replaces the scheme with the old one's options.
    assert residual({"name": "admin", "init": "profiled"}, {"name": "deepnorm"}) == {
        "name": "deepnorm"}
    assert residual({"name": "admin", "init": "profiled"}, "post") == "post"
    norm = merge({"model": {"norm": "rmsnorm"}}, {"model": {"norm": {"eps": 1e-6}}})
    assert norm["model"]["norm"] == {"name": "rmsnorm", "eps": 1e-6}


# -- reading ---------------------------------------------------------------------------------------


def test_a_recipe_builds_on_its_base_and_the_base_on_its_own(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    write(tmp_path / "common" / "root.yaml", tiny(optim={"lr": 1e-3, "warmup_steps": 5}))
    write(tmp_path / "common" / "mid.yaml", "base: root.yaml\noptim: {lr: 2.0e-3}\n"
          "model: {residual: deepnorm}\n")
    derived = write(tmp_path / "ablations" / "a.yaml",
                    "base: ../common/mid.yaml\noptim: {warmup_steps: 7}\nseed: 9\n")
    monkeypatch.chdir(tmp_path / "common")  # paths are the files' own, not the working folder's
    data = read_recipe(derived)
    assert "base" not in data
    recipe = load(derived)
    assert recipe == from_dict(tiny(optim={"lr": 2e-3, "warmup_steps": 7}, seed=9,
                                    model={"residual": "deepnorm"}))
    # Overrides go on top of everything, and validation sees the merged recipe once.
    assert load(derived, ["optim.lr=5e-4"]).optim.lr == 5e-4


def test_a_list_of_bases_applies_in_order(tmp_path: Path):
    write(tmp_path / "one.yaml", tiny(seed=1, optim={"lr": 1e-3}))
    write(tmp_path / "two.yaml", {"seed": 2, "optim": {"warmup_steps": 3}})
    recipe = load(write(tmp_path / "r.yaml", "base: [one.yaml, two.yaml]\n"))
    assert (recipe.seed, recipe.optim.lr, recipe.optim.warmup_steps) == (2, 1e-3, 3)
    recipe = load(write(tmp_path / "r.yaml", "base: [two.yaml, one.yaml]\n"))
    assert (recipe.seed, recipe.optim.lr, recipe.optim.warmup_steps) == (1, 1e-3, 3)


def test_only_the_merged_recipe_is_validated(tmp_path: Path):
    # Neither file is a valid recipe alone: d_model 130 is not divisible by 4 heads.
    write(tmp_path / "base.yaml", tiny(model={"d_model": 130, "heads": 4}))
    load(write(tmp_path / "r.yaml", "base: base.yaml\nmodel: {heads: 2}\n"))
    with pytest.raises(ConfigError, match=r"model\.d_model: 130 is not divisible by heads=4"):
        load(tmp_path / "base.yaml")


@pytest.mark.parametrize("value", ["3", "[]", "[a.yaml, 4]", "''", "{x: 1}"])
def test_base_must_name_files(tmp_path: Path, value: str):
    with pytest.raises(ConfigError, match="base must be a recipe file's path, or a list"):
        load(write(tmp_path / "r.yaml", f"base: {value}\n"))


def test_base_is_no_key_of_plain_data_or_overrides(tmp_path: Path):
    with pytest.raises(ConfigError, match="base: names the recipe file a recipe file builds"):
        from_dict({"base": "x.yaml"})
    write(tmp_path / "b.yaml", tiny())
    with pytest.raises(ConfigError, match="not set by an override"):
        load(write(tmp_path / "r.yaml", tiny()), ["base=b.yaml"])


# -- at the command line -------------------------------------------------------------------------


def test_recipes_in_a_cycle_are_refused_naming_the_chain(tmp_path: Path):
    a = write(tmp_path / "a.yaml", "base: sub/b.yaml\nseed: 1\n")
    write(tmp_path / "sub" / "b.yaml", "base: ../a.yaml\nseed: 2\n")
    for command in ("validate", "show"):
        result = runner.invoke(app, ["recipe", command, str(a)])
        assert result.exit_code == 2, result.output
        assert (f"base: recipes that build on each other in a cycle: {a} -> "
                f"{tmp_path / 'sub' / 'b.yaml'} -> {a}") in result.output
        assert "Traceback" not in result.output
    itself = write(tmp_path / "self.yaml", "base: ./self.yaml\n")
    result = runner.invoke(app, ["recipe", "validate", str(itself)])
    assert result.exit_code == 2
    assert f"cycle: {itself} -> {itself}" in result.output


def test_links_are_followed_to_the_file_they_name(tmp_path: Path):
    a = write(tmp_path / "a.yaml", "base: link.yaml\n")
    (tmp_path / "link.yaml").symlink_to(a)
    cycle = re.escape(f"cycle: {a} -> {tmp_path / 'link.yaml'}") + "$"
    with pytest.raises(ConfigError, match=cycle):
        read_recipe(a)
    (tmp_path / "loop1.yaml").symlink_to(tmp_path / "loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to(tmp_path / "loop1.yaml")
    with pytest.raises(ConfigError, match=r"builds on loop1\.yaml, but there is no recipe file"):
        read_recipe(write(tmp_path / "r.yaml", "base: loop1.yaml\n"))


def test_a_missing_base_is_refused(tmp_path: Path):
    write(tmp_path / "mid.yaml", "base: gone.yaml\n")
    path = write(tmp_path / "r.yaml", "base: mid.yaml\n")
    result = runner.invoke(app, ["recipe", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert (f"base: {tmp_path / 'mid.yaml'} builds on gone.yaml, but there is no recipe file "
            f"{tmp_path / 'gone.yaml'}") in result.output
    assert "Traceback" not in result.output


def test_a_problem_in_a_recipe_built_on_bases_names_the_bases(tmp_path: Path):
    """A key with a problem may come from a base the user is not looking at: the error says
    which files were merged (exit 2)."""
    write(tmp_path / "typo.yaml", "model: {familly: decoder}\n")
    path = write(tmp_path / "top.yaml", "base: typo.yaml\ntask: causal_lm\n")
    result = runner.invoke(app, ["recipe", "validate", str(path)])
    assert result.exit_code == 2
    assert f"invalid recipe (built on {tmp_path / 'typo.yaml'})" in result.output
    assert "model.familly: unknown key" in result.output
    plain = write(tmp_path / "plain.yaml", "model: {familly: decoder}\n")
    assert "built on" not in runner.invoke(app, ["recipe", "validate", str(plain)]).output


def test_show_and_validate_print_the_merged_recipe(tmp_path: Path):
    base = write(tmp_path / "base.yaml", tiny())
    path = write(tmp_path / "r.yaml", "base: base.yaml\noptim: {lr: 3.0e-3}\n")
    shown = runner.invoke(app, ["recipe", "show", str(path), "seed=5"])
    assert shown.exit_code == 0, shown.output
    printed = yaml.safe_load(shown.output)
    assert "base" not in printed
    assert printed == from_dict(tiny(optim={"lr": 3e-3}, seed=5)).to_dict()
    valid = runner.invoke(app, ["recipe", "validate", str(path)])
    assert valid.exit_code == 0, valid.output
    assert valid.output.strip() == f"{path}: ok (built on {base})"


def test_a_run_stores_the_whole_recipe_without_its_base(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    base = write(tmp_path / "recipes" / "base.yaml", tiny())
    path = write(tmp_path / "recipes" / "r.yaml", "base: base.yaml\noptim: {lr: 2.0e-3}\n")
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["train", str(path), f"run.dir={run_dir}", "seed=7"])
    assert result.exit_code == 0, result.output
    stored = yaml.safe_load((run_dir / "recipe.yaml").read_text(encoding="utf-8"))
    assert "base" not in stored
    # As this machine trains it: data.buckets' auto resolved (no ladder on a CPU).
    expected = resolve_auto(load(path, [f"run.dir={run_dir}", "seed=7"]))
    assert stored == expected.to_dict()
    base.unlink()  # the run is reproducible without the base
    assert load(run_dir / "recipe.yaml") == expected
