"""Recipes: loading, ``key=value`` overrides, round trips, and every class of recipe error.

Each error test asserts that *all* problems of the recipe are reported in one ConfigError, each
located by its key path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from registered import builtin

from normzoo import recipe as recipes
from normzoo.errors import ConfigError, NormzooError
from normzoo.recipe import Recipe, apply_overrides, from_dict, load, parse_override
from normzoo.recipe.bases import read_recipe

RECIPES = sorted((Path(__file__).resolve().parent.parent / "recipes").glob("**/*.yaml"))


def problems(data, **kwargs) -> dict[str, str]:
    """``{key path: message}`` of the ConfigError that ``from_dict(data)`` raises."""
    with pytest.raises(ConfigError) as info:
        from_dict(data, **kwargs)
    found = {p.path: p.message for p in info.value.problems}
    assert len(found) == len(info.value.problems), "one problem per key path"
    for path, message in found.items():  # the printed error carries every problem, located
        assert f"{path}: {message}" in str(info.value)
    return found


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- loading and round trips ---------------------------------------------------------------------


def test_the_recipes_folder_is_not_empty():
    assert len(RECIPES) >= 5


@pytest.mark.parametrize("path", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_shipped_recipe_loads_and_round_trips(path: Path):
    recipe = load(path)
    assert isinstance(recipe, Recipe)
    raw = read_recipe(path)  # with what it builds on merged in
    assert recipe.task == raw["task"]
    assert recipe.model.family == recipes.FAMILY_OF_TASK[recipe.task]
    residual = raw["model"]["residual"]  # a name, or a mapping with options
    if isinstance(residual, dict):
        assert recipe.model.residual.options == {k: v for k, v in residual.items() if k != "name"}
        residual = residual["name"]
    assert recipe.model.residual.name == str(residual)
    # to_yaml -> YAML -> from_dict gives back an equal recipe, and so does to_dict.
    again = from_dict(yaml.safe_load(recipe.to_yaml()))
    assert again == recipe
    assert again.to_dict() == recipe.to_dict()
    assert from_dict(recipe.to_dict()) == recipe


def test_round_trip_keeps_scheme_options_and_overrides(tmp_path: Path):
    path = write(tmp_path, "task: causal_lm\nmodel: {d_model: 64, heads: 4}\n")
    recipe = load(path, ["model.residual=mixln", "model.residual.post_fraction=0.5",
                         "optim.betas=[0.9,0.99]", "data.tokenizer.type=unigram"])
    assert recipe.model.residual.name == "mixln"
    assert recipe.model.residual.options == {"post_fraction": 0.5}
    text = recipe.to_yaml()
    assert from_dict(yaml.safe_load(text)) == recipe
    # The saved recipe is self-contained: loading the YAML file itself gives the same recipe.
    assert load(write(tmp_path, text, "saved.yaml")) == recipe


def test_an_empty_recipe_file_is_refused_and_braces_give_the_defaults(tmp_path: Path):
    # An empty file is a mistake (issue 12: it started the 100,000-step default run).
    with pytest.raises(ConfigError, match="is empty"):
        load(write(tmp_path, "# nothing but a comment\n"))
    assert load(write(tmp_path, "{}\n", "defaults.yaml")) == Recipe()


@pytest.mark.parametrize(
    ("task", "family"), [(name, task.family) for name, task in builtin("task").items()])
def test_task_fills_in_the_model_family(task: str, family: str):
    assert from_dict({"task": task}).model.family == family
    assert from_dict({"task": task, "model": {"d_model": 64, "heads": 2}}).model.family == family
    assert from_dict({"task": task, "model": {"family": family}}).model.family == family


# -- overrides -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("optim.lr=3e-4", "optim.lr", 3e-4),
        ("optim.lr=3.0e-4", "optim.lr", 3e-4),
        ("optim.lr=1e5", "optim.lr", 1e5),
        ("optim.lr=0.001", "optim.lr", 0.001),
        ("trainer.max_steps=100", "trainer.max_steps", 100),
        ("trainer.progress_bar=false", "trainer.progress_bar", False),
        ("model.tie_output=true", "model.tie_output", True),
        ("optim.betas=[0.9,0.99]", "optim.betas", [0.9, 0.99]),
        ("optim.betas=[0.9, 0.99]", "optim.betas", [0.9, 0.99]),
        ("model.residual=deepnorm", "model.residual", "deepnorm"),
        ("data.name=de-en", "data.name", "de-en"),  # an 'e' does not make it a number
        ("data.src_lang=de", "data.src_lang", "de"),
        ("data.dir=/tmp/a=b", "data.dir", "/tmp/a=b"),  # only the first '=' splits
        ("eval.valid_bleu_limit=null", "eval.valid_bleu_limit", None),
        (" optim.lr = 2 ", "optim.lr", 2),
    ],
)
def test_parse_override(text: str, key: str, value):
    got_key, got = parse_override(text)
    assert got_key == key
    assert got == value
    assert type(got) is type(value)


@given(st.one_of(st.integers(-10**9, 10**9),
                 st.floats(allow_nan=False, allow_infinity=False)))
def test_numbers_round_trip_through_an_override(number):
    for text in (repr(number), str(number)):
        key, value = parse_override(f"optim.lr={text}")
        assert key == "optim.lr"
        assert value == number
        assert isinstance(value, type(number)) or isinstance(number, float)


def test_text_fields_take_the_text_as_written():
    out = apply_overrides({}, ["data.tgt_lang=no", "data.src_lang=on",
                               "data.valid_split=2013", "trainer.max_time=1:00:00:00",
                               "data.name='de-en'", "run.dir=null", "data.test_split=  x  "])
    assert out == {"data": {"tgt_lang": "no", "src_lang": "on", "valid_split": "2013",
                            "name": "de-en", "test_split": "x"},
                   "trainer": {"max_time": "1:00:00:00"}, "run": {"dir": None}}
    recipe = from_dict(out)
    assert (recipe.data.src_lang, recipe.data.tgt_lang) == ("on", "no")
    # Other fields keep YAML's reading.
    assert apply_overrides({}, ["trainer.progress_bar=no"]) == {
        "trainer": {"progress_bar": False}}


def test_a_second_recipe_file_is_named_as_one():
    """``normzoo recipe validate recipes/*.yaml`` hands the other files over as overrides."""
    with pytest.raises(ConfigError, match=r"a second recipe file\? a command takes one recipe"):
        apply_overrides({}, ["recipes/gpt_prenorm.yaml"])
    with pytest.raises(ConfigError) as error:
        apply_overrides({}, ["nonsense"])
    assert "recipe file" not in str(error.value)


@pytest.mark.parametrize("text", ["model=null", "model=", "data.tokenizer=~", "optim= "])
def test_a_section_is_not_emptied_by_an_override(text: str):
    """``model=`` (a stray space in a command line) or ``model=null`` put back every default
    of the model section, a 6+6 d-512 model in place of the recipe's, without a word."""
    with pytest.raises(ConfigError, match=r"is a section: an empty value would reset") as error:
        apply_overrides({"model": {"d_model": 64}}, [text])
    assert f"{text.split('=')[0]}.KEY=VALUE" in str(error.value)
    # an optional field is still cleared by null
    assert apply_overrides({}, ["model.qk_norm=null"]) == {"model": {"qk_norm": None}}


def test_overrides_change_a_loaded_recipe(tmp_path: Path):
    path = write(tmp_path, "task: translation\noptim: {lr: 1.0e-3}\n")
    recipe = load(path, ["optim.lr=3e-4", "trainer.max_steps=7", "trainer.progress_bar=false",
                         "optim.betas=[0.9,0.99]", "model.residual=deepnorm",
                         "data.tokenizer.vocab_size=300"])
    assert recipe.optim.lr == pytest.approx(3e-4)
    assert recipe.trainer.max_steps == 7
    assert recipe.trainer.progress_bar is False
    assert recipe.optim.betas == (0.9, 0.99)
    assert recipe.model.residual.name == "deepnorm"
    assert recipe.data.tokenizer.vocab_size == 300


def test_overrides_create_nested_sections_and_leave_the_input_alone():
    data = {"task": "mlm"}
    out = apply_overrides(data, ["data.tokenizer.vocab_size=500", "run.dir=/tmp/x"])
    assert out == {"task": "mlm", "data": {"tokenizer": {"vocab_size": 500}},
                   "run": {"dir": "/tmp/x"}}
    assert data == {"task": "mlm"}
    assert from_dict(out).data.tokenizer.vocab_size == 500


def test_a_scheme_name_replaces_the_mapping_with_the_old_options():
    data = {"model": {"residual": {"name": "mixln", "post_fraction": 0.5}}}
    out = apply_overrides(data, ["model.residual=deepnorm"])
    assert out["model"]["residual"] == "deepnorm"
    recipe = from_dict(out)
    assert recipe.model.residual.name == "deepnorm"
    assert recipe.model.residual.options == {}


def test_an_option_on_a_bare_name_turns_it_into_a_mapping():
    out = apply_overrides({"model": {"residual": "mixln"}}, ["model.residual.post_fraction=0.5"])
    assert out["model"]["residual"] == {"name": "mixln", "post_fraction": 0.5}
    assert from_dict(out).model.residual.options == {"post_fraction": 0.5}
    # The same for the norm.
    out = apply_overrides({"model": {"norm": "layernorm"}}, ["model.norm.eps=1e-6"])
    assert out["model"]["norm"] == {"name": "layernorm", "eps": 1e-6}


def test_overrides_apply_in_order():
    out = apply_overrides({}, ["model.residual=mixln", "model.residual.post_fraction=0.75",
                               "optim.lr=1", "optim.lr=2"])
    assert out == {"model": {"residual": {"name": "mixln", "post_fraction": 0.75}},
                   "optim": {"lr": 2}}


def test_bad_override_syntax_reports_every_override_at_once():
    with pytest.raises(ConfigError) as info:
        apply_overrides({"model": {"d_model": 64}},
                        ["foo", "=3", "a..b=1", "x=[1,", "model.d_model.x=4", "ok.key=1"])
    found = {p.path: p.message for p in info.value.problems}
    assert found.keys() == {"foo", "=3", "a..b=1", "x", "model.d_model"}
    assert "key=value" in found["foo"]
    assert "empty key" in found["=3"]
    assert "empty key" in found["a..b=1"]
    assert "YAML" in found["x"]
    assert "not a section" in found["model.d_model"]
    assert info.value.title == "invalid override"


def test_bad_override_syntax_through_load(tmp_path: Path):
    path = write(tmp_path, "task: translation\n")
    with pytest.raises(ConfigError, match="key=value"):
        load(path, ["trainer.max_steps"])


def test_an_override_can_introduce_a_recipe_error(tmp_path: Path):
    path = write(tmp_path, "task: translation\n")
    with pytest.raises(ConfigError) as info:
        load(path, ["optim.warmup=10", "model.dropout=1.5"])
    paths = {p.path for p in info.value.problems}
    assert paths == {"optim.warmup", "model.dropout"}


# -- every class of recipe error -------------------------------------------------------------------


def test_unknown_section_and_unknown_keys_with_suggestions():
    found = problems({
        "optimizer": {"lr": 1},
        "optim": {"warmup": 10, "lr": 1e-3},
        "data": {"tokenizer": {"vocab": 100}},
        "model": {"dropuot": 0.1},
        "trainer": {"max_step": 10},
    })
    assert found.keys() == {"optimizer", "optim.warmup", "data.tokenizer.vocab",
                            "model.dropuot", "trainer.max_step"}
    assert found["optimizer"] == "unknown section (did you mean 'optim'?)"
    assert found["optim.warmup"] == "unknown key (did you mean 'warmup_steps'?)"
    assert "did you mean 'vocab_size'" in found["data.tokenizer.vocab"]
    assert "did you mean 'dropout'" in found["model.dropuot"]
    assert "did you mean 'max_steps'" in found["trainer.max_step"]


def test_unknown_key_far_from_everything_has_no_suggestion():
    found = problems({"optim": {"zzzzqqq": 1}})
    assert found == {"optim.zzzzqqq": "unknown key"}


def test_wrong_types():
    found = problems({
        "seed": "one",
        "model": {"d_model": "wide", "tie_output": "maybe"},
        "optim": {"betas": [0.9, "x"], "lr": [1]},
        "trainer": {"devices": "two"},
        "data": "builtin",
    })
    assert found.keys() == {"seed", "model.d_model", "model.tie_output", "optim.betas.1",
                            "optim.lr", "trainer.devices", "data"}
    assert "integer" in found["seed"]
    assert "integer" in found["model.d_model"]
    assert "boolean" in found["model.tie_output"]
    # A union type (int or "auto") is one problem at the key's own path.
    assert "integer" in found["trainer.devices"] and "'auto'" in found["trainer.devices"]
    assert "dictionary" in found["data"]


def test_out_of_range_values():
    found = problems({
        "model": {"d_model": 30, "heads": 4, "ffn_dim": -1, "dropout": 1.0,
                  "encoder_layers": -2},
        "data": {"max_tokens": 0, "mask_prob": 1.5, "tokenizer": {"vocab_size": 10}},
        "optim": {"lr": -1e-3, "warmup_steps": -5, "label_smoothing": 1.0},
        "trainer": {"max_steps": 0},
        "eval": {"beam": 0},
    })
    assert found.keys() == {
        "model.d_model", "model.ffn_dim", "model.dropout", "model.encoder_layers",
        "data.max_tokens", "data.mask_prob", "data.tokenizer.vocab_size",
        "optim.lr", "optim.warmup_steps", "optim.label_smoothing",
        "trainer.max_steps", "eval.beam",
    }
    # d_model % heads is a cross-field check: it is reported alongside the field errors.
    assert found["model.d_model"] == "30 is not divisible by heads=4"
    assert "greater than 0" in found["model.ffn_dim"]
    assert "less than 1" in found["model.dropout"]
    assert "greater than 0" in found["data.max_tokens"]
    assert "greater than or equal to 64" in found["data.tokenizer.vocab_size"]


def test_a_model_without_layers_for_its_family():
    found = problems({"task": "causal_lm", "model": {"decoder_layers": 0}})
    assert found.keys() == {"model.decoder_layers"}
    assert "at least 1" in found["model.decoder_layers"]


def test_unknown_norm_and_scheme_names_with_suggestions():
    found = problems({"model": {"norm": "layernrom", "residual": "deepnrom"},
                      "optim": {"lr": 0}})
    assert found.keys() == {"model.norm", "model.residual", "optim.lr"}
    assert "unknown norm 'layernrom'" in found["model.norm"]
    assert "did you mean 'layernorm'" in found["model.norm"]
    assert "did you mean 'deepnorm'" in found["model.residual"]
    assert "rmsnorm" in found["model.norm"]  # lists what is installed


def test_registry_names_are_checked_even_when_the_model_has_other_problems():
    found = problems({"model": {"dropout": 1.5, "d_model": 30, "heads": 4,
                                "residual": "deepnrom"}})
    assert found.keys() == {"model.dropout", "model.d_model", "model.residual"}
    assert "did you mean 'deepnorm'" in found["model.residual"]


def test_registry_check_can_be_skipped():
    recipe = from_dict({"model": {"residual": "not_installed_here"}}, check_registry=False)
    assert recipe.model.residual.name == "not_installed_here"


def test_unknown_scheme_option_with_suggestion():
    found = problems({"model": {"residual": {"name": "mixln", "post_fractoin": 0.5}},
                      "optim": {"warmup": 1}})
    assert found.keys() == {"model.residual.post_fractoin", "optim.warmup"}
    assert "unknown option (did you mean 'post_fraction'?)" in found[
        "model.residual.post_fractoin"]
    assert "accepted: post_fraction" in found["model.residual.post_fractoin"]


def test_out_of_range_scheme_option():
    found = problems({"model": {"residual": {"name": "mixln", "post_fraction": 1.5},
                                "norm": {"name": "layernorm", "epss": 1}}})
    assert found.keys() == {"model.residual.post_fraction", "model.norm.epss"}
    assert "less than or equal to 1" in found["model.residual.post_fraction"]
    assert "did you mean 'eps'" in found["model.norm.epss"]


def test_scheme_options_via_override_are_validated(tmp_path: Path):
    path = write(tmp_path, "task: translation\nmodel: {residual: mixln}\n")
    with pytest.raises(ConfigError) as info:
        load(path, ["model.residual.post_fraction=-0.5"])
    assert [p.path for p in info.value.problems] == ["model.residual.post_fraction"]


def test_incompatible_norm_and_scheme():
    found = problems({"model": {"norm": "dyt", "residual": "post"}, "optim": {"lr": 0}})
    assert found.keys() == {"model.norm", "optim.lr"}
    assert "'dyt' cannot normalise the residual stream" in found["model.norm"]
    assert "pre-norm scheme" in found["model.norm"]
    # dyt with a pre-norm scheme is fine.
    assert from_dict({"model": {"norm": "dyt", "residual": "pre"}}).model.norm.name == "dyt"


def test_task_and_family_mismatch():
    found = problems({"task": "mlm", "model": {"family": "decoder"}})
    assert found == {"model.family": "task 'mlm' needs family 'encoder', not 'decoder'"}


def test_task_and_family_mismatch_is_reported_with_model_problems():
    found = problems({"task": "mlm", "model": {"family": "decoder", "dropout": 2,
                                               "d_model": 30, "heads": 4},
                      "optim": {"lr": -1}})
    assert found.keys() == {"model.family", "model.dropout", "model.d_model", "optim.lr"}


def test_an_invalid_task_or_family_is_one_problem_not_two():
    found = problems({"task": "translate", "model": {"family": "encoder_decoder"}})
    assert found.keys() == {"task"}
    found = problems({"task": "mlm", "model": {"family": "encodr"}})
    assert found.keys() == {"model.family"}
    assert "'encoder'" in found["model.family"]


def test_files_source_needs_a_directory():
    found = problems({"data": {"source": "files"}})
    assert found == {"data.dir": "required when source is 'files'"}
    # ... reported together with the other problems of the section and the recipe.
    found = problems({"data": {"source": "files", "max_len": 0}, "optim": {"lr": 0}})
    assert found.keys() == {"data.dir", "data.max_len", "optim.lr"}
    assert from_dict({"data": {"source": "files", "dir": "x"}}).data.dir == "x"


def test_hub_source_needs_a_path():
    assert problems({"data": {"source": "hub"}}) == {
        "data.path": "required when source is 'hub'"}


def test_min_lr_above_the_peak():
    found = problems({"optim": {"lr": 1e-4, "min_lr": 1e-3}})
    assert found.keys() == {"optim.min_lr"}


def test_a_recipe_with_many_problems_reports_all_of_them():
    found = problems({
        "tasks": "mlm",
        "task": "mlm",
        "model": {"family": "decoder", "norm": "dyt", "residual": "post", "d_model": 10,
                  "heads": 3, "dropuot": 0.1},
        "data": {"source": "files", "max_tokens": -1},
        "optim": {"warmup": 4000},
        "trainer": {"precision": "fp8"},
    })
    assert found.keys() == {"tasks", "model.family", "model.norm", "model.d_model",
                            "model.dropuot", "data.dir", "data.max_tokens", "optim.warmup",
                            "trainer.precision"}


def test_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="recipe file not found") as info:
        load(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(info.value)
    assert isinstance(info.value, NormzooError)


def test_a_directory_is_not_a_recipe(tmp_path: Path):
    with pytest.raises(ConfigError, match="is a directory, not a recipe file; give a recipe"):
        load(tmp_path)


def test_a_run_directory_given_as_the_recipe_names_its_recipe_and_the_resume(tmp_path: Path):
    """``normzoo train runs/x`` where ``runs/x/recipe.yaml`` was meant: the message names the
    file and the command that continues the run, and the command exits 2."""
    from typer.testing import CliRunner

    from normzoo.cli import app

    (tmp_path / "recipe.yaml").write_text("task: translation\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["train", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"{tmp_path} is a directory, not a recipe file" in result.output
    assert f"normzoo train {tmp_path / 'recipe.yaml'} --resume auto" in result.output
    assert "Traceback" not in result.output


def test_malformed_yaml_names_the_line(tmp_path: Path):
    path = write(tmp_path, "task: translation\nmodel:\n  d_model: 64\n  heads: [2\noptim: {}\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    message = str(info.value)
    assert "malformed YAML" in message
    assert str(path) in message
    assert "line 5" in message


def test_malformed_yaml_bad_indentation(tmp_path: Path):
    path = write(tmp_path, "task: translation\nmodel:\n  d_model: 64\n heads: 2\n")
    with pytest.raises(ConfigError, match=r"malformed YAML \(line 4"):
        load(path)


def test_not_utf8(tmp_path: Path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("task: translation # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="UTF-8"):
        load(path)


@pytest.mark.parametrize("text", ["- task\n- model\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str):
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load(write(tmp_path, text))
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        from_dict(yaml.safe_load(text))


def test_yaml_is_read_safely(tmp_path: Path):
    path = write(tmp_path, "task: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load(path)


def test_unknown_and_out_of_range_options_of_one_scheme_are_reported_together():
    found = problems({"model": {"residual": {"name": "mixln", "post_fraction": 1.5,
                                             "bogus": 1}}})
    assert found.keys() == {"model.residual.post_fraction", "model.residual.bogus"}
