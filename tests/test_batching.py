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


# -- sharding: each global batch of world_size * max_tokens split across the ranks -------------


def rank_batches(lengths, max_tokens, world_size, *, seed=0, epoch=0, shuffle=True):
    """Each rank's batches for the epoch, from its own sampler, as on separate processes."""
    per_rank = []
    for rank in range(world_size):
        sampler = TokenBudgetSampler(lengths, max_tokens, seed=seed, shuffle=shuffle, rank=rank,
                                     world_size=world_size)
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(sampler) == len(batches)
        per_rank.append(batches)
    return per_rank


def check_shards(lengths, max_tokens, world_size, *, seed=0, epoch=0, shuffle=True):
    """The ranks step together through the global batches, each taking ``batch[rank::world]``."""
    per_rank = rank_batches(lengths, max_tokens, world_size, seed=seed, epoch=epoch,
                            shuffle=shuffle)
    global_batches = token_budget_batches(lengths, max_tokens, seed=seed, epoch=epoch,
                                          shuffle=shuffle, shards=world_size)
    assert_partition(global_batches, len(lengths))
    # (1) Every rank has one step per global batch.
    assert [len(b) for b in per_rank] == [len(global_batches)] * world_size
    small = []  # global batches with fewer examples than ranks: they are topped up
    for step, batch in enumerate(global_batches):
        slices = [batches[step] for batches in per_rank]
        assert all(slices), "every rank has something to step on"
        # (2) Together the ranks hold exactly this step's global batch ...
        assert {i for s in slices for i in s} == set(batch)
        if len(batch) >= world_size:
            # ... each example on one rank only, the shares as even as can be ...
            assert sorted(i for s in slices for i in s) == sorted(batch)
            assert max(map(len, slices)) - min(map(len, slices)) <= 1
        else:
            # ... or, when there are too few examples, one each, repeating some.
            assert [len(s) for s in slices] == [1] * world_size
            small.append(batch)
        # Every world_size-th example (the batch is in length order: shares alike in length).
        for rank, s in enumerate(slices):
            assert s == (batch[rank::world_size] or [batch[rank % len(batch)]])
        # (4) A rank's padded share: at most max_tokens plus its longest example.
        for s in slices:
            longest = max(max(lengths[i], 1) for i in s)
            assert len(s) * longest <= max_tokens + longest
    # (2) Over the epoch every example once; repeats only from the topped-up batches, and since
    # any world_size examples fit a global batch, only one of those (the last in length order).
    seen = Counter(i for batches in per_rank for b in batches for i in b)
    assert set(seen) == set(range(len(lengths)))
    repeated = {i for i, count in seen.items() if count > 1}
    assert repeated <= {i for b in small for i in b}
    assert sum(seen.values()) - len(lengths) == sum(world_size - len(b) for b in small)
    assert len(small) <= 1
    return per_rank, global_batches


@st.composite
def budgets_and_lengths(draw, max_size=80):
    """A per-rank budget and lengths that fit it (0 included: an empty example takes a row)."""
    max_tokens = draw(st.integers(min_value=1, max_value=120))
    lengths = draw(st.lists(st.integers(min_value=0, max_value=max_tokens), max_size=max_size))
    return max_tokens, lengths


# Budgets, lengths, rank counts and epochs for the sharding properties below.
sharding_cases = given(
    case=budgets_and_lengths(),
    world_size=st.integers(min_value=1, max_value=6),
    seed=st.integers(min_value=0, max_value=3),
    epoch=st.integers(min_value=0, max_value=3),
    shuffle=st.booleans(),
)


@settings(max_examples=120, deadline=None)
@sharding_cases
def test_sharding_property(case, world_size, seed, epoch, shuffle):
    max_tokens, lengths = case
    check_shards(lengths, max_tokens, world_size, seed=seed, epoch=epoch, shuffle=shuffle)


@settings(max_examples=120, deadline=None)
@sharding_cases
def test_ranks_reproduce_one_process_with_their_summed_budget(
    case, world_size, seed, epoch, shuffle,
):
    """(3) world_size ranks at max_tokens=B see, step by step, what 1 process at
    world_size * B sees: what lets a multi-process run reproduce a single-process one."""
    max_tokens, lengths = case
    per_rank = rank_batches(lengths, max_tokens, world_size, seed=seed, epoch=epoch,
                            shuffle=shuffle)
    single = TokenBudgetSampler(lengths, world_size * max_tokens, seed=seed, shuffle=shuffle)
    single.set_epoch(epoch)
    steps = list(single)
    assert [len(b) for b in per_rank] == [len(steps)] * world_size
    for step, batch in enumerate(steps):
        assert {i for batches in per_rank for i in batches[step]} == set(batch)
    assert token_budget_batches(lengths, max_tokens, seed=seed, epoch=epoch, shuffle=shuffle,
                                shards=world_size) == steps


