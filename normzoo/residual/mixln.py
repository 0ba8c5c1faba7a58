"""Mix-LN (Li et al. 2024): Post-LN in the first floor(fraction * L) layers, Pre-LN after.

Post-LN early keeps the shallow layers' gradients healthy; Pre-LN late keeps deep layers
contributing. A final LN follows whenever the last layer is Pre-LN.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field

from normzoo.residual.base import (
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    final_norm_ends,
)
from normzoo.residual.post import PostLNResidual
from normzoo.residual.pre import PreLNResidual


class MixLN(ResidualScheme):
    """Mix-LN: Post-LN for the first fraction of layers, Pre-LN after."""

    def __init__(
        self, stack: StackInfo, post_fraction: Annotated[float, Field(ge=0, le=1)] = 0.25
    ) -> None:
        super().__init__(stack)
        self.post_fraction = post_fraction
        self.post_layers = math.floor(post_fraction * stack.depth)

    def is_post(self, layer: int) -> bool:
        return layer < self.post_layers

    def residual(self, site: Site, make_norm: NormFactory) -> Residual:
        if self.is_post(site.layer):
            return PostLNResidual(make_norm())
        return PreLNResidual(make_norm())

    def ends(self, make_norm: NormFactory) -> StreamEnds:
        if self.is_post(self.stack.depth - 1):
            return StreamEnds(None)
        return final_norm_ends(make_norm)

    def normalizes_stream(self) -> bool:
        return self.post_layers > 0
