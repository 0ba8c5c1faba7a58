"""The built-in corpus ``toy-en-xx``: English-like sentences -> an invented language.

Why it exists: a fresh, offline machine must be able to run the translation quick start, and a
normalization study needs a task on which models can actually *learn* something, so that loss
curves and BLEU differ between configurations. Copying the source gets a BLEU near zero here; a
model has to learn a lexicon, agreement and word order.

The task, in short:

* **Lexicon.** Several hundred English lemmas (typed in below) map one-to-one to invented target
  stems, generated once from a fixed seed by a syllable generator. Every target surface form
  (stem plus inflection) is unique across the whole language and never equals an English word of
  the lexicon, so the target is unambiguous and nothing can be copied.
* **Agreement.** Target nouns carry a grammatical gender (class 0 or 1, fixed per noun, not
  visible on the noun itself) and a plural suffix. Determiners and adjectives, attributive and
  predicative, take a suffix for gender x number. Verbs take a suffix for tense x the subject's
  number, even where English shows neither (``the dog saw`` / ``the dogs saw``).
* **Word order.** The target is verb-final: ``subject [adverb] [noun phrase + postposition]
  [object] verb``; adjectives follow the noun in mirror order (``the big red ball`` -> ``DET
  ball red big``); prepositions become postpositions.

The source -> target mapping is a *function*: sentences are sampled as small trees, and the
English grammar that renders them is unambiguous (no word belongs to two parts of speech, no
verb has identical present and past forms, no noun has identical singular and plural, a
prepositional phrase always attaches to the clause), so one English sentence has one tree and
one translation. :func:`translate` renders hand-built trees, and :func:`inflections` analyses
every target word, so tests can check the rules without a second implementation of them.

Splits are disjoint by construction: a sentence's split is a hash bucket of its English text
(independent of the sampling seed), so no seed can put a test sentence into training data.

Pure standard library and fast (all 21,000 default pairs in about half a second), because the
quick start and ``normzoo list`` must not wait on it.
"""

from __future__ import annotations

import functools
import random
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "AGREEMENT_SUFFIXES",
    "CORPUS_NAME",
    "NOUN_PLURAL_SUFFIX",
    "SPLITS",
    "VERB_SUFFIXES",
    "Clause",
    "Form",
    "NounPhrase",
    "generate",
    "inflections",
    "lexicon",
    "noun_gender",
    "translate",
    "write_split",
]

CORPUS_NAME = "toy-en-xx"
SPLITS: dict[str, int] = {"train": 20000, "valid": 500, "test": 500}

# The language itself never depends on the sampling seed: bump the version to change it.
_LEXICON_SEED = f"{CORPUS_NAME}/lexicon/v1"
# Hash buckets (of 10) that own each split; the rest belong to train.
_SPLIT_BUCKETS = {"valid": 0, "test": 1}
_MIN_WORDS, _MAX_WORDS = 4, 16

# --------------------------------------------------------------------------------------------
# Target morphology. Stems always end in a vowel and every suffix starts with a consonant, so
# words read as stem + ending; the lexicon builder still checks every surface form is unique.

NOUN_PLURAL_SUFFIX = "n"
#: Determiner and adjective endings by (gender, plural).
AGREEMENT_SUFFIXES: dict[tuple[int, bool], str] = {
    (0, False): "l",
    (1, False): "r",
    (0, True): "li",
    (1, True): "ri",
}
#: Verb (and copula) endings by (past, subject plural).
VERB_SUFFIXES: dict[tuple[bool, bool], str] = {
    (False, False): "t",
    (False, True): "nt",
    (True, False): "sa",
    (True, True): "san",
}

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = "lmnrs"

# --------------------------------------------------------------------------------------------
# English side. Nouns by semantic class: verbs restrict their subjects and objects to classes so
# that most sentences are plausible ("the girl eats an apple", not "the apple eats a girl").

