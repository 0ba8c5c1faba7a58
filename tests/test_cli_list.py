"""``normzoo list``: every name with its distribution, version and description; broken plugins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from registered import declared
from typer.testing import CliRunner

from normzoo import registry
from normzoo.cli import app
from normzoo.registry import first_doc_line

# normzoo's own names, as pyproject.toml's entry points declare them.
NORMS = declared("norm")
RESIDUALS = declared("residual")
SOURCE = f"normzoo {version('normzoo')}"

FAKE_NORM = '''
    import torch

    class Fake(torch.nn.Module):
        """Fake norm from a third-party package."""

        def __init__(self, dim: int) -> None:
            super().__init__()
'''


def builtin_line(reg: registry.Registry, name: str) -> re.Pattern[str]:
    description = first_doc_line(reg.get(name))
    assert description
    return re.compile(
        rf"^  {re.escape(name)} +{re.escape(SOURCE)} +{re.escape(description)}$", re.MULTILINE
    )


def assert_lists(output: str, regs: list[registry.Registry]) -> None:
    for reg, names in ((registry.norms, NORMS), (registry.residuals, RESIDUALS)):
        for name in names:
            found = builtin_line(reg, name).search(output) is not None
            assert found == (reg in regs), f"{name}: listed={found}\n{output}"


def write_troublemakers(fake_dists) -> Path:
    """One broken plugin and one name that two distributions claim."""
    fake_dists.write(
        "shaky-plugin", "0.3.0",
        {"normzoo.norms": {"shakynorm": "nz_cli_broken:Norm", "steadynorm": "nz_cli_ok:Fake"}},
        {"nz_cli_broken": "raise RuntimeError('plugin exploded on import')\n",
         "nz_cli_ok": FAKE_NORM},
    )
    return fake_dists.write(
        "rival-plugin", "9.9", {"normzoo.residuals": {"deepnorm": "nz_cli_ok:Fake"}}
    )


def check_trouble(output: str) -> None:
    broken = re.search(r"^  shakynorm +shaky-plugin 0\.3\.0 +BROKEN: (.*)$", output, re.MULTILINE)
    assert broken, output
    assert "RuntimeError: plugin exploded on import" in broken.group(1)
    assert re.search(
        r"^  steadynorm +shaky-plugin 0\.3\.0 +Fake norm from a third-party package\.$",
        output, re.MULTILINE,
    ), output
    # A built-in's name is reserved: the built-in is listed as usual, the plugin's entry as its
    # conflict, right below it.
    conflict = re.search(
        r"^  deepnorm +normzoo [^ ]+ +DeepNorm.*\n  deepnorm +rival-plugin 9\.9 +(.*)$",
        output, re.MULTILINE)
    assert conflict, output
    assert "CONFLICT: 'deepnorm' is the name of a built-in" in conflict.group(1)
    assert SOURCE in conflict.group(1) and "rename it in rival-plugin" in conflict.group(1)
    assert "2 plugin(s) cannot be used until fixed; the others work." in output


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_list_shows_every_builtin_with_distribution_version_and_description(runner):
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    assert "norms (normzoo.norms)" in result.output
    assert "residual schemes (normzoo.residuals)" in result.output
    assert_lists(result.output, [registry.norms, registry.residuals])
    assert "BROKEN" not in result.output and "CONFLICT" not in result.output


@pytest.mark.parametrize(("kind", "shown"), [("norms", "norms"), ("residuals", "residuals"),
                                              ("norm", "norms"), ("residual", "residuals")])
def test_list_one_kind(runner, kind, shown):
    result = runner.invoke(app, ["list", kind])
    assert result.exit_code == 0, result.output
    assert_lists(result.output, [getattr(registry, shown)])


@pytest.mark.parametrize(("kind", "hint"), [("bogus", ""), ("residules", "residuals")])
def test_list_unknown_kind_exits_2(runner, kind, hint):
    result = runner.invoke(app, ["list", kind])
    assert result.exit_code == 2
    assert f"error: unknown kind '{kind}'" in result.output
    assert "use all, norms, residuals or tasks" in result.output
    assert (f"did you mean '{hint}'" in result.output) == bool(hint)
    assert "Traceback" not in result.output


def test_list_reports_broken_and_conflicting_plugins(runner, fake_dists):
    fake_dists.activate(write_troublemakers(fake_dists))
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    check_trouble(result.output)
    for name in NORMS:
        assert builtin_line(registry.norms, name).search(result.output), name


def test_list_in_a_real_process(fake_dists):
    """The installed console script, with the fake distributions found through PYTHONPATH."""
    site = write_troublemakers(fake_dists)
    script = Path(sys.executable).with_name("normzoo")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("NO_COLOR", None)
    out = subprocess.run([str(script), "list"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    check_trouble(out.stdout)
    for reg, names in ((registry.norms, NORMS), (registry.residuals, RESIDUALS - {"deepnorm"})):
        for name in names:
            assert builtin_line(reg, name).search(out.stdout), f"{name}\n{out.stdout}"

    wrong = subprocess.run([str(script), "list", "bogus"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert wrong.returncode == 2
    assert "unknown kind 'bogus'" in wrong.stderr and not wrong.stdout


def test_list_check_fails_on_broken_or_conflicting_plugins(fake_dists):
    """``normzoo list --check`` (for plugin CI): exit 1 while any entry is BROKEN or CONFLICT,
    like ``pip check``; 0 when every name is usable."""
    script = Path(sys.executable).with_name("normzoo")

    def run(*args: str, site: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(s) for s in (site,) if s] + list(filter(None, [os.environ.get("PYTHONPATH")])))}
        return subprocess.run([str(script), "list", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    clean = run("--check")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "BROKEN" not in clean.stdout and "CONFLICT" not in clean.stdout

    site = write_troublemakers(fake_dists)
    failed = run("--check", site=site)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    check_trouble(failed.stdout)
    assert "Traceback" not in failed.stdout + failed.stderr

    fake_dists.activate(site)
    runner = CliRunner()
    assert runner.invoke(app, ["list", "--check", "residuals"]).exit_code == 1  # reserved name
    assert runner.invoke(app, ["list", "--check", "norms"]).exit_code == 1  # the broken plugin
    assert runner.invoke(app, ["list"]).exit_code == 0  # plain listing stays informational


def test_list_check_on_a_name_two_plugins_claim(runner, fake_dists):
    one = fake_dists.write("alpha-norms", "1.0", {"normzoo.norms": {"twin": "nz_cli_ok:Fake"}},
                           {"nz_cli_ok": FAKE_NORM}, folder="one")
    two = fake_dists.write("beta-norms", "2.0", {"normzoo.norms": {"twin": "nz_cli_ok:Fake"}},
                           folder="two")
    fake_dists.activate(one, two)
    result = runner.invoke(app, ["list", "norms", "--check"])
    assert result.exit_code == 1, result.output
    assert re.search(r"^  twin +alpha-norms 1\.0 +CONFLICT: also registered by beta-norms 2\.0$",
                     result.output, re.MULTILINE), result.output
    assert runner.invoke(app, ["list", "residuals", "--check"]).exit_code == 0


def test_builtin_descriptions_read_from_source_are_their_docstrings():
    """``normzoo list`` reads normzoo's own entries from their source, not importing torch: the
    line it prints must be the one the imported object gives."""
    from normzoo.registry.entry import builtin_doc_line

    for reg in (registry.norms, registry.residuals):
        for entry in reg.entries(load=True):
            assert builtin_doc_line(entry.target) == first_doc_line(entry.obj), entry.info.name


def test_listing_only_builtins_imports_no_torch():
    code = ("import sys\nfrom normzoo.cli import main\nsys.argv = ['normzoo', 'list']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('torch imported:', 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert "layernorm" in result.stdout
    assert result.stdout.strip().endswith("torch imported: False")
