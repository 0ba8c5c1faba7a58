"""``normzoo export --format hf``: a directory that ``transformers`` loads with its Auto classes.

A decoder that is exactly a Llama (Pre-LN, RMSNorm, rotary positions, SwiGLU, no biases) goes to
``LlamaForCausalLM``, or with RMSNorm QK-norm to ``Qwen3ForCausalLM``
(:mod:`normzoo.export.hf.llama`); any other model is read as a plain Post-LN or Pre-LN model
(:mod:`normzoo.export.hf.plain`, folding what folds) and renamed onto the ``transformers``
architecture with the same layers (:mod:`normzoo.export.hf.architectures`).
Either is written with ``save_pretrained`` beside a fast tokenizer, a generation config and a
model card. Before the directory is published the export
loads it back through the Auto class, as a user would, and compares its logits with normzoo's on
a probe batch: a difference above :data:`TOLERANCE` is refused rather than shipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from normzoo.contract import task_of
from normzoo.data.tokenizer import BOS, EOS, PAD, SPECIALS
from normzoo.errors import NormzooError
from normzoo.export.hf.architectures import Target, target_for
from normzoo.export.hf.llama import llama_target, why_not_llama
from normzoo.export.hf.plain import NotMappable, PlainModel, plain_model
from normzoo.models.family_info import family_info

# Largest |logit difference| an export may have; fp32 rounding gives ~1e-5 on trained models.
TOLERANCE = 1e-3


@dataclass(frozen=True)
class HFExport:
    """What was exported: the architecture, what was folded, and the measured difference."""

    architecture: str
    auto_class: str
    placement: str
    folded: str
    max_abs_logit_diff: float


def _tokenizer(loaded: Any, family: str, max_positions: int) -> Any:
    """normzoo's tokenizer as a ``transformers`` fast tokenizer that adds the special tokens
    normzoo's data adds to a text of ``family``: source + </s> (translation), <s> + text
    (causal LM), <s> text </s> (masked LM)."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    pad, bos, eos, unk, mask = SPECIALS
    info = family_info(family)
    template = " ".join([bos] * info.starts_with_bos + ["$A"] + [eos] * info.ends_with_eos)
    backend = Tokenizer.from_str(loaded.tokenizer.backend.to_str())
    backend.post_processor = TemplateProcessing(
        single=template, special_tokens=[(bos, BOS), (eos, EOS)])
    # "is <mask> a": the masked token was a whole "▁word", its space included (as RoBERTa's).
    mask_token = AddedToken(mask, lstrip=True, rstrip=False, normalized=False, special=True)
    backend.add_special_tokens([mask_token])
    # A decoder continues the end of its prompt: a batch of prompts is padded on the left.
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=pad, bos_token=bos, eos_token=eos, unk_token=unk,
        mask_token=mask_token, model_max_length=max_positions,
        padding_side="left" if info.continues_prompt else "right")


def _generation_config(loaded: Any, family: str) -> Any:
    """normzoo's decoding settings: never PAD or BOS (so greedy search is token for token
    normzoo's), the recipe's beam and length penalty (normzoo's beam search is fairseq's,
    which ``transformers``' is not, so beams may differ).

    Lengths are set by ``max_new_tokens`` alone (``max_length`` beside it makes ``generate``
    warn whenever a caller passes ``max_new_tokens``): a decoder continues for as many tokens
    as ``normzoo generate`` does by default; a translation for up to the positions' capacity.
    normzoo's per-sentence rule ``max_len_a * source tokens + max_len_b`` is no constant, so
    it is stored beside them, for :class:`LengthRule` to apply."""
    import inspect

    from transformers import GenerationConfig

    from normzoo.inference.model import Loaded

    settings: dict[str, Any] = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
                                "suppress_tokens": [PAD, BOS]}
    info = family_info(family)
    if info.continues_prompt:
        default = inspect.signature(Loaded.generate).parameters["max_new_tokens"].default
        settings["max_new_tokens"] = default
    if info.cross_attention:  # a translation: the target after BOS has max_positions - 1 at most
        evaluation = loaded.recipe.eval
        settings |= {"decoder_start_token_id": BOS, "num_beams": evaluation.beam,
                     "max_new_tokens": loaded.recipe.model.max_positions - 1,
                     "max_len_a": evaluation.max_len_a, "max_len_b": evaluation.max_len_b}
        if evaluation.beam > 1:  # transformers refuses a length penalty without beams
            settings["length_penalty"] = evaluation.lenpen
    return GenerationConfig(**settings)


