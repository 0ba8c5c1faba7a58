"""Streaming token-budget batches (normzoo.tasks.lm.streaming) on a local folder in the hub's
layout, read offline with ``datasets.load_dataset(..., streaming=True)`` as a recipe would."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import islice
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_sources import hub_folder, offline  # noqa: F401  (offline is a fixture)

from normzoo.data.sources import DataError
from normzoo.data.tokenizer import BOS, EOS
from normzoo.tasks.lm.streaming import StreamingBatches

pytestmark = pytest.mark.usefixtures("offline")
MAX_LEN, MAX_TOKENS = 16, 48


def corpus(n: int = 240) -> list[str]:
    """Lines of 0..30 words, each with a word of its own (``L{i}``), and blank lines among them."""
    rng = random.Random(0)
    lines = []
    for i in range(n):
        if i % 9 == 4:
            lines.append(["", "   ", "\t"][i % 3])
        else:
            lines.append(" ".join([f"L{i}", *(f"w{rng.randrange(50)}"
                                              for _ in range(rng.randrange(31)))]))
    return lines


class Encoder:
    """A stand-in for ``Tokenizer.encode_batch`` that records how it is called."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, lines: list[str]) -> list[list[int]]:
        self.calls.append(list(lines))
        return [[int(w[1:]) + (1000 if w[0] == "L" else 5) for w in line.split()]
                for line in lines]

    @property
    def lines(self) -> int:
        return sum(len(call) for call in self.calls)


@pytest.fixture(autouse=True)
def _no_shutdown_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """datasets sleeps 5 s whenever an iterator over streamed parquet closes (apache/arrow#45214);
    harmless once an epoch, but these tests close dozens."""
    import datasets

    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return hub_folder(tmp_path / "corpus", "default",
                      {"train": {"text": corpus(), "id": list(range(len(corpus())))}})


def make(folder: Path, task: str, *, encoder: Encoder | None = None, **kwargs) -> StreamingBatches:
    import datasets

    settings = {"max_len": MAX_LEN, "max_tokens": MAX_TOKENS, "seed": 3, "buffer_size": 64,
                "pool_batches": 3, **kwargs}
    rows = datasets.load_dataset(str(folder), "default", split="train", streaming=True)
    return StreamingBatches(lambda: rows, task=task, encode=encoder or Encoder(), **settings)


def take(batches: StreamingBatches, n: int) -> list[list[np.ndarray]]:
    return list(islice(iter(batches), n))


def same(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.array_equal(r, s) for r, s in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))


def first_epoch(batches: StreamingBatches) -> list[list[np.ndarray]]:
    out = []
    for batch in batches:
        out.append(batch)
        if batch.position["epoch"] == 1:
            return out
    raise AssertionError("unreachable: the stream is endless")


def encoded() -> list[list[int]]:
    return Encoder()([line for line in corpus() if line.strip()])