_NOUNS: dict[str, tuple[str, ...]] = {
    "animal": (
        "dog", "cat", "bird", "horse", "cow", "pig", "goat", "duck", "fox", "wolf", "bear",
        "lion", "tiger", "rabbit", "mouse", "snake", "frog", "monkey", "elephant", "owl", "bee",
        "ant", "spider", "goose", "donkey", "camel", "eagle", "turtle", "squirrel", "chicken",
        "parrot", "dragon",
    ),
    "person": (
        "man", "woman", "child", "boy", "girl", "baby", "teacher", "student", "doctor",
        "farmer", "king", "queen", "soldier", "sailor", "baker", "painter", "singer", "driver",
        "friend", "neighbor", "stranger", "guest", "brother", "sister", "mother", "father",
        "uncle", "aunt", "cousin", "prince", "princess", "nurse", "pilot", "thief", "wizard",
    ),
    "place": (
        "house", "garden", "river", "lake", "mountain", "hill", "forest", "field", "road",
        "bridge", "village", "city", "town", "castle", "church", "school", "market", "shop",
        "station", "island", "beach", "farm", "park", "kitchen", "library", "tower", "cave",
        "valley", "harbor", "palace",
    ),
    "thing": (
        "tree", "flower", "boat", "ship", "car", "train", "bus", "bicycle", "ball", "box",
        "book", "letter", "table", "chair", "bed", "door", "window", "wall", "lamp", "clock",
        "cup", "bottle", "plate", "knife", "spoon", "basket", "bag", "coat", "hat", "shoe",
        "shirt", "key", "ring", "coin", "stone", "stick", "rope", "candle", "mirror", "picture",
        "toy", "doll", "kite", "drum", "guitar", "piano", "pencil", "map", "gift", "flag",
        "tent", "cloud", "star", "leaf", "feather", "umbrella", "blanket", "bell", "wheel",
        "ladder", "bucket", "hammer", "sword", "shield", "crown", "jar", "pillow",
    ),
    "food": (
        "apple", "cake", "egg", "banana", "potato", "tomato", "carrot", "onion", "pie",
        "cookie", "sandwich", "lemon", "cherry", "pear", "peach", "plum", "melon", "nut",
        "grape",
    ),
}
_IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "child": "children", "mouse": "mice", "goose": "geese",
    "wolf": "wolves", "thief": "thieves", "knife": "knives", "leaf": "leaves",
    "potato": "potatoes", "tomato": "tomatoes",
}

_ANIMATE = ("animal", "person")
_OBJECTS = ("thing", "food")
_ALL = ("animal", "person", "place", "thing", "food")
_PLACES_AND_THINGS = ("place", "thing")

