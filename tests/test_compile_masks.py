"""Compiled on a CPU, the feed-forward sublayer and dropout save no boolean tensor for the
backward (inductor writes one over 20x slower than eager: ``normzoo.nn.feedforward.relu``),
and compute what the eager ones compute, mask for mask."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from normzoo.nn.dropout import Dropout
from normzoo.nn.feedforward import FeedForward


def saved_for_backward(fn: Any, *inputs: torch.Tensor) -> list[torch.dtype]:
    """The dtypes of what ``fn``'s compiled forward keeps for its backward, partitioned as
    inductor partitions it (its decompositions, the min-cut partitioner), without generating
    code: the forward graph returns its results, then the saved tensors."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    outputs: list[torch.dtype] = []

    def forward(gm: torch.fx.GraphModule, _: Any) -> Any:
        node = next(n for n in gm.graph.nodes if n.op == "output")
        outputs.extend(a.meta["val"].dtype for a in node.args[0]
                       if isinstance(a, torch.fx.Node) and "val" in a.meta)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward,
                           bw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                           partition_fn=min_cut_rematerialization_partition,
                           decompositions=select_decomp_table())
    torch._dynamo.reset()
    fn_c = torch.compile(fn, backend=backend)
    fn_c(*inputs).sum().backward()
    torch._dynamo.reset()
    return outputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_feedforward_and_dropout_save_no_boolean_mask(dtype):
    torch.manual_seed(0)
    ffn = FeedForward(16, 64, activation="relu", dropout=0.1)
    residual = Dropout(0.1)
    x = torch.randn(4, 9, 16, requires_grad=True)

    def sublayer(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            return residual(ffn(x)).float()

    saved = saved_for_backward(sublayer, x)
    assert saved, "the forward graph returned nothing"
    assert torch.bool not in saved, saved


def _run(fn: Any, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)
    out = fn(x)
    out.backward(torch.linspace(-1, 1, out.numel()).view_as(out).to(out.dtype))
    return out.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.1, 0.3])
def test_compiled_dropout_and_relu_give_the_eager_values_and_gradients(dtype, p):
    """The same draws make the same masks whether traced or not: traced with a backend that
    runs the graph's ops as torch's (``aot_eager``), values compare bit for bit. Inductor draws
    its own random words, so a run compiled by it drops other elements."""
    torch.manual_seed(1)
    ffn = FeedForward(8, 32, activation="relu", dropout=p).to(dtype)
    drop = Dropout(p)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return drop(ffn(x))

    x = torch.randn(3, 11, 8, dtype=dtype)
    torch._dynamo.reset()
    traced = torch.compile(fn, backend="aot_eager", fullgraph=True)
    eager_out, eager_grad = _run(fn, x, seed=5)
    traced_out, traced_grad = _run(traced, x, seed=5)
    torch._dynamo.reset()
    assert torch.equal(traced_out, eager_out)
    assert torch.equal(traced_grad, eager_grad)
    assert (eager_out == 0).any() and (eager_out != 0).any()  # both kinds of element are tested
