"""``trainer.compile``'s step (:mod:`normzoo.tasks.compiled`): a batch's lengths padded (as a
ladder of lengths pads them, :mod:`normzoo.data.shapes`) without changing the loss or the
gradients, the loss compiled with the model, static shapes on a ladder and dynamic ones
without, and the compiles a run makes counted, logged and explained; here for the whole model
(``trainer.compile_scope: model``), its layers as regions in ``tests/test_compile_regions.py``.

TorchDynamo traces here with the "eager" backend: the same guards, graphs and compiles as
inductor, without its minute of C++ generation per graph on a CPU."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from registered import BUILTIN_TASKS, norms_where, tasks_where
from task_samples import model_of_family, sample
from tiny import tiny

from normzoo.contract import module_class
from normzoo.recipe import from_dict
from normzoo.tasks import base
from normzoo.tasks.compiled import compiled_inputs, recompiles_expected

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

SMALL = {"d_model": 32, "heads": 2, "ffn_dim": 64, "dropout": 0.0}
# The small model of each family a task trains.
FAMILY_MODELS = {  # dropout 0: a padded batch draws other dropout masks, as any other shape would
    "encoder_decoder": {**SMALL, "encoder_layers": 1, "decoder_layers": 1},
    "encoder": {**SMALL, "encoder_layers": 2, "norm": "rmsnorm"},
    "decoder": {**SMALL, "decoder_layers": 2, "positions": "rope", "norm": "rmsnorm"},
}
# Every task on its family's model, and each encoder's task with each norm whose statistics mix
# positions (masked BatchNorm's skip padding; a decoder, causal, refuses such a norm).
PADDING_CASES = [(task, None) for task in BUILTIN_TASKS] + [
    (task, norm) for task in tasks_where(lambda task: task.family == "encoder")
    for norm in norms_where(lambda factory: getattr(factory, "mixes_positions", False))]


def make(task_name: str, **trainer):
    recipe = from_dict({"task": task_name, "model": model_of_family(task_name, FAMILY_MODELS),
                        "trainer": trainer})
    torch.manual_seed(0)
    return module_class(task_name)(recipe, 50).train()


def batch_for(task_name: str, rows: int = 3, length: int = 11) -> dict:
    """A translation batch (``task_name``: translation) of ``rows`` pairs, padded inside."""
    torch.manual_seed(1)
    tokens = torch.randint(4, 50, (rows, length))
    tokens[0, length - 4:] = 0  # a shorter sentence: padding inside the batch already
    target = torch.randint(4, 50, (rows, length - 2))
    target[1, 3:] = 0
    return {"src": tokens, "tgt_in": target[:, :-1], "tgt_out": target[:, 1:], "ntokens": 7}


def padded_to(batch: dict, fill: dict[str, int], length: int) -> dict:
    """The loss's tensors of ``batch``, right-padded along time to ``length`` with each one's
    padding value, as a ladder's rung pads a collated batch (a tensor of one value per example,
    a classifier's labels, has no time to pad)."""
    return {name: torch.nn.functional.pad(batch[name], (0, length - batch[name].shape[1]),
                                          value=value) if batch[name].dim() > 1 else batch[name]
            for name, value in fill.items()}


@pytest.mark.parametrize(("task_name", "norm"), PADDING_CASES,
                         ids=[task + (f"-{norm}" if norm else "") for task, norm in PADDING_CASES])
