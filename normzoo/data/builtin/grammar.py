"""The built-in language's sentences: trees, their English and target renderings, and
:func:`translate`.

* **Word order.** The target is verb-final: ``subject [adverb] [noun phrase + postposition]
  [object] verb``; adjectives follow the noun in mirror order (``the big red ball`` -> ``DET
  ball red big``); prepositions become postpositions.

The source -> target mapping is a *function*: sentences are small trees (:class:`Clause`), and
the English grammar that renders them is unambiguous (no word belongs to two parts of speech, no
verb has identical present and past forms, no noun has identical singular and plural, a
prepositional phrase always attaches to the clause), so one English sentence has one tree and
one translation. The words and their inflected forms come from the lexicon that
:mod:`~normzoo.data.builtin.language` builds; :func:`translate` renders hand-built trees, and
:func:`~normzoo.data.builtin.corpus.inflections` analyses every target word, so tests can check
the rules without a second implementation of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from normzoo.data.builtin.language import _Language, _language
from normzoo.data.builtin.words import (
    _CONJUNCTIONS,
    _DETERMINERS,
    _MANNER_ADVERBS,
    _NUMERALS,
    _PREPOSITIONS,
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
