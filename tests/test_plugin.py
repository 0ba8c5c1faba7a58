"""The example third-party plugin (plugins/normzoo-example-plugin), built and installed by pip.

The plugin's own test helper (``plugins/normzoo-example-plugin/tests/plugin_site.py``) has pip
build its wheel offline and install it with ``--target`` into a temporary folder put on
``sys.path``: the same files a ``pip install`` writes into site-packages, found through the same
entry points, while the environment itself is never modified. The plugin's own tests (its
``cosine_softcap`` scheme) are in that folder too, and run in this suite (``testpaths``).
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from normzoo import registry
from normzoo.cli import app
from normzoo.errors import ConfigError
from normzoo.models import assemble

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "normzoo-example-plugin"
_spec = importlib.util.spec_from_file_location("example_plugin_site",
                                               PLUGIN / "tests" / "plugin_site.py")
plugin_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plugin_site)
DIST, MODULE, VERSION = plugin_site.DIST, plugin_site.MODULE, plugin_site.VERSION
TINY = {"vocab_size": 30, "d_model": 16, "heads": 2, "ffn_dim": 32, "encoder_layers": 2,
        "decoder_layers": 2, "dropout": 0.0, "norm": {"name": "groupnorm", "groups": 2},
        "residual": "gpt2_scaled"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The plugin, pip-installed into a private folder on sys.path for this module's tests."""
    with plugin_site.pip_installed(tmp_path_factory) as target:
        yield target


def test_the_plugin_is_not_there_without_installing_it():
    """Guards the fixture: the names come from the installed plugin, nowhere else."""
    assert "groupnorm" not in registry.norms.names()
    assert not {"gpt2_scaled", "cosine_softcap"} & set(registry.residuals.names())


def test_the_plugin_uses_only_normzoos_public_api():
    for path in (PLUGIN / MODULE).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("normzoo"):
                assert node.module == "normzoo.plugin", f"{path.name} imports {node.module}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("normzoo") for a in node.names), path.name


DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_the_plugin_guide_gives_import_paths_and_the_contract():
    """docs/plugins.md: every name it uses has an import line that works, init_weights says
    when it runs, and the assemble() example (option dictionaries) runs as written."""
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    imported: dict = {}
    for block in blocks:
        for node in ast.parse(block).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("normzoo"):
                exec(compile(ast.Module([node], []), str(DOCS), "exec"), imported)
    for name in ("ResidualScheme", "Residual", "StreamEnds", "Site", "StackInfo", "NormFactory",
                 "SublayerKind", "Family", "assemble"):
        assert name in imported, f"docs/plugins.md never shows where {name} is imported from"
    [row] = [line for line in text.splitlines() if line.startswith("| `init_weights")]
    assert "after" in row and "xavier_uniform" in row, row
    [example] = [block for block in blocks if "assemble({" in block]
    namespace: dict = {}
    exec(compile(example, str(DOCS), "exec"), namespace)
    assert namespace["model"].plugins[0]["name"] == "rmsnorm"


def test_installed_names_are_registered_with_their_distribution(site):
    for reg, name in ((registry.norms, "groupnorm"), (registry.residuals, "gpt2_scaled")):
        assert reg.info(name).as_dict() == {"name": name, "distribution": DIST,
                                            "version": VERSION}
        assert reg.get(name).__module__.startswith(f"{MODULE}.")
        assert Path(sys.modules[MODULE].__file__).is_relative_to(site)
    assert "layernorm" in registry.norms and "deepnorm" in registry.residuals


def _check_listing(output: str) -> None:
    for name, text in (("groupnorm", "GroupNorm (Wu & He 2018)"), ("gpt2_scaled", "GPT-2 init")):
        line = rf"^  {name} +{re.escape(DIST)} {re.escape(VERSION)} +{re.escape(text)}"
        assert re.search(line, output, re.MULTILINE), f"{name}:\n{output}"
    assert "BROKEN" not in output and "CONFLICT" not in output


