"""The batches of ``peers.py``: real sentence pairs (Multi30k train, or normzoo's built-in corpus
where that folder is missing), BPE-tokenized once and packed by token budget, the same for
every framework; ``gpu_step.py`` steps on the same ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from frameworks import Size


def read_pairs(data_dir: Path, limit: int | None) -> tuple[list[str], list[str], str]:
    """Multi30k train (En, De) when ``data_dir`` has it, else the built-in toy corpus."""
    from normzoo.data import builtin
    from normzoo.data.sources import parallel_files

    if (data_dir / "train.en").is_file():
        src, tgt = parallel_files(data_dir, "train", "en", "de")
        name = f"Multi30k train ({data_dir})"
    else:
        pairs = builtin.generate("train", size=limit)
        src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
        name = "normzoo built-in corpus, train (Multi30k not found)"
    return src[:limit], tgt[:limit], name


def prepare_data(size: Size, data_dir: Path, train_batches: int,
                 buckets: int | str | None = "auto") -> dict[str, Any]:
    """Tokenize once and pack the training and decoding batches every worker will use, padded
    as ``normzoo train`` pads them (``data.buckets``; ``auto``: as on this machine, a ladder of
    lengths fitted to the pairs on a GPU, each batch to its longest on a CPU)."""
    from normzoo.data.batching import token_budget_batches
    from normzoo.data.examples import ParallelData
    from normzoo.data.shapes import LengthLadder, ladder_rungs
    from normzoo.data.tokenizer import train_tokenizer
    from normzoo.recipe import from_dict
    from normzoo.run.machine import batch_ladder

    src, tgt, corpus = read_pairs(data_dir, size.pair_limit)
    tokenizer = train_tokenizer(src + tgt, vocab_size=size.vocab_size)
    data = ParallelData.build(tokenizer.encode_batch(src), tokenizer.encode_batch(tgt),
                              max_len=128, drop_long=True)
    buckets = ladder_rungs(batch_ladder(from_dict({"data": {"buckets": buckets}})).data)
    ladder = LengthLadder.fit(data.lengths(), buckets) if buckets else None
    packed = token_budget_batches(data.lengths(), size.max_tokens, seed=0, ladder=ladder)
    train = [data.collate(items) for items in packed[:train_batches]]
    n, step = size.decode_sentences, size.decode_batch
    decode = [data.collate(list(range(i, min(i + step, n))))["src"] for i in range(0, n, step)]
    return {"train": train, "decode": decode, "vocab_size": tokenizer.vocab_size,
            "corpus": corpus, "pairs": len(data),
            "ladder": list(ladder.rungs) if ladder is not None else None}
