"""Post-LN (Vaswani et al. 2017): x <- LN(x + f(x)); no final norm; needs learning-rate warm-up.

``embedding_norm: true`` adds BERT's LN on the embeddings before the first layer (Devlin et al.
2019): the original Transformer has none, BERT has one, and an encoder exported to
``transformers``' BERT needs it (docs/huggingface.md).
"""

from __future__ import annotations

from normzoo.residual.base import (
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Sublayer,
)


class PostLNResidual(Residual):
    def __init__(self, norm) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x, f: Sublayer):
        return self.norm(x + f(x))

    def plain_form(self) -> PlainForm | str:
        return PlainForm("post") if type(self) is PostLNResidual else super().plain_form()



class PostLN(ResidualScheme):
    """Post-LN (Vaswani 2017): x <- LN(x + f(x)), no final norm; needs warm-up."""

    def __init__(self, stack: StackInfo, embedding_norm: bool = False) -> None:
        super().__init__(stack)
        self.normalizes_embeddings = embedding_norm

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        return PostLNResidual(make_norm())

    def embedding_norm(self) -> bool:
        return self.normalizes_embeddings

    def normalizes_stream(self) -> bool:
        return True
