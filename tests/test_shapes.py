"""Few batch shapes (:mod:`normzoo.data.shapes`): the ladder fitted exactly, batches padded to
its rungs with one shape a rung, the padding invisible to the loss, ``data.buckets`` resolved
for the machine and recorded, and the shapes and padding of real corpora (Multi30k, the WMT14
sample) at the quick start's budget."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny

from normzoo.data.batching import ShapedBatch, TokenBudgetSampler, pack, token_budget_batches
from normzoo.data.examples import ParallelData, SentenceData, TokenTable
from normzoo.data.shapes import LengthLadder, count_shapes, ladder_for, rows_per_rung
from normzoo.errors import ConfigError
from normzoo.recipe import from_dict, load
from normzoo.run.machine import batch_ladder

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def slots(lengths: np.ndarray, rungs: tuple[int, ...]) -> int:
    return int(LengthLadder(rungs).ceil(lengths).sum())


@pytest.mark.parametrize("seed", range(6))
def test_the_fitted_ladder_pads_least_of_all_ladders(seed: int):
    lengths = np.random.default_rng(seed).integers(1, 30, size=200)
    values = sorted(set(lengths.tolist()))
    for count in (1, 2, 3, 4):
        fitted = LengthLadder.fit(lengths, count)
        assert len(fitted.rungs) == count and fitted.rungs[-1] == values[-1]
        best = min(slots(lengths, (*inner, values[-1]))
                   for inner in itertools.combinations(values[:-1], count - 1))
        assert slots(lengths, fitted.rungs) == best


def test_a_ladder_as_long_as_the_lengths_are_distinct_is_the_lengths():
    assert LengthLadder.fit([5, 3, 3, 9], 8).rungs == (3, 5, 9)
    assert LengthLadder.fit([], 4).rungs == (1,)


def test_ceil_pads_up_to_the_next_rung_and_leaves_longer_lengths_alone():
    ladder = LengthLadder((8, 16, 32))
    assert ladder.ceil(np.array([1, 8, 9, 31, 32, 40])).tolist() == [8, 8, 16, 32, 32, 40]
    assert ladder.ceil(17) == 32


def test_a_ladder_is_distinct_ascending_positive_lengths():
    for rungs in ((), (8, 8), (16, 8), (0, 8)):
        with pytest.raises(ValueError, match="ascending"):
            LengthLadder(rungs)


def test_a_spread_ladder_climbs_geometrically_to_max_len():
    ladder = LengthLadder.spread(6, 256)
    assert ladder.rungs[0] == 8 and ladder.rungs[-1] == 256 and len(ladder.rungs) == 6
    assert all(r % 8 == 0 for r in ladder.rungs)
    ratios = np.diff(np.log(ladder.rungs))
    assert ratios.max() - ratios.min() < 0.3
    assert LengthLadder.spread(4, 6).rungs == (6,)


def ladder_batches(lengths, budget, rungs, **kwargs):
    return token_budget_batches(lengths, budget, ladder=LengthLadder(rungs), **kwargs)


def test_ladder_batches_hold_every_example_once_and_keep_the_budget():
    lengths = np.random.default_rng(0).integers(1, 60, size=3000)
    batches = ladder_batches(lengths, 1024, (12, 20, 32, 59), seed=4, epoch=2)
    assert sorted(i for b in batches for i in b) == list(range(3000))
    for batch in batches:
        assert isinstance(batch, ShapedBatch)
        assert max(lengths[batch]) <= batch.length
        assert len(batch) * batch.length <= 1024


def test_every_batch_but_the_last_has_its_rungs_one_shape():
    lengths = np.random.default_rng(1).integers(1, 60, size=5000)
    ladder = LengthLadder((12, 20, 32, 59))
    rows = dict(zip(ladder.rungs, rows_per_rung(ladder, 1024).tolist(), strict=True))
    batches = token_budget_batches(lengths, 1024, ladder=ladder, shuffle=False)
    assert all(len(b) == rows[b.length] for b in batches[:-1])
    shapes = {(len(b), b.length) for b in batches}
    assert len(shapes) <= len(ladder.rungs) + 1
    # The batches are a function of the sorted lengths: every epoch has the same shapes.
    for epoch in range(3):
        again = token_budget_batches(lengths, 1024, ladder=ladder, seed=9, epoch=epoch)
        assert {(len(b), b.length) for b in again} == shapes


def test_without_a_ladder_the_batches_are_as_before():
    lengths = np.random.default_rng(2).integers(1, 40, size=500)
    batches = token_budget_batches(lengths, 256, seed=3)
    assert all(isinstance(b, ShapedBatch) and b.length == 0 for b in batches)
    order, bounds, padded = pack(lengths, 256, seed=3)
    assert [order[bounds[b]:bounds[b + 1]].tolist() for b in range(len(padded))] == batches
    assert not padded.any()


def test_examples_longer_than_the_ladder_keep_their_own_length():
    batches = ladder_batches([3, 4, 30, 31, 5], 64, (8,), shuffle=False)
    assert [(sorted(b), b.length) for b in batches] == [([0, 1, 4], 8), ([2, 3], 0)]


def test_ranks_share_a_ladder_batch_evenly():
    lengths = np.random.default_rng(3).integers(1, 60, size=2000)
    ladder = LengthLadder((12, 20, 32, 59))
    per_rank = [list(TokenBudgetSampler(lengths, 512, seed=1, rank=r, world_size=2,
                                        ladder=ladder)) for r in range(2)]
    for first, second in list(zip(*per_rank, strict=True))[:-1]:
        assert len(first) == len(second) and first.length == second.length
        assert len(first) * first.length <= 512
        assert not set(first) & set(second)


def pairs(rows: int = 9):
    rng = np.random.default_rng(5)
    src = [rng.integers(4, 50, size=rng.integers(1, 12)).tolist() for _ in range(rows)]
    tgt = [rng.integers(4, 50, size=rng.integers(1, 12)).tolist() for _ in range(rows)]
    return ParallelData.build(src, tgt, 64, drop_long=False)


def test_collate_pads_both_sides_to_the_batchs_rung():
    data = pairs()
    exact = data.collate([0, 1, 2])
    padded = data.collate(ShapedBatch([0, 1, 2], 16))
    for key in ("src", "tgt_in", "tgt_out"):
        assert padded[key].shape == (3, 16)
        width = exact[key].shape[1]
        assert torch.equal(padded[key][:, :width], exact[key])
        assert not padded[key][:, width:].any()  # PAD is 0
    assert padded["ntokens"] == exact["ntokens"]


def test_the_data_loader_hands_the_rung_to_collate():
    data = pairs()
    sampler = TokenBudgetSampler(data.lengths(), 64, ladder=LengthLadder((6, 9, 13)))
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=data.collate)
    for indices, batch in zip(sampler, loader, strict=True):
        assert batch["src"].shape == (len(indices), indices.length)


def test_padding_to_a_rung_leaves_the_loss_and_its_count_alone():
    from normzoo.contract import module_class

    recipe = from_dict({"task": "translation", "model": {
        "d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 1,
        "dropout": 0.0}})
    torch.manual_seed(0)
    task = module_class("translation")(recipe, 50).eval()
    data = pairs()
    exact, padded = data.collate([0, 3, 5]), data.collate(ShapedBatch([0, 3, 5], 24))
    with torch.no_grad():
        a, b = task.loss_terms(exact, 0.1), task.loss_terms(padded, 0.1)
    torch.testing.assert_close(a.loss_sum, b.loss_sum, rtol=1e-6, atol=1e-5)
    assert int(a.tokens) == int(b.tokens)


def test_masked_lm_masks_no_padding_of_a_rung():
    lines = TokenTable.from_rows([[5, 6, 7], [8, 9], [10, 11, 12, 13]])
    data = SentenceData(lines, 64, 50, 0.5, mask_seed=1)
    exact, padded = data.collate([0, 1, 2]), data.collate(ShapedBatch([0, 1, 2], 12))
    width = exact["tokens"].shape[1]
    assert padded["tokens"].shape == (3, 12)
    assert torch.equal(padded["tokens"][:, :width], exact["tokens"])
    assert torch.equal(padded["labels"][:, :width], exact["labels"])
    assert (padded["labels"][:, width:] == -100).all()


def test_shapes_and_padding_are_counted_per_side():
    # Two pairs of one batch padded to 8: slots 2 rows x (8 + 8), real 3 + 5 + 2 + 6.
    src, tgt = np.array([3, 5]), np.array([2, 6])
    count = count_shapes([src, tgt], np.array([0, 1]), np.array([0, 2]), np.array([8]))
    assert (count.shapes, count.batches) == (1, 1)
    assert count.padding == pytest.approx(1 - 16 / 32)
    exact = count_shapes([src, tgt], np.array([0, 1]), np.array([0, 2]), np.array([0]))
    assert exact.padding == pytest.approx(1 - 16 / 22)


def test_buckets_auto_resolves_for_the_machine_and_stays_as_written_otherwise():
    cpu = from_dict(tiny())
    assert cpu.data.buckets == "auto"
    assert batch_ladder(cpu).data.buckets is None  # a CPU in eager mode: no shape costs
    # Compiled on a CPU: one dynamic graph, not a static graph per shape.
    assert batch_ladder(from_dict(tiny(trainer={"compile": True}))).data.buckets is None
    for written in (5, [8, 16, 64], None):
        assert batch_ladder(from_dict(tiny(data={"buckets": written}))).data.buckets == written


def test_buckets_auto_is_a_ladder_on_a_cuda_device(monkeypatch):
    from normzoo.run import machine

    monkeypatch.setattr(machine, "training_device", lambda trainer: object())  # CUDA's props
    assert batch_ladder(from_dict(tiny(trainer={"accelerator": "auto"}))).data.buckets == 12


@pytest.mark.parametrize("value, says", [(0, "at least one rung"), ([16, 8], "ascending"),
                                         ([8, 128], "exceeds max_len=64")])
def test_a_bad_ladder_is_refused_by_key(value, says: str):
    with pytest.raises(ConfigError, match=rf"data\.buckets.*{says}"):
        from_dict(tiny(data={"buckets": value}))


def test_a_run_records_its_batch_shapes_and_says_them_first(tmp_path: Path, monkeypatch,
                                                           capfd):
    from normzoo.run import training

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")}, data={"buckets": 4}))
    training.run(recipe, "tiny.yaml")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    err = capfd.readouterr().err
    line = next(line for line in err.splitlines() if "train batches" in line)
    assert "ladder of 4" in line
    assert f"in {summary['train_batch_shapes']} shapes" in line
    assert f"{summary['train_padding']:.1%} of their token slots padding" in line
    assert 1 <= summary["train_batch_shapes"] <= 5 and 0 < summary["train_padding"] < 0.5
    recorded = load(tmp_path / "run" / "recipe.yaml").data
    assert (recorded.buckets, recorded.num_workers) == (4, 0)  # auto resolved: no CPU worker


def corpus_shapes(recipe_path: Path, overrides: list[str], buckets) -> tuple:
    from normzoo.tasks.datamodule import TextDataModule

    recipe = load(recipe_path, [*overrides, f"data.buckets={json.dumps(buckets)}"])
    data = TextDataModule(recipe)
    data.setup("fit")
    return data.train_shapes(), data.ladder


@pytest.mark.skipif(not (SHARED / "multi30k").is_dir(), reason="needs ../shared/data")
def test_a_multi30k_epoch_comes_in_few_shapes_with_little_padding(tmp_path, monkeypatch):
    """The issue's goal at the quick start's budget (2,048 tokens): at most 16 shapes and 12%
    padding, where each batch padded to its longest gives 35 shapes and 6.8%."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path))
    setting = [f"data.dir={SHARED / 'multi30k'}", "data.max_tokens=2048"]
    exact, _ = corpus_shapes(RECIPES / "multi30k_prenorm.yaml", setting, None)
    shapes, ladder = corpus_shapes(RECIPES / "multi30k_prenorm.yaml", setting, 12)
    print(f"Multi30k, 2,048 tokens: exact {exact.describe()}; 12 rungs {ladder.rungs}: "
          f"{shapes.describe()}")
    assert exact.shapes >= 30 and exact.padding < 0.08
    assert shapes.shapes <= 16 and shapes.padding <= 0.12
    assert shapes.batches <= exact.batches * 1.1  # the budget kept: about as many steps