def test_normzoo_list_shows_the_plugin(site):
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    _check_listing(result.output)
    script = Path(sys.executable).with_name("normzoo")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([str(script), "list"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    _check_listing(done.stdout)


def test_groupnorm_values(site):
    factory = registry.norms.get("groupnorm")
    torch.manual_seed(0)
    norm = factory(12, groups=3)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = 4 * torch.randn(2, 5, 12) + 1
    g = x.double().reshape(2, 5, 3, 4)
    mean = g.mean(-1, keepdim=True)
    var = g.var(-1, unbiased=False, keepdim=True)
    expected = ((g - mean) / torch.sqrt(var + 1e-5)).reshape(2, 5, 12)
    expected = expected * norm.weight.double() + norm.bias.double()
    y = norm(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)
    # Each group on its own has zero mean, unit variance before the affine map.
    plain = factory(12, groups=3, affine=False)(x).reshape(2, 5, 3, 4)
    assert plain.mean(-1).abs().max() < 1e-5
    # groups=1 is LayerNorm.
    torch.testing.assert_close(factory(12, groups=1)(x), F.layer_norm(x, (12,)))
    # Float32 statistics under bf16: a large common offset survives.
    xb = (1000 + 8 * torch.randn(4, 12)).to(torch.bfloat16)
    yb = factory(12, groups=2)(xb)
    assert yb.dtype == torch.bfloat16
    ref = F.layer_norm(xb.double().reshape(4, 2, 6), (6,)).reshape(4, 12).float().bfloat16()
    assert (yb != ref).float().mean() < 0.05
    with pytest.raises(ValueError, match="not divisible by groups=5"):
        factory(12, groups=5)


def _twins(family: str, width: int = 16, **residual_options):
    """The same seed through Pre-LN and gpt2_scaled: only the residual projections differ."""
    config = {**TINY, "family": family, "d_model": width, "ffn_dim": 2 * width}
    torch.manual_seed(0)
    pre = assemble({**config, "residual": "pre"})
    torch.manual_seed(0)
    scaled = assemble({**config, "residual": {"name": "gpt2_scaled", **residual_options}})
    return pre, scaled


@pytest.mark.parametrize(("family", "n"), [("decoder", 4), ("encoder_decoder", 6)])
def test_gpt2_scaled_scales_the_residual_projections(site, family, n):
    pre, scaled = _twins(family)
    projections = {"out", "cross_out", "ffn_out"}
    seen = set()
    for layer_pre, layer_scaled in zip(pre.decoder.layers, scaled.decoder.layers, strict=True):
        parts = [("self_attn", ""), ("cross_attn", "cross_"), ("ffn", "")]
        for attr, prefix in parts:
            if getattr(layer_pre, attr) is None:
                continue
            roles_pre = getattr(layer_pre, attr).role_weights()
            roles_scaled = getattr(layer_scaled, attr).role_weights()
            for role, weight in roles_pre.items():
                full = prefix + role
                factor = 1 / math.sqrt(n) if full in projections else 1.0
                torch.testing.assert_close(roles_scaled[role], weight * factor, msg=full)
                seen.add(full)
    assert projections <= seen or family == "decoder"
    assert {"out", "ffn_out", "q", "v"} <= seen
    # Pre-LN placement and a final norm after the stack, of the configured kind.
    final = scaled.decoder.ends.final_norm
    assert type(final).__name__ == "GroupNorm" and final.groups == 2
    # The rest of the model is untouched.
    torch.testing.assert_close(scaled.decoder.layers[0].ffn.ffn_in.weight,
                               pre.decoder.layers[0].ffn.ffn_in.weight)


def test_gpt2_scaled_init_std(site):
    _, scaled = _twins("decoder", width=64, init_std=0.02)
    roles = scaled.decoder.layers[1].self_attn.role_weights()
    assert roles["q"].std().item() == pytest.approx(0.02, rel=0.1)
    assert roles["v"].std().item() == pytest.approx(0.02, rel=0.1)
    assert roles["out"].std().item() == pytest.approx(0.02 / 2, rel=0.1)  # N = 4
    ffn = scaled.decoder.layers[0].ffn.role_weights()
    assert ffn["ffn_out"].std().item() == pytest.approx(0.01, rel=0.1)


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_a_plugin_model_trains(site, family):
    torch.manual_seed(0)
    model = assemble({**TINY, "family": family})
    assert {(p["kind"], p["distribution"], p["version"]) for p in model.plugins} == {
        ("norm", DIST, VERSION), ("residual", DIST, VERSION)}
    tokens = torch.randint(1, 30, (4, 9))
    tokens[2, 6:] = 0  # some padding
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    model.train()
    for _ in range(8):
        logits = model(inputs) if family == "decoder" else model(tokens, inputs)
        loss = F.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1), ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] - 0.1, losses
    assert model.decoder.ends.final_norm.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"residual": {"name": "gpt2_scaled", "init_std": -1}}, "model.residual.init_std",
         "greater than 0"),
        ({"residual": {"name": "gpt2_scaled", "init_sdt": 0.02}}, "model.residual.init_sdt",
         "unknown option (did you mean 'init_std'?)"),
        ({"norm": {"name": "groupnorm", "groups": 0}}, "model.norm.groups", "greater than 0"),
        ({"norm": {"name": "groupnorm", "groups": "two"}}, "model.norm.groups", "valid integer"),
    ],
)
def test_bad_plugin_options_are_config_errors(site, change, path, words):
    with pytest.raises(ConfigError) as caught:
        assemble({**TINY, "family": "decoder", **change})
    assert [p.path for p in caught.value.problems] == [path]
    assert words in caught.value.problems[0].message


