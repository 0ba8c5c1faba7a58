"""``normzoo export``: a trained model as a folder that needs neither the run nor Lightning.

* :mod:`~normzoo.export.writer` — the export folder (``--format normzoo`` or ``hf``), written
  whole; checkpoint averaging.
* :mod:`~normzoo.export.card` — the model card (``README.md``) every export carries.
* :mod:`~normzoo.export.hf` — ``transformers`` classes for a model that is a plain Post-LN or
  Pre-LN Transformer.

``from normzoo.export import export`` is the writer's entry point; it is looked up on first
use so that importing the package (for the card, say) does not load torch.
"""

from typing import Any

_WRITER_NAMES = ("export", "FORMATS", "average_state", "recent_checkpoints")


def __getattr__(name: str) -> Any:
    if name in _WRITER_NAMES:
        from normzoo.export import writer

        return getattr(writer, name)
    raise AttributeError(f"module 'normzoo.export' has no attribute {name!r}")