def test_padding_changes_neither_the_loss_nor_the_gradients(task_name: str, norm: str | None,
                                                             tmp_path: Path):
    model = {**model_of_family(task_name, FAMILY_MODELS), "max_positions": 128,
             **({"norm": norm} if norm else {})}
    recipe, batch, vocab = sample(task_name, tmp_path, model=model)
    torch.manual_seed(0)
    task = module_class(task_name)(recipe, vocab).train()
    longest = max(batch[name].shape[1] for name in task.loss_inputs if batch[name].dim() > 1)
    padded = padded_to(batch, task.loss_inputs, longest + 5)
    assert "ntokens" not in compiled_inputs(batch, task.loss_inputs)  # host-side counts stay out

    def loss_and_grads(inputs):
        task.zero_grad()
        terms = task.loss_terms(inputs, 0.1)
        terms.loss_sum.backward()
        return terms, [p.grad.clone() for p in task.parameters() if p.grad is not None]

    plain, plain_grads = loss_and_grads(batch)
    terms, grads = loss_and_grads(padded)
    assert int(terms.tokens) == int(plain.tokens)
    torch.testing.assert_close(terms.loss_sum, plain.loss_sum, rtol=1e-6, atol=1e-5)
    assert len(grads) == len(plain_grads)
    # The padded batch sums in another order: masked BatchNorm's statistics moved one element of
    # 1,600 by 1.9e-6 (of 0.019) on a Zen CPU, float32 rounding, not padding leaking in.
    for grad, expected in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-5)


def test_the_compiled_step_computes_the_eager_loss_on_a_few_shapes(traced):
    """Model and loss compile together (the model itself stays uncompiled, so checkpoint keys
    keep their names), and batches of new lengths compile nothing new."""
    eager, task = make("translation"), make("translation", compile=True, compile_scope="model")
    assert task.model._compiled_call_impl is None
    assert task.model.state_dict().keys() == eager.model.state_dict().keys()
    for rows, length in ((3, 11), (5, 9), (2, 14), (4, 20)):
        batch = batch_for("translation", rows, length)
        torch.testing.assert_close(task.step_terms(batch, 0.1).loss_sum,
                                   eager.loss_terms(batch, 0.1).loss_sum, rtol=1e-6, atol=1e-5)
    assert task._compiles.compiles == 1


def test_on_a_ladder_the_step_compiles_static_shapes_once_each(traced):
    """``data.buckets`` set: one graph per shape, none dynamic, each the eager loss; a shape
    seen again compiles nothing."""
    import torch._dynamo.config as dynamo

    recipe = from_dict({"task": "translation", "model": FAMILY_MODELS["encoder_decoder"],
                        "data": {"buckets": [8, 16, 24]},
                        "trainer": {"compile": True, "compile_scope": "model"}})
    torch.manual_seed(0)
    task = module_class("translation")(recipe, 50).train()
    eager = make("translation")
    assert dynamo.recompile_limit >= recompiles_expected(3)
    shapes = ((4, 8), (3, 16), (2, 24), (4, 8), (3, 16))
    for rows, length in shapes:
        batch = batch_for("translation", rows, length)
        torch.testing.assert_close(task.step_terms(batch, 0.1).loss_sum,
                                   eager.loss_terms(batch, 0.1).loss_sum, rtol=1e-6, atol=1e-5)
    # Static: a graph per shape (a dynamic one would take all three in one or two).
    assert task._compiles.compiles == len(set(shapes))


def test_a_compiled_run_logs_its_compiles_and_says_why_past_the_expected(
        tmp_path: Path, monkeypatch, capfd, traced):
    from normzoo.run import training as train

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    # Training's graph is expected; validation's (eval mode, no gradients) is one more, and
    # with nothing more expected it is reported, with TorchDynamo's reason.
    monkeypatch.setattr(base, "recompiles_expected", lambda shapes, step=None: 1)
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            data={"buckets": None},
                            trainer={"max_steps": 8, "val_every_steps": 4, "log_every_steps": 1,
                                     "compile": True, "compile_scope": "model",
                                     "loggers": ["csv"]}))
    train.run(recipe, "tiny.yaml")
    with open(tmp_path / "run" / "logs" / "csv" / "metrics.csv", newline="") as f:
        logged = [float(r["compile/compiles"]) for r in csv.DictReader(f)
                  if r.get("compile/compiles")]
    assert len(logged) == 8
    assert logged[0] >= 1 and logged[-1] <= 1 + 2
    assert "trainer.compile: compiled again at step" in capfd.readouterr().err