def test_the_plugin_measures_its_branch_gains_through_the_data_init_hooks(site):
    """gpt2_scaled's data_init: every hook of the contract's data-dependent init, written from
    outside normzoo: each branch's output becomes 1/sqrt(N) of the stream it joins on the
    measured batch; the state round-trips; a model with gains set needs no second pass."""
    torch.manual_seed(0)
    model = assemble({**TINY, "family": "decoder",
                      "residual": {"name": "gpt2_scaled", "data_init": True}})
    scheme = model.scheme
    assert scheme.needs_data_init(model) and scheme.data_init_state(model) is None
    tokens = torch.randint(1, 30, (4, 9))
    seen = []  # (stream in, branch out) of each connection, during a second pass
    state = scheme.data_init(model, lambda: model(tokens))
    assert len(state["gains"]) == 4 and all(g > 0 for g in state["gains"])
    assert not scheme.needs_data_init(model) and scheme.data_init_state(model) == state
    for module in model.modules():
        if type(module).__name__ == "PreNormResidual":
            module.register_forward_hook(
                lambda m, args, out: seen.append((args[0], out - args[0], m.branch_share)))
    with torch.no_grad():
        model(tokens)
    for x, added, share in seen:  # the first connection's measurement holds exactly
        ratio = added.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()
        assert ratio.item() == pytest.approx(share, rel=1e-4)
        break
    twin = assemble({**TINY, "family": "decoder",
                     "residual": {"name": "gpt2_scaled", "data_init": True}})
    scheme.load_data_init(twin, state)  # rank 0's gains, as every other process takes them
    assert scheme.data_init_state(twin) == state
    assert "measured 4 branch gains" in scheme.describe_data_init(state)


def test_the_plugin_declares_its_gains_optimizer_options_and_export_form(site):
    from normzoo.recipe import OptimConfig
    from normzoo.residual import PlainForm
    from normzoo.tasks.optim import build_optimizer

    model = assemble({**TINY, "family": "decoder",
                      "residual": {"name": "gpt2_scaled", "data_init": True}})
    optimizer, _ = build_optimizer(model, OptimConfig(lr=1e-3, weight_decay=0.1), 10)
    groups = {g["name"]: g for g in optimizer.param_groups}
    gains = {id(m.gain) for m in model.modules() if getattr(m, "gain", None) is not None}
    assert {id(p) for p in groups["lr_0_0.1"]["params"]} == gains and len(gains) == 4
    form = model.decoder.layers[0].ffn_residual.plain_form()
    assert isinstance(form, PlainForm) and form.placement == "pre" and form.branch_scale == 0.0
    with pytest.raises(ConfigError) as caught:  # the scheme's recipe_problem, by its options
        from normzoo.recipe import from_dict

        from_dict({"task": "causal_lm", "trainer": {"strategy": "fsdp"},
                   "model": {"residual": {"name": "gpt2_scaled", "data_init": True}}})
    assert "data_init is not supported with trainer.strategy=fsdp" in str(caught.value)


def test_a_plugin_scheme_initialised_from_data_trains_and_records_it(site, tmp_path, monkeypatch):
    """Through `normzoo train`'s task: the first batch sets the gains before the first update,
    the checkpoint records them under normzoo.data_init."""
    from tiny import tiny

    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            model={"residual": {"name": "gpt2_scaled", "data_init": True}},
                            trainer={"max_steps": 2, "val_every_steps": 2}))
    train.run(recipe, "tiny.yaml")
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    gains = saved["normzoo"]["data_init"]["gains"]
    assert len(gains) == 2 + 3 and all(g > 0 for g in gains)  # 1+1 layers: 2 + 3 connections
