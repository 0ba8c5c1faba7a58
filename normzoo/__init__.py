"""normzoo: residual schemes and normalization layers for Transformers, as one name in a recipe.

Importing the package is cheap: heavy modules (torch, Lightning) load only when used.
"""

__version__ = "0.1.0"
