"""The opt-in ``trainer.compile``: the compiled model trains like the eager one (slow: compiling
on a CPU takes about a minute)."""

from __future__ import annotations

import pytest
import torch

from normzoo.recipe import from_dict
from normzoo.tasks.translation import TranslationTask

RECIPE = {
    "task": "translation",
    "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1, "dropout": 0.0},
}


def task(compile_mode: bool | str) -> TranslationTask:
    recipe = from_dict({**RECIPE, "trainer": {"compile": compile_mode}})
    torch.manual_seed(0)
    return TranslationTask(recipe, vocab_size=50)


def test_compile_is_off_by_default_and_compiles_in_place_when_asked():
    assert task(False).model._compiled_call_impl is None
    assert task(True).model._compiled_call_impl is not None
    compiled = task("default")
    assert compiled.model._compiled_call_impl is not None
    # In place: the weights keep their names, so checkpoints load into an eager model.
    assert compiled.model.state_dict().keys() == task(False).model.state_dict().keys()


@pytest.mark.slow
def test_the_compiled_model_computes_what_the_eager_one_does():
    eager, compiled = task(False), task("default")
    compiled.model.load_state_dict(eager.model.state_dict())
    for shape in ((3, 7, 5), (2, 9, 6)):  # dynamic shapes: a new batch shape, no recompile error
        src = torch.randint(4, 50, shape[:2])
        tgt = torch.randint(4, 50, (shape[0], shape[2]))
        batch = {"src": src, "tgt_in": tgt}
        torch.testing.assert_close(compiled.logits(batch), eager.logits(batch),
                                   rtol=1e-4, atol=1e-4)
