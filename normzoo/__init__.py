"""normzoo: residual schemes and normalization layers for Transformers, as one name in a recipe.

Importing the package is cheap: heavy modules (torch, Lightning) load only when used.
"""

__version__ = "0.2.0"  # the one place: pyproject.toml reads it (dynamic version)


def __getattr__(name: str):
    """``normzoo.load`` without importing torch at ``import normzoo`` time."""
    if name == "load":
        from normzoo.inference.load import load

        return load
    raise AttributeError(f"module 'normzoo' has no attribute {name!r}")
