"""The prepared (memory-mapped) data path: exactly the in-memory path's batches, a cache keyed
by content, and no torn or damaged cache ever read as data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny

from normzoo.data.batching import token_budget_batches
from normzoo.data.cache import DamagedCache, cache_root
from normzoo.data.prepare import open_prepared, prepare, recipe_tokenizer
from normzoo.data.sources import load_parallel, load_text
from normzoo.data.tokenizer import BOS, EOS, PAD
from normzoo.recipe import from_dict
from normzoo.tasks.datamodule import TextDataModule

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_multi30k = pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))


# -- the in-memory path as it was: Python lists of token lists (the reference) ----------------


def _pad(rows, value=PAD):
    out = torch.full((len(rows), max(len(r) for r in rows)), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def reference_translation(src, tgt, max_len, drop_long):
    """(lengths, collate) of the list-based ParallelData normzoo had before prepared data."""
    pairs = enumerate(zip(src, tgt, strict=True))
    kept = [(i, s[: max_len - 1], t[: max_len - 1]) for i, (s, t) in pairs
            if not (drop_long and (len(s) + 1 > max_len or len(t) + 1 > max_len))]

    def collate(items):
        rows = [kept[i] for i in items]
        return {"src": _pad([[*s, EOS] for _, s, _ in rows]),
                "tgt_in": _pad([[BOS, *t] for _, _, t in rows]),
                "tgt_out": _pad([[*t, EOS] for _, _, t in rows]),
                "ids": torch.tensor([i for i, _, _ in rows]),
                "ntokens": sum(len(t) + 1 for _, _, t in rows)}

    return [max(len(s), len(t)) + 1 for _, s, t in kept], collate


def reference_blocks(lines, block):
    stream = [t for ids in lines for t in [*ids, EOS]]
    blocks = [stream[i : i + block + 1] for i in range(0, len(stream) - 1, block)]
    blocks = [b for b in blocks if len(b) > 1]

    def collate(items):
        rows = [blocks[i] for i in items]
        return {"tokens": _pad([r[:-1] for r in rows]),
                "labels": _pad([r[1:] for r in rows], value=-100),
                "ntokens": sum(len(r) - 1 for r in rows)}

    return [len(b) - 1 for b in blocks], collate


def reference_sentences(lines, max_len):
    rows = [[BOS, *ids[: max_len - 2], EOS] for ids in lines if ids]
    return [len(r) for r in rows], rows


def same_batch(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def multi30k(task: str, **data) -> object:
    if task == "translation":
        source = {"source": "files", "dir": str(MULTI30K), "src_lang": "en", "tgt_lang": "de",
                  "train_split": "train", "valid_split": "val", "test_split": "test2016"}
    else:
        source = {"source": "files", "dir": str(data.pop("dir")), "train_split": "train",
                  "valid_split": "val", "test_split": "test2016"}
    return from_dict(tiny(task=task, data={
        "train_limit": None, "valid_limit": None, "max_len": 40, "max_tokens": 1024,
        "tokenizer": {"vocab_size": 2000, "min_frequency": 2}, **source, **data}))


@needs_multi30k
def test_prepared_translation_batches_equal_the_in_memory_path():
    """Every batch of an epoch (token ids and order) and every validation/test batch: the
    memory-mapped arrays give what the lists gave, with ids that score each sentence once."""
    recipe = multi30k("translation")
    module = TextDataModule(recipe)
    module.setup("fit")
    tokenizer = module.tokenizer
    data = recipe.data
    for role, split, drop in (("train", "train", True), ("valid", "val", False),
                              ("test", "test2016", False)):
        src, tgt = load_parallel(data, split)
        lengths, collate = reference_translation(tokenizer.encode_batch(src),
                                                 tokenizer.encode_batch(tgt), data.max_len, drop)
        dataset = module.dataset(role)
        assert dataset.lengths().tolist() == lengths
        batches = token_budget_batches(lengths, data.max_tokens, seed=recipe.seed, epoch=1,
                                       shuffle=drop)
        for items in batches:
            assert same_batch(dataset.collate(items), collate(items))
        if role != "train":
            assert module.sources[role] == src and module.references[role] == tgt
    # Some pairs really are longer than max_len=40 and dropped for training only.
    assert len(module.dataset("train")) < 29_000 == len(load_parallel(data, "train")[0])
    # The loader is the sampler over those lengths: its first batches are the reference's.
    loader = iter(module.train_dataloader())
    reference = token_budget_batches(module.dataset("train").lengths(), data.max_tokens,
                                     seed=recipe.seed, epoch=0)
    for items in reference[:5]:
        assert same_batch(next(loader), module.dataset("train").collate(items))


@needs_multi30k
@pytest.mark.parametrize("task", ["causal_lm", "mlm"])
def test_prepared_language_model_batches_equal_the_in_memory_path(task: str, tmp_path: Path):
    for split in ("train", "val", "test2016"):
        (tmp_path / f"{split}.txt").write_bytes((MULTI30K / f"{split}.en").read_bytes())
    recipe = multi30k(task, dir=tmp_path)
    module = TextDataModule(recipe)
    module.setup("fit")
    for role, split in (("train", "train"), ("valid", "val")):
        lines = module.tokenizer.encode_batch(load_text(recipe.data, split))
        dataset = module.dataset(role)
        if task == "causal_lm":
            lengths, collate = reference_blocks(lines, recipe.data.max_len)
            assert dataset.lengths().tolist() == lengths
            for items in token_budget_batches(lengths, 1024, seed=3)[:50]:
                assert same_batch(dataset.collate(items), collate(items))
        else:
            lengths, rows = reference_sentences(lines, recipe.data.max_len)
            assert dataset.lengths().tolist() == lengths
            for items in token_budget_batches(lengths, 1024, seed=3)[:50]:
                assert torch.equal(torch.cat([torch.as_tensor(r) for r in dataset.rows(items)]),
                                   torch.cat([torch.tensor(rows[i]) for i in items]))


def test_cache_is_reused_and_keyed_by_content(tmp_path: Path):
    """A second prepare opens the same folder; a changed byte in any split builds a new one
    whose arrays hold the new text."""
    folder = tmp_path / "data"
    folder.mkdir()
    for split, n in (("train", 300), ("valid", 20), ("test", 20)):
        (folder / f"{split}.en").write_text("".join(f"a b c {i}\n" for i in range(n)))
        (folder / f"{split}.xx").write_text("".join(f"x y z {i}\n" for i in range(n)))
    recipe = from_dict(tiny(data={"source": "files", "dir": str(folder), "train_limit": None,
                                  "valid_limit": None}))
    first, tokenizer, report = prepare(recipe)
    assert report.built
    again, _, report = prepare(recipe)
    assert not report.built and again.path == first.path
    # The test file changes (same size): a new cache, and the old one untouched.
    path = folder / "test.xx"
    path.write_text(path.read_text().replace("x y z 7\n", "x y q 7\n"))
    changed, _, report = prepare(recipe)
    assert report.built and changed.path != first.path
    assert changed.lines("test", "ref")[7] == "x y q 7"
    assert first.lines("test", "ref")[7] == "x y z 7"
    assert (changed.table("test", "tgt").row(7).tolist()
            == tokenizer.encode("x y q 7"))


def _small_recipe(tmp_path: Path, lines: int = 200):
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    for split in ("train", "valid", "test"):
        (folder / f"{split}.en").write_text("".join(f"the cat {i} sat\n" for i in range(lines)))
        (folder / f"{split}.xx").write_text("".join(f"le chat {i} assis\n" for i in range(lines)))
    return from_dict(tiny(data={"source": "files", "dir": str(folder), "train_limit": None,
                                "valid_limit": None}))


@pytest.mark.parametrize("damage", ["flip", "truncate", "manifest", "missing"])
def test_damaged_cache_is_detected_and_rebuilt(tmp_path: Path, damage: str):
    recipe = _small_recipe(tmp_path)
    prepared, tokenizer, _ = prepare(recipe)
    good = prepared.table("train", "src").tokens.copy()
    target = prepared.path / "train" / "src.tokens"
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[10] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-2])
    elif damage == "manifest":
        (prepared.path / "manifest.json").write_text("{")
    else:
        target.unlink()
    if damage != "flip":  # a process that only maps (no checksum) still refuses it
        with pytest.raises(DamagedCache, match="damaged"):
            open_prepared(recipe, tokenizer)
    rebuilt, _, report = prepare(recipe)
    assert report.built and "damaged" in report.rebuilt_damaged
    assert np.array_equal(rebuilt.table("train", "src").tokens, good)


def test_other_ranks_wait_for_the_cache_and_never_build(tmp_path: Path):
    recipe = _small_recipe(tmp_path)
    tokenizer = recipe_tokenizer(recipe)
    with pytest.raises(DamagedCache, match="normzoo prepare"):
        open_prepared(recipe, tokenizer, wait_s=0)
    assert not list(cache_root().glob("[0-9a-f]*[0-9a-f]"))  # nothing was built


def test_tokenizer_trains_on_a_seeded_sample(tmp_path: Path):
    """Above ``sample_size`` examples the vocabulary comes from a seeded sample: the same
    seed gives the same tokenizer, another seed another cache entry."""
    recipe = _small_recipe(tmp_path, lines=400)
    full = recipe_tokenizer(recipe)

    def sampled(seed: int):
        data = recipe.to_dict()["data"]
        data["tokenizer"] = {**data["tokenizer"], "sample_size": 40, "sample_seed": seed}
        return recipe_tokenizer(from_dict({**recipe.to_dict(), "data": data}))

    assert sampled(1).to_str() == sampled(1).to_str()
    assert sampled(1).to_str() != full.to_str()
    from normzoo.data import train_tokenizer as module

    texts = module._tokenizer_texts(from_dict({**recipe.to_dict(), "data": {
        **recipe.to_dict()["data"],
        "tokenizer": {**recipe.to_dict()["data"]["tokenizer"], "sample_size": 40}}}))
    assert len(texts) == 80  # 40 sources, then their 40 targets
    assert [t.split()[2] for t in texts[:40]] == [t.split()[2] for t in texts[40:]]


def _prepare_command(recipe_file: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "normzoo", "prepare", str(recipe_file)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_during_prepare_leaves_nothing_usable(tmp_path: Path):
    """A prepare killed while it writes leaves only a temporary folder, which no reader opens
    and the next prepare removes; that prepare's cache equals an uninterrupted one."""
    import yaml

    folder = tmp_path / "data"
    folder.mkdir()
    text = "".join(f"sentence number {i} with a few words\n" for i in range(60_000))
    for split in ("train", "valid", "test"):
        (folder / f"{split}.en").write_text(text)
        (folder / f"{split}.xx").write_text(text.upper())
    recipe = tiny(data={"source": "files", "dir": str(folder), "train_limit": None,
                        "valid_limit": None})
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(yaml.safe_dump(recipe))
    root = tmp_path / "cache" / "prepared"
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    process = _prepare_command(recipe_file, env)
    deadline = time.monotonic() + 120
    while not list(root.glob("*.tmp-*/valid")) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    leftovers = [p for p in root.iterdir() if p.is_dir() and p.name != "tokenizers"]
    assert leftovers and all(".tmp-" in p.name for p in leftovers)
    parsed = from_dict(recipe)
    with pytest.raises(DamagedCache):
        open_prepared(parsed, recipe_tokenizer(parsed))
    # The next prepare builds the whole cache and clears the torn folder.
    finished = _prepare_command(recipe_file, env)
    out, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    assert not list(root.glob("*.tmp-*"))
    prepared, _, report = prepare(parsed)
    assert not report.built
    assert prepared.manifest["splits"]["train"]["rows"] == 60_000
    assert Path(out.strip().splitlines()[-1].split(": ", 1)[1].split(" (")[0]) == prepared.path


def test_prepare_command_reports_what_it_wrote(tmp_path: Path):
    recipe = _small_recipe(tmp_path)
    data = recipe.to_dict()
    data["data"]["max_len"] = 5  # "the cat 123 sat" is longer: dropped from training
    import yaml

    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(yaml.safe_dump(data))
    result = subprocess.run([sys.executable, "-m", "normzoo", "prepare", str(recipe_file)],
                            capture_output=True, text=True,
                            env={**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("train: 200 pairs")  # the role, once: the split has its name
    assert "dropped" in lines[0] and "longer than data.max_len=5" in lines[0]
    assert lines[1].startswith("valid: 200 pairs") and lines[2].startswith("test:  ")
    assert lines[3].startswith("built in ") and "MiB" in lines[3]
    manifest = json.loads((Path(lines[3].split(": ", 1)[1].split(" (")[0])
                           / "manifest.json").read_text())
    assert manifest["splits"]["train"]["rows"] == 200
    missing = subprocess.run([sys.executable, "-m", "normzoo", "prepare", str(recipe_file),
                              f"data.dir={tmp_path / 'nowhere'}"], capture_output=True, text=True)
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert "Traceback" not in missing.stderr
