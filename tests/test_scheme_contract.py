"""The scheme contract, complete (issue 53, item 5): what a scheme's hooks receive and declare.

* ``Residual.optimizer_options`` is part of the contract (none declared by default), while a
  plain module (a plugin's norm) may still declare options;
* Admin's profiling gets the padding mask as an argument of its connection's ``forward``, not
  from the per-thread mask the stacks publish for norms;
* what docs/plugins.md promises about ``data_init`` (the model it receives, gradients,
  ``run_forward`` called twice, the generators) and ``after_step`` (``role_weights()``);
* a plugin norm used only as ``model.qk_norm`` is recorded with its distribution (checkpoint,
  ``metadata.json``, model card), so once uninstalled, loading names what to install.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.models.layers import connect
from normzoo.nn.padding import padding_mask_context
from normzoo.residual import Family, Residual, Site, StackInfo, SublayerKind
from normzoo.residual.admin import Admin, profile
from normzoo.residual.pre import PreLN
from normzoo.tasks.optim import declared_options

DIM = 8


# -- optimizer_options: a hook of the contract ---------------------------------------------------


def test_a_residual_connection_declares_no_optimizer_options_by_default():
    class Plain(Residual):
        def __init__(self) -> None:
            super().__init__()
            self.mix = nn.Parameter(torch.eye(2))

        def forward(self, x, f):
            return x + f(x)

    assert Residual().optimizer_options() == {}
    assert declared_options(nn.Sequential(Plain())) == {}, "the default declares nothing"

    class Declaring(Plain):
        def optimizer_options(self):
            return {"mix": {"weight_decay": 0.0}}

    assert declared_options(nn.Sequential(Declaring())) == {"0.mix": {"weight_decay": 0.0}}


def test_a_plain_module_may_still_declare_optimizer_options():
    """A plugin's norm is a plain nn.Module: no base class gives it the hook, and it may define
    it all the same."""

    class Gain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gain = nn.Parameter(torch.ones(3))

        def optimizer_options(self):
            return {"gain": {"lr_scale": 0.5}}

    assert declared_options(nn.Sequential(nn.Linear(3, 3), Gain())) == {
        "1.gain": {"lr_scale": 0.5}}


# -- the padding mask reaches a connection as an argument ----------------------------------------


def _variance(t: torch.Tensor) -> float:
    flat = t.double().flatten()
    return ((flat - flat.mean()) ** 2).mean().item()


def test_admin_profiling_takes_the_padding_mask_as_an_argument():
    """The second connection's w is measured over the real tokens of the mask handed to the
    first one's ``forward``, whatever mask is published for the norms meanwhile."""
    stack = StackInfo(Family.ENCODER, "encoder", 1, 0, DIM)
    scheme = Admin(stack, init="profiled")
    first, second = (scheme.residual(Site(stack, 0, kind), lambda: nn.LayerNorm(DIM))
                     for kind in (SublayerKind.SELF_ATTN, SublayerKind.FFN))
    assert first.takes_padding_mask
    model = nn.ModuleList([first, second])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, DIM, generator=gen)
    x[1, 3:] = 100.0  # padding with a value that would dominate any variance it entered
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[1, 3:] = True
    branch = 3.0 * torch.ones(DIM)

    def run() -> None:
        with padding_mask_context(torch.zeros_like(pad)):  # what the norms see: ignored
            h = connect(first, x, lambda h: h * 0 + branch, pad)
            connect(second, h, lambda h: h, pad)

    result = profile(model, run)
    keep = ~pad
    expected = math.sqrt(_variance(x[keep]) + _variance((x * 0 + branch)[keep]))
    assert result["encoder"] == pytest.approx([1.0, expected], rel=1e-6)


def test_a_connection_that_does_not_ask_for_the_mask_keeps_the_two_argument_forward():
    class TwoArguments(Residual):
        def forward(self, x, f):
            return x + f(x)

    x = torch.ones(1, 2, DIM)
    out = connect(TwoArguments(), x, lambda h: h, torch.zeros(1, 2, dtype=torch.bool))
    assert torch.equal(out, 2 * x)


# -- what data_init and after_step receive (docs/plugins.md) -------------------------------------


class Recording(PreLN):
    """Pre-LN, recording what its data-dependent init and after_step see."""

    seen: ClassVar[dict] = {}

    @classmethod
    def needs_data_init(cls, model):
        return True

    @classmethod
    def data_init(cls, model, run_forward):
        cls.seen.update(model=model, grad=torch.is_grad_enabled(), training=model.training)
        cls.seen["outputs"] = [run_forward(), run_forward()]  # twice: allowed
        return {"ran": 2}

    @classmethod
    def after_step(cls, model):
        cls.seen.setdefault("roles", []).append(sorted(
            role for m in model.modules() if callable(getattr(m, "role_weights", None))
            for role in m.role_weights()))


