"""What each model family is, said once: its stacks, its name on a model card, the parts its
parameters are counted from, how its texts are framed and its ``transformers`` counterparts.

The family's *names* are :class:`~normzoo.residual.base.Family`'s (the plugin API's, on the
lowest floor); this module describes each member, and the rest of normzoo reads a model's
:class:`FamilyInfo` (``config.family_info``) instead of comparing its family's name, so that
no ``if family == "decoder"`` is written outside :mod:`normzoo.models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from normzoo.residual.base import Family

FAMILY_NAMES: tuple[str, ...] = tuple(member.value for member in Family)
# model.family's type: "encoder" | "decoder" | "encoder_decoder", read off the enum.
FamilyName = Literal[FAMILY_NAMES]  # type: ignore[valid-type]


@dataclass(frozen=True)
class HFMapping:
    """A family's ``transformers`` counterparts: the Auto class that loads them, and the
    architecture with the same layers for each plain placement (``post``, ``pre``), whose
    weights :mod:`normzoo.export.hf.architectures` writes."""

    auto_class: str
    architectures: Mapping[str, str]


@dataclass(frozen=True)
class FamilyInfo:
    """One model family, as the code outside :mod:`normzoo.models` asks about it."""

    family: Family
    title: str  # on a model card
    stacks: tuple[str, ...]  # in forward order: the encoder reads the source first
    masked_lm_head: bool  # a dense layer and a norm before the output projection (BERT)
    continues_prompt: bool  # generates by continuing its input: a batch is padded on the left
    starts_with_bos: bool  # how normzoo's data frames a text (a translation's source)
    ends_with_eos: bool
    hf: HFMapping

    @property
    def name(self) -> str:
        return self.family.value

    @property
    def cross_attention(self) -> bool:
        """Whether the decoder attends to an encoder's output: the model reads a source and a
        target (two embeddings, two position tables, a cross-attention per decoder layer)."""
        return len(self.stacks) > 1


FAMILY_INFO: Mapping[Family, FamilyInfo] = MappingProxyType({
    Family.ENCODER_DECODER: FamilyInfo(
        Family.ENCODER_DECODER, "encoder-decoder", ("encoder", "decoder"),
        masked_lm_head=False, continues_prompt=False, starts_with_bos=False,
        ends_with_eos=True,
        hf=HFMapping("AutoModelForSeq2SeqLM", MappingProxyType({
            "post": "MarianMTModel", "pre": "BlenderbotForConditionalGeneration"}))),
    Family.DECODER: FamilyInfo(
        Family.DECODER, "decoder-only (GPT-style)", ("decoder",),
        masked_lm_head=False, continues_prompt=True, starts_with_bos=True,
        ends_with_eos=False,
        hf=HFMapping("AutoModelForCausalLM", MappingProxyType({
            "pre": "GPT2LMHeadModel", "post": "OpenAIGPTLMHeadModel"}))),
    Family.ENCODER: FamilyInfo(
        Family.ENCODER, "encoder-only (BERT-style)", ("encoder",),
        masked_lm_head=True, continues_prompt=False, starts_with_bos=True,
        ends_with_eos=True,
        hf=HFMapping("AutoModelForMaskedLM", MappingProxyType({
            "post": "BertForMaskedLM", "pre": "MegatronBertForMaskedLM"}))),
})
if set(FAMILY_INFO) != set(Family):  # pragma: no cover - a member added without its info
    raise RuntimeError(f"no FamilyInfo for {sorted(set(Family) - set(FAMILY_INFO))}")


def family_info(family: str | Family) -> FamilyInfo:
    """The description of ``family`` (a member of :class:`Family`, or its name)."""
    return FAMILY_INFO[Family(family)]
