"""The task: ``SPLIT.txt`` lines of ``words<TAB>tags`` (one tag per word), each word's tag
predicted at its first token. Light: no torch at import."""

from __future__ import annotations

from typing import Any

from normzoo.plugin import Task

TAGS = ("S", "M", "L")
UNTAGGED = len(TAGS)  # a word's later tokens, BOS and EOS: stored as an id, no loss


class Tagger(Task):
    """Tags each word of a sentence (a third party's task)."""

    name = "nz_tagger"
    family = "encoder"
    module = "nz_tagger.module:TaggerModule"
    parts = ("text", "tags")
    tables = ("text", "tags")  # the tags cached beside the tokens, one id per token
    compared_score = ("accuracy", "max", "")

    def read(self, split: Any) -> Any:
        for lines in split.lines():
            words, tags = zip(*(line.split("\t") for line in lines), strict=True)
            yield list(words), list(tags)

    def encode(self, parts: Any, tokenizer: Any) -> list[list[list[int]]]:
        rows, tag_rows = [], []
        for text, tags in zip(*parts, strict=True):
            words = text.split()
            ids, tag_ids = [], []
            for pieces, tag in zip(tokenizer.encode_batch(words), tags.split(), strict=True):
                ids += pieces
                tag_ids += [TAGS.index(tag)] + [UNTAGGED] * (len(pieces) - 1)
            rows.append(ids)
            tag_rows.append(tag_ids)
        return [rows, tag_rows]

    def dataset(self, prepared: Any, role: str, recipe: Any, tokenizer: Any) -> Any:
        from nz_tagger.module import Tagged

        return Tagged(prepared.table(role, "text"), prepared.table(role, "tags"),
                      recipe.data.max_len)

    def build_model(self, recipe: Any, vocab_size: int) -> Any:
        """The encoder with a ``tagger`` head on each token's state."""
        from torch import nn

        from normzoo.plugin import assemble

        model = assemble(recipe.model, vocab_size=vocab_size)
        model.tagger = nn.Linear(recipe.model.d_model, len(TAGS))
        return model
