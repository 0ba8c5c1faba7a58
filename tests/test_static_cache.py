"""The static KV cache and the fixed-shape step a CUDA graph replays, checked on the CPU.

A cache preallocated for its positions computes, step by step, exactly what the growing one
does; in fixed-shape mode (attention over the whole capacity under a mask of the filled
positions, the position a device tensor) it computes the same to float32 rounding, for every
residual scheme, and reads nothing on the host, which is what capturing it as a CUDA graph
needs. The graph's bookkeeping (the first step eager, captured steps kept by shape and reused,
the source padded, the eager fallback when capturing fails, the switch) runs here with the
replay emulated; only the capture itself needs a GPU (``tests/test_gpu_decoding.py``).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from test_decoding_batched import Reads, build, sources
from test_incremental import SCHEMES, assert_logits_close, source, tokens
from test_incremental import build as build_any

import normzoo.inference.step_graphs as step_graphs
from normzoo.inference.decoding import beam_search, greedy
from normzoo.nn.kv_cache import StaticKVCache

FAMILIES = ["encoder_decoder", "decoder"]


def steps(model, family: str, seq: torch.Tensor, cache, fixed_from: int | None = None):
    """Logits of ``seq`` fed one token at a time through ``cache``; from step ``fixed_from`` on
    in fixed-shape mode, as a replayed graph runs them."""
    memory, mask = model.encode(source()) if family == "encoder_decoder" else (None, None)
    out = []
    for t in range(seq.shape[1]):
        if fixed_from is not None and t >= fixed_from:
            cache.position = torch.tensor([t])
            memory = None  # a fixed-shape step reads cross-attention's keys from the cache
        step = seq[:, t : t + 1]
        out.append(model(step, cache=cache) if family == "decoder"
                   else model.decode(step, memory, mask, cache))
        if getattr(cache, "position", None) is not None:
            cache.seek(t + 1)
    return torch.cat(out, dim=1)


def model_for(family: str, scheme: str, positions: str):
    extra = {"rope_base": 100.0} if positions == "rope" else {}
    return build_any(family, scheme, positions=positions, seed=5, **extra)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope"])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_static_cache_computes_what_the_growing_one_does(scheme, family, positions):
    model = model_for(family, scheme, positions)
    seq = tokens(3, 7, seed=6)
    with torch.no_grad():
        growing = steps(model, family, seq, model.new_cache())
        static = steps(model, family, seq, model.new_cache(capacity=9))
        fixed = steps(model, family, seq, model.new_cache(capacity=11), fixed_from=1)
    assert torch.equal(static, growing)
    assert_logits_close(fixed, growing)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_fixed_shape_step_reads_nothing_on_the_host(scheme, family):
    """A read of a value on the host cannot be captured in a CUDA graph (nor is it cheap)."""
    model = model_for(family, scheme, "rope" if scheme == "pre" else "learned")
    seq = tokens(3, 3, seed=7)
    cache = model.new_cache(capacity=8)
    with torch.no_grad():
        steps(model, family, seq[:, :1], cache)
        cache.position = torch.tensor([1])
        memory_mask = model.padding_mask(source())
        with Reads() as reads:
            if family == "decoder":
                model(seq[:, 1:2], cache=cache)
            else:
                model.decode(seq[:, 1:2], None, memory_mask, cache)
    assert reads.seen == []


def test_a_beam_reorder_is_in_place_and_matches_the_growing_cache():
    model = model_for("encoder_decoder", "pre", "rope")
    seq, index = tokens(3, 6, seed=8), torch.tensor([2, 0, 0])
    with torch.no_grad():
        memory, mask = model.encode(source())
        caches = [model.new_cache(), model.new_cache(capacity=6)]
        for cache in caches:
            model.decode(seq[:, :3], memory, mask, cache)
        storage = caches[1].keys.data_ptr()
        out = []
        for cache in caches:
            cache.reorder(index, cross=False)
            out.append(model.decode(seq[index][:, 3:], memory[index], mask[index], cache))
    assert caches[1].keys.data_ptr() == storage
    assert torch.equal(out[1], out[0])
    assert caches[1].layers[0].self_k.shape == caches[0].layers[0].self_k.shape


def test_a_static_cache_refuses_more_positions_than_it_holds():
    model = model_for("decoder", "pre", "learned")
    cache = model.new_cache(capacity=4)
    assert isinstance(cache, StaticKVCache)
    with torch.no_grad():
        model(tokens(2, 4, seed=9), cache=cache)
        with pytest.raises(ValueError, match="capacity of 4"):
            model(tokens(2, 1, seed=10), cache=cache)


# -- the step as a CUDA graph, its replay emulated ----------------------------------------------


@pytest.fixture
def emulated_graphs(monkeypatch):
    """Graphs wanted on the CPU, each capture emulated: a replay runs the fixed-shape step over
    the captured tensors. Returns the list of captures made."""
    captures = []

    def capture(self) -> None:
        captured = self.captured
        captured.cache.position = captured.position
        captured.logits = self._fixed_step().clone()

        class Replay:
            def replay(_) -> None:
                captured.logits.copy_(self._fixed_step())

        captured.graph = Replay()
        captures.append(captured)

    monkeypatch.setattr(step_graphs, "graphs_wanted", lambda device, graphs: graphs is not False)
    monkeypatch.setattr(step_graphs.GraphedStep, "_capture", capture)
    return captures


def test_decoding_through_the_graphed_step_finds_the_eager_hypotheses(emulated_graphs):
    model = build(1, 5.0)
    first, second, other = sources(4, seed=6), sources(4, seed=4), sources(3, seed=5)
    assert first.shape[1] != second.shape[1]  # both round up to one source length
    for src in (first, second):
        assert beam_search(model, src, beam=4) == beam_search(model, src, beam=4, graphs=False)
    assert greedy(model, other) == greedy(model, other, graphs=False)
    kept = step_graphs._CAPTURED[model]
    # Beam 4 over two batches of 4 sentences: one capture; greedy's 3 rows: another.
    assert len(emulated_graphs) == 2
    assert {key[:3] for key in kept} == {(16, 32, 16), (3, 32, 16)}


def test_a_step_that_cannot_be_captured_decodes_eagerly(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(step_graphs, "graphs_wanted", lambda device, graphs: True)
    monkeypatch.setattr(torch.cuda, "Stream", refuse)
    model = build(0, 4.0)
    src = sources(3, seed=6)
    with pytest.warns(UserWarning, match="could not be captured as a CUDA graph"):
        hyps = beam_search(model, src, beam=3)
    assert hyps == beam_search(model, src, beam=3, graphs=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused once: eager from then on, without a word
        assert beam_search(model, src, beam=3) == hyps
    assert model in step_graphs._REFUSED


def test_graphs_are_on_for_cuda_only_and_can_be_turned_off(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.delenv(step_graphs.GRAPHS_ENV, raising=False)
    assert step_graphs.graphs_wanted(cuda, None)
    assert not step_graphs.graphs_wanted(cuda, False)
    assert not step_graphs.graphs_wanted(cpu, True)
    monkeypatch.setenv(step_graphs.GRAPHS_ENV, "0")
    assert not step_graphs.graphs_wanted(cuda, None)
    assert step_graphs.graphs_wanted(cuda, True)
