"""The built-in corpus ``toy-en-xx``: sampled sentences of the built-in language, in splits.

Why it exists: a fresh, offline machine must be able to run the translation quick start, and a
normalization study needs a task on which models can actually *learn* something, so that loss
curves and BLEU differ between configurations. Copying the source gets a BLEU near zero here; a
model has to learn a lexicon, agreement (:mod:`~normzoo.data.builtin.language`) and word order
(:mod:`~normzoo.data.builtin.grammar`).

Splits are disjoint by construction: a sentence's split is a hash bucket of its English text
(independent of the sampling seed), so no seed can put a test sentence into training data.

Pure standard library and fast (all 21,000 default pairs in about half a second), because the
quick start and ``normzoo list`` must not wait on it.
"""

from __future__ import annotations

import random
import zlib
from pathlib import Path

from normzoo.data.builtin.grammar import Clause, NounPhrase, _english, _target
from normzoo.data.builtin.language import CORPUS_NAME, Form, _Language, _language
from normzoo.data.builtin.words import (
    _ADJECTIVES,
    _ALL,
    _ANIMATE,
    _ANIMATE_PREPOSITIONS,
    _FREQUENCY_ADVERBS,
    _INTRANSITIVE,
    _MANNER_ADVERBS,
    _NUMERALS,
    _PLACES_AND_THINGS,
    _PREPOSITIONS,
    _TRANSITIVE,
)

SPLITS: dict[str, int] = {"train": 20000, "valid": 500, "test": 500}
# Hash buckets (of 10) that own each split; the rest belong to train.
_SPLIT_BUCKETS = {"valid": 0, "test": 1}
_MIN_WORDS, _MAX_WORDS = 4, 16

# Sampling weights, as repeated entries so that sampling is one rng.choice.
_SINGULAR_DETS = (
    ("the",) * 35 + ("a",) * 25 + ("this",) * 6 + ("that",) * 6 + ("every",) * 4 + ("no",) * 3
    + ("my",) * 5 + ("your",) * 4 + ("our",) * 4 + ("their",) * 4 + ("one",) * 4
)
_PLURAL_DETS = (
    ("the",) * 35 + ("this",) * 7 + ("that",) * 7 + ("some",) * 12 + ("no",) * 4 + ("my",) * 5
    + ("your",) * 4 + ("our",) * 4 + ("their",) * 4 + tuple(_NUMERALS[1:]) * 2
)


# --------------------------------------------------------------------------------------------
# Sampling.


def _sample_np(lang: _Language, rng: random.Random, classes: tuple[str, ...],
               max_adjectives: int) -> NounPhrase:
    noun = rng.choice(lang.nouns_in[classes])
    plural = rng.random() < 0.4
    det = rng.choice(_PLURAL_DETS if plural else _SINGULAR_DETS)
    r = rng.random()
    if r < 0.5:
        return NounPhrase(noun, plural, det, ())
    if r < 0.85 or max_adjectives < 2:
        return NounPhrase(noun, plural, det, (rng.choice(_ADJECTIVES),))
    return NounPhrase(noun, plural, det, tuple(rng.sample(_ADJECTIVES, 2)))


def _sample_clause(lang: _Language, rng: random.Random) -> Clause:
    kind = rng.random()
    past = rng.random() < 0.4
    pp = None
    if rng.random() < 0.3:
        preposition = rng.choice(_PREPOSITIONS)
        classes = _ALL if preposition in _ANIMATE_PREPOSITIONS else _PLACES_AND_THINGS
        pp = (preposition, _sample_np(lang, rng, classes, 1))
    adverb = None
    if kind < 0.45:
        verb, _, _, objects = rng.choice(_TRANSITIVE)
        subject = _sample_np(lang, rng, _ANIMATE, 2)
        obj = _sample_np(lang, rng, objects, 2)
        predicate = None
    elif kind < 0.78:
        verb, _, _, subjects = rng.choice(_INTRANSITIVE)
        subject = _sample_np(lang, rng, subjects, 2)
        obj = predicate = None
    else:
        verb, obj = "be", None
        subject = _sample_np(lang, rng, _ALL, 1)
        predicate = rng.choice(_ADJECTIVES)
    if rng.random() < 0.25:
        manner = verb != "be" and rng.random() < 0.6
        adverb = rng.choice(_MANNER_ADVERBS if manner else _FREQUENCY_ADVERBS)
    return Clause(subject, verb, obj, predicate, past, pp, adverb)


