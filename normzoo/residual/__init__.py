"""Residual schemes, one file each; each file's ``Residual`` reads like the scheme's formula.

What a plugin builds on is exported here: the contract (``ResidualScheme``, ``Residual``,
``StreamEnds``, ``PlainForm``) and the types its hooks take (``StackInfo``, ``Site``,
``SublayerKind``, ``Family``, ``NormFactory``, ``Stream``, ``Sublayer``), and the
initialisations the built-ins use (:mod:`.init`). Plugins import them from ``normzoo.plugin``.
"""

from normzoo.residual.base import (
    Family,
    NormFactory,
    PlainForm,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    Stream,
    StreamEnds,
    Sublayer,
    SublayerKind,
)
from normzoo.residual.init import linear_default_, torchscale_scaled, xavier_normal_scaled

__all__ = [
    "Family",
    "NormFactory",
    "PlainForm",
    "Residual",
    "ResidualScheme",
    "Site",
    "StackInfo",
    "Stream",
    "StreamEnds",
    "Sublayer",
    "SublayerKind",
    "linear_default_",
    "torchscale_scaled",
    "xavier_normal_scaled",
]
