"""Every built-in residual scheme on a CUDA GPU: a bf16-autocast training step (forward,
backward, AdamW, the scheme's after_step) gives finite losses and moves the weights, and in
float32 incremental decoding with the KV cache equals the full forward there too. Skipped
without a GPU; ``benchmarks/gpu_check.sh`` runs these (``-m gpu``) first on a lent machine."""

from __future__ import annotations

import pytest
import torch
from registered import BUILTIN_SCHEMES

from normzoo.models import assemble

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LLAMA = {"family": "decoder", "vocab_size": 97, "d_model": 64, "heads": 4, "kv_heads": 2,
         "ffn_dim": 128, "decoder_layers": 3, "dropout": 0.0, "positions": "rope",
         "activation": "swiglu", "bias": False, "norm": "rmsnorm", "embed_scale": False,
         "max_positions": 64}


def _schemes() -> list[str]:
    return BUILTIN_SCHEMES  # normzoo's own: not an installed plugin's, nor a test's


@pytest.mark.parametrize("scheme", _schemes())
def test_a_bf16_training_step_on_the_gpu(scheme: str):
    torch.manual_seed(0)
    model = assemble({**LLAMA, "residual": scheme}).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    tokens = torch.randint(2, 97, (4, 32), device="cuda")
    losses = []
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), tokens[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        model.scheme.after_step(model)
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    moved = sum((p.detach() - before[n]).abs().sum().item() for n, p in model.named_parameters())
    assert moved > 0


@pytest.mark.parametrize("scheme", _schemes())
def test_cached_decoding_equals_the_full_forward_on_the_gpu(scheme: str):
    torch.manual_seed(1)
    model = assemble({**LLAMA, "residual": scheme}).cuda().eval()
    tokens = torch.randint(2, 97, (2, 9), device="cuda")
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        steps = [model(tokens[:, i:i + 1], cache=cache) for i in range(tokens.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
