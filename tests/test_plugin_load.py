"""Loading a checkpoint built with a plugin: the recorded distribution and version decide.

Each test takes the session's tiny translation checkpoint, makes its norm a third-party one
(``fakeln``, recorded as coming from some distribution and version) and installs fake
distributions (``.dist-info`` folders on ``sys.path``) that do or do not match the record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from normzoo import registry
from normzoo.cli import app
from normzoo.errors import NormzooError
from normzoo.inference.load import CheckpointError, load_checkpoint

# fakeln is the built-in LayerNorm under another name, so the checkpoint's weights fit it.
SAME = '''
    from normzoo.nn.norms import LayerNorm

    class FakeLN(LayerNorm):
        """LayerNorm from a third-party distribution."""
'''
# Version 2.0 renamed the option eps to epsilon.
RENAMED = '''
    from normzoo.nn.norms import LayerNorm

    class FakeLN(LayerNorm):
        """LayerNorm from a third-party distribution, 2.0: eps is now epsilon."""

        def __init__(self, dim: int, epsilon: float = 1e-5) -> None:
            super().__init__(dim, eps=epsilon)
'''
BROKEN = """
    import nz_missing_dependency_q  # not installed
"""


def craft(checkpoint: Path, out: Path, dist: str, version: str,
          norm: dict | None = None) -> Path:
    """``checkpoint`` with its norm replaced by ``fakeln`` recorded as from ``dist version``."""
    data = torch.load(checkpoint, weights_only=True)
    data["normzoo"]["recipe"]["model"]["norm"] = norm or {"name": "fakeln"}
    data["normzoo"]["plugins"] = [
        {"kind": "norm", "name": "fakeln", "distribution": dist, "version": version}
        if p["kind"] == "norm" else p for p in data["normzoo"]["plugins"]]
    torch.save(data, out)
    return out


def fake_norm(fake_dists, dist: str, version: str, module: str, source: str,
              folder: str = "site") -> Path:
    """A distribution registering ``fakeln`` as ``module:FakeLN``; returns its folder."""
    return fake_dists.write(dist, version, {"normzoo.norms": {"fakeln": f"{module}:FakeLN"}},
                            {module: source}, folder=folder)


def refusal(checkpoint: Path, *parts: str) -> str:
    """The CheckpointError that loading ``checkpoint`` raises; it must contain ``parts``."""
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(checkpoint)
    message = str(caught.value)
    for part in parts:
        assert part in message, message
    return message


def norm_modules(model: torch.nn.Module) -> set[str]:
    return {type(m).__module__ for m in model.modules() if type(m).__name__ == "FakeLN"}


def test_another_plugin_version_warns_and_loads(tiny_checkpoint, tmp_path, fake_dists):
    site = fake_norm(fake_dists, "nz-fake-norms", "2.0", "nz_same", SAME)
    fake_dists.activate(site)
    crafted = craft(tiny_checkpoint, tmp_path / "old.ckpt", "nz-fake-norms", "1.0")
    with pytest.warns(registry.PluginVersionWarning) as caught:
        loaded = load_checkpoint(crafted)
    [message] = [str(w.message) for w in caught]
    for part in ("norm 'fakeln'", "nz-fake-norms 1.0", "nz-fake-norms 2.0 is installed",
                 "pip install 'nz-fake-norms==1.0'"):
        assert part in message, message
    assert norm_modules(loaded.model) == {"nz_same"}
    assert loaded.translate(["the dog sees a cat"])  # loading was not broken

    # The same version: silence.
    same = craft(tiny_checkpoint, tmp_path / "same.ckpt", "nz-fake-norms", "2.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint(same)

    # At the command line the warning goes to stderr and the command still succeeds.
    script = Path(sys.executable).with_name("normzoo")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(script), "translate", str(crafted)], input="the dog\n",
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "nz-fake-norms 1.0" in done.stderr and "2.0 is installed" in done.stderr
    assert "nz-fake-norms" not in done.stdout and len(done.stdout.splitlines()) == 1


def test_an_option_error_on_load_names_both_versions(tiny_checkpoint, tmp_path, fake_dists):
    fake_dists.activate(fake_norm(fake_dists, "nz-fake-norms", "2.0", "nz_renamed", RENAMED))
    crafted = craft(tiny_checkpoint, tmp_path / "old.ckpt", "nz-fake-norms", "1.0",
                    {"name": "fakeln", "eps": 1e-5})
    with pytest.raises(NormzooError) as caught, pytest.warns(registry.PluginVersionWarning):
        load_checkpoint(crafted)
    message = str(caught.value)
    for part in ("model.norm.eps: unknown option (did you mean 'epsilon'?)",
                 "built with nz-fake-norms 1.0", "nz-fake-norms 2.0 is installed",
                 "pip install 'nz-fake-norms==1.0'"):
        assert part in message, message
    assert "invalid recipe" not in message

    result = CliRunner().invoke(app, ["translate", str(crafted)], input="the dog\n")
    assert result.exit_code == 2, result.output
    assert "nz-fake-norms 1.0" in result.output and "2.0 is installed" in result.output
    assert "Traceback" not in result.output


def test_a_plugin_that_fails_to_import_is_named(tiny_checkpoint, tmp_path, fake_dists):
    fake_dists.activate(fake_norm(fake_dists, "nz-broken-norms", "1.0", "nz_broken_q", BROKEN))
    crafted = craft(tiny_checkpoint, tmp_path / "broken.ckpt", "nz-broken-norms", "1.0")
    message = refusal(crafted, "norm 'fakeln'", "nz-broken-norms 1.0", "failed to import",
                      "ModuleNotFoundError: No module named 'nz_missing_dependency_q'")
    assert "invalid recipe" not in message

    result = CliRunner().invoke(app, ["translate", str(crafted)], input="the dog\n")
    assert result.exit_code == 2
    assert "failed to import" in result.output and "invalid recipe" not in result.output


def test_a_contested_name_resolves_by_the_recorded_distribution(
        tiny_checkpoint, tmp_path, fake_dists):
    fake_dists.activate(fake_norm(fake_dists, "alpha-norms", "1.0", "nz_alpha_q", SAME, "one"),
                        fake_norm(fake_dists, "beta-norms", "2.0", "nz_beta_q", SAME, "two"))
    for dist, version, module in (("beta-norms", "2.0", "nz_beta_q"),
                                  ("alpha-norms", "1.0", "nz_alpha_q")):
        crafted = craft(tiny_checkpoint, tmp_path / f"{dist}.ckpt", dist, version)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            loaded = load_checkpoint(crafted)
        assert norm_modules(loaded.model) == {module}
        assert loaded.translate(["the dog"])
    # A distribution that is not among the claimants is not installed here.
    refusal(craft(tiny_checkpoint, tmp_path / "gamma.ckpt", "gamma-norms", "3.0"),
            "'gamma-norms' (version 3.0), which is not installed here")


def test_a_name_now_provided_by_another_distribution_is_refused(
        tiny_checkpoint, tmp_path, fake_dists):
    fake_dists.activate(fake_norm(fake_dists, "beta-norms", "2.0", "nz_beta_r", SAME))
    refusal(craft(tiny_checkpoint, tmp_path / "alpha.ckpt", "alpha-norms", "1.0"),
            "'alpha-norms' (version 1.0), which is not installed here",
            "'fakeln' here comes from beta-norms 2.0", "pip install 'alpha-norms==1.0'")