# (base = present plural, third person singular, past, object classes).
_TRANSITIVE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("see", "sees", "saw", _ALL), ("find", "finds", "found", _ALL),
    ("watch", "watches", "watched", _ALL), ("like", "likes", "liked", _ALL),
    ("love", "loves", "loved", _ALL), ("hate", "hates", "hated", _ALL),
    ("want", "wants", "wanted", _ALL), ("need", "needs", "needed", _ALL),
    ("remember", "remembers", "remembered", _ALL), ("forget", "forgets", "forgot", _ALL),
    ("draw", "draws", "drew", _ALL), ("paint", "paints", "painted", _ALL),
    ("admire", "admires", "admired", _ALL), ("protect", "protects", "protected", _ALL),
    ("ignore", "ignores", "ignored", _ALL), ("miss", "misses", "missed", _ALL),
    ("choose", "chooses", "chose", _ALL), ("keep", "keeps", "kept", _ALL),
    ("visit", "visits", "visited", (*_ANIMATE, "place")),
    ("know", "knows", "knew", (*_ANIMATE, "place")),
    ("follow", "follows", "followed", _ANIMATE), ("chase", "chases", "chased", _ANIMATE),
    ("help", "helps", "helped", _ANIMATE), ("call", "calls", "called", _ANIMATE),
    ("meet", "meets", "met", _ANIMATE), ("greet", "greets", "greeted", _ANIMATE),
    ("teach", "teaches", "taught", _ANIMATE), ("feed", "feeds", "fed", _ANIMATE),
    ("bite", "bites", "bit", _ANIMATE), ("hug", "hugs", "hugged", _ANIMATE),
    ("kiss", "kisses", "kissed", _ANIMATE), ("trust", "trusts", "trusted", _ANIMATE),
    ("take", "takes", "took", _OBJECTS), ("hold", "holds", "held", _OBJECTS),
    ("carry", "carries", "carried", _OBJECTS), ("push", "pushes", "pushed", _OBJECTS),
    ("pull", "pulls", "pulled", _OBJECTS), ("buy", "buys", "bought", _OBJECTS),
    ("sell", "sells", "sold", _OBJECTS), ("bring", "brings", "brought", _OBJECTS),
    ("throw", "throws", "threw", _OBJECTS), ("catch", "catches", "caught", _OBJECTS),
    ("break", "breaks", "broke", _OBJECTS), ("fix", "fixes", "fixed", _OBJECTS),
    ("wash", "washes", "washed", _OBJECTS), ("lift", "lifts", "lifted", _OBJECTS),
    ("drop", "drops", "dropped", _OBJECTS), ("kick", "kicks", "kicked", _OBJECTS),
    ("touch", "touches", "touched", _OBJECTS), ("move", "moves", "moved", _OBJECTS),
    ("lose", "loses", "lost", _OBJECTS), ("steal", "steals", "stole", _OBJECTS),
    ("hide", "hides", "hid", _OBJECTS), ("fill", "fills", "filled", ("thing",)),
    ("eat", "eats", "ate", ("food",)), ("cook", "cooks", "cooked", ("food",)),
    ("build", "builds", "built", _PLACES_AND_THINGS),
)
# (base, third person singular, past, subject classes).
_INTRANSITIVE: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("sleep", "sleeps", "slept", _ANIMATE), ("run", "runs", "ran", _ANIMATE),
    ("walk", "walks", "walked", _ANIMATE), ("swim", "swims", "swam", _ANIMATE),
    ("jump", "jumps", "jumped", _ANIMATE), ("dance", "dances", "danced", _ANIMATE),
    ("sing", "sings", "sang", _ANIMATE), ("laugh", "laughs", "laughed", _ANIMATE),
    ("cry", "cries", "cried", _ANIMATE), ("smile", "smiles", "smiled", _ANIMATE),
    ("sit", "sits", "sat", _ANIMATE), ("stand", "stands", "stood", _ANIMATE),
    ("wait", "waits", "waited", _ANIMATE), ("play", "plays", "played", _ANIMATE),
    ("rest", "rests", "rested", _ANIMATE), ("shout", "shouts", "shouted", _ANIMATE),
    ("whisper", "whispers", "whispered", _ANIMATE), ("arrive", "arrives", "arrived", _ANIMATE),
    ("win", "wins", "won", _ANIMATE), ("work", "works", "worked", _ANIMATE),
    ("travel", "travels", "traveled", _ANIMATE), ("listen", "listens", "listened", _ANIMATE),
    ("hurry", "hurries", "hurried", _ANIMATE), ("wander", "wanders", "wandered", _ANIMATE),
    ("climb", "climbs", "climbed", _ANIMATE), ("sneeze", "sneezes", "sneezed", _ANIMATE),
    ("yawn", "yawns", "yawned", _ANIMATE), ("cough", "coughs", "coughed", _ANIMATE),
    ("fly", "flies", "flew", _ANIMATE), ("fall", "falls", "fell", _ALL),
    ("shine", "shines", "shone", _ALL), ("grow", "grows", "grew", _ALL),
    ("shake", "shakes", "shook", _ALL), ("vanish", "vanishes", "vanished", _ALL),
    ("glow", "glows", "glowed", _ALL), ("disappear", "disappears", "disappeared", _ALL),
    ("sink", "sinks", "sank", _ALL), ("float", "floats", "floated", _ALL),
    ("burn", "burns", "burned", _ALL),
)
_COPULA = ("be", "is", "are", "was", "were")  # lemma, present sg/pl, past sg/pl

_ADJECTIVES = (
    "big", "small", "old", "young", "new", "red", "blue", "green", "yellow", "black", "white",
    "brown", "gray", "pink", "purple", "happy", "sad", "angry", "tired", "hungry", "thirsty",
    "brave", "clever", "quiet", "loud", "tall", "short", "long", "heavy", "light", "warm",
    "cold", "hot", "wet", "dry", "dirty", "clean", "soft", "hard", "strong", "weak", "fast",
    "slow", "rich", "poor", "cruel", "gentle", "proud", "lazy", "busy", "famous", "strange",
    "beautiful", "ugly", "pretty", "funny", "serious", "careful", "friendly", "lonely", "calm",
    "wild", "tiny", "huge", "empty", "full", "dark", "bright", "sharp", "round", "sweet",
    "bitter", "fresh", "ancient", "golden", "wooden", "broken", "noisy", "shy", "silly",
)
# Manner adverbs follow the verb phrase in English; frequency adverbs precede the verb (or
# follow the copula). The target puts every adverb right after the subject.
_MANNER_ADVERBS = (
    "quickly", "slowly", "quietly", "loudly", "carefully", "happily", "sadly", "suddenly",
    "gently", "badly", "calmly", "proudly", "eagerly", "patiently", "bravely", "politely",
)
_FREQUENCY_ADVERBS = ("often", "always", "never", "sometimes", "rarely", "usually", "seldom")
_PREPOSITIONS = (
    "with", "without", "near", "under", "behind", "beside", "above", "below", "inside",
    "outside", "around", "across", "toward", "through", "along", "beyond", "into", "from", "in",
    "on", "at",
)
# Prepositions whose object may be a person or an animal; the others take places and things.
_ANIMATE_PREPOSITIONS = frozenset({"with", "without", "near", "behind", "beside", "toward"})
_NUMERALS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# lemma -> (singular form or None, plural form or None); None: not used with that number.
_DETERMINERS: dict[str, tuple[str | None, str | None]] = {
    "the": ("the", "the"), "a": ("a", None), "this": ("this", "these"),
    "that": ("that", "those"), "every": ("every", None), "some": (None, "some"),
    "no": ("no", "no"), "my": ("my", "my"), "your": ("your", "your"), "our": ("our", "our"),
    "their": ("their", "their"),
}
_CONJUNCTIONS = ("and", "but")