# The two language models: the tasks StreamingBatches (normzoo/tasks/lm) batches.
@pytest.mark.parametrize("task", ["causal_lm", "mlm"])
@pytest.mark.parametrize(("world_size", "rank"), [(1, 0), (2, 0), (2, 1)])
def test_resume_is_exact(folder: Path, task: str, world_size: int, rank: int):
    ref = take(make(folder, task, rank=rank, world_size=world_size), 10_000 // 48)
    epochs = [b.position["epoch"] for b in ref]
    end = epochs.index(1)  # the last batch of epoch 0
    assert 2 in epochs  # the reference crosses two epoch boundaries
    pools = [i for i, b in enumerate(ref) if b.position["first"] == b.position["batches"]]
    for k in sorted({1, 4, pools[3] + 1, end - 1, end, end + 1, end + 7}):
        first = make(folder, task, rank=rank, world_size=world_size)
        assert same(take(first, k), ref[:k])
        state = json.loads(json.dumps(first.state_dict()))  # what a checkpoint holds
        for saved in (state, {"epoch": state["epoch"], "batches": state["batches"]}):
            again = make(folder, task, rank=rank, world_size=world_size)
            again.load_state_dict(saved)
            assert same(take(again, 8), ref[k : k + 8]), (k, saved)


def test_resume_encodes_only_from_the_current_pool(folder: Path):
    ref = make(folder, "causal_lm")
    last = first_epoch(ref)[-2].position  # deep into epoch 0
    fast, slow = Encoder(), Encoder()
    make(folder, "causal_lm", encoder=fast).load_state_dict(last)
    for encoder, state in ((fast, last), (slow, {"epoch": 0, "batches": last["batches"]})):
        batches = make(folder, "causal_lm", encoder=encoder)
        batches.load_state_dict(state)
        take(batches, 1)
    assert 0 < fast.lines < slow.lines / 4
    # Never one line at a time.
    assert all(len(call) > 1 for call in slow.calls)


@pytest.mark.parametrize("task", ["causal_lm", "mlm"])  # the language models, as above
def test_two_ranks_see_what_one_rank_with_twice_the_budget_sees(folder: Path, task: str):
    one = take(make(folder, task, max_tokens=2 * MAX_TOKENS), 60)
    ranks = [take(make(folder, task, rank=r, world_size=2), 60) for r in (0, 1)]
    for step, batch in enumerate(one):
        for r in (0, 1):  # disjoint shares; a lone example (an epoch's last block) goes to both
            assert same([ranks[r][step]], [batch[r::2] or batch])
    # Each share keeps to its budget (plus at most one example, as the map-style sampler).
    for share in ranks[0] + ranks[1]:
        longest = max(len(row) for row in share)
        assert (len(share) - 1) * longest <= MAX_TOKENS


def test_an_epoch_of_mlm_holds_every_line_once(folder: Path):
    rows = [row for batch in first_epoch(make(folder, "mlm")) for row in batch]
    want = [[BOS, *ids[: MAX_LEN - 2], EOS] for ids in encoded() if ids]
    assert Counter(tuple(r) for r in rows) == Counter(tuple(r) for r in want)
    assert max(len(r) for r in rows) == MAX_LEN  # long lines were cut


def test_an_epoch_of_causal_lm_holds_every_token_once(folder: Path):
    blocks = [row for batch in first_epoch(make(folder, "causal_lm")) for row in batch]
    stream = [t for ids in encoded() for t in [*ids, EOS]]
    # Blocks overlap by one token: their labels hold every token but the stream's first.
    labels = Counter(int(t) for block in blocks for t in block[1:])
    assert sum(labels.values()) == len(stream) - 1
    assert not labels - Counter(stream) and (Counter(stream) - labels).total() == 1
    assert sum(len(b) != MAX_LEN + 1 for b in blocks) <= 1  # only the epoch's last is shorter


def test_causal_blocks_are_the_flat_stream_cut(folder: Path):
    """Without shuffling (a buffer of one row) the blocks are exactly those of the flat stream."""
    blocks = [row for batch in first_epoch(make(folder, "causal_lm", buffer_size=1))
              for row in batch]
    stream = [t for ids in encoded() for t in [*ids, EOS]]
    cut = [stream[i : i + MAX_LEN + 1] for i in range(0, len(stream) - 1, MAX_LEN)]
    assert sorted(tuple(b) for b in blocks) == sorted(tuple(b) for b in cut)


def test_blank_lines_are_skipped_and_lines_encoded_in_chunks(folder: Path):
    encoder = Encoder()
    rows = [row for batch in first_epoch(make(folder, "mlm", encoder=encoder)) for row in batch]
    seen = [line for call in encoder.calls for line in call]
    assert all(line.strip() for line in seen)
    assert sorted(seen) == sorted(line for line in corpus() if line.strip())
    assert len(encoder.calls) == 1 and len(rows) == len(seen)  # 214 lines: one call


def test_epochs_reshuffle_and_the_seed_repeats(folder: Path):
    a = first_epoch(make(folder, "mlm"))
    b = take(make(folder, "mlm"), len(a) * 2)
    assert same(b[: len(a)], a)
    key = [sorted(tuple(r) for r in batch) for batch in b]
    assert key[: len(a)] != key[len(a) : 2 * len(a)]  # epoch 1 is not epoch 0 again
    assert not same(first_epoch(make(folder, "mlm", seed=4))[:5], a[:5])


def test_a_missing_text_field_is_a_data_error(folder: Path):
    with pytest.raises(DataError, match="no 'content' column") as info:
        take(make(folder, "mlm", text_field="content"), 1)
    assert "'text'" in str(info.value) and "'id'" in str(info.value)


def test_bad_settings():
    with pytest.raises(ValueError, match="max_len"):
        StreamingBatches(list, task="mlm", encode=Encoder(), max_len=64, max_tokens=32, seed=0)
    with pytest.raises(ValueError, match="translation"):
        StreamingBatches(list, task="translation", encode=Encoder(), max_len=8, max_tokens=32,
                         seed=0)


def test_a_dataloader_worker_gives_the_same_batches_and_their_positions(
        folder: Path, monkeypatch: pytest.MonkeyPatch):
    """One worker encodes ahead of the training loop; each batch says where the stream stands
    once it is handed out. More workers would each yield every batch: refused."""
    import torch.utils.data
    from torch.utils.data import DataLoader

    ref = take(make(folder, "causal_lm"), 30)
    loader = DataLoader(make(folder, "causal_lm"), batch_size=None, num_workers=1,
                        collate_fn=lambda batch: (batch.position, batch))
    got = list(islice(loader, 30))
    assert same([batch for _, batch in got], ref)
    assert [position for position, _ in got] == [batch.position for batch in ref]
    # As inside worker 0 of two (real ones take 10 s to shut down after the error).
    monkeypatch.setattr(torch.utils.data, "get_worker_info",
                        lambda: SimpleNamespace(id=0, num_workers=2))
    with pytest.raises(ValueError, match="num_workers"):
        take(make(folder, "mlm"), 1)


def test_a_ladder_pads_each_streamed_batch_to_its_rung(folder: Path):
    """With ``data.buckets`` a streamed MLM batch carries its rung (``Batch.length``), holds no
    example longer than it and keeps the token budget; the loader pads to it."""
    from normzoo.data.examples import mask_tokens, pad
    from normzoo.data.shapes import LengthLadder
    from normzoo.tasks.lm.streaming import StreamingLoader

    ladder = LengthLadder.spread(4, MAX_LEN)
    batches = make(folder, "mlm", ladder=ladder)
    seen = first_epoch(batches)
    assert {b.length for b in seen} <= set(ladder.rungs)
    for batch in seen:
        assert max(len(row) for row in batch) <= batch.length
        assert len(batch) * batch.length <= MAX_TOKENS
    loader = StreamingLoader(make(folder, "mlm", ladder=ladder),
                             lambda rows, length: mask_tokens(pad(rows, length=length), 50, 0.15,
                                                              None))
    for batch, expected in zip(islice(iter(loader), 5), seen, strict=False):
        assert batch["tokens"].shape == (len(expected), expected.length)
