"""``trainer.compile_scope: layers`` (:class:`normzoo.tasks.compiled.RegionalStep`): each
Transformer layer and the model's ends compiled as regions, once per layer class and shape,
while the training and validation step runs; the loss and gradients are eager's, checkpoint keys
keep their names, decoding stays eager, and ``auto`` picks a scope per device.

TorchDynamo traces with the "eager" backend, as in ``tests/test_compile_buckets.py``: the same
guards, graphs and compiles as inductor, without its minute of C++ generation per graph."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from task_samples import model_of_family, sample
from typer.testing import CliRunner

from normzoo.contract import module_class
from normzoo.recipe import from_dict
from normzoo.tasks.compiled import (
    AUTO_SCOPE,
    RegionalStep,
    recompiles_expected,
    run_device,
    scope_for,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

SMALL = {"d_model": 32, "heads": 2, "ffn_dim": 64, "dropout": 0.0}
FAMILY_MODELS = {  # dropout 0: the compiled and the eager step draw no masks to compare
    "encoder_decoder": {**SMALL, "encoder_layers": 3, "decoder_layers": 2},
    "encoder": {**SMALL, "encoder_layers": 3, "norm": "rmsnorm"},
    "decoder": {**SMALL, "decoder_layers": 3, "positions": "rope", "norm": "rmsnorm"},
}


def frames() -> int:
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def translation(scope: str = "layers", encoder: int = 6, decoder: int = 2, **data):
    recipe = from_dict({"task": "translation", "data": data,
                        "model": {**SMALL, "encoder_layers": encoder, "decoder_layers": decoder},
                        "trainer": {"compile": bool(scope), "compile_scope": scope or "auto"}})
    torch.manual_seed(0)
    return module_class("translation")(recipe, 50).train()


def pairs(rows: int, length: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(rows * 100 + length)
    src = torch.randint(4, 50, (rows, length))
    src[0, length - 3:] = 0  # padded inside the batch
    tgt = torch.randint(4, 50, (rows, length - 1))
    return {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}


@pytest.mark.parametrize("task_name", ["translation", "causal_lm", "classification"])
def test_layers_train_as_eager_does(task_name: str, tmp_path: Path, traced):
    """Two steps of the task's own batch, eager and with its layers compiled: the same loss
    and the same gradients at each, and after an update of each."""
    recipe, batch, vocab = sample(task_name, tmp_path,
                                  model=model_of_family(task_name, FAMILY_MODELS))
    trainer = recipe.trainer.model_copy(update={"compile": True, "compile_scope": "layers"})
    torch.manual_seed(0)
    eager = module_class(task_name)(recipe, vocab).train()
    torch.manual_seed(0)
    task = module_class(task_name)(recipe.model_copy(update={"trainer": trainer}), vocab).train()
    assert isinstance(task._compiled, RegionalStep)
    optimizers = [torch.optim.SGD(t.parameters(), lr=0.1) for t in (eager, task)]
    for _ in range(2):
        expected = eager.loss_terms(batch, 0.1)
        terms = task.step_terms(batch, 0.1)
        torch.testing.assert_close(terms.loss_sum, expected.loss_sum, rtol=1e-5, atol=1e-5)
        assert int(terms.tokens) == int(expected.tokens)
        expected.loss_sum.backward()
        terms.loss_sum.backward()
        for (name, want), got in zip(eager.named_parameters(), task.parameters(), strict=True):
            assert (want.grad is None) == (got.grad is None), name
            if want.grad is not None:
                torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-6, msg=name)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    assert task._compiles.compiles >= 1


def test_a_layer_class_compiles_once_whatever_the_depth(traced):
    """6 encoder layers and 2 decoder layers compile what 1 and 1 do: one graph per layer
    class (and per end module), every layer of a stack reusing it; a new length compiles
    nothing (dynamic shapes), and validation (eval mode, no gradients) each region once."""
    shallow, deep = translation(encoder=1, decoder=1), translation(encoder=6, decoder=2)
    # two layer classes, two embeddings, two stacks' ends
    assert deep._compiled.regions == shallow._compiled.regions == 2 + 2 + 2
    counts = []
    for task in (shallow, deep):
        torch._dynamo.reset()
        start = frames()
        task.step_terms(pairs(3, 11), 0.1).loss_sum.backward()
        counts.append(frames() - start)
        task.step_terms(pairs(5, 9), 0.1).loss_sum.backward()  # a new shape
        assert frames() - start == counts[-1]
        task.eval()
        with torch.no_grad():
            task.step_terms(pairs(4, 13))
        assert frames() - start <= 2 * deep._compiled.regions
    assert counts[0] == counts[1] <= deep._compiled.regions
    # what the "compiled again" warning waits for: each region's share of the whole step's
    assert recompiles_expected(None, deep._compiled) == 4 * deep._compiled.regions
    assert recompiles_expected(None, deep._compiled) == deep._expected_compiles
    assert recompiles_expected(3) == 10 and recompiles_expected(None) == 4


def test_on_a_ladder_each_region_compiles_a_shape_once(traced):
    """``data.buckets`` set: static shapes, a graph per shape per region, none recompiled
    when a shape comes again, and the recompile limit raised to hold every region's."""
    import torch._dynamo.config as dynamo

    task, eager = translation(buckets=[8, 16, 24]), translation(None)
    assert dynamo.recompile_limit >= 2 * recompiles_expected(3)
    torch._dynamo.reset()
    start, seen = frames(), []
    for rows, length in ((4, 8), (3, 16), (4, 8), (2, 24), (3, 16)):
        batch = pairs(rows, length)
        torch.testing.assert_close(task.step_terms(batch, 0.1).loss_sum,
                                   eager.loss_terms(batch, 0.1).loss_sum, rtol=1e-5, atol=1e-5)
        seen.append(frames() - start)
    assert seen[0] == seen[1] - seen[0] == seen[3] - seen[2] > 0  # each new shape, alike
    assert seen[2] == seen[1] and seen[4] == seen[3]  # a shape seen again: nothing


