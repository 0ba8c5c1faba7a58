"""Residual schemes, one file each; each file's ``Residual`` reads like the scheme's formula."""

from normzoo.residual.base import (
    Family,
    NormFactory,
    Residual,
    ResidualScheme,
    Site,
    StackInfo,
    StreamEnds,
    SublayerKind,
)

__all__ = [
    "Family",
    "NormFactory",
    "Residual",
    "ResidualScheme",
    "Site",
    "StackInfo",
    "StreamEnds",
    "SublayerKind",
]