@pytest.mark.skipif(not (SHARED / "wmt14_ende").is_dir(), reason="needs ../shared/data")
def test_the_wmt14_sample_comes_in_few_shapes(tmp_path, monkeypatch):
    """newstest2013 (3,000 pairs) as a training split at wmt_prenorm's 4,096 tokens: a small
    sample, whose 28 batches are mostly a rung's leftovers, so its padding is above a full
    corpus's."""
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path))
    setting = ["data.source=files", f"data.dir={SHARED / 'wmt14_ende'}",
               "data.train_split=newstest2013", "data.valid_split=newstest2014",
               "data.test_split=newstest2014", "data.tokenizer.vocab_size=8000"]
    exact, _ = corpus_shapes(RECIPES / "wmt_prenorm.yaml", setting, None)
    shapes, ladder = corpus_shapes(RECIPES / "wmt_prenorm.yaml", setting, 12)
    print(f"WMT14 sample, 4,096 tokens: exact {exact.describe()}; 12 rungs {ladder.rungs}: "
          f"{shapes.describe()}")
    assert shapes.shapes <= 16 and shapes.shapes < exact.shapes
    assert shapes.padding <= 0.25


def test_ladder_for_reads_the_recipe():
    data = from_dict(tiny(data={"buckets": [8, 16, 64]})).data
    assert ladder_for(data, np.array([3, 9])).rungs == (8, 16, 64)
    assert ladder_for(from_dict(tiny(data={"buckets": 2})).data,
                      np.array([3, 3, 9, 20])).rungs == (3, 20)
    assert ladder_for(from_dict(tiny(data={"buckets": 3})).data, None).rungs[-1] == 64
    assert ladder_for(from_dict(tiny()).data, np.array([3])) is None  # auto, unresolved
