"""The corpora ``data_scale.py`` measures on: training pairs sampled with a seeded generator from
the real ones in ``../shared/data`` (Multi30k and WMT14 newstest2013/2014, about 40 k pairs), up
to a corpus the size of WMT14 En-De, and English and German lines for a causal LM corpus of a
given number of tokens; each also once with every real pair or line, the same vocabulary with
too little data to matter (the model's own memory). Validation is newstest2013, test
newstest2014.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from common import MULTI30K

WMT14 = MULTI30K.parent / "wmt14_ende"


def real_pairs() -> tuple[list[str], list[str]]:
    src, tgt = [], []
    for folder, splits in ((MULTI30K, ("train", "val", "test2016")),
                           (WMT14, ("newstest2013", "newstest2014"))):
        for split in splits:
            src += (folder / f"{split}.en").read_text(encoding="utf-8").splitlines()
            tgt += (folder / f"{split}.de").read_text(encoding="utf-8").splitlines()
    return src, tgt


def write_real_corpus(folder: Path) -> Path:
    """Every real pair once (about 40 k): the same vocabulary as the sampled corpora, so the
    same model, with a corpus too small for its data to matter: the model's own memory."""
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = real_pairs()
    (folder / "train.en").write_text("".join(line + "\n" for line in src))
    (folder / "train.de").write_text("".join(line + "\n" for line in tgt))
    return _dev_and_test(folder, lm=False)


def write_corpus(folder: Path, pairs: int, seed: int = 0) -> Path:
    """``pairs`` training pairs sampled from the real ones; WMT14's dev and test sets."""
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = real_pairs()
    rng = np.random.default_rng(seed)
    with (folder / "train.en").open("w") as en, (folder / "train.de").open("w") as de:
        for start in range(0, pairs, 500_000):
            picks = rng.integers(0, len(src), min(500_000, pairs - start)).tolist()
            en.write("".join(src[i] + "\n" for i in picks))
            de.write("".join(tgt[i] + "\n" for i in picks))
    return _dev_and_test(folder, lm=False)


def write_lm_real_corpus(folder: Path) -> Path:
    """Every real line once: the LM corpora's vocabulary, little data."""
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = real_pairs()
    (folder / "train.txt").write_text("".join(line + "\n" for line in src + tgt))
    return _dev_and_test(folder, lm=True)


def write_lm_corpus(folder: Path, tokens: int, seed: int = 0) -> Path:
    """About ``tokens`` tokens (estimated at 1.4 per word) of sampled English and German lines."""
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = real_pairs()
    lines = src + tgt
    words = np.array([len(line.split()) for line in lines])
    rng = np.random.default_rng(seed)
    target_words = int(tokens / 1.4)
    with (folder / "train.txt").open("w") as out:
        written = 0
        while written < target_words:
            picks = rng.integers(0, len(lines), 200_000)
            written += int(words[picks].sum())
            out.write("".join(lines[i] + "\n" for i in picks.tolist()))
    return _dev_and_test(folder, lm=True)


def _dev_and_test(folder: Path, lm: bool) -> Path:
    """WMT14's newstest2013 (validation) and newstest2014 (test) beside the training text, their
    English side alone for a causal LM corpus, then the mark that the corpus is complete."""
    for role, split in (("valid", "newstest2013"), ("test", "newstest2014")):
        if lm:
            (folder / f"{role}.txt").write_bytes((WMT14 / f"{split}.en").read_bytes())
        else:
            for lang in ("en", "de"):
                shutil.copyfile(WMT14 / f"{split}.{lang}", folder / f"{role}.{lang}")
    (folder / "done").write_text("")
    return folder
