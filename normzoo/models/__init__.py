"""Model assembly: the three families built from a :class:`ModelConfig`."""

from normzoo.models.assemble import assemble
from normzoo.models.config import Component, ModelConfig
from normzoo.models.families import DecoderModel, EncoderModel, Seq2SeqModel, TransformerModel

__all__ = [
    "Component",
    "DecoderModel",
    "EncoderModel",
    "ModelConfig",
    "Seq2SeqModel",
    "TransformerModel",
    "assemble",
]
