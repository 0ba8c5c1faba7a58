"""A registry name plus its options, as a recipe writes it: ``norm: rmsnorm`` or
``residual: {name: mixln, post_fraction: 0.25}``. Its own module so that the model section
(:mod:`~normzoo.models.config`) and the name resolution (:mod:`~normzoo.models.resolve`) both
build on it without importing each other."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Component(BaseModel):
    """A registry name plus its options (every other key of the mapping)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def __str__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.name}({opts})" if opts else self.name