def test_keys_stay_and_decoding_stays_eager(traced):
    """The layers are compiled in place only while the step runs: the state dict has eager's
    keys (no ``_orig_mod.``), no module keeps a compiled call, and the model called outside
    the step (decoding) compiles nothing."""
    task, eager = translation(), translation(None)
    assert task.state_dict().keys() == eager.state_dict().keys()
    task.step_terms(pairs(3, 11), 0.1).loss_sum.backward()
    assert not any("_orig_mod" in key for key in task.state_dict())
    assert all(m._compiled_call_impl is None for m in task.model.modules())
    task.eval()
    before = frames()
    with torch.no_grad():
        memory, mask = task.model.encode(pairs(2, 7)["src"])
        logits = task.model.decode(torch.full((2, 1), 2), memory, mask)
    assert frames() == before and logits.shape[:2] == (2, 1)


@pytest.mark.parametrize("scope", ["layers", "model"])
def test_a_probed_step_runs_eager_and_measures_everything(scope: str, traced):
    """The diagnostics' probes (forward hooks, every ``diagnostics.every_steps``): compiled,
    TorchDynamo ignored hooks added after its graph (the whole model's probes read nothing) or
    compiled the hooks themselves (a region's); a probed step runs eager, so it measures what
    an eager run does and compiles nothing."""
    from normzoo.diagnostics.probes import probe

    task, eager = translation(scope), translation(None)
    task.step_terms(pairs(3, 11), 0.1).loss_sum.backward()
    compiles = task._compiles.compiles
    found = {}
    for name, run in (("compiled", task), ("eager", eager)):
        with probe(run.model) as found[name]:
            run.step_terms(pairs(4, 12), 0.1).loss_sum.backward()
    assert task._compiles.compiles == compiles
    assert found["compiled"].flat().keys() == found["eager"].flat().keys()
    assert len(found["compiled"].branch_ratio) == 6 * 2 + 2 * 3  # every sublayer's


def test_auto_picks_a_scope_per_device(traced):
    """``auto`` is the measured pick for a CPU, ``layers`` on a CUDA device (unmeasured
    there: the whole model's 34 s a shape on an H200 is what it avoids), the whole model on
    any other; an explicit scope is itself everywhere."""
    assert scope_for("auto", "cpu") == AUTO_SCOPE["cpu"] in ("layers", "model")
    assert scope_for("auto", "cuda") == "layers"
    assert scope_for("auto", "mps") == "model"
    for device in ("cpu", "cuda", "mps"):
        assert scope_for("model", device) == "model" and scope_for("layers", device) == "layers"
    assert run_device("cpu") == "cpu" and run_device("gpu") == run_device("cuda") == "cuda"
    if not torch.cuda.is_available():
        assert run_device("auto") in ("cpu", "mps")
    recipe = from_dict({"task": "translation", "model": SMALL,
                        "trainer": {"compile": True, "accelerator": "cpu"}})
    assert recipe.trainer.compile_scope == "auto"
    task = module_class("translation")(recipe, 50)
    assert isinstance(task._compiled, RegionalStep) == (AUTO_SCOPE["cpu"] == "layers")
    whole = translation("model")
    assert not isinstance(whole._compiled, RegionalStep)
    assert whole._expected_compiles == recompiles_expected(None)


def test_an_unknown_scope_is_a_recipe_error():
    from normzoo.cli import app

    quickstart = Path(__file__).resolve().parents[1] / "recipes" / "quickstart.yaml"
    result = CliRunner().invoke(app, ["recipe", "validate", str(quickstart),
                                      "trainer.compile_scope=blocks"])
    assert result.exit_code == 2, result.output
    assert "trainer.compile_scope" in result.output and "Traceback" not in result.output
