"""Token-budget batches: the budget, coverage, determinism, length bucketing and sharding."""

from __future__ import annotations

import random
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normzoo.data.batching import TokenBudgetSampler, token_budget_batches


def random_lengths(n: int, seed: int = 0, low: int = 1, high: int = 60) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


def padded_size(batch: list[int], lengths: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)


def assert_partition(batches: list[list[int]], n: int) -> None:
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(n)), "every example exactly once"
    assert all(batches), "no empty batch"


def assert_bucketed(batches: list[list[int]], lengths: list[int]) -> None:
    """Batches hold contiguous runs of the sorted lengths: their ranges never interleave."""
    ranges = sorted((min(lengths[i] for i in b), max(lengths[i] for i in b)) for b in batches)
    for (_, hi), (lo, _) in pairwise(ranges):
        assert hi <= lo


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=64), max_size=200),
    max_tokens=st.integers(min_value=64, max_value=2000),
    seed=st.integers(min_value=0, max_value=3),
    epoch=st.integers(min_value=0, max_value=3),
    shuffle=st.booleans(),
)
def test_budget_coverage_and_bucketing(lengths, max_tokens, seed, epoch, shuffle):
    batches = token_budget_batches(lengths, max_tokens, seed=seed, epoch=epoch, shuffle=shuffle)
    assert_partition(batches, len(lengths))
    for batch in batches:
        assert padded_size(batch, lengths) <= max_tokens  # padding included
        assert len(batch) <= max_tokens  # even empty examples take a row
    assert_bucketed(batches, lengths)
    # Greedy packing: no two consecutive-in-length batches could have been one.
    if not shuffle:
        for a, b in pairwise(batches):
            merged = (len(a) + len(b)) * max(max(lengths[i] for i in a + b), 1)
            assert merged > max_tokens


def test_budget_is_filled_greedily():
    lengths = [10] * 10
    batches = token_budget_batches(lengths, 35, shuffle=False)
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert token_budget_batches([5, 10], 20, shuffle=False) == [[0, 1]]
    assert token_budget_batches([5, 10, 10], 20, shuffle=False) == [[0, 1], [2]]


def test_an_example_exactly_at_the_budget_fits_alone():
    assert token_budget_batches([7, 3, 7], 7, shuffle=False) == [[1], [0], [2]]


def test_an_example_longer_than_the_budget_raises():
    with pytest.raises(ValueError, match="example 2 has 9 tokens, more than max_tokens=8"):
        token_budget_batches([1, 2, 9, 3], 8)


def test_no_examples_no_batches():
    assert token_budget_batches([], 100) == []
    assert list(TokenBudgetSampler([], 100, world_size=2, rank=1)) == []


def test_unshuffled_batches_are_in_length_order():
    lengths = random_lengths(300, seed=3)
    batches = token_budget_batches(lengths, 200, shuffle=False)
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    assert flat == sorted(range(300), key=lambda i: lengths[i])  # ties in index order
    assert batches == token_budget_batches(lengths, 200, shuffle=False, seed=9, epoch=4)


def test_deterministic_under_the_seed_and_epoch():
    lengths = random_lengths(500, seed=1)
    first = token_budget_batches(lengths, 256, seed=7, epoch=3)
    assert first == token_budget_batches(list(lengths), 256, seed=7, epoch=3)
    other_epoch = token_budget_batches(lengths, 256, seed=7, epoch=4)
    other_seed = token_budget_batches(lengths, 256, seed=8, epoch=3)
    assert other_epoch != first
    assert other_seed != first
    for batches in (other_epoch, other_seed):
        assert_partition(batches, len(lengths))
    # Shuffling changes the order of the batches, not only ties within them.
    assert [b[0] for b in other_epoch] != [b[0] for b in first]
    # ... and the batch order is not simply length order.
    means = [sum(lengths[i] for i in b) / len(b) for b in first]
    assert means != sorted(means)


def test_shuffle_breaks_ties_randomly():
    lengths = [5] * 40
    a = token_budget_batches(lengths, 50, seed=0, epoch=0)
    b = token_budget_batches(lengths, 50, seed=0, epoch=1)
    assert sorted(map(sorted, a)) != sorted(map(sorted, b))


def test_batches_are_near_homogeneous_in_length():
    lengths = random_lengths(2000, seed=2, high=100)
    batches = token_budget_batches(lengths, 1024, seed=1)
    assert_bucketed(batches, lengths)
    real = sum(lengths)
    padded = sum(padded_size(b, lengths) for b in batches)
    assert padded / real < 1.05  # bucketing keeps padding small
    spreads = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches]
    assert max(spreads) <= 8


# -- the sampler ---------------------------------------------------------------------------------


def test_sampler_single_process_is_token_budget_batches():
    lengths = random_lengths(300, seed=4)
    sampler = TokenBudgetSampler(lengths, 300, seed=5)
    assert list(sampler) == token_budget_batches(lengths, 300, seed=5, epoch=0)
    assert len(sampler) == len(list(sampler))
    sampler.set_epoch(2)
    assert list(sampler) == token_budget_batches(lengths, 300, seed=5, epoch=2)