# Sampling weights, as repeated entries so that sampling is one rng.choice.
_SINGULAR_DETS = (
    ("the",) * 35 + ("a",) * 25 + ("this",) * 6 + ("that",) * 6 + ("every",) * 4 + ("no",) * 3
    + ("my",) * 5 + ("your",) * 4 + ("our",) * 4 + ("their",) * 4 + ("one",) * 4
)
_PLURAL_DETS = (
    ("the",) * 35 + ("this",) * 7 + ("that",) * 7 + ("some",) * 12 + ("no",) * 4 + ("my",) * 5
    + ("your",) * 4 + ("our",) * 4 + ("their",) * 4 + tuple(_NUMERALS[1:]) * 2
)


class NounPhrase(NamedTuple):
    """``det adjectives* noun``; ``det`` is a determiner lemma (``this`` covers ``these``) or a
    numeral (``one`` needs a singular noun, the others a plural)."""

    noun: str
    plural: bool = False
    det: str = "the"
    adjectives: tuple[str, ...] = ()


class Clause(NamedTuple):
    """One clause. ``verb="be"`` with a ``predicate`` adjective makes a copula clause; a
    transitive verb needs ``obj``. ``pp`` is ``(preposition, NounPhrase)``; ``adverb`` may be a
    manner adverb (not with ``be``) or a frequency adverb."""

    subject: NounPhrase
    verb: str
    obj: NounPhrase | None = None
    predicate: str | None = None
    past: bool = False
    pp: tuple[str, NounPhrase] | None = None
    adverb: str | None = None


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


# --------------------------------------------------------------------------------------------
# Rendering.


def _english_np(lang: _Language, np: NounPhrase, out: list[str]) -> None:
    noun, plural, det, adjectives = np
    noun_form = lang.en_noun[noun, plural]
    if det == "a":
        out.append("an" if (adjectives[0] if adjectives else noun_form)[0] in "aeiou" else "a")
    else:
        out.append(lang.en_det[det, plural])
    out.extend(adjectives)
    out.append(noun_form)


def _target_np(lang: _Language, np: NounPhrase, out: list[str]) -> None:
    """Determiner (agreeing) or invariant numeral, noun, then the adjectives mirrored."""
    noun, plural, det, adjectives = np
    gender = lang.gender[noun]
    out.append(lang.tg_word[det] if det in lang.tg_word else lang.tg_agree[det, gender, plural])
    out.append(lang.tg_noun[noun, plural])
    for adjective in reversed(adjectives):
        out.append(lang.tg_agree[adjective, gender, plural])


def _english_clause(lang: _Language, clause: Clause, out: list[str]) -> None:
    """``S [freq] V [O] [PP] [manner]``, or ``S be [freq] ADJ [PP]``."""
    subject, verb, obj, predicate, past, pp, adverb = clause
    _english_np(lang, subject, out)
    frequency = adverb in lang.frequency
    if verb == "be":
        out.append(lang.en_verb["be", past, subject.plural])
        if frequency:
            out.append(adverb)
        out.append(predicate)
    else:
        if frequency:
            out.append(adverb)
        out.append(lang.en_verb[verb, past, subject.plural])
        if obj is not None:
            _english_np(lang, obj, out)
    if pp is not None:
        out.append(pp[0])
        _english_np(lang, pp[1], out)
    if adverb is not None and not frequency:
        out.append(adverb)


def _target_clause(lang: _Language, clause: Clause, out: list[str]) -> None:
    """``S [adverb] [NP postposition] [O | ADJ] V``: verb-final, everything agreeing."""
    subject, verb, obj, predicate, past, pp, adverb = clause
    _target_np(lang, subject, out)
    if adverb is not None:
        out.append(lang.tg_word[adverb])
    if pp is not None:
        _target_np(lang, pp[1], out)
        out.append(lang.tg_word[pp[0]])
    if obj is not None:
        _target_np(lang, obj, out)
    if predicate is not None:
        out.append(lang.tg_agree[predicate, lang.gender[subject.noun], subject.plural])
    out.append(lang.tg_verb[verb, past, subject.plural])