def _bucket_split(source: str) -> str:
    """The split that owns a sentence: a seed-independent hash of its English text."""
    bucket = zlib.crc32(source.encode("utf-8")) % 10
    for split, owned in _SPLIT_BUCKETS.items():
        if bucket == owned:
            return split
    return "train"


def generate(split: str, size: int | None = None, seed: int = 0) -> list[tuple[str, str]]:
    """(source, target) pairs of ``split``: deterministic in (split, size, seed), unique within
    the split, and disjoint from the other splits whatever the seeds. A smaller ``size`` gives a
    prefix of the larger list, so limits behave like truncation. ``size=None`` -> ``SPLITS``."""
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}' of corpus '{CORPUS_NAME}'; "
                         f"valid splits: {', '.join(SPLITS)}")
    if size is None:
        size = SPLITS[split]
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    lang = _language()
    return [(source, _target(lang, clauses, conjunction))
            for source, clauses, conjunction in sentences(split, size, seed)]


def sentences(split: str, size: int, seed: int = 0) -> list[tuple[str, list[Clause], str]]:
    """The sampled sentences of ``split`` behind :func:`generate`: each English text with its
    clause trees and conjunction, so that another view of the corpus (the classifier's labels,
    ``normzoo/classification/corpus.py``) reads the same sentences' structure."""
    lang = _language()
    rng = random.Random(f"{CORPUS_NAME}/{split}/{seed}")
    found: list[tuple[str, list[Clause], str]] = []
    seen: set[str] = set()
    attempts = 0
    while len(found) < size:
        attempts += 1
        if attempts > 100 * size + 10_000:
            raise RuntimeError(f"could not sample {size} distinct '{split}' sentences")
        clauses = [_sample_clause(lang, rng)]
        conjunction = "and"
        if rng.random() < 0.15:
            clauses.append(_sample_clause(lang, rng))
            conjunction = "and" if rng.random() < 0.7 else "but"
        # Only the English decides acceptance: the target is rendered for kept draws only.
        source = _english(lang, clauses, conjunction)
        if (not _MIN_WORDS <= source.count(" ") + 1 <= _MAX_WORDS or source in seen
                or _bucket_split(source) != split):
            continue
        seen.add(source)
        found.append((source, clauses, conjunction))
    return found


# --------------------------------------------------------------------------------------------
# Tables and files.


def lexicon() -> dict[str, dict[str, str]]:
    """Part of speech -> {English lemma: target stem} (a copy). Stems take the suffixes in
    ``NOUN_PLURAL_SUFFIX``, ``AGREEMENT_SUFFIXES`` and ``VERB_SUFFIXES``; nouns' singular and
    invariant words are the bare stem."""
    return {pos: dict(table) for pos, table in _language().target.items()}


def noun_gender(noun: str) -> int:
    """The grammatical gender (0 or 1) of an English noun's target translation."""
    try:
        return _language().gender[noun]
    except KeyError:
        raise ValueError(f"unknown noun '{noun}'") from None


def inflections() -> dict[str, Form]:
    """Every target surface form -> its analysis (a copy); the target vocabulary, in effect."""
    return dict(_language().forms)


def write_split(directory: Path | str, split: str, src_lang: str = "en", tgt_lang: str = "xx",
                *, size: int | None = None, seed: int = 0) -> tuple[Path, Path]:
    """Write ``{split}.{src_lang}`` and ``{split}.{tgt_lang}``: line-aligned UTF-8, one sentence
    a line, the layout ``data.source=files`` reads. Returns (source path, target path)."""
    if src_lang == tgt_lang:
        raise ValueError(f"source and target language must differ, both are '{src_lang}'")
    pairs = generate(split, size=size, seed=seed)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / f"{split}.{src_lang}", directory / f"{split}.{tgt_lang}"
    for path, side in zip(paths, (0, 1), strict=True):
        text = "".join(pair[side] + "\n" for pair in pairs)
        path.write_text(text, encoding="utf-8", newline="\n")
    return paths