def test_set_epoch_changes_the_order():
    lengths = random_lengths(400, seed=5)
    sampler = TokenBudgetSampler(lengths, 256, seed=1)
    epoch0 = list(sampler)
    assert list(sampler) == epoch0  # iterating again, same epoch: same batches
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert epoch1 != epoch0
    assert_partition(epoch1, len(lengths))
    sampler.set_epoch(0)
    assert list(sampler) == epoch0


def test_unshuffled_sampler_ignores_the_epoch():
    lengths = random_lengths(100, seed=6)
    sampler = TokenBudgetSampler(lengths, 128, shuffle=False)
    first = list(sampler)
    sampler.set_epoch(5)
    assert list(sampler) == first


def shards(lengths, max_tokens, world_size, *, seed=0, epoch=0, shuffle=True):
    samplers = [TokenBudgetSampler(lengths, max_tokens, seed=seed, shuffle=shuffle, rank=r,
                                   world_size=world_size) for r in range(world_size)]
    for s in samplers:
        s.set_epoch(epoch)
    return [list(s) for s in samplers], samplers


def check_shards(lengths, max_tokens, world_size, *, seed=0, epoch=0, shuffle=True):
    per_rank, samplers = shards(lengths, max_tokens, world_size, seed=seed, epoch=epoch,
                                shuffle=shuffle)
    everything = token_budget_batches(lengths, max_tokens, seed=seed, epoch=epoch,
                                      shuffle=shuffle)
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, f"ranks step together: {[len(b) for b in per_rank]}"
    assert all(len(s) == len(b) for s, b in zip(samplers, per_rank, strict=True))
    # Together the ranks cover every example ...
    taken = [i for batches in per_rank for b in batches for i in b]
    assert set(taken) == set(range(len(lengths)))
    # ... each batch of the epoch once, plus fewer than world_size repeats to even them out.
    got = Counter(tuple(b) for batches in per_rank for b in batches)
    want = Counter(tuple(b) for b in everything)
    extra = got - want
    assert not want - got
    assert sum(extra.values()) == len(per_rank[0]) * world_size - len(everything)
    assert sum(extra.values()) < world_size or not everything
    for batch in extra:
        assert batch in want  # a repeat is a copy of a real batch
    # No example is in two different batches.
    assert_partition(everything, len(lengths))
    return per_rank


@pytest.mark.parametrize("n", [1, 2, 3, 57, 300])
def test_two_ranks_cover_everything_in_step(n: int):
    lengths = random_lengths(n, seed=n)
    per_rank = check_shards(lengths, 128, 2)
    if n >= 57:
        assert not set(map(tuple, per_rank[0])) & set(map(tuple, per_rank[1])) or (
            len(token_budget_batches(lengths, 128)) % 2 == 1)


def test_two_ranks_share_no_batch_when_the_count_is_even():
    lengths = [10] * 40  # 4 per batch -> 10 batches
    per_rank, _ = shards(lengths, 40, 2)
    assert len(per_rank[0]) == len(per_rank[1]) == 5
    assert not set(map(tuple, per_rank[0])) & set(map(tuple, per_rank[1]))


def test_odd_batch_count_repeats_exactly_one_batch():
    lengths = [10] * 36  # 9 batches
    per_rank, _ = shards(lengths, 40, 2)
    assert len(per_rank[0]) == len(per_rank[1]) == 5
    shared = set(map(tuple, per_rank[0])) & set(map(tuple, per_rank[1]))
    assert len(shared) == 1


@pytest.mark.parametrize("world_size", [3, 4, 8])
@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_more_ranks_than_batches_still_step_together(world_size: int, n: int):
    lengths = [10] * n  # 4 per batch
    per_rank = check_shards(lengths, 40, world_size)
    assert all(len(b) == -(-len(token_budget_batches(lengths, 40)) // world_size)
               for b in per_rank)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=40), max_size=120),
    max_tokens=st.integers(min_value=40, max_value=400),
    world_size=st.integers(min_value=1, max_value=5),
    epoch=st.integers(min_value=0, max_value=2),
    shuffle=st.booleans(),
)
def test_sharding_property(lengths, max_tokens, world_size, epoch, shuffle):
    check_shards(lengths, max_tokens, world_size, epoch=epoch, shuffle=shuffle)


def test_ranks_agree_on_the_epoch_order():
    lengths = random_lengths(200, seed=8)
    for epoch in (0, 1):
        per_rank = check_shards(lengths, 128, 2, seed=3, epoch=epoch)
        everything = token_budget_batches(lengths, 128, seed=3, epoch=epoch)
        assert per_rank[0] == everything[0::2][: len(per_rank[0])]


def test_empty_examples_still_take_a_row():
    batches = token_budget_batches([0] * 100, 10, shuffle=False)
    assert_partition(batches, 100)
    assert [len(b) for b in batches] == [10] * 10
