"""The base of every recipe section, in a module of its own so that the sections kept apart
from :mod:`normzoo.recipe.schema` (:mod:`normzoo.recipe.optim`) share it without a cycle."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """Unknown keys are errors, and so are nan and infinity, which pass range checks such as
    ``gt=0`` (inf > 0) and mean nothing in a recipe."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
