"""The rule a study's verdicts follow (:mod:`normzoo.verdicts.rule`): copies and outputs of one
training run refused, unknown devices and precisions and mixed sides capped at *indicated*, and
genuine seeds of the committed studies never refused."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from normzoo.contract.outputs import ExampleOutputs
from normzoo.verdicts import distinct
from normzoo.verdicts.rule import EQUAL, Run, compare

ROOT = Path(__file__).resolve().parent.parent


def _ratio(totals: np.ndarray) -> np.ndarray:
    return totals[..., 0] / totals[..., 1]


def _classifier_run(label: str, seed: int, accuracy: float, n: int = 500, **kinds) -> Run:
    """A run's per-example outputs: ``accuracy`` of ``n`` examples right, each with a loss of
    its own (the seed's draws)."""
    rng = np.random.default_rng([seed, int(accuracy * 1000), ord(label[0])])
    correct = (rng.random(n) < accuracy).astype(float)
    loss = rng.exponential(0.3, n)
    outputs = ExampleOutputs(np.stack([correct, np.ones(n)], 1), _ratio,
                             [(int(c), float(v)) for c, v in zip(correct, loss, strict=True)])
    return Run(label, str(seed), float(correct.mean()), kinds.get("precision", "32-true"),
               kinds.get("device", "cpu"), kinds.get("identity", f"init-{label}"), outputs)


def _sides(base: float = 0.70, system: float = 0.80, **kinds) -> tuple[list[Run], list[Run]]:
    return ([_classifier_run(f"b{s}", s, base + 0.01 * s) for s in (1, 2, 3)],
            [_classifier_run(f"s{s}", s, system + 0.01 * s, **kinds) for s in (1, 2, 3)])


def test_a_clear_difference_over_three_distinct_seeds_is_shown():
    row = compare(*_sides())
    assert row["verdict"] == "shown", row["reason"]
    assert row["paired"] and row["example_p"] < 0.05 and row["seed_p"] < 0.05
    assert row["rule_p"] == row["example_p"]  # the example-level test decides


def _copy(run: Run, label: str, seed: str, changed: float) -> Run:
    """``run``'s outputs under another name and seed, ``changed`` of its examples altered."""
    keys = list(run.outputs.keys)
    stats = run.outputs.stats.copy()
    for i in range(max(1, int(len(keys) * changed))):
        keys[i] = (1 - keys[i][0], keys[i][1] + 1.0)
        stats[i, 0] = 1 - stats[i, 0]
    return Run(label, seed, float(stats[:, 0].mean()), run.precision, run.device,
               f"init-{label}", ExampleOutputs(stats, _ratio, keys))


@pytest.mark.parametrize("changed", [0.002, 0.01, 0.1])
def test_copies_with_lines_changed_are_refused(changed: float):
    base, system = _sides()
    copies = [system[0], _copy(system[0], "s2", "2", changed), _copy(system[0], "s3", "3",
                                                                     changed)]
    with pytest.raises(distinct.NotDistinct, match=r"must be distinct work.*agree on"):
        compare(base, copies)


def test_two_outputs_of_one_training_run_are_refused_whichever_side():
    base, system = _sides()
    # A run's best checkpoint and its average: other outputs, the same initial weights.
    twin = Run("s1-average", "4", system[1].score, "32-true", "cpu", system[0].identity,
               system[1].outputs)
    with pytest.raises(distinct.NotDistinct, match="outputs of one training run"):
        compare(base, [system[0], twin, system[2]])
    with pytest.raises(distinct.NotDistinct, match="outputs of one training run"):
        compare([*base[:2], Run("b3", "3", base[2].score, "32-true", "cpu", system[0].identity,
                                base[2].outputs)], system)


@pytest.mark.parametrize(("kinds", "why"), [
    ({"device": ""}, "recorded no device"),
    ({"precision": ""}, "recorded no precision"),
    ({"precision": "bf16-mixed"}, "more than one precision"),
    ({"device": "cuda"}, "more than one device"),
])
def test_unknown_or_mixed_kinds_cap_a_difference_at_indicated(kinds: dict, why: str):
    row = compare(*_sides(**kinds))
    assert row["verdict"] == "indicated" and why in row["reason"], row["reason"]


def test_a_side_mixing_precisions_is_at_most_indicated():
    base, system = _sides()
    system[1] = _classifier_run("s2", 2, 0.82, precision="bf16-mixed")
    row = compare(base, system)
    assert row["verdict"] == "indicated" and "more than one precision" in row["reason"]


def test_equal_is_said_only_within_a_margin_and_held_to_the_rule():
    base, system = _sides(0.80, 0.80)
    assert compare(base, system)["verdict"] == "not shown"
    row = compare(base, system, margin=0.1)
    assert row["verdict"] == EQUAL and row["equivalence_p"] < 0.05
    capped = compare(*_sides(0.80, 0.80, device=""), margin=0.1)
    assert capped["verdict"] == "not shown" and "only indicated" in capped["reason"]


def test_repeated_seeds_and_runs_are_refused():
    base, system = _sides()
    with pytest.raises(distinct.NotDistinct, match="both seed 1"):
        compare(base, [system[0], Run("s9", "1", 0.8, "32-true", "cpu", "x", None), system[2]])
    with pytest.raises(distinct.NotDistinct, match="given twice"):
        compare(base, [system[0], system[0], system[2]])


def _committed_seed_translations() -> dict[tuple[str, str], list[list[str | None]]]:
    """The depth study's committed test translations, grouped by setting, each line kept
    where it differs from its reference (the keys the rule compares)."""
    references = (ROOT.parent / "shared" / "data" / "multi30k" / "test2016.de")
    if not references.is_file():
        pytest.skip("needs ../shared/data/multi30k")
    refs = references.read_text(encoding="utf-8").split("\n")
    groups: dict[tuple[str, str], list[list[str | None]]] = defaultdict(list)
    for hyps in sorted((ROOT / "docs" / "study-depth" / "data").glob("*/*/hyps.test2016.txt")):
        cell = hyps.parent.name
        setting = cell.split("_", 1)[1] if cell.startswith("seed-") else cell
        lines = hyps.read_text(encoding="utf-8").split("\n")
        groups[(hyps.parent.parent.name, setting)].append(
            [h if h != r else None for h, r in zip(lines, refs, strict=True)])
    return groups


def test_genuine_seeds_of_the_committed_studies_are_never_refused():
    groups = _committed_seed_translations()
    shares = [distinct.agreement(a, b) for runs in groups.values()
              for a, b in itertools.combinations(runs, 2)]
    assert len(shares) >= 25  # every committed pair of seeds of one setting
    assert max(shares) < 0.3 < distinct.MAX_AGREEMENT  # the bound stands well above them
    for (part, setting), runs in groups.items():
        labels = [f"{part}/{setting}/{i}" for i in range(len(runs))]
        assert distinct.near_copies("system", labels, runs) == []


@pytest.mark.parametrize("study", ["study-classify", "study-quickstart"])
def test_genuine_seeds_of_the_committed_per_example_outputs_are_never_refused(study: str):
    """The classifier's seeds (each example's prediction and loss) and the quick start's
    (translations of the built-in corpus) agree on a few percent of their examples at most."""
    import yaml

    from normzoo.contract import task_of

    groups: dict[str, list] = defaultdict(list)
    for cell in sorted((ROOT / "docs" / study / "data").glob("*/*")):
        recipe = yaml.safe_load((cell / "recipe.yaml").read_text(encoding="utf-8"))
        outputs = task_of(recipe).example_outputs(cell, recipe, None)
        setting = cell.name.split("_", 1)[1] if "_" in cell.name else ""
        groups[f"{cell.parent.name}/{setting}"].append(outputs.keys)
    pairs = [(name, distinct.agreement(a, b)) for name, runs in groups.items()
             for a, b in itertools.combinations(runs, 2)]
    assert len(pairs) >= 6 and max(share for _, share in pairs) < 0.05
    for name, runs in groups.items():
        assert distinct.near_copies("system", [f"{name}/{i}" for i in range(len(runs))],
                                    runs) == []
