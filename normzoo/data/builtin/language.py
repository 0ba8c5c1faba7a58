"""The language of the built-in corpus: its lexicon and inflections, built once from a fixed seed.

* **Lexicon.** Several hundred English lemmas (typed in, in :mod:`~normzoo.data.builtin.words`)
  map one-to-one to invented target stems, generated once from a fixed seed by a syllable
  generator. Every target surface form (stem plus inflection) is unique across the whole
  language and never equals an English word of the lexicon, so the target is unambiguous and
  nothing can be copied.
* **Agreement.** Target nouns carry a grammatical gender (class 0 or 1, fixed per noun, not
  visible on the noun itself) and a plural suffix. Determiners and adjectives, attributive and
  predicative, take a suffix for gender x number. Verbs take a suffix for tense x the subject's
  number, even where English shows neither (``the dog saw`` / ``the dogs saw``).

Building the language also refuses any ambiguity in the English grammar (no word belongs to two
parts of speech, no verb has identical present and past forms, no noun has identical singular
and plural): it is what makes the sentences of :mod:`~normzoo.data.builtin.grammar` translate
as a function. :func:`~normzoo.data.builtin.corpus.inflections` analyses every target word, so
tests can check the rules without a second implementation of them.
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

from normzoo.data.builtin.words import (
    _ADJECTIVES,
    _ALL,
    _ANIMATE,
    _CODAS,
    _CONJUNCTIONS,
    _COPULA,
    _DETERMINERS,
    _FREQUENCY_ADVERBS,
    _INTRANSITIVE,
    _IRREGULAR_PLURALS,
    _MANNER_ADVERBS,
    _NOUNS,
    _NUMERALS,
    _ONSETS,
    _PREPOSITIONS,
    _TRANSITIVE,
    _VOWELS,
    AGREEMENT_SUFFIXES,
    NOUN_PLURAL_SUFFIX,
    VERB_SUFFIXES,
)

CORPUS_NAME = "toy-en-xx"

# The language itself never depends on the sampling seed: bump the version to change it.
_LEXICON_SEED = f"{CORPUS_NAME}/lexicon/v1"


class Form(NamedTuple):
    """What one target word is: part of speech, English lemma, and its inflection features
    (``None`` where the part of speech does not inflect for it)."""

    pos: str
    lemma: str
    gender: int | None = None
    plural: bool | None = None
    past: bool | None = None


# --------------------------------------------------------------------------------------------
# Building the language (once per process).


def _english_plural(noun: str) -> str:
    if noun in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


class _Language:
    """All tables the sampler and renderers need, built deterministically from ``_LEXICON_SEED``.

    Flat dicts keyed by (lemma, features) keep rendering to lookups and joins, which is what
    makes generating the whole corpus take a fraction of a second.
    """

    def __init__(self) -> None:
        self.noun_class = {n: c for c, nouns in _NOUNS.items() for n in nouns}
        nouns = list(self.noun_class)
        self.transitive = {v[0]: v for v in _TRANSITIVE}
        self.intransitive = {v[0]: v for v in _INTRANSITIVE}
        self.en_noun = {(n, p): _english_plural(n) if p else n for n in nouns for p in (0, 1)}
        self.en_verb: dict[tuple[str, bool, bool], str] = {}
        for base, third, past, _ in (*_TRANSITIVE, *_INTRANSITIVE):
            self.en_verb.update({(base, False, False): third, (base, False, True): base,
                                 (base, True, False): past, (base, True, True): past})
        lemma, is_, are, was, were = _COPULA
        self.en_verb.update({(lemma, False, False): is_, (lemma, False, True): are,
                             (lemma, True, False): was, (lemma, True, True): were})
        self._check_english()
        self.english_forms = self._english_forms()

        rng = random.Random(_LEXICON_SEED)
        self.target: dict[str, dict[str, str]] = {}  # pos -> english lemma -> target stem
        self.forms: dict[str, Form] = {}  # every target surface form -> its analysis
        self._stems: set[str] = set()
        # Function words first, so that they get the short forms.
        self._assign(rng, "determiner", list(_DETERMINERS), (1, 1), self._agreeing_forms)
        self._assign(rng, "verb", ["be"], (1, 1), self._verb_forms)
        self._assign(rng, "conjunction", list(_CONJUNCTIONS), (1, 1), self._invariant)
        self._assign(rng, "preposition", list(_PREPOSITIONS), (1, 2), self._invariant)
        self._assign(rng, "numeral", list(_NUMERALS), (1, 2), self._invariant)
        self._assign(rng, "noun", nouns, (2, 3), self._noun_forms)
        self._assign(rng, "adjective", list(_ADJECTIVES), (2, 3), self._agreeing_forms)
        verbs = [v[0] for v in (*_TRANSITIVE, *_INTRANSITIVE)]
        self._assign(rng, "verb", verbs, (2, 3), self._verb_forms)
        adverbs = list(_MANNER_ADVERBS + _FREQUENCY_ADVERBS)
        self._assign(rng, "adverb", adverbs, (2, 3), self._invariant)

        # Gender: a balanced, fixed, arbitrary split, as in natural languages.
        shuffled = sorted(nouns)
        rng.shuffle(shuffled)
        self.gender = {n: i % 2 for i, n in enumerate(shuffled)}
        for form, analysis in list(self.forms.items()):
            if analysis.pos == "noun":
                self.forms[form] = analysis._replace(gender=self.gender[analysis.lemma])

        # Rendering tables.
        stems = self.target
        self.tg_noun = {(n, p): stems["noun"][n] + (NOUN_PLURAL_SUFFIX if p else "")
                        for n, p in self.en_noun}
        self.tg_agree = {
            (w, g, p): stems[pos][w] + AGREEMENT_SUFFIXES[g, p]
            for pos in ("determiner", "adjective") for w in stems[pos]
            for (g, p) in AGREEMENT_SUFFIXES
        }
        self.tg_verb = {(v, t, p): stem + VERB_SUFFIXES[t, p]
                        for v, stem in stems["verb"].items() for (t, p) in VERB_SUFFIXES}
        self.en_det = {(d, p): form for d, forms in _DETERMINERS.items()
                       for p, form in enumerate(forms) if form}
        self.en_det.update({(n, n != "one"): n for n in _NUMERALS})
        self.frequency = frozenset(_FREQUENCY_ADVERBS)
        self.tg_word = {w: t for pos in ("conjunction", "preposition", "numeral", "adverb")
                        for w, t in stems[pos].items()}

        # Sampling tables.
        self.nouns_in = {
            classes: tuple(n for n in nouns if self.noun_class[n] in classes)
            for classes in {v[3] for v in (*_TRANSITIVE, *_INTRANSITIVE)} | {_ALL, _ANIMATE}
        }

    def _check_english(self) -> None:
        """Refuse any ambiguity in the English grammar: it is what makes source -> target a
        function (a shared form would give one sentence two trees and two translations)."""
        owners: dict[str, set[str]] = {}

        def own(word: str, owner: str) -> None:
            owners.setdefault(word, set()).add(owner)

        for (n, _p), form in self.en_noun.items():
            own(form, f"noun:{n}")
        for n in self.noun_class:
            if self.en_noun[n, 0] == self.en_noun[n, 1]:
                raise AssertionError(f"noun '{n}' has the same singular and plural")
        for (v, _t, _p), form in self.en_verb.items():
            own(form, f"verb:{v}")
        for v in {v for v, _, _ in self.en_verb}:
            third, base, past = (self.en_verb[v, False, False], self.en_verb[v, False, True],
                                 self.en_verb[v, True, False])
            if len({third, base, past}) != 3:
                raise AssertionError(f"verb '{v}' repeats a form: {third}, {base}, {past}")
        for pos, words in (("adjective", _ADJECTIVES), ("adverb", _MANNER_ADVERBS),
                           ("adverb", _FREQUENCY_ADVERBS), ("preposition", _PREPOSITIONS),
                           ("numeral", _NUMERALS), ("conjunction", _CONJUNCTIONS)):
            for w in words:
                own(w, f"{pos}:{w}")
        for d, numbers in _DETERMINERS.items():
            for form in numbers:
                if form:
                    own(form, f"determiner:{d}")
        own("an", "determiner:a")
        clashes = {w: o for w, o in owners.items() if len(o) > 1}
        if clashes:
            raise AssertionError(f"English forms with two owners: {clashes}")
        self._english_owners = owners

    def _english_forms(self) -> frozenset[str]:
        return frozenset(self._english_owners)

    # Surface forms a stem produces, with their analyses.
    @staticmethod
    def _invariant(pos: str, lemma: str, stem: str) -> dict[str, Form]:
        return {stem: Form(pos, lemma)}

    @staticmethod
    def _noun_forms(pos: str, lemma: str, stem: str) -> dict[str, Form]:
        return {stem: Form(pos, lemma, plural=False),
                stem + NOUN_PLURAL_SUFFIX: Form(pos, lemma, plural=True)}

    @staticmethod
    def _agreeing_forms(pos: str, lemma: str, stem: str) -> dict[str, Form]:
        numbers = _DETERMINERS[lemma] if pos == "determiner" else ("sg", "pl")
        return {stem + suffix: Form(pos, lemma, gender=g, plural=p)
                for (g, p), suffix in AGREEMENT_SUFFIXES.items() if numbers[p]}

    @staticmethod
    def _verb_forms(pos: str, lemma: str, stem: str) -> dict[str, Form]:
        return {stem + suffix: Form(pos, lemma, plural=p, past=t)
                for (t, p), suffix in VERB_SUFFIXES.items()}

    def _assign(self, rng: random.Random, pos: str, lemmas: list[str],
                syllables: tuple[int, int], forms_of) -> None:
        """Give each lemma a fresh stem whose every surface form is new and not English."""
        table = self.target.setdefault(pos, {})
        for lemma in lemmas:
            while True:
                stem = _stem(rng, rng.randint(*syllables))
                forms = forms_of(pos, lemma, stem)
                taken = (stem in self._stems or stem in self.forms or stem in self.english_forms
                         or any(f in self.forms or f in self.english_forms or f in self._stems
                                for f in forms))
                if not taken:
                    break
            table[lemma] = stem
            self._stems.add(stem)
            self.forms.update(forms)


def _stem(rng: random.Random, syllables: int) -> str:
    """(C)V(C) syllables, the last one open, so that stem + consonant-initial suffix reads well."""
    parts = []
    for i in range(syllables):
        final = i == syllables - 1
        onset = "" if i == 0 and syllables > 1 and rng.random() < 0.15 else rng.choice(_ONSETS)
        coda = "" if final or rng.random() < 0.7 else rng.choice(_CODAS)
        parts.append(onset + rng.choice(_VOWELS) + coda)
    return "".join(parts)


@functools.lru_cache(maxsize=1)
def _language() -> _Language:
    return _Language()
