"""Summed, label-smoothed cross-entropy over a vocabulary, computed a block of rows at a time.

``F.cross_entropy`` on ``[tokens, vocab]`` logits makes several passes over full-size float32
arrays: the cast of bf16 logits to float32, ``log_softmax``, the smoothing term's sum, and in
the backward ``log_softmax``'s gradient, the sum of the two terms' gradients and the cast back.
For a 6,000-entry vocabulary and 2,048 tokens these arrays are 49 MB each, so the loss cost as
much as all the Transformer's layers under bf16 on a CPU (``benchmarks/precision.py``). Here
each block of rows is taken from the logits, turned into its loss and its gradient while it is
in cache, and the gradient is kept for the backward, which only scales it (by the loss scale
too, under ``16-mixed``) and casts it to the logits' dtype.

The kept gradient is float32, or bf16 for bf16 logits (bf16 has float32's exponent range, so
rounding it early loses mantissa bits only, as the cast at the end would, and halves the
memory). Never float16: it is kept before the loss scale multiplies it, and float16 flushes
anything below 6e-8 to zero (the probabilities of all but the likely tokens of a confident
model), where the scaled gradient ``2**16`` times larger is representable.

The result equals ``F.cross_entropy(logits.float(), labels, ignore_index=...,
label_smoothing=..., reduction="sum")`` (tested within float32 rounding, loss and gradient).
"""

from __future__ import annotations

import torch

# Rows per block: 32 rows of a 32k vocabulary in float32 are 4 MB, a few times L2 but well
# inside the last-level cache; smaller vocabularies take more rows to keep blocks this size.
BLOCK_ELEMENTS = 1 << 20


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int,
                smoothing: float) -> torch.Tensor:
        rows, vocab = logits.shape
        needs_grad = ctx.needs_input_grad[0]
        stored = torch.bfloat16 if logits.dtype == torch.bfloat16 else torch.float32
        grad = torch.empty(rows, vocab, dtype=stored, device=logits.device) if needs_grad \
            else None
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        step = max(1, min(rows, BLOCK_ELEMENTS // vocab))
        # Work space for one block, allocated once per call: fresh multi-megabyte tensors per
        # block cost a page fault per 4 kB on a CPU, more than the arithmetic.
        f32 = {"dtype": torch.float32, "device": logits.device}
        x_buf = torch.empty(step, vocab, **f32) if logits.dtype != torch.float32 else None
        e_buf = torch.empty(step, vocab, **f32)
        for start in range(0, rows, step):
            block = logits[start : start + step]
            n = block.shape[0]
            x = block if x_buf is None else x_buf[:n].copy_(block)
            y = labels[start : start + step, None]
            keep = y.ne(ignore_index)
            y = y.masked_fill(~keep, 0)
            top = x.amax(dim=-1, keepdim=True)
            e = torch.sub(x, top, out=e_buf[:n]).exp_()
            norm = e.sum(dim=-1, keepdim=True)
            lse = top + norm.log()
            loss = lse - x.gather(1, y)  # -log p(y)
            if smoothing:  # -mean_j log p(j) = lse - mean_j x_j
                loss = (1.0 - smoothing) * loss + smoothing * (lse - x.mean(dim=-1, keepdim=True))
            total += loss.masked_fill(~keep, 0.0).sum()
            if needs_grad:
                # d loss / d x_j = softmax_j - eps / V - (1 - eps) [j = y]; 0 on ignored rows
                kept = keep.to(torch.float32)
                g = e.mul_(kept / norm).sub_(kept * (smoothing / vocab))
                g.scatter_add_(1, y, kept * (smoothing - 1.0))
                grad[start : start + step].copy_(g)
        if needs_grad:
            ctx.save_for_backward(grad)
            ctx.logits_dtype = logits.dtype
        ctx.backward_done = False
        return total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        if ctx.backward_done:
            raise RuntimeError("smoothed_cross_entropy_sum scales its stored gradient in place: "
                               "a second backward through it (retain_graph) is not supported")
        ctx.backward_done = True
        (grad,) = ctx.saved_tensors
        # In place: the stored gradient is this loss's own buffer, used once. Scaled first (by
        # the loss scale too), then cast: a float16 result is rounded only once it is scaled.
        grad = grad.mul_(grad_output.to(grad.dtype)).to(ctx.logits_dtype)
        return grad, None, None, None


def smoothed_cross_entropy_sum(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int,
                               smoothing: float = 0.0) -> torch.Tensor:
    """Summed cross-entropy (float32) of ``logits`` ``[N, V]`` (any float dtype) against
    ``labels`` ``[N]``, label-smoothed by ``smoothing`` as ``F.cross_entropy`` smooths, rows
    labelled ``ignore_index`` left out."""
    return _SmoothedCrossEntropy.apply(logits, labels, ignore_index, float(smoothing))
