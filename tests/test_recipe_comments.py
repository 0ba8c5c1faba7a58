"""The commands a recipe's comments give run clean (issue 52, item 3): each "Offline:" line and
``normzoo train recipes/...`` example, followed as written (a folder for DIR), loads and draws
no warning. ``recipes/gpt_llama.yaml``'s "Offline:" line used to leave the hub's ``data.path``
set beside ``data.source=files``, which ``train`` warns is not read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from normzoo.recipe import load
from normzoo.run.inputs import unread_data_keys

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
OVERRIDE = re.compile(r"^[a-z_][\w.]*=\S*$")


def commented_commands(recipe: Path) -> list[list[str]]:
    """The overrides of each command in the recipe's leading comment (continued lines joined)."""
    text = []
    for line in recipe.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text.append(line.lstrip("# ").rstrip())
    joined = " ".join(text).replace("\\ ", " ")
    commands = re.findall(r"(?:Offline:|normzoo train \S+)((?:\s+[a-z_][\w.]*=\S+)+)", joined)
    return [[word for word in found.split() if OVERRIDE.match(word)] for found in commands]


CASES = [(path, words) for path in sorted(RECIPES.rglob("*.yaml"))
         for words in commented_commands(path)]


def test_the_recipes_with_commands_are_found():
    assert {path.name for path, _ in CASES} >= {"gpt_llama.yaml", "wmt_prenorm.yaml",
                                                "bert_postnorm.yaml", "multi30k_prenorm.yaml"}


@pytest.mark.parametrize("path, words", CASES, ids=[f"{p.name}:{' '.join(w)}" for p, w in CASES])
def test_a_commented_command_loads_without_a_warning(tmp_path: Path, path: Path, words):
    words = [w.replace("PATH/TO/multi30k", str(tmp_path)).replace("=DIR", f"={tmp_path}")
             for w in words]
    recipe = load(path, words)
    assert unread_data_keys(recipe) == []
