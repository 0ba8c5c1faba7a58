"""The built-in labelled corpus ``toy-en-labels``: the toy corpus's English, each sentence
labelled with the tense and grammatical number of its first clause.

Why it exists: ``recipes/classify.yaml`` must train offline, in under a minute, on a task where
a model has to *read* the sentence, so that normalization choices can change the score.

**The label** is ``{tense}-{number}`` of the first clause (``present-singular``,
``present-plural``, ``past-singular``, ``past-plural``), taken from the sentence tree that the
grammar sampled, never re-parsed from text. The grammar is unambiguous (one English sentence,
one tree), so the label is a function of the text and 100% accuracy is reachable. It is not
trivial:

* the tense is carried by the first clause's verb and the number by its subject (determiner,
  noun form) or by the verb's agreement (``runs``/``run``, ``was``/``were``); no one word says
  both except the copula, and a simple past verb (``ran``) says nothing about number;
* those words sit at varying positions (0-2 adjectives, an optional frequency adverb before the
  verb), and the best single fixed-position word predicts the label for only about 70% of the
  training sentences (the first word: about 46%);
* 15% of the sentences have a second clause with its own tense and number, so a bag of words is
  not enough either: the model must tell which verb belongs to the first clause (a linear
  bag-of-words model reaches about 92% on test; the majority class is 36%).

The classes keep the grammar's natural balance (about 36/24/24/16% in train: 40% of clauses
are past, 40% of subjects plural); the mild imbalance is what makes macro-F1 differ from
accuracy, so both metrics carry information.

**Splits** are exactly the toy corpus's (``toy-en-xx``): the same sampling, seed and hash
buckets, so the texts are the English side of
the toy corpus (``normzoo.plugin.toy_sentences``) (same order) and no text is shared between splits.

Pure standard library (no torch), deterministic, and fast (the 20,000-sentence train split in
about a quarter of a second): the fast paths (``normzoo list``, recipe checks) import it.
"""

from __future__ import annotations

from typing import Any

from normzoo.plugin import TOY_SPLITS, DataError, toy_sentences

CORPUS_NAME = "toy-en-labels"
SPLITS: dict[str, int] = dict(TOY_SPLITS)
LABELS: tuple[str, ...] = ("present-singular", "present-plural", "past-singular", "past-plural")


def clause_label(clause: Any) -> str:
    """The label of one clause tree: its tense and its subject's grammatical number."""
    tense = "past" if clause.past else "present"
    number = "plural" if clause.subject.plural else "singular"
    return f"{tense}-{number}"


def builtin_examples(split: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(English texts, label names) of ``split`` of ``toy-en-labels``; ``limit`` generates only
    that prefix (the same first examples as the full split), so limits behave like truncation.

    Raises :class:`~normzoo.data.sources.DataError` for a split other than train, valid, test,
    or a negative limit."""
    if split not in SPLITS:
        raise DataError(f"the built-in corpus '{CORPUS_NAME}' has no split '{split}'; "
                        f"it has {', '.join(SPLITS)}")
    if limit is not None and limit < 0:
        raise DataError(f"limit must be >= 0, got {limit}")
    size = SPLITS[split] if limit is None else min(limit, SPLITS[split])
    found = toy_sentences(split, size)
    return [text for text, _, _ in found], [clause_label(clauses[0]) for _, clauses, _ in found]
