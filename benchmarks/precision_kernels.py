"""The kernels that decide bf16's speed on a CPU, at the depth study's shapes, in one process:
attention by torch's SDPA and by normzoo's explicit path, the vocabulary cross-entropy by
``F.cross_entropy`` and by normzoo's blocked one, dropout by ``F.dropout`` and by normzoo's
(forward and backward, fp32 and bf16), and the study's matrix products in GFLOP/s in both dtypes:
what bf16 can gain at most. ``precision.py`` reports them beside its training runs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _time_ms(fn, reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def measure_kernels() -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    from normzoo.nn.attention import explicit_attention
    from normzoo.nn.cross_entropy import smoothed_cross_entropy_sum
    from normzoo.nn.dropout import dropout

    torch.manual_seed(0)
    # A study batch: ~2,000 target tokens as 100 sentences of 20, 4 heads of 32, a 6,000 vocab.
    b, h, t, d, vocab, tokens = 100, 4, 20, 32, 6000, 2000
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)
    mask[::3, ..., -4:] = False
    labels = torch.randint(1, vocab, (tokens,))
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        name = "fp32" if dtype is torch.float32 else "bf16"

        def leaf(*shape, dtype=dtype):
            return torch.randn(*shape).to(dtype).requires_grad_(True)

        q, k, v = leaf(b, h, t, d), leaf(b, h, t, d), leaf(b, h, t, d)
        logits, x = leaf(tokens, vocab), leaf(b, t, 128)

        def sdpa(q=q, k=k, v=v):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

        def explicit(q=q, k=k, v=v):
            explicit_attention(q, k, v, mask, 0.0).sum().backward()

        def torch_ce(logits=logits):
            F.cross_entropy(logits.float(), labels, ignore_index=0, label_smoothing=0.1,
                            reduction="sum").backward()

        def blocked_ce(logits=logits):
            smoothed_cross_entropy_sum(logits, labels, ignore_index=0,
                                       smoothing=0.1).backward()

        def torch_dropout(x=x):
            F.dropout(x, 0.1, True).sum().backward()

        def our_dropout(x=x):
            dropout(x, 0.1, True).sum().backward()

        for kernel, ours, theirs in (("attention (SDPA / explicit)", explicit, sdpa),
                                     ("cross-entropy, 6,000 vocab (F / blocked)", blocked_ce,
                                      torch_ce),
                                     ("dropout 0.1 (F / normzoo)", our_dropout, torch_dropout)):
            rows.append({"kernel": kernel, "dtype": name, "torch_ms": _time_ms(theirs),
                         "normzoo_ms": _time_ms(ours)})
    return rows


def measure_gemm() -> list[dict[str, Any]]:
    """GFLOP/s of the study's matrix products, fp32 against bf16: what bf16 can gain at most."""
    import torch

    rows = []
    for m, k, n, what in ((2048, 128, 512, "FFN in"), (2048, 512, 128, "FFN out"),
                          (2048, 128, 384, "fused q/k/v"), (2048, 128, 6000, "output "
                                                                              "projection")):
        rates = {}
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
            out = torch.empty(m, n, dtype=dtype)
            ms = _time_ms(lambda a=a, b=b, out=out: torch.mm(a, b, out=out))
            rates[str(dtype).split(".")[-1]] = 2 * m * k * n / ms / 1e6
        rows.append({"shape": f"[{m}, {k}] x [{k}, {n}] ({what})", "fp32_gflops":
                     rates["float32"], "bf16_gflops": rates["bfloat16"]})
    return rows
