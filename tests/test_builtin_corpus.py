"""The built-in toy corpus is a real, deterministic translation task with clean splits.

What matters for experiments: the same data on every machine, no test sentence in training,
a target that is a function of the source (so BLEU has a ceiling of 100), and a target that
cannot be had by copying (so a model's BLEU measures learning).
"""

from __future__ import annotations

import functools

import pytest
import sacrebleu

from normzoo.data import builtin
from normzoo.data.builtin import Clause, NounPhrase


@functools.cache
def _split(name: str, seed: int = 0) -> tuple[tuple[str, str], ...]:
    return tuple(builtin.generate(name, seed=seed))


def _words(sentence: str) -> list[str]:
    return sentence.lower().replace(",", "").rstrip(".").split()


def _english_forms() -> set[str]:
    """Every English word the lexicon can produce (lemmas and inflections)."""
    return set(builtin._language().english_forms)


def test_generation_is_deterministic_and_seeded():
    assert builtin.generate("valid") == builtin.generate("valid")
    other = builtin.generate("valid", seed=1)
    assert other != builtin.generate("valid")
    assert len(set(other) & set(_split("valid"))) < 50  # a different sample, not a shuffle


def test_split_sizes_and_prefix_property():
    assert builtin.SPLITS == {"train": 20000, "valid": 500, "test": 500}
    for name, size in builtin.SPLITS.items():
        assert len(_split(name)) == size
    assert builtin.generate("test", size=37) == list(_split("test")[:37])
    assert builtin.generate("test", size=0) == []


def test_unknown_split_names_the_valid_ones():
    with pytest.raises(ValueError, match="train, valid, test"):
        builtin.generate("validation")


def test_splits_are_disjoint_and_unique():
    sources = {name: [s for s, _ in _split(name)] for name in builtin.SPLITS}
    for name, lines in sources.items():
        assert len(set(lines)) == len(lines), name
    train, valid, test = (set(sources[n]) for n in ("train", "valid", "test"))
    assert not train & valid
    assert not train & test
    assert not valid & test
    # Disjoint whatever the seed: membership depends on the sentence only.
    assert not set(s for s, _ in _split("valid", seed=7)) & train


def test_mapping_is_a_function_and_nothing_is_copied():
    translation: dict[str, str] = {}
    for name in builtin.SPLITS:
        for source, target in (*_split(name), *_split(name, seed=3)[:2000]):
            assert translation.setdefault(source, target) == target, source
    english = _english_forms()
    for source, target in _split("train"):
        copied = english.intersection(_words(target))
        assert not copied, (source, target, copied)


def test_text_looks_like_text():
    for source, target in _split("test"):
        for sentence in (source, target):
            assert sentence[0].isupper() and sentence.endswith(".")
            assert "  " not in sentence and " ." not in sentence and " ," not in sentence
        assert 4 <= len(source.split()) <= 16
    lengths = {len(s.split()) for s, _ in _split("train")}
    assert min(lengths) == 4 and max(lengths) == 16


def test_lexicon_is_large_and_one_to_one():
    lexicon = builtin.lexicon()
    lemmas = [(pos, en) for pos, table in lexicon.items() for en in table]
    assert len(lemmas) >= 300
    assert len(lexicon["noun"]) >= 150 and len(lexicon["adjective"]) >= 70
    assert len(lexicon["verb"]) >= 70
    stems = [stem for table in lexicon.values() for stem in table.values()]
    assert len(set(stems)) == len(stems)
    assert not set(stems) & _english_forms()
    forms = builtin.inflections()
    assert not set(forms) & _english_forms()
    assert 1000 <= len(forms) <= 1500


def test_every_target_word_is_a_known_form():
    forms = builtin.inflections()
    used = {w for _, target in _split("train") for w in _words(target)}
    assert used <= set(forms)
    assert len(used) > 0.95 * len(forms)  # the training data covers the vocabulary


def _tokens(target: str) -> list[builtin.Form]:
    forms = builtin.inflections()
    return [forms[w] for w in _words(target)]


