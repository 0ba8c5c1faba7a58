"""An example third-party normzoo plugin.

normzoo finds these names through the entry points in this distribution's ``pyproject.toml``;
nothing here is imported until a recipe (or ``normzoo list``) asks for one of them.
"""

__version__ = "0.1.0"