def test_two_ranks_reproduce_one_process_on_a_corpus():
    lengths = random_lengths(1000, seed=11, high=100)
    for epoch in (0, 1, 2):
        per_rank = rank_batches(lengths, 256, 2, seed=4, epoch=epoch)
        single = TokenBudgetSampler(lengths, 512, seed=4)
        single.set_epoch(epoch)
        union = [sorted(a + b) for a, b in zip(*per_rank, strict=True)]
        assert union == [sorted(b) for b in single]
        assert not any(set(a) & set(b) for a, b in zip(*per_rank, strict=True))
    # ... and not what 1 process at the per-rank budget sees.
    assert len(per_rank[0]) < len(token_budget_batches(lengths, 256, seed=4, epoch=2))


def test_each_rank_takes_every_world_size_th_example():
    lengths = [5, 1, 4, 2, 3, 6]  # in length order: 1, 3, 4, 2, 0, 5
    assert token_budget_batches(lengths, 9, shuffle=False, shards=2) == [[1, 3, 4, 2], [0, 5]]
    assert rank_batches(lengths, 9, 2, shuffle=False) == [[[1, 4], [0]], [[3, 2], [5]]]
    lengths = [10] * 10  # 8 fit the global budget of 2 * 40
    assert rank_batches(lengths, 40, 2, shuffle=False) == [
        [[0, 2, 4, 6], [8]],
        [[1, 3, 5, 7], [9]],
    ]


def test_a_global_batch_smaller_than_the_world_is_topped_up_with_repeats():
    lengths = [10] * 6  # a global budget of 4 * 10: [0, 1, 2, 3], [4, 5]
    assert rank_batches(lengths, 10, 4, shuffle=False) == [
        [[0], [4]],
        [[1], [5]],
        [[2], [4]],
        [[3], [5]],
    ]
    assert rank_batches([7], 10, 3) == [[[0]], [[0]], [[0]]]


def test_a_rank_share_may_pass_max_tokens_by_less_than_one_example():
    # 3 * 10 fits the global 2 * 15; rank 0 gets two of them: 20 > 15, but <= 15 + 10.
    assert rank_batches([10] * 3, 15, 2, shuffle=False) == [[[0, 2]], [[1]]]


@pytest.mark.parametrize("world_size", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 40, 57, 300])
def test_ranks_step_together(world_size: int, n: int):
    lengths = [10] * n  # 4 per rank: 4 * world_size per global batch
    per_rank, global_batches = check_shards(lengths, 40, world_size)
    assert len(per_rank[0]) == len(global_batches) == -(-n // (4 * world_size))


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_sharded_epochs_are_deterministic_and_differ(world_size: int):
    lengths = random_lengths(400, seed=8, high=80)
    epoch0, _ = check_shards(lengths, 128, world_size, seed=3, epoch=0)
    assert rank_batches(lengths, 128, world_size, seed=3, epoch=0) == epoch0
    epoch1, _ = check_shards(lengths, 128, world_size, seed=3, epoch=1)
    other_seed, _ = check_shards(lengths, 128, world_size, seed=4, epoch=0)
    for rank in range(world_size):
        assert epoch1[rank] != epoch0[rank]
        assert other_seed[rank] != epoch0[rank]
    # One sampler moved on by set_epoch (its len() and iter() cached) follows along.
    sampler = TokenBudgetSampler(lengths, 128, seed=3, rank=1, world_size=world_size)
    assert list(sampler) == epoch0[1]
    sampler.set_epoch(1)
    assert len(sampler) == len(epoch1[1])
    assert list(sampler) == epoch1[1]
    sampler.set_epoch(0)
    assert list(sampler) == epoch0[1]


def test_unshuffled_shards_ignore_the_epoch():
    lengths = random_lengths(150, seed=9)
    assert rank_batches(lengths, 64, 3, shuffle=False, epoch=0) == rank_batches(
        lengths, 64, 3, shuffle=False, epoch=7)


@pytest.mark.parametrize("world_size", [2, 4])
def test_an_example_longer_than_max_tokens_raises_when_sharded(world_size: int):
    # It would fit the global budget, but a rank must hold it alone.
    with pytest.raises(ValueError, match="example 2 has 9 tokens, more than max_tokens=8"):
        token_budget_batches([1, 2, 9, 3], 8, shards=world_size)
    sampler = TokenBudgetSampler([1, 2, 9, 3], 8, rank=1, world_size=world_size)
    with pytest.raises(ValueError, match="more than max_tokens=8"):
        list(sampler)
    assert rank_batches([1, 2, 8, 3], 8, world_size)  # exactly max_tokens is fine


def test_one_shard_is_the_single_process_batching():
    lengths = random_lengths(300, seed=10)
    for shuffle in (True, False):
        batches = token_budget_batches(lengths, 200, seed=2, epoch=1, shuffle=shuffle)
        assert token_budget_batches(lengths, 200, seed=2, epoch=1, shuffle=shuffle,
                                    shards=1) == batches
        assert rank_batches(lengths, 200, 1, seed=2, epoch=1, shuffle=shuffle) == [batches]
    with pytest.raises(ValueError, match="more than max_tokens=8"):
        token_budget_batches([9], 8, shards=1)


def test_empty_examples_still_take_a_row():
    batches = token_budget_batches([0] * 100, 10, shuffle=False)
    assert_partition(batches, 100)
    assert [len(b) for b in batches] == [10] * 10