def test_agreement_in_a_constructed_sentence():
    lexicon = builtin.lexicon()
    for noun in ("dog", "house", "apple", "teacher"):
        gender = builtin.noun_gender(noun)
        for plural in (False, True):
            subject = NounPhrase(noun, plural, "the", ("big", "red"))
            _, target = builtin.translate(Clause(subject, "be", predicate="old", past=True))
            det, noun_form, red, big, old, verb = _words(target)
            suffix = builtin.AGREEMENT_SUFFIXES[gender, plural]
            assert det == lexicon["determiner"]["the"] + suffix
            assert noun_form == lexicon["noun"][noun] + (
                builtin.NOUN_PLURAL_SUFFIX if plural else "")
            # Adjectives follow the noun, mirrored, and agree; so does the predicate.
            assert (red, big, old) == tuple(
                lexicon["adjective"][a] + suffix for a in ("red", "big", "old"))
            assert verb == lexicon["verb"]["be"] + builtin.VERB_SUFFIXES[True, plural]
    assert {builtin.noun_gender(n) for n in lexicon["noun"]} == {0, 1}
    with pytest.raises(ValueError):
        builtin.noun_gender("unicorn")


def test_agreement_holds_across_the_corpus():
    """Determiners agree with the next noun, adjectives with the noun they follow, and the
    clause-final verb with the number of the clause's first noun (its subject)."""
    checked = 0
    for _, target in _split("test") + _split("valid"):
        tokens = _tokens(target)
        noun = None
        subject = None
        for i, form in enumerate(tokens):
            if form.pos == "determiner":
                following = tokens[i + 1]
                assert following.pos == "noun"
                assert (form.gender, form.plural) == (following.gender, following.plural)
            elif form.pos == "noun":
                noun = form
                subject = subject or form
            elif form.pos == "adjective" and tokens[i - 1].pos in ("noun", "adjective"):
                assert (form.gender, form.plural) == (noun.gender, noun.plural), target
                checked += 1
            elif form.pos == "verb":
                assert form.plural == subject.plural, target
                subject = None
            elif form.pos != "adjective":
                noun = None
    assert checked > 300


def test_target_is_verb_final_with_postpositions():
    subject = NounPhrase("girl", True, "two")
    obj = NounPhrase("apple", False, "a", ("green",))
    clause = Clause(subject, "eat", obj=obj, pp=("under", NounPhrase("tree")), adverb="quickly")
    source, target = builtin.translate(clause)
    assert source == "Two girls eat a green apple under the tree quickly."
    pos = [(f.pos, f.lemma) for f in _tokens(target)]
    assert pos == [
        ("numeral", "two"), ("noun", "girl"), ("adverb", "quickly"), ("determiner", "the"),
        ("noun", "tree"), ("preposition", "under"), ("determiner", "a"), ("noun", "apple"),
        ("adjective", "green"), ("verb", "eat"),
    ]
    for _, target in _split("test"):
        clauses = " ".join(_words(target))
        for conjunction in builtin.lexicon()["conjunction"].values():
            clauses = clauses.replace(f" {conjunction} ", " | ")
        for part in clauses.split(" | "):
            assert builtin.inflections()[part.split()[-1]].pos == "verb", target


def test_english_side_is_grammatical():
    source, target = builtin.translate(
        [Clause(NounPhrase("owl", False, "a", ()), "sleep", past=True, adverb="often"),
         Clause(NounPhrase("box", True, "this", ("empty",)), "be", predicate="heavy")],
        conjunction="but",
    )
    assert source == "An owl often slept, but these empty boxes are heavy."
    assert target.count(",") == 1
    with pytest.raises(ValueError):
        builtin.translate(Clause(NounPhrase("dog", True, "a"), "sleep"))
    with pytest.raises(ValueError):
        builtin.translate(Clause(NounPhrase("dog"), "see"))  # transitive without object


def test_copying_the_source_scores_near_zero_bleu():
    pairs = _split("test")
    sources = [s for s, _ in pairs]
    targets = [t for _, t in pairs]
    assert sacrebleu.corpus_bleu(sources, [targets]).score < 5
    assert sacrebleu.corpus_bleu(targets, [targets]).score == pytest.approx(100)


def test_write_split(tmp_path):
    src, tgt = builtin.write_split(tmp_path / "corpus", "valid")
    assert (src.name, tgt.name) == ("valid.en", "valid.xx")
    sources = src.read_text(encoding="utf-8").splitlines()
    targets = tgt.read_text(encoding="utf-8").splitlines()
    assert list(zip(sources, targets, strict=True)) == list(_split("valid"))
    src, tgt = builtin.write_split(str(tmp_path), "test", "eng", "toy")
    assert (src.name, tgt.name) == ("test.eng", "test.toy")
    assert len(tgt.read_text(encoding="utf-8").splitlines()) == builtin.SPLITS["test"]
