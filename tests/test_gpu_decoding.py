"""Decoding with the step captured as a CUDA graph, on a GPU: every residual scheme's step is
captured (no eager fallback) and, in float32, greedy and beam search find what the eager step
finds; captured steps are reused by later batches of the same shape; under bf16 autocast the
graph runs too. Skipped without a GPU; ``benchmarks/gpu_check.sh`` runs these (``-m gpu``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from registered import BUILTIN_SCHEMES
from test_decoding_batched import sources as cpu_sources

import normzoo.inference.step_graphs as step_graphs
from normzoo.inference.decoding import beam_search, greedy
from normzoo.models import assemble

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

VOCAB = 61


def model_for(scheme: str = "pre", **changes):
    torch.manual_seed(0)
    model = assemble({"vocab_size": VOCAB, "d_model": 64, "heads": 4, "ffn_dim": 128,
                      "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.1,
                      "tie_output": False, "max_positions": 64, "residual": scheme, **changes})
    with torch.no_grad():
        model.output.weight.mul_(3)
    return model.cuda().eval()


def sources(batch: int, seed: int) -> torch.Tensor:
    """``batch`` right-padded sentences of 2 to 13 tokens (ids below the CPU tests' vocabulary,
    so within this one's), on the GPU."""
    return cpu_sources(batch, seed, longest=13).cuda()


def captured(model) -> list[step_graphs.Captured]:
    return list(step_graphs._CAPTURED.get(model, {}).values())


@pytest.mark.parametrize("scheme", BUILTIN_SCHEMES)
def test_every_scheme_s_step_is_captured_and_finds_the_eager_hypotheses(scheme):
    model = model_for(scheme)
    src = sources(6, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to eager warns
        graphed = (greedy(model, src), beam_search(model, src, beam=4))
    assert graphed == (greedy(model, src, graphs=False),
                       beam_search(model, src, beam=4, graphs=False))
    assert captured(model) and all(c.graph is not None and not c.failed for c in captured(model))


def test_a_captured_step_is_reused_by_batches_of_its_shape():
    model = model_for(positions="rope", rope_base=100.0, kv_heads=2)
    batches = [sources(5, seed) for seed in (1, 3, 4)]
    eager = [beam_search(model, src, beam=5, graphs=False) for src in batches]
    assert [beam_search(model, src, beam=5) for src in batches] == eager
    # Sources of 12 and 13 tokens, limits of 24 and 25: one shape once rounded, one capture.
    assert {src.shape[1] for src in batches} == {12, 13}
    assert len(captured(model)) == 1
    assert captured(model)[0].memory_mask.shape == (25, 16)


def test_under_bf16_autocast_the_graph_runs():
    model = model_for()
    src = sources(8, seed=5)
    with warnings.catch_warnings(), torch.autocast("cuda", dtype=torch.bfloat16):
        warnings.simplefilter("error")
        graphed = beam_search(model, src, beam=5)
        eager = beam_search(model, src, beam=5, graphs=False)
    assert all(c.graph is not None for c in captured(model))
    # bf16 rounds the masked full-capacity step a little differently from the eager one.
    assert sum(a == b for a, b in zip(graphed, eager, strict=True)) >= len(eager) - 2
