"""The lists tests parametrise over (``tests/registered.py``) hold every norm, residual scheme
and task normzoo ships, as pyproject.toml's entry points declare them, and nothing else: so a
new built-in is covered by every parametrised test, and the lists cannot silently shrink (a
built-in that fails to import would drop out of ``Registry.working()``)."""

from __future__ import annotations

import pytest
import registered
from registered import BUILTIN_NORMS, BUILTIN_SCHEMES, BUILTIN_TASKS, declared

from normzoo import registry


@pytest.mark.parametrize(("kind", "listed"), [
    ("norm", BUILTIN_NORMS), ("residual", BUILTIN_SCHEMES), ("task", BUILTIN_TASKS)])
def test_the_lists_hold_every_built_in_pyproject_declares(kind: str, listed: list[str]):
    group = registered.KINDS[kind].group
    shipped = declared(kind)
    assert shipped, f"pyproject.toml declares no [project.entry-points.\"{group}\"]"
    assert listed == sorted(listed) and len(set(listed)) == len(listed)
    missing, extra = sorted(shipped - set(listed)), sorted(set(listed) - shipped)
    assert not missing, (f"built-in {kind}s declared in pyproject.toml but not enumerated "
                         f"(broken import, or stale metadata: reinstall normzoo): {missing}; "
                         + "; ".join(f"{name}: {registered.KINDS[kind].entry(name).error}"
                                     for name in missing if name in registered.KINDS[kind]))
    assert not extra, f"enumerated as built-in {kind}s but not in pyproject.toml: {extra}"


def _class(obj: object) -> type:
    """A registered class, or the class of a registered instance (a task: the registry makes
    one anew each time it is re-read, as other tests make it)."""
    return obj if isinstance(obj, type) else type(obj)


def test_every_list_matches_its_registered_objects():
    for kind, listed in (("norm", BUILTIN_NORMS), ("residual", BUILTIN_SCHEMES),
                         ("task", BUILTIN_TASKS)):
        objects = registered.builtin(kind)
        assert list(objects) == listed
        for name, obj in objects.items():
            assert _class(obj) is _class(registered.KINDS[kind].get(name)), name


def test_the_predicates_pick_from_the_built_ins():
    assert registered.norms_where(lambda cls: True) == BUILTIN_NORMS
    assert registered.schemes_where(lambda cls: False) == []
    assert set(registered.tasks_where(lambda task: task.family == "encoder")) < set(
        BUILTIN_TASKS)


def test_in_process_and_third_party_names_are_left_out(fake_dists):
    """What other tests register (in-process, or as a fake distribution) is never a
    built-in, whenever the lists are read."""
    fake_dists.activate(fake_dists.write(
        "nz-coverage-plugin", "1.0", {"normzoo.norms": {"coveragenorm": "nz_coverage:Norm"}},
        {"nz_coverage": "import torch\n\nclass Norm(torch.nn.Module):\n"
                        "    def __init__(self, dim):\n        super().__init__()\n"}))
    registry.residuals.register("coverage_scheme", object)
    try:
        assert "coveragenorm" in registry.norms.names()
        assert "coverage_scheme" in registry.residuals.names()
        read = registered._builtin.__wrapped__  # uncached: as if read now
        assert [name for name, _ in read("norm")] == BUILTIN_NORMS
        assert [name for name, _ in read("residual")] == BUILTIN_SCHEMES
    finally:
        registry.residuals.unregister("coverage_scheme")
