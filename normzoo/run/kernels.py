"""Which kernels a run's attention and optimizer use, for ``summary.json`` and the header.

Both are decided where they run (:mod:`normzoo.nn.sdpa_choice` per attention call,
:func:`normzoo.tasks.optim.adamw_impl` when the optimizer is built); here the same functions
are asked with the run's device, precision and model, so the record says what ran.
"""

from __future__ import annotations

from typing import Any

import torch

from normzoo.nn.attention import explicit_for
from normzoo.nn.sdpa_choice import AttentionCase, first_backend_names
from normzoo.recipe import Recipe
from normzoo.tasks.optim import adamw_impl

# The dtype attention computes in under each of Lightning's precisions (autocast's, or the
# weights' own under "-true").
COMPUTE_DTYPES = {"32-true": torch.float32, "bf16-mixed": torch.bfloat16,
                  "bf16-true": torch.bfloat16, "16-mixed": torch.float16}


def attention_backends(recipe: Recipe, device_type: str) -> dict[str, str]:
    """Per attention case, what runs it: on a GPU the SDPA kernel tried first (``flash``,
    ``efficient``, ``cudnn``, ``math``) or ``explicit``; elsewhere ``explicit`` or
    ``sdpa (<device>)``, torch's own dispatch there."""
    model = recipe.model
    dtype = COMPUTE_DTYPES[recipe.trainer.precision]
    if explicit_for(model.attention_impl, device_type, dtype):
        return dict.fromkeys((case.value for case in AttentionCase), "explicit")
    chosen = first_backend_names(device_type, dtype, model.d_model // model.heads,
                                 model.attention_backend)
    return chosen or dict.fromkeys((case.value for case in AttentionCase),
                                   f"sdpa ({device_type})")


def kernel_record(recipe: Recipe, device_type: str) -> dict[str, Any]:
    """``summary.json``'s ``attention_backends`` and ``optimizer_impl``."""
    return {"attention_backends": attention_backends(recipe, device_type),
            "optimizer_impl": adamw_impl(device_type, recipe.trainer.precision)}


def kernel_line(recipe: Recipe, device_type: str) -> str:
    """The header's line on a GPU: each attention case's kernel and AdamW's."""
    record = kernel_record(recipe, device_type)
    cases = "; ".join(f"{case}: {name}" for case, name in record["attention_backends"].items())
    return (f"kernels: attention (model.attention_backend={recipe.model.attention_backend}) "
            f"{cases} · AdamW {record['optimizer_impl']}")