def test_data_init_sees_the_bare_model_with_gradients_on_and_may_run_forward_twice(
        monkeypatch):
    from tiny import tiny

    from normzoo import registry
    from normzoo.contract import module_class
    from normzoo.recipe import from_dict

    real_get = registry.residuals.get
    monkeypatch.setattr(registry.residuals, "get",
                        lambda name: Recording if name == "pre" else real_get(name))
    Recording.seen.clear()
    recipe = from_dict(tiny(model={"dropout": 0.3, "residual": "pre"}))
    task = module_class(recipe.task)(recipe, 120)
    roles = Recording.seen["roles"][0]  # after_step ran once on the freshly built model
    assert {"q", "k", "v", "out", "ffn_in", "ffn_out"} <= set(roles), roles
    assert type(task.model).__name__ == "Seq2SeqModel" and task.model.scheme is Recording
    task.train()
    src = torch.randint(4, 120, (2, 6))
    batch = {"src": src, "tgt_in": src.clone(), "tgt_out": src.clone()}
    before = torch.random.get_rng_state()
    assert task.data_init(batch) == {"ran": 2}
    seen = Recording.seen
    assert seen["model"] is task.model, "the assembled model, not Lightning's module"
    assert seen["grad"] is True, "normzoo does not turn gradients off around data_init"
    assert seen["training"] is True
    one, two = seen["outputs"]
    assert one.shape == two.shape and not torch.equal(one, two), "fresh dropout masks per call"
    assert torch.equal(torch.random.get_rng_state(), before), "the run's generators untouched"


def test_the_guides_after_step_example_reaches_every_role_through_role_weights():
    """docs/plugins.md's ``UnitRows`` example, run as written, on a built model."""
    import re

    from normzoo.models import assemble

    text = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
    [example] = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL)
                 if "class UnitRows" in b]
    namespace: dict = {}
    exec(compile(example, "docs/plugins.md", "exec"), namespace)
    model = assemble({"family": "encoder_decoder", "vocab_size": 50, "d_model": 16, "heads": 2,
                      "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                      "activation": "swiglu"})
    namespace["UnitRows"].after_step(model)
    attention = model.decoder.layers[0].cross_attn
    assert set(attention.role_weights()) == {"q", "k", "v", "out"}  # no cross_ prefix here
    assert set(model.decoder.layers[0].ffn.role_weights()) == {"ffn_in", "ffn_gate", "ffn_out"}
    for module in model.modules():
        if callable(getattr(module, "role_weights", None)):
            for weight in module.role_weights().values():
                norms = weight.detach().norm(dim=1)
                torch.testing.assert_close(norms, torch.ones_like(norms))


# -- a plugin norm used only as model.qk_norm is recorded ------------------------------------------

QK_NORM = '''
    from normzoo.nn.norms import RMSNorm

    class HeadNorm(RMSNorm):
        """RMSNorm from a third-party distribution, whose gain learns at half the rate."""

        def optimizer_options(self):
            return {"weight": {"lr_scale": 0.5}}
'''


def test_a_plugin_norm_used_only_as_qk_norm_is_recorded_and_named_once_missing(
        fake_dists, tmp_path, monkeypatch):
    from tiny import tiny

    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    dist, version = "nz-head-norms", "0.3"
    fake_dists.activate(fake_dists.write(dist, version,
                                         {"normzoo.norms": {"nz_headnorm": "nz_head:HeadNorm"}},
                                         {"nz_head": QK_NORM}))
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    recipe = from_dict(tiny(run={"dir": str(run_dir)}, model={"qk_norm": "nz_headnorm"},
                            trainer={"max_steps": 2, "val_every_steps": 2, "log_every_steps": 1}))
    train.run(recipe, "tiny.yaml")
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    record = {"kind": "norm", "name": "nz_headnorm", "distribution": dist, "version": version}
    assert record in torch.load(checkpoint, weights_only=True)["normzoo"]["plugins"]
    # The plain module's declared options took effect, logged as docs/plugins.md says.
    header = (run_dir / "logs" / "csv" / "metrics.csv").read_text().splitlines()[0]
    assert "train/lr_0_0.5" in header.split(","), header

    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["export", str(checkpoint), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert record in json.loads((out / "metadata.json").read_text())["plugins"]
    assert f"nz_headnorm ({dist} {version})" in (out / "README.md").read_text()

    fake_dists.restore()  # uninstalled
    for source in (checkpoint, out):
        result = CliRunner().invoke(app, ["evaluate", str(source)])
        assert result.exit_code == 2, result.output
        assert f"pip install '{dist}=={version}'" in result.output, result.output
        assert "norm 'nz_headnorm'" in result.output and "Traceback" not in result.output
