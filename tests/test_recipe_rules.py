"""Every rule that ties recipe fields together is checked by ``normzoo recipe validate``, so that
validating a recipe catches all that ``normzoo train`` would refuse; and overrides give the
same recipe in any order.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.recipe import apply_overrides, from_dict

QUICKSTART = Path(__file__).parent.parent / "recipes" / "quickstart.yaml"

# (overrides on recipes/quickstart.yaml, key path of the problem, what its message says)
CROSS_FIELD_RULES = {
    "task needs its family": (["task=mlm", "model.family=decoder"], "model.family",
                              "task 'mlm' needs family 'encoder'"),
    "d_model divisible by heads": (["model.d_model=130"], "model.d_model",
                                   "not divisible by heads=4"),
    "an encoder has layers": (["model.encoder_layers=0"], "model.encoder_layers",
                              "needs at least 1"),
    "a decoder has layers": (["model.decoder_layers=0"], "model.decoder_layers",
                             "needs at least 1"),
    "pad id inside the vocabulary": (["model.vocab_size=100", "model.pad_id=100"],
                                     "model.pad_id", "outside the vocabulary"),
    "files need a folder": (["data.source=files"], "data.dir", "required when source"),
    "the hub needs a path": (["data.source=hub"], "data.path", "required when source"),
    "only hub data streams": (["task=causal_lm", "data.streaming=true"], "data.streaming",
                              "streams hub datasets only"),
    "translation does not stream": (["data.source=hub", "data.path=corpus",
                                     "data.streaming=true"], "data.streaming",
                                    "streams causal_lm and mlm corpora"),
    "an example fits a batch": (["data.max_len=512", "data.max_tokens=256"], "data.max_len",
                                "exceeds max_tokens=256"),
    "the floor below the peak": (["optim.min_lr=0.01"], "optim.min_lr",
                                 "above the peak learning rate"),
    "admin profiling without fsdp": (["trainer.strategy=fsdp", "model.residual=admin",
                                      "model.residual.init=profiled"], "model.residual",
                                     "init 'profiled' is not supported with "
                                     "trainer.strategy=fsdp"),
    "no batch statistics in a causal decoder": (["model.norm=batchnorm"], "model.norm",
                                                "cannot be used in a causal decoder"),
    "a stream norm that can stand on the stream": (["model.norm=dyt", "model.residual=post"],
                                                   "model.norm",
                                                   "cannot normalise the residual stream"),
    "kv_heads divides heads": (["model.kv_heads=3"], "model.kv_heads",
                               "does not divide heads=4"),
    "at least one kv head": (["model.kv_heads=0"], "model.kv_heads",
                             "greater than or equal to 1"),
    "rope needs an even head dimension": (["model.positions=rope", "model.d_model=132"],
                                          "model.positions", "even head dimension"),
    "a positive rope base": (["model.rope_base=0"], "model.rope_base", "greater than 0"),
    "no norm bias in a bias-free model": (["model.bias=false", "model.norm.bias=true"],
                                          "model.norm.bias", "contradicts model.bias: false"),
    "a scheme's options fit its signature": (["model.residual=mixln",
                                              "model.residual.post_fraction=2"],
                                             "model.residual.post_fraction", "less than"),
}


def validate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["recipe", "validate", str(QUICKSTART), *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("rule", sorted(CROSS_FIELD_RULES))
def test_recipe_validate_checks_every_cross_field_rule(rule: str):
    overrides, path, says = CROSS_FIELD_RULES[rule]
    code, output = validate(*overrides)
    assert code == 2, output
    assert f"{path}: " in output and says in output, output
    assert "Traceback" not in output


def test_the_quickstart_with_an_example_longer_than_a_batch_is_refused_up_front():
    """The case that used to print ``ok`` and fail only once ``train`` built its data."""
    code, output = validate("data.max_len=512", "data.max_tokens=256")
    assert code == 2
    assert "data.max_len: 512 exceeds max_tokens=256" in output
    assert validate("data.max_len=256", "data.max_tokens=256")[0] == 0


def test_every_rule_is_reported_at_once():
    overrides = [o for rule in ("an example fits a batch", "the floor below the peak",
                                "d_model divisible by heads")
                 for o in CROSS_FIELD_RULES[rule][0]]
    code, output = validate(*overrides)
    assert code == 2
    assert {"data.max_len", "optim.min_lr", "model.d_model"} <= {
        line.strip()[2:].split(":")[0] for line in output.splitlines()
        if line.strip().startswith("- ")}


# -- overrides in any order ------------------------------------------------------------------

ORDERED = ["model.residual.post_fraction=0.25", "model.residual=mixln", "model.d_model=64",
           "model.heads=2", "model.norm.eps=1.0e-6", "model.norm=rmsnorm"]


def test_a_scheme_option_before_the_scheme_name_is_kept():
    """``model.residual.factor=2 model.residual=NAME`` once dropped the option silently."""
    for overrides in (ORDERED[:2], ORDERED[1::-1]):
        recipe = from_dict(apply_overrides(yaml.safe_load(QUICKSTART.read_text()), overrides))
        assert recipe.model.residual.name == "mixln"
        assert recipe.model.residual.options == {"post_fraction": 0.25}


@settings(max_examples=40, deadline=None)
@given(st.permutations(ORDERED))
def test_overrides_give_one_recipe_in_any_order(order: list[str]):
    base = yaml.safe_load(QUICKSTART.read_text())
    assert from_dict(apply_overrides(base, order)) == from_dict(apply_overrides(base, ORDERED))


def test_recipe_show_prints_one_recipe_for_every_order():
    shown = set()
    for order in itertools.islice(itertools.permutations(ORDERED[:4]), 0, None, 5):
        result = CliRunner().invoke(app, ["recipe", "show", str(QUICKSTART), *order])
        assert result.exit_code == 0, result.output
        shown.add(result.output)
    assert len(shown) == 1
    assert "post_fraction: 0.25" in shown.pop()


def test_a_misspelt_option_is_reported_whatever_its_place():
    for overrides in (["model.residual=mixln", "model.residual.post_fractoin=0.5"],
                      ["model.residual.post_fractoin=0.5", "model.residual=mixln"]):
        code, output = validate(*overrides)
        assert code == 2
        assert "model.residual.post_fractoin: unknown option" in output


def test_rules_of_one_section_and_across_sections_report_together():
    """A section's rules are all reported, and the recipe-wide ones too while sections have
    problems of their own (pydantic skips a model's rules once one of its fields fails)."""
    code, output = validate("data.source=files", "data.max_len=512", "data.max_tokens=256")
    assert code == 2 and "data.dir: required" in output and "data.max_len: 512" in output
    code, output = validate("model.d_model=130", "data.source=hub", "data.path=corpus",
                            "data.streaming=true", "model.dropout=2")
    assert code == 2
    for says in ("model.d_model: 130", "model.dropout:", "data.streaming: streams causal_lm"):
        assert says in output, output


def test_a_model_section_that_skipped_the_registry_is_checked_before_it_is_built():
    from normzoo.errors import ConfigError
    from normzoo.models import assemble

    for model, says in (({"norm": "batchnorm"}, "causal decoder"),
                        ({"residual": {"name": "mixln", "post_fraction": 5}}, "less than")):
        recipe = from_dict({"task": "causal_lm", "model": model}, check_registry=False)
        with pytest.raises(ConfigError, match=says):
            assemble(recipe.model, vocab_size=100)
    typed = from_dict({"task": "causal_lm", "model": {
        "d_model": 32, "heads": 2, "ffn_dim": 64, "decoder_layers": 1,
        "residual": {"name": "mixln", "post_fraction": "0.5"}}})
    assert typed.model.residual.options == {"post_fraction": 0.5}  # typed once, at validation
    assert assemble(typed.model, vocab_size=100) is not None


def test_the_registry_check_returns_a_new_config_and_changes_none():
    """Checking a model section against the registry gives a new, typed config; the one it
    was given (frozen) is left as it was, and checking again changes nothing."""
    from normzoo.models import ModelConfig

    given = ModelConfig(residual={"name": "mixln", "post_fraction": "0.5"})
    checked = given.resolved()
    assert checked is not given
    assert given.residual.options == {"post_fraction": "0.5"}
    assert checked.residual.options == {"post_fraction": 0.5}
    assert checked.resolved() == checked
