"""Residual schemes, one file each; each file's ``Residual`` reads like the scheme's formula.

What a plugin builds on is exported here: the contract (``ResidualScheme``, ``Residual``,
``StreamEnds``, ``PlainForm``) and the types its hooks take (``StackInfo``, ``Site``,
``SublayerKind``, ``Family``, ``NormFactory``, ``Stream``, ``Sublayer``).
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
]
