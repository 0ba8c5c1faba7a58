"""The plugin registry: lazy entry points, broken plugins, name conflicts, suggestions."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import distributions, version

import pytest
from registered import declared

from normzoo import registry
from normzoo.errors import ConfigError, RegistryError
from normzoo.models import assemble
from normzoo.registry import first_doc_line, normalize_distribution, plugin_provenance

# normzoo's own names, as pyproject.toml's entry points declare them.
NORMS = declared("norm")
RESIDUALS = declared("residual")
NORMZOO_VERSION = version("normzoo")

GOOD_NORM = '''
    """A fake norm for registry tests.

    More text that ``normzoo list`` must not show.
    """
    import torch

    class Fake(torch.nn.Module):
        """Fake norm: the identity."""

        def __init__(self, dim: int) -> None:
            super().__init__()

        def forward(self, x):
            return x
'''
BROKEN = """
    import normzoo_no_such_dependency_xyz  # fails on import
"""


def test_builtins_are_registered_through_normzoos_entry_points():
    assert set(registry.norms.names()) >= NORMS
    assert set(registry.residuals.names()) >= RESIDUALS
    for reg, names in ((registry.norms, NORMS), (registry.residuals, RESIDUALS)):
        for name in names:
            info = reg.info(name)
            assert (info.name, info.distribution, info.version) == (
                name, "normzoo", NORMZOO_VERSION)
            assert first_doc_line(reg.get(name)), f"{name} has no description"


def test_indexing_imports_nothing():
    """Listing names and provenance reads metadata only: not torch, not one built-in module."""
    code = (
        "import sys\n"
        "from normzoo import registry\n"
        "assert 'layernorm' in registry.norms.names() and 'deepnorm' in registry.residuals\n"
        "registry.norms.entries(load=False); registry.plugin_provenance('layernorm', 'pre')\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('normzoo.nn')\n"
        "             or m.startswith('normzoo.residual') or m == 'lightning'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_plugin_is_imported_on_first_get_only(fake_dists):
    site = fake_dists.write(
        "lazy-plugin", "1.2.3",
        {"normzoo.norms": {"lazynorm": "nz_fake_lazy:Fake"}},
        {"nz_fake_lazy": GOOD_NORM},
    )
    fake_dists.activate(site)
    assert "lazynorm" in registry.norms.names()
    assert "lazynorm" in registry.norms
    entry = registry.norms.entry("lazynorm")
    assert not entry.loaded
    assert registry.norms.info("lazynorm").as_dict() == {
        "name": "lazynorm", "distribution": "lazy-plugin", "version": "1.2.3"}
    registry.norms.entries(load=False)
    assert "nz_fake_lazy" not in sys.modules

    cls = registry.norms.get("lazynorm")
    assert "nz_fake_lazy" in sys.modules
    assert cls.__module__ == "nz_fake_lazy" and cls.__name__ == "Fake"
    assert registry.norms.entry("lazynorm").loaded
    assert first_doc_line(cls) == "Fake norm: the identity."


def test_a_broken_plugin_is_reported_and_fails_only_when_asked_for(fake_dists):
    site = fake_dists.write(
        "shaky-plugin", "0.3.0",
        {
            "normzoo.norms": {
                "shakynorm": "nz_fake_broken:Norm",  # the module fails to import
                "missingattr": "nz_fake_ok:NoSuchClass",  # the module lacks the attribute
                "oknorm": "nz_fake_ok:Fake",  # fine, from the same distribution
            },
        },
        {"nz_fake_broken": BROKEN, "nz_fake_ok": GOOD_NORM},
    )
    fake_dists.activate(site)
    entries = {e.info.name: e for e in registry.norms.entries()}  # loads all; must not raise

    shaky = entries["shakynorm"]
    assert shaky.info.as_dict() == {
        "name": "shakynorm", "distribution": "shaky-plugin", "version": "0.3.0"}
    assert shaky.error.startswith("ModuleNotFoundError")
    assert "normzoo_no_such_dependency_xyz" in shaky.error
    assert "nz_fake_broken.py:2" in shaky.error  # points at the plugin's own line
    assert entries["missingattr"].error.startswith("AttributeError")
    assert entries["oknorm"].error is None and entries["layernorm"].error is None

    with pytest.raises(RegistryError) as caught:
        registry.norms.get("shakynorm")
    message = str(caught.value)
    for part in ("shakynorm", "shaky-plugin 0.3.0", "failed to import",
                 "normzoo_no_such_dependency_xyz"):
        assert part in message
    with pytest.raises(RegistryError, match=r"missingattr.*shaky-plugin"):
        registry.norms.get("missingattr")

    # Every other name keeps working, including the broken plugin's healthy sibling.
    assert registry.norms.get("oknorm").__name__ == "Fake"
    assert registry.norms.get("layernorm").__name__ == "LayerNorm"
    assert registry.residuals.get("pre").__name__ == "PreLN"


def test_a_recipe_naming_a_broken_plugin_gets_a_config_error(fake_dists):
    site = fake_dists.write(
        "shaky-plugin", "0.3.0",
        {"normzoo.norms": {"shakynorm": "nz_fake_broken2:Norm"}},
        {"nz_fake_broken2": BROKEN},
    )
    fake_dists.activate(site)
    config = {"family": "decoder", "vocab_size": 20, "d_model": 8, "heads": 2, "ffn_dim": 16,
              "decoder_layers": 1}
    with pytest.raises(ConfigError, match="shaky-plugin"):
        assemble({**config, "norm": "shakynorm"})
    assert assemble({**config, "norm": "layernorm"}) is not None


def test_two_distributions_claiming_one_name_is_an_error_naming_both(fake_dists):
    one = fake_dists.write(
        "alpha-norms", "1.0", {"normzoo.norms": {"twin": "nz_fake_alpha:Fake"}},
        {"nz_fake_alpha": GOOD_NORM}, folder="one",
    )
    two = fake_dists.write(
        "beta-norms", "2.0",
        {"normzoo.norms": {"twin": "nz_fake_beta:Fake", "betaonly": "nz_fake_beta:Fake"}},
        {"nz_fake_beta": GOOD_NORM}, folder="two",
    )
    fake_dists.activate(one, two)
    entry = registry.norms.entry("twin")
    claimants = {(i.distribution, i.version) for i in [entry.info, *entry.rivals]}
    assert claimants == {("alpha-norms", "1.0"), ("beta-norms", "2.0")}
    with pytest.raises(RegistryError) as caught:
        registry.norms.get("twin")
    assert "alpha-norms 1.0" in str(caught.value) and "beta-norms 2.0" in str(caught.value)
    assert "nz_fake_alpha" not in sys.modules  # neither claimant was imported
    assert registry.norms.get("betaonly").__name__ == "Fake"
    assert registry.norms.get("layernorm").__name__ == "LayerNorm"


@pytest.mark.parametrize("plugin_first", [True, False])
def test_builtin_names_are_reserved(fake_dists, monkeypatch, plugin_first):
    """A plugin registering a built-in's name is the plugin's conflict; the built-in works."""
    site = fake_dists.write(
        "shadow-plugin", "0.1",
        {"normzoo.norms": {"layernorm": "nz_fake_shadow:Fake", "shadownorm": "nz_fake_shadow:Fake"},
         "normzoo.residuals": {"pre": "nz_fake_shadow:Fake"}},
        {"nz_fake_shadow": GOOD_NORM},
    )
    fake_dists.activate(site)
    real = registry.entry_points

    def ordered(group):  # whichever order importlib.metadata happens to list them in
        eps = list(real(group=group))
        mine = [ep for ep in eps if ep.dist is not None and ep.dist.name == "shadow-plugin"]
        rest = [ep for ep in eps if ep not in mine]
        return mine + rest if plugin_first else rest + mine

    monkeypatch.setattr(registry, "entry_points", ordered)
    registry.norms.refresh()
    registry.residuals.refresh()
    for reg, name, cls in ((registry.norms, "layernorm", "LayerNorm"),
                           (registry.residuals, "pre", "PreLN")):
        assert reg.info(name).distribution == "normzoo"
        assert not reg.entry(name).rivals
        assert reg.get(name).__name__ == cls
        [refused] = [e for e in reg.refused() if e.info.name == name]
        assert refused.info.as_dict() == {"name": name, "distribution": "shadow-plugin",
                                          "version": "0.1"}
        assert "built-in" in refused.conflict and f"normzoo {NORMZOO_VERSION}" in refused.conflict
    assert "nz_fake_shadow" not in sys.modules  # the refused entry is never imported
    assert registry.norms.get("shadownorm").__name__ == "Fake"  # its other names work
    config = {"family": "decoder", "vocab_size": 20, "d_model": 8, "heads": 2, "ffn_dim": 16,
              "decoder_layers": 1, "norm": "layernorm", "residual": "pre"}
    assert assemble(config).plugins[0]["distribution"] == "normzoo"


def test_pinned_resolves_a_contested_name_by_the_recorded_distribution(fake_dists):
    one = fake_dists.write(
        "alpha-norms", "1.0", {"normzoo.norms": {"twin": "nz_fake_alpha2:Fake"}},
        {"nz_fake_alpha2": GOOD_NORM}, folder="one",
    )
    two = fake_dists.write(
        "beta-norms", "2.0", {"normzoo.norms": {"twin": "nz_fake_beta2:Fake"}},
        {"nz_fake_beta2": GOOD_NORM}, folder="two",
    )
    fake_dists.activate(one, two)
    for dist, module in (("beta-norms", "nz_fake_beta2"), ("Alpha_Norms", "nz_fake_alpha2")):
        with registry.pinned([{"kind": "norm", "name": "twin", "distribution": dist,
                               "version": "1.0"}]):
            assert registry.norms.get("twin").__module__ == module
            assert normalize_distribution(registry.norms.info("twin").distribution) == (
                normalize_distribution(dist))
    with pytest.raises(RegistryError, match="more than one distribution"):
        registry.norms.get("twin")  # outside a checkpoint the name stays ambiguous


def test_one_distribution_found_twice_is_not_a_conflict(fake_dists, monkeypatch):
    """An editable install next to a stale copy of the same distribution (any spelling)."""
    one = fake_dists.write(
        "twin-plugin", "1.0", {"normzoo.norms": {"twinnorm": "nz_fake_twin:Fake"}},
        {"nz_fake_twin": GOOD_NORM}, folder="one",
    )
    two = fake_dists.write(
        "Twin_Plugin", "1.1", {"normzoo.norms": {"twinnorm": "nz_fake_twin:Fake"}},
        folder="two",
    )
    fake_dists.activate(one, two)
    assert not registry.norms.entry("twinnorm").rivals
    assert registry.norms.get("twinnorm").__name__ == "Fake"

    # importlib.metadata already hides the second copy; the registry must not rely on that.
    copies = list(distributions(path=[str(one), str(two)]))
    assert len(copies) == 2

    def both_copies(group):
        eps = [ep for dist in copies for ep in dist.entry_points if ep.group == group]
        return eps + eps  # and each copy seen twice, as with a path listed twice

    monkeypatch.setattr(registry, "entry_points", both_copies)
    registry.norms.refresh()
    entry = registry.norms.entry("twinnorm")
    assert entry.info.distribution == "twin-plugin" and not entry.rivals
    assert registry.norms.get("twinnorm").__name__ == "Fake"


@pytest.mark.parametrize(
    ("reg", "typo", "suggestion"),
    [
        (registry.norms, "layernrom", "layernorm"),
        (registry.norms, "LayerNorm", "layernorm"),
        (registry.norms, "rms_norm", "rmsnorm"),
        (registry.residuals, "deepnrom", "deepnorm"),
        (registry.residuals, "resi-dual", "resi_dual"),
    ],
)
def test_unknown_names_get_a_close_match(reg, typo, suggestion):
    with pytest.raises(RegistryError) as caught:
        reg.get(typo)
    message = str(caught.value)
    assert f"unknown {reg.kind} '{typo}' (did you mean '{suggestion}'?)" in message
    assert "registered: " in message


def test_unknown_name_without_a_close_match_lists_what_exists():
    with pytest.raises(RegistryError) as caught:
        registry.norms.entry("zzzzzz")
    assert "did you mean" not in str(caught.value)
    assert "batchnorm, dyt, layernorm" in str(caught.value)


def test_register_and_unregister_in_process():
    class Custom:
        """Custom norm registered from a notebook."""

    try:
        registry.norms.register("custom_nb", Custom)
        assert registry.norms.get("custom_nb") is Custom
        assert registry.norms.info("custom_nb").distribution == registry.IN_PROCESS
        with pytest.raises(RegistryError, match=r"already registered by normzoo"):
            registry.norms.register("layernorm", Custom)
        assert registry.norms.get("layernorm") is not Custom
        registry.norms.unregister("custom_nb")
        assert "custom_nb" not in registry.norms
    finally:
        registry.norms.refresh()
    assert "custom_nb" not in registry.norms.names()


def test_plugin_provenance_records_name_distribution_and_version():
    assert plugin_provenance("rmsnorm", "deepnorm") == [
        {"kind": "norm", "name": "rmsnorm", "distribution": "normzoo",
         "version": NORMZOO_VERSION},
        {"kind": "residual", "name": "deepnorm", "distribution": "normzoo",
         "version": NORMZOO_VERSION},
    ]
    with pytest.raises(RegistryError, match="did you mean 'rmsnorm'"):
        plugin_provenance("rmsnrm", "pre")


def test_first_doc_line():
    class Described:
        """Ignored docstring."""

        description = "  The description wins.\n  Second line.  "

    class Docstring:
        """
        First line after a blank.

        Body.
        """

    class Nothing:
        pass

    assert first_doc_line(Described) == "The description wins."
    assert first_doc_line(Docstring) == "First line after a blank."
    assert first_doc_line(Nothing) == ""


def test_a_plugin_that_exits_on_import_is_broken_not_fatal(fake_dists):
    """``sys.exit()`` in a plugin's module raised SystemExit through the registry, which caught
    Exception only: ``normzoo list``, a mistyped name and ``evaluate`` ended with exit 1 and no
    name. It is a broken plugin like any other, named where it is asked for."""
    site = fake_dists.write(
        "exiting-plugin", "0.1.0", {"normzoo.norms": {"exitnorm": "nz_fake_exits:Norm"}},
        {"nz_fake_exits": "import sys\nsys.exit(3)\n"})
    fake_dists.activate(site)
    entries = {e.info.name: e for e in registry.norms.entries()}  # must not exit
    assert entries["exitnorm"].error.startswith("SystemExit: 3")
    with pytest.raises(RegistryError, match=r"exitnorm.*exiting-plugin 0\.1\.0.*failed to"):
        registry.norms.get("exitnorm")
    assert registry.norms.get("layernorm").__name__ == "LayerNorm"
