"""The three model families: BERT-style encoder, GPT-style decoder, encoder-decoder.

Each takes token ids and returns logits; none knows about Lightning, losses or devices.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from normzoo.models.config import ModelConfig
from normzoo.models.stacks import DecoderStack, EncoderStack
from normzoo.nn.embeddings import Embeddings
from normzoo.nn.kv_cache import KVCache, StaticKVCache
from normzoo.nn.padding import padding_mask_context
from normzoo.residual.base import ResidualScheme


class OutputProjection(nn.Module):
    """Hidden states to vocabulary logits, tied to the token embedding when asked."""

    def __init__(self, dim: int, vocab_size: int, tied: nn.Embedding | None) -> None:
        super().__init__()
        self.tied = tied
        if tied is None:
            self.weight = nn.Parameter(torch.empty(vocab_size, dim))
            nn.init.normal_(self.weight, mean=0.0, std=dim**-0.5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weight = self.tied.weight if self.tied is not None else self.weight
        return F.linear(h, weight)


class TransformerModel(nn.Module):
    """Common parts: the config that built the model and the plugins it came from."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.pad_id = config.pad_id
        self.plugins: list[dict[str, str]] = []
        # The residual scheme's class (set by assemble): the task calls its model-wide hooks
        # (data-dependent init) without knowing which scheme it is.
        self.scheme: type[ResidualScheme] = ResidualScheme

    def _embeddings(self, token_embedding: nn.Embedding | None = None) -> Embeddings:
        c = self.config
        return Embeddings(
            c.vocab_size,
            c.d_model,
            pad_id=c.pad_id,
            positions=c.positions,
            max_positions=c.max_positions,
            dropout=c.dropout,
            token_embedding=token_embedding,
            scale=c.embed_scale,
        )

    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.eq(self.pad_id)


class EncoderModel(TransformerModel):
    """BERT-style encoder with a masked-LM head (dense, activation, norm, tied projection).

    The head's dense bias and the output bias exist only where the model has biases
    (``model.bias``), like the norms' biases.
    """

    def __init__(self, config: ModelConfig, encoder: EncoderStack, make_norm) -> None:
        super().__init__(config)
        self.embeddings = self._embeddings()
        self.encoder = encoder
        self.head_dense = nn.Linear(config.d_model, config.d_model, bias=config.norm_bias)
        self.head_norm = make_norm(config.d_model)
        tied = self.embeddings.tokens if config.tie_output else None
        self.output = OutputProjection(config.d_model, config.vocab_size, tied)
        self.output_bias = (nn.Parameter(torch.zeros(config.vocab_size)) if config.norm_bias
                            else None)

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Contextual hidden states ``[B, T, dim]``."""
        return self.encoder(self.embeddings(tokens), self.padding_mask(tokens))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = self.padding_mask(tokens)
        h = F.gelu(self.head_dense(self.encoder(self.embeddings(tokens), mask)))
        # The head's norm may be a BatchNorm: padding must stay out of its statistics too.
        with padding_mask_context(mask):
            h = self.head_norm(h)
        logits = self.output(h)
        return logits if self.output_bias is None else logits + self.output_bias


class DecoderModel(TransformerModel):
    """GPT-style causal language model; ``cache`` enables incremental decoding."""

    def __init__(self, config: ModelConfig, decoder: DecoderStack) -> None:
        super().__init__(config)
        self.embeddings = self._embeddings()
        self.decoder = decoder
        tied = self.embeddings.tokens if config.tie_output else None
        self.output = OutputProjection(config.d_model, config.vocab_size, tied)

    def new_cache(self, capacity: int | None = None) -> KVCache | StaticKVCache:
        """A growing cache, or one preallocated for ``capacity`` positions."""
        return self.decoder.new_cache(capacity)

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        cache: KVCache | StaticKVCache | None = None,
        key_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, T, vocab]``; with ``cache``, ``tokens`` continue the cached prefix."""
        offset = 0 if cache is None else cache.offset
        h = self.decoder(
            self.embeddings(tokens, offset),
            key_padding_mask=key_padding_mask,
            norm_padding_mask=self.padding_mask(tokens),
            cache=cache,
        )
        return self.decoder.ends.logits(h, self.output)


class Seq2SeqModel(TransformerModel):
    """Encoder-decoder for translation, with shared source/target embeddings by default."""

    def __init__(self, config: ModelConfig, encoder: EncoderStack, decoder: DecoderStack) -> None:
        super().__init__(config)
        self.encoder_embeddings = self._embeddings()
        shared = self.encoder_embeddings.tokens if config.share_embeddings else None
        self.decoder_embeddings = self._embeddings(shared)
        self.encoder = encoder
        self.decoder = decoder
        tied = self.decoder_embeddings.tokens if config.tie_output else None
        self.output = OutputProjection(config.d_model, config.vocab_size, tied)

    def new_cache(self, capacity: int | None = None) -> KVCache | StaticKVCache:
        """A growing cache, or one preallocated for ``capacity`` positions."""
        return self.decoder.new_cache(capacity)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder output ``[B, S, dim]`` and the source padding mask ``[B, S]``."""
        mask = self.padding_mask(src)
        return self.encoder(self.encoder_embeddings(src), mask), mask

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_padding_mask: torch.Tensor | None,
        cache: KVCache | StaticKVCache | None = None,
    ) -> torch.Tensor:
        """Logits for target prefix ``tgt``; with ``cache``, ``tgt`` holds only new tokens."""
        offset = 0 if cache is None else cache.offset
        h = self.decoder(
            self.decoder_embeddings(tgt, offset),
            memory,
            memory_padding_mask=memory_padding_mask,
            norm_padding_mask=self.padding_mask(tgt),
            cache=cache,
        )
        return self.decoder.ends.logits(h, self.output)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[B, T, vocab]`` for target input ``tgt`` given ``src``."""
        memory, mask = self.encode(src)
        return self.decode(tgt, memory, mask)
