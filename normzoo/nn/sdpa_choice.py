"""Which of torch's SDPA kernels attention may use on a GPU, in which order: a pure choice from
the attention case, the dtype, the head width and the recipe's ``model.attention_backend``.

Left to itself, torch puts cuDNN's attention first on Hopper and Blackwell GPUs (cuDNN > 9.15),
and cuDNN builds an execution plan for every new shape it sees. Token-budget batches change
shape every step, so a run kept paying for plans: on an H200 (torch 2.11, bf16 autocast,
Transformer-base, issue 50) the first steps on a new batch shape took 0.4-4.3 s under cuDNN
and 32-100 ms with cuDNN left out, and the steady step was the same either way. So the default
leaves cuDNN out, and takes each remaining kernel where its constraints let it run:

* **flash** (FlashAttention-2) takes no explicit mask (only ``is_causal`` on equal lengths), runs
  in fp16/bf16 only, with a head width of at most 256: the causal self-attention of a training
  decoder, and one-token decoding steps, which need no mask.
* **efficient** (the memory-efficient CUTLASS kernel) takes a mask and float32 too, with a head
  width divisible by 8 in fp16/bf16 (4 in float32): padded self-attention, padded causal
  attention, cross-attention with its source mask.
* **math** (plain ATen operations) takes everything: the fallback, always last.

A recipe may name a kernel (``flash``, ``efficient``, ``cudnn``, ``math``): it goes first where
its constraints allow the case, and the default order follows as the fallback, so a case it
cannot run (flash on a padded batch) still runs. Off a GPU nothing is chosen (``None``): CPU
attention is what it was, :mod:`normzoo.nn.attention` decides between SDPA and the explicit path
there. The list is applied with ``sdpa_kernel(backends, set_priority=True)``: torch tries them in
this order and takes the first that accepts the tensors, so the first listed one is what runs,
unless a constraint modelled here only in part (alignment of the tensors in memory, the GPU's
generation) refuses it.
"""

from __future__ import annotations

import enum
from typing import Literal

import torch
from torch.nn.attention import SDPBackend

AttentionBackend = Literal["auto", "flash", "efficient", "cudnn", "math"]
BACKEND_NAMES: tuple[str, ...] = ("auto", "flash", "efficient", "cudnn", "math")
KERNELS: dict[str, SDPBackend] = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
NAMES: dict[SDPBackend, str] = {kernel: name for name, kernel in KERNELS.items()}
HALF = (torch.float16, torch.bfloat16)


class AttentionCase(enum.Enum):
    """The kinds of attention a normzoo model runs; ``masked`` is whether SDPA gets a mask."""

    SELF_PADDED = "self-attention, key padding mask"
    CAUSAL = "causal, no mask"
    CAUSAL_PADDED = "causal, padding mask"
    CROSS = "cross-attention, source mask"
    DECODE = "incremental decoding, query length 1"

    @property
    def masked(self) -> bool:
        return self in (AttentionCase.SELF_PADDED, AttentionCase.CAUSAL_PADDED,
                        AttentionCase.CROSS)


def attention_case(*, cross: bool, causal: bool, masked: bool, query_len: int) -> AttentionCase:
    """The case of one SDPA call: ``masked`` is whether it gets a mask tensor (a causal call
    on a cache's offset positions has one even without padding)."""
    if cross:
        return AttentionCase.CROSS
    if causal and not masked and query_len == 1:
        return AttentionCase.DECODE
    if causal:
        return AttentionCase.CAUSAL_PADDED if masked else AttentionCase.CAUSAL
    return AttentionCase.SELF_PADDED


def kernel_applies(kernel: SDPBackend, case: AttentionCase, dtype: torch.dtype,
                   head_dim: int) -> bool:
    """Whether ``kernel`` can run ``case`` at this dtype and head width, by the constraints
    torch's CUDA dispatcher checks (``sdp_utils.cpp``) that do not depend on the GPU."""
    if kernel == SDPBackend.FLASH_ATTENTION:
        return not case.masked and dtype in HALF and head_dim <= 256
    if kernel == SDPBackend.EFFICIENT_ATTENTION:
        return dtype in (*HALF, torch.float32) and head_dim % (8 if dtype in HALF else 4) == 0
    if kernel == SDPBackend.CUDNN_ATTENTION:
        return dtype in HALF and head_dim <= 128 and head_dim % 8 == 0
    return kernel == SDPBackend.MATH


def sdpa_backends(case: AttentionCase, device_type: str, dtype: torch.dtype, head_dim: int,
                  override: AttentionBackend = "auto") -> list[SDPBackend] | None:
    """The SDPA kernels to allow for ``case``, in the order torch should try them; None off a
    GPU (``device_type`` other than ``cuda``), where nothing is restricted.

    ``auto``: flash where it applies, then the memory-efficient kernel, then math; cuDNN never
    (see the module docstring). A named kernel goes first where it applies to the case, before
    that same order; ``math`` alone is math only."""
    if device_type != "cuda":
        return None
    if override == "math":
        return [SDPBackend.MATH]
    order = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if override != "auto":
        order.insert(0, KERNELS[override])
    chosen = [k for k in order if kernel_applies(k, case, dtype, head_dim)]
    return [*dict.fromkeys(chosen), SDPBackend.MATH]


def first_backend_names(device_type: str, dtype: torch.dtype, head_dim: int,
                        override: AttentionBackend = "auto") -> dict[str, str] | None:
    """For every case, the name of the kernel :func:`sdpa_backends` puts first (what a run
    records); None off a GPU."""
    if device_type != "cuda":
        return None
    return {case.value: NAMES[sdpa_backends(case, device_type, dtype, head_dim, override)[0]]
            for case in AttentionCase}
