"""The opt-in ``trainer.compile``: the compiled step trains like the eager one (slow: compiling
on a CPU takes about a minute)."""

from __future__ import annotations

import pytest
import torch
from registered import BUILTIN_TASKS
from task_samples import model_of_family, sample

from normzoo.recipe import from_dict
from normzoo.tasks.translation.module import TranslationModule

RECIPE = {
    "task": "translation",
    "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1, "dropout": 0.0},
}


def task(compile_mode: bool | str, scope: str = "auto") -> TranslationModule:
    recipe = from_dict({**RECIPE, "trainer": {"compile": compile_mode, "compile_scope": scope}})
    torch.manual_seed(0)
    return TranslationModule(recipe, vocab_size=50)


def test_compile_is_off_by_default_and_compiles_the_loss_when_asked():
    """The model and its loss compile as one region (``TaskModule.step_terms``); the model
    itself is left as it is, so its weights keep their names and checkpoints load into an
    eager model."""
    assert task(False)._compiled is None
    for mode in (True, "default"):
        compiled = task(mode)
        assert compiled._compiled is not None
        assert compiled.model._compiled_call_impl is None
        assert compiled.model.state_dict().keys() == task(False).model.state_dict().keys()


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["model", "layers"])
def test_the_compiled_step_computes_what_the_eager_one_does(scope: str):
    """Through inductor (tests/test_compile_buckets.py and tests/test_compile_regions.py trace
    with the eager backend), the whole model or its layers and ends as regions."""
    import torch._dynamo

    torch._dynamo.reset()
    eager, compiled = task(False), task("default", scope)
    compiled.model.load_state_dict(eager.model.state_dict())
    for shape in ((3, 7, 5), (2, 9, 6), (4, 20, 18)):  # new lengths, padded or not: one graph
        src = torch.randint(4, 50, shape[:2])
        tgt = torch.randint(4, 50, (shape[0], shape[2] + 1))
        batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
        torch.testing.assert_close(compiled.step_terms(batch, 0.1).loss_sum,
                                   eager.loss_terms(batch, 0.1).loss_sum, rtol=1e-4, atol=1e-4)
    # one graph for the whole step; or at most one a region (layer class, embedding, stack end)
    if scope == "model":
        assert compiled._compiles.compiles == 1
    else:
        assert 1 < compiled._compiles.compiles <= compiled._compiled.regions


# The small model of each family (dropout on: its masks are in the graph too).
SMALL = {"d_model": 32, "heads": 2, "ffn_dim": 64, "dropout": 0.1}
FAMILY_MODELS = {
    "encoder_decoder": RECIPE["model"],
    "encoder": {**SMALL, "encoder_layers": 2, "norm": "rmsnorm"},
    "decoder": {**SMALL, "decoder_layers": 2, "positions": "rope", "norm": "rmsnorm"},
}


@pytest.mark.parametrize("task_name", BUILTIN_TASKS)
def test_the_model_and_its_loss_trace_as_one_graph(task_name: str, tmp_path):
    """No graph break between the embeddings and the loss: each break splits the compiled
    step and adds guards. The padding mask the stacks publish for masked norms once broke the
    graph at every layer (a ContextVar, which TorchDynamo cannot trace). Masked BatchNorm
    still breaks it where it counts the real tokens of a batch (a number the graph depends on)."""
    import torch._dynamo

    from normzoo.contract import module_class

    # A padded training batch of the task's own data, on the small model of its family.
    recipe, batch, vocab = sample(task_name, tmp_path,
                                  model=model_of_family(task_name, FAMILY_MODELS))
    torch.manual_seed(0)
    current = module_class(task_name)(recipe, vocab).train()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(lambda b: current.loss_terms(b, 0.1).loss_sum)(batch)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
