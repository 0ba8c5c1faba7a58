"""The WMT recipes run on local line-aligned files by overrides alone (the machines are offline).

The fast test shrinks the model by overrides as well, so it runs in seconds; the slow one keeps
Transformer-base and takes a few optimizer steps on real WMT newstest text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from normzoo import recipe
from normzoo.data import builtin
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

WMT_RECIPES = ["recipes/wmt_prenorm.yaml", "recipes/wmt_postnorm.yaml",
               "recipes/wmt_deepnorm.yaml"]
WMT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "wmt14_ende"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
        yield


def local_files(folder: Path) -> Path:
    """train/valid/test .en/.de files: the toy corpus stands in for WMT text."""
    for split, size in (("train", 300), ("valid", 20), ("test", 20)):
        builtin.write_split(folder, split, src_lang="en", tgt_lang="de", size=size)
    return folder


def files_overrides(folder: Path, run_dir: Path) -> list[str]:
    return [
        "data.source=files", f"data.dir={folder}", "data.valid_split=valid",
        "data.test_split=test", f"run.dir={run_dir}", "trainer.progress_bar=false",
        "trainer.accelerator=cpu", "trainer.precision=32-true",
    ]


@pytest.mark.parametrize("path", WMT_RECIPES)
def test_wmt_recipe_validates_as_shipped(path: str):
    loaded = recipe.load(path)
    assert loaded.data.source == "hub" and loaded.data.path == "wmt/wmt14"
    assert (loaded.model.d_model, loaded.model.encoder_layers, loaded.model.heads) == (512, 6, 8)


@pytest.mark.parametrize("path", WMT_RECIPES)
def test_wmt_recipe_trains_on_local_files_by_overrides(path: str, tmp_path: Path):
    small = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=2",
             "model.decoder_layers=2", "data.tokenizer.vocab_size=200", "data.max_tokens=512",
             "trainer.accumulate=1", "trainer.max_steps=4", "trainer.val_every_steps=2",
             "eval.beam=1"]
    run_dir = tmp_path / "run"
    loaded = recipe.load(path, files_overrides(local_files(tmp_path / "data"), run_dir) + small)
    assert loaded.model.residual.name == Path(path).stem.removeprefix("wmt_").replace(
        "prenorm", "pre").replace("postnorm", "post")
    summary = train.run(loaded, path)
    assert summary["steps"] == 4
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert summary["test"]["sentences"] == 20


@pytest.mark.slow
@pytest.mark.skipif(not WMT_DIR.is_dir(), reason="needs ../shared/data/wmt14_ende")
def test_wmt_transformer_base_takes_steps_on_newstest(tmp_path: Path):
    """Full-size Transformer-base, two optimizer steps of 2 x 1024 tokens on newstest2013."""
    run_dir = tmp_path / "run"
    overrides = [
        "data.source=files", f"data.dir={WMT_DIR}", "data.train_split=newstest2013",
        "data.valid_split=newstest2013", "data.test_split=newstest2014",
        "data.train_limit=400", "data.valid_limit=8", "data.max_tokens=1024",
        "data.tokenizer.vocab_size=4000", "trainer.accumulate=2", "trainer.max_steps=2",
        "trainer.val_every_steps=2", "trainer.precision=32-true", "trainer.accelerator=cpu",
        "trainer.progress_bar=false", f"run.dir={run_dir}", "eval.beam=1",
        "eval.valid_bleu=false",
    ]
    summary = train.run(recipe.load("recipes/wmt_prenorm.yaml", overrides), "wmt_prenorm.yaml")
    assert summary["steps"] == 2