def _render(lang: _Language, clauses: Sequence[Clause], conjunction: str, render_clause,
            conjunction_word: str) -> str:
    """Join clauses; capital first letter and final period, punctuation attached."""
    words: list[str] = []
    for i, clause in enumerate(clauses):
        if i:
            if conjunction == "but":  # "but" takes a comma in both languages
                words[-1] += ","
            words.append(conjunction_word)
        render_clause(lang, clause, words)
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def _english(lang: _Language, clauses: Sequence[Clause], conjunction: str) -> str:
    return _render(lang, clauses, conjunction, _english_clause, conjunction)


def _target(lang: _Language, clauses: Sequence[Clause], conjunction: str) -> str:
    return _render(lang, clauses, conjunction, _target_clause, lang.tg_word[conjunction])


def _check_np(lang: _Language, np: NounPhrase, what: str) -> None:
    if np.noun not in lang.noun_class:
        raise ValueError(f"{what}: unknown noun '{np.noun}'")
    if np.det in _NUMERALS:
        if (np.det == "one") == bool(np.plural):
            raise ValueError(f"{what}: numeral '{np.det}' does not fit plural={np.plural}")
    elif np.det not in _DETERMINERS or _DETERMINERS[np.det][bool(np.plural)] is None:
        raise ValueError(f"{what}: determiner '{np.det}' does not fit plural={np.plural}")
    bad = [a for a in np.adjectives if a not in lang.target["adjective"]]
    if bad or len(set(np.adjectives)) != len(np.adjectives):
        raise ValueError(f"{what}: bad adjectives {np.adjectives}")


def _check_clause(lang: _Language, clause: Clause) -> None:
    _check_np(lang, clause.subject, "subject")
    if clause.verb == "be":
        if clause.predicate not in lang.target["adjective"] or clause.obj is not None:
            raise ValueError("'be' needs an adjective predicate and no object")
        if clause.adverb in _MANNER_ADVERBS:
            raise ValueError("'be' takes only frequency adverbs")
    elif clause.verb in lang.transitive:
        if clause.obj is None or clause.predicate is not None:
            raise ValueError(f"transitive '{clause.verb}' needs an object and no predicate")
        _check_np(lang, clause.obj, "object")
    elif clause.verb in lang.intransitive:
        if clause.obj is not None or clause.predicate is not None:
            raise ValueError(f"intransitive '{clause.verb}' takes no object or predicate")
    else:
        raise ValueError(f"unknown verb '{clause.verb}'")
    if clause.pp is not None:
        if clause.pp[0] not in _PREPOSITIONS:
            raise ValueError(f"unknown preposition '{clause.pp[0]}'")
        _check_np(lang, clause.pp[1], "prepositional phrase")
    if clause.adverb is not None and clause.adverb not in lang.target["adverb"]:
        raise ValueError(f"unknown adverb '{clause.adverb}'")


def translate(clauses: Clause | Sequence[Clause], conjunction: str = "and") -> tuple[str, str]:
    """(English, target) for a hand-built sentence: the same renderer the corpus uses, exposed
    so tests can probe a specific construction instead of searching the corpus for it."""
    lang = _language()
    if isinstance(clauses, Clause):
        clauses = [clauses]
    if not clauses:
        raise ValueError("a sentence needs at least one clause")
    if conjunction not in _CONJUNCTIONS:
        raise ValueError(f"unknown conjunction '{conjunction}'; known: {list(_CONJUNCTIONS)}")
    for clause in clauses:
        _check_clause(lang, clause)
    return _english(lang, clauses, conjunction), _target(lang, clauses, conjunction)


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
    rng = random.Random(f"{CORPUS_NAME}/{split}/{seed}")
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    attempts = 0
    while len(pairs) < size:
        attempts += 1
        if attempts > 100 * size + 10_000:
            raise RuntimeError(f"could not sample {size} distinct '{split}' sentences")
        clauses = [_sample_clause(lang, rng)]
        conjunction = "and"
        if rng.random() < 0.15:
            clauses.append(_sample_clause(lang, rng))
            conjunction = "and" if rng.random() < 0.7 else "but"
        # Only the English decides acceptance, so the target is rendered for kept draws only.
        source = _english(lang, clauses, conjunction)
        if (not _MIN_WORDS <= source.count(" ") + 1 <= _MAX_WORDS or source in seen
                or _bucket_split(source) != split):
            continue
        seen.add(source)
        pairs.append((source, _target(lang, clauses, conjunction)))
    return pairs


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
