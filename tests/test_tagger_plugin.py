"""A third party's token tagger (tests/third_party/nz_tagger: its own package, one
``normzoo.tasks`` entry point, importing only ``normzoo.plugin``, under 150 lines and 10 task
members) installed beside normzoo: it trains, is cached by ``prepare``, ``evaluate`` prints what
``summary.json`` holds, and a run killed with SIGKILL resumes to the uninterrupted run."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_resume import assert_same_run, normzoo

PACKAGE = Path(__file__).parent / "third_party" / "nz_tagger"
STEPS = 30


def _tag(word: str) -> str:
    return "S" if len(word) <= 3 else "M" if len(word) <= 6 else "L"


def _write_splits(folder: Path) -> float:
    """Sentences of the toy corpus, each word tagged by its length; the majority tag's share."""
    from normzoo.data import builtin

    folder.mkdir()
    counts: dict[str, int] = {}
    for split, size in (("train", 400), ("valid", 40), ("test", 40)):
        lines = []
        for text, _ in builtin.generate(split, size=size):
            words = text.split()
            tags = [_tag(w) for w in words]
            for tag in tags:
                counts[tag] = counts.get(tag, 0) + (split == "test")
            lines.append(f"{' '.join(words)}\t{' '.join(tags)}")
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return max(counts.values()) / sum(counts.values())


@pytest.fixture(scope="module")
def tagger(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The plugin installed (a site folder with its dist-info, on PYTHONPATH), its data, its
    recipe, and an uninterrupted run."""
    root = tmp_path_factory.mktemp("tagger")
    site = root / "site"
    shutil.copytree(PACKAGE, site / "nz_tagger")
    info = site / "nz_tagger-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nz-tagger\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[normzoo.tasks]\nnz_tagger = nz_tagger.task:Tagger\n")
    majority = _write_splits(root / "data")
    recipe = {"task": "nz_tagger",
              "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 2,
                        "dropout": 0.0},
              "data": {"source": "files", "dir": str(root / "data"), "max_len": 40,
                       "max_tokens": 512, "tokenizer": {"type": "bpe", "vocab_size": 300}},
              "optim": {"lr": 3.0e-3, "warmup_steps": 5},
              "trainer": {"max_steps": STEPS, "val_every_steps": 5, "log_every_steps": 1,
                          "progress_bar": False}}
    (root / "tagger.yaml").write_text(yaml.safe_dump(recipe))
    env = {"PYTHONPATH": str(site)}
    whole = normzoo(["train", "tagger.yaml", "run.dir=runs/whole"], root, env=env)
    assert whole.returncode == 0, whole.stderr
    return {"root": root, "env": env, "majority": majority, "whole": root / "runs" / "whole"}


def test_the_tagger_is_small_and_written_against_normzoo_plugin_alone():
    sources = {p.name: p.read_text(encoding="utf-8") for p in PACKAGE.glob("*.py")}
    assert sum(len(s.splitlines()) for s in sources.values()) <= 150
    tree = ast.parse(sources["task.py"])
    [task] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tagger"]
    members = [n for n in task.body if isinstance(n, ast.FunctionDef | ast.Assign)]
    assert len(members) <= 10
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                    "normzoo"):
                assert node.module == "normzoo.plugin", node.module


def test_it_trains_and_evaluate_prints_its_summary(tagger: dict):
    summary = json.loads((tagger["whole"] / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["task"] == "nz_tagger"
    test = summary["test"]
    assert test["accuracy"] > tagger["majority"]  # it learned more than the commonest tag
    checkpoint = tagger["whole"] / "checkpoints" / "last.ckpt"
    best = summary["best_checkpoint"]
    result = normzoo(["evaluate", best or str(checkpoint), "--json"], tagger["root"],
                     env=tagger["env"])
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert scores["accuracy"] == round(test["accuracy"], 4)
    assert scores["loss"] == round(test["loss"], 4)
    assert scores["lines"] == 40


def test_prepare_caches_its_tags_and_counts_its_tokens(tagger: dict):
    result = normzoo(["prepare", "tagger.yaml"], tagger["root"], env=tagger["env"])
    assert result.returncode == 0, result.stderr
    assert "already prepared" in result.stdout + result.stderr
    [manifest] = (tagger["root"] / "cache").rglob("manifest.json")
    stored = json.loads(manifest.read_text())
    assert stored["dtypes"] == {"tags": "int32"}
    assert {"train/text.tokens", "train/tags.tokens"} <= set(stored["files"])
    from normzoo.data.cache import Prepared

    prepared = Prepared.open(manifest.parent)
    text, tags = prepared.table("train", "text"), prepared.table("train", "tags")
    assert (text.lengths() == tags.lengths()).all()  # one tag id per token
    assert stored["splits"]["train"]["tokens"] == int(text.lengths().sum())


def test_a_sigkilled_run_resumes_to_the_uninterrupted_one(tagger: dict):
    root, env = tagger["root"], tagger["env"]
    killed = normzoo(["train", "tagger.yaml", "run.dir=runs/killed"], root,
                     crash=["step", "17"], env=env)
    assert killed.returncode == -9, killed.stderr
    resumed = normzoo(["train", "tagger.yaml", "run.dir=runs/killed", "--resume", "auto"],
                      root, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(root / "runs" / "killed", tagger["whole"])
