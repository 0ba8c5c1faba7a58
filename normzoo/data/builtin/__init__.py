"""The built-in corpus ``toy-en-xx``: English-like sentences -> an invented language.

* :mod:`~normzoo.data.builtin.words` — the fixed word tables the language is drawn from.
* :mod:`~normzoo.data.builtin.language` — the language: its lexicon and inflections, built
  from a fixed seed.
* :mod:`~normzoo.data.builtin.grammar` — its sentences: trees, the English and target
  renderings, and :func:`translate`.
* :mod:`~normzoo.data.builtin.corpus` — the corpus: sampled sentences in disjoint splits,
  :func:`generate`, :func:`write_split` and the lexicon tables.
"""

from normzoo.data.builtin.corpus import (
    SPLITS,
    generate,
    inflections,
    lexicon,
    noun_gender,
    write_split,
)
from normzoo.data.builtin.grammar import Clause, NounPhrase, translate
from normzoo.data.builtin.language import CORPUS_NAME, Form
from normzoo.data.builtin.language import _language as _language  # tests read the lexicon
from normzoo.data.builtin.words import AGREEMENT_SUFFIXES, NOUN_PLURAL_SUFFIX, VERB_SUFFIXES

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