class LengthRule:
    """normzoo's length limit for ``transformers``' ``generate`` on a translation export: at
    most ``max_len_a * n + max_len_b`` target tokens for a source of ``n`` tokens (its ``</s>``
    counted), and never more than ``max_new_tokens``, sentence by sentence, as normzoo decodes.

    ``transformers``' own limit is one number for the whole batch; with this logits processor
    batched greedy search gives normzoo's greedy translations exactly::

        out = model.generate(**inputs, num_beams=1, logits_processor=[
            LengthRule(model.generation_config, inputs["input_ids"])])

    A sentence at its limit is given ``</s>``, which decoding with ``skip_special_tokens``
    drops. Needs only ``torch``: any callable ``(input_ids, scores) -> scores`` is a logits
    processor to ``generate``.
    """

    def __init__(self, generation_config: Any, input_ids: torch.Tensor) -> None:
        from normzoo.inference.decoding import max_target_lengths

        config = generation_config
        self.limits = max_target_lengths(input_ids, config.max_len_a, config.max_len_b,
                                         config.max_new_tokens)
        self.eos = config.eos_token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # input_ids: the decoder's tokens so far (its start token first), beams side by side.
        limits = self.limits.to(scores.device).repeat_interleave(
            input_ids.shape[0] // self.limits.shape[0])
        done = limits <= input_ids.shape[1] - 1
        scores[done] = float("-inf")
        scores[done, self.eos] = 0.0
        return scores


def probe_batch(vocab_size: int, family: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random real-token ids (one padded row) shaped as each family's inputs."""
    generator = torch.Generator().manual_seed(seed)
    low = len(SPECIALS)

    def ids(rows: int, length: int, start: int | None, end: int | None) -> torch.Tensor:
        body = torch.randint(low, max(vocab_size, low + 1), (rows, length), generator=generator)
        parts = ([torch.full((rows, 1), start)] if start is not None else []) + [body] + (
            [torch.full((rows, 1), end)] if end is not None else [])
        return torch.cat(parts, dim=1)

    info = family_info(family)
    if info.cross_attention:
        src = ids(3, 11, None, EOS)
        src[2, 7:] = PAD
        return {"src": src, "tgt": ids(3, 9, BOS, None)}
    tokens = ids(3, 10, BOS if info.starts_with_bos else None,
                 EOS if info.ends_with_eos else None)
    tokens[2, 6:] = PAD
    return {"tokens": tokens}


@torch.no_grad()
def logits_difference(model: torch.nn.Module, hf_model: Any, family: str) -> float:
    """Max |normzoo logits - transformers logits| over the real positions of a probe batch."""
    batch = probe_batch(model.config.vocab_size, family)
    model.eval()
    hf_model.eval()
    if family_info(family).cross_attention:
        ours = model(batch["src"], batch["tgt"])
        theirs = hf_model(input_ids=batch["src"], attention_mask=batch["src"].ne(PAD).long(),
                          decoder_input_ids=batch["tgt"]).logits
        keep = torch.ones(batch["tgt"].shape, dtype=torch.bool)
    else:
        tokens = batch["tokens"]
        ours = model(tokens)
        theirs = hf_model(input_ids=tokens, attention_mask=tokens.ne(PAD).long()).logits
        keep = tokens.ne(PAD)
    return float((ours - theirs.to(ours.dtype)).abs()[keep].max())


def build(loaded: Any) -> tuple[Any, PlainModel, Target]:
    """The ``transformers`` model equal to ``loaded.model``, in memory."""
    transformers = _transformers()
    unmapped = task_of(loaded.recipe).hf_unmapped
    if unmapped is not None:
        raise NotMappable(unmapped)
    scheme = loaded.recipe.model.residual.name
    llama = llama_target(loaded.model, scheme)  # a Llama first: what decoders are served as
    if llama is not None:
        plain, target = llama
    elif loaded.model.config.positions == "rope":  # no other target has rotary positions
        raise NotMappable("rotary positions export only as LlamaForCausalLM (or Qwen3ForCausalLM "
                          "with QK-norm), and this model is "
                          f"not a Llama: {why_not_llama(loaded.model)}")
    else:
        plain = plain_model(loaded.model, scheme)
        target = target_for(plain)
    config, weights = target.build(plain, loaded.model.config)
    hf_model = getattr(transformers, target.architecture)(config)
    expected = set(hf_model.state_dict())
    if expected != set(weights):  # a mapping bug, or a transformers release that renamed
        raise NotMappable(f"the installed transformers {transformers.__version__} names "
                          f"{target.architecture}'s weights differently from what normzoo "
                          f"writes (missing {sorted(expected - set(weights))[:3]}, unexpected "
                          f"{sorted(set(weights) - expected)[:3]})")
    hf_model.load_state_dict({k: v.contiguous() for k, v in weights.items()}, strict=True)
    # Marian leaves its position table out of save_pretrained (it recomputes its own
    # sinusoids); normzoo's table differs from those, so it must be saved.
    hf_model._keys_to_ignore_on_save = None
    return hf_model.eval(), plain, target


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise NormzooError("--format hf needs the transformers package: pip install "
                           "'normzoo[hf]'") from None
    return transformers


def write(loaded: Any, staging: Path) -> HFExport:
    """Write the ``transformers`` directory into ``staging`` and check it loads back equal."""
    transformers = _transformers()
    transformers.utils.logging.disable_progress_bar()  # normzoo's output is one line
    hf_model, plain, target = build(loaded)
    family = plain.family
    hf_model.generation_config = _generation_config(loaded, family)
    hf_model.save_pretrained(staging)
    _tokenizer(loaded, family, loaded.recipe.model.max_positions).save_pretrained(staging)
    reloaded = getattr(transformers, target.auto_class).from_pretrained(staging)
    difference = logits_difference(loaded.model, reloaded, family)
    if not difference <= TOLERANCE:
        raise NotMappable(f"the {target.architecture} export differs from the normzoo model by "
                          f"{difference:.3g} in the logits (tolerance {TOLERANCE:g}); not "
                          "exported")
    result = HFExport(target.architecture, target.auto_class, plain.placement, plain.folded,
                      difference)
    provenance = {"architecture": result.architecture, "auto_class": result.auto_class,
                  "placement": result.placement, "scheme": plain.scheme,
                  "folded": result.folded, "max_abs_logit_diff": difference,
                  "transformers_version": transformers.__version__}
    (staging / "normzoo.json").write_text(json.dumps(provenance, indent=2), encoding="utf-8")
    return result
