"""The depth study under issue 51's rule (``studies/depth/verdicts.py``,
``tables.py``): the sentence-level test is the hierarchical bootstrap, the seeds'
test is paired where both sides ran the same seeds, a comparison whose cells mix device kinds is
at most indicated, every not shown carries the 95% interval of the difference, "equal" comes
only from the equivalence test against a stated margin, and each table of comparisons says
whether Holm's correction keeps each one. Cells are written straight into the report's data
folder and rendered with ``--render-only``, as the committed page is."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: studies/
from studies.depth import report as study_depth
from studies.depth import tables, verdicts

WORDS = ["ein", "mann", "fährt", "mit", "dem", "fahrrad", "durch", "die", "stadt", "am", "abend"]
REFERENCES = [" ".join(WORDS[i % 5:i % 5 + 6]) + f" {i}" for i in range(60)]
GOOD = REFERENCES  # scores 100
BAD = [" ".join(reversed(r.split()[:4])) for r in REFERENCES]  # scores little
ODD = [bad if i % 2 else good for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]
EVEN = [good if i % 2 else bad for i, (good, bad) in enumerate(zip(GOOD, BAD, strict=True))]


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _diagnose(folder: Path, scheme: str, cross: bool) -> None:
    """Stream 10 -> 40 (4x); self-attention branch flat; the decoder's cross-attention branch,
    where ``cross``, growing 3x (more than half of the stream's growth)."""
    rows = []
    for when in ("init", "final"):
        for stack in ("encoder", "decoder"):
            grads = (1.0, 3.0, 8.0) if scheme == "post" else (1.0, 1.2, 1.5)
            for layer, (g, s, r) in enumerate(zip(grads, (10.0, 20.0, 40.0), (0.8, 0.2, 0.1),
                                                  strict=True)):
                rows.append({"when": when, "stack": stack, "layer": layer, "grad_norm": g,
                             "stream_norm": s, "layer_cosine": 0.9, "ratio_self_attn": r,
                             "ratio_cross_attn": "", "ratio_ffn": r, "branch_self_attn": "",
                             "branch_cross_attn": (1.0, 2.0, 3.0)[layer]
                             if cross and stack == "decoder" else "",
                             "branch_ffn": (2.0, 2.1, 2.2)[layer] if cross else ""})
    _write_csv(folder / "diagnose.csv", rows)


def cell(data: Path, tier: str, scheme: str, seed: str, bleu: float, hyps: list[str],
         device: str = "cpu", precision: str = "bf16-mixed", cross: bool = False) -> Path:
    """A collected cell as ``docs/study-depth/data/<tier>/`` holds it."""
    name = f"seed-{seed}_residual-{'admin-init-profiled' if scheme == 'admin' else scheme}"
    folder = data / tier / name
    folder.mkdir(parents=True)
    residual = "{name: admin, init: profiled}" if scheme == "admin" else scheme
    (folder / "cell.json").write_text(json.dumps({
        "cell": name, "seed": seed, "model.residual": residual, "status": "ok", "steps": 4500,
        "stopped": "step cap"}))
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "steps": 4500, "stopped": "step cap",
        "machine": {"cpu": "AMD EPYC", "device": device,
                    "gpu": "NVIDIA H200" if device == "cuda" else None},
        "test": {"bleu": bleu, "greedy_bleu": bleu - 1, "signature": "nrefs:1|test"}}))
    (folder / "recipe.yaml").write_text(
        f"seed: {seed}\nmodel:\n  residual:\n    name: {scheme}\n"
        f"trainer:\n  precision: {precision}\n")
    (folder / "hyps.test2016.txt").write_text("\n".join(hyps) + "\n")
    _write_csv(folder / "loss.csv", [{"step": s, "train_loss": 9.0 - s / 1000,
                                      "val_loss": 5.0 - s / 1000, "train_time": s / 10}
                                     for s in (50, 100)])
    _diagnose(folder, scheme, cross)
    return folder


def three(data: Path, tier: str, scheme: str, bleus: tuple[float, ...], hyps: list[str],
          devices: tuple[str, ...] = ("cpu", "cpu", "cpu"), **kw) -> None:
    for seed, (bleu, device) in enumerate(zip(bleus, devices, strict=True), start=1):
        cell(data, tier, scheme, str(seed), bleu, hyps, device=device, **kw)


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Render the report from what ``fill(data)`` wrote; returns its text."""
    data = tmp_path / "docs" / "study-depth" / "data"
    monkeypatch.setattr(study_depth, "DATA", data)
    monkeypatch.setattr(study_depth, "FIGURES", tmp_path / "docs" / "study-depth")
    monkeypatch.setattr(study_depth, "REPORT", tmp_path / "docs" / "study-depth.md")
    monkeypatch.setattr(study_depth.plots, "draw_all", lambda *a, **k: {})
    references = tmp_path / "test2016.de"
    references.write_text("\n".join(REFERENCES) + "\n")

    def build(fill) -> str:
        fill(data)
        assert study_depth.main(["--render-only", "--references", str(references)]) == 0
        return study_depth.REPORT.read_text(encoding="utf-8")

    return build


def full(data: Path, stability_devices: tuple[str, ...] = ("cpu", "cpu", "cpu")) -> None:
    """Post-LN ahead at 6+6; deep Post-LN failing; the fixes training; the no-warm-up control."""
    three(data, "ceiling", "post", (31.2, 30.6, 31.1), GOOD)
    three(data, "ceiling", "pre", (28.0, 28.3, 27.6), BAD)
    three(data, "stability", "post", (1.2, 0.7, 1.1), BAD)
    three(data, "stability", "pre", (27.2, 26.6, 27.3), GOOD, cross=True)
    three(data, "stability", "deepnorm", (28.1, 27.7, 28.4), GOOD, devices=stability_devices)
    three(data, "stability", "admin", (28.6, 28.2, 28.9), GOOD)
    three(data, "nowarmup6", "post", (0.6, 0.3, 0.5), BAD)
    three(data, "nowarmup6", "pre", (20.1, 19.7, 20.3), GOOD)


def test_the_sentence_test_is_the_hierarchical_bootstrap_not_the_pooled_one(page, monkeypatch):
    """The runs go to the bootstrap as runs, seed with seed, never pooled into one corpus."""
    import normzoo.inference.scoring as scoring
    import normzoo.sweep.bootstrap as bootstrap

    calls = []
    real = bootstrap.hierarchical_bootstrap

    def spy(baseline, system, references, samples=1000):
        calls.append((len(baseline), len(system), len(references)))
        return real(baseline, system, references, samples)

    def pooled(*args, **kwargs):
        raise AssertionError("the pooled paired bootstrap is no longer the page's test")

    monkeypatch.setattr(bootstrap, "hierarchical_bootstrap", spy)
    monkeypatch.setattr(scoring, "paired_bootstrap", pooled)
    text = page(full)
    assert calls and all(call == (3, 3, len(REFERENCES)) for call in calls)
    assert "sentences: hierarchical bootstrap p = " in text
    assert "paired bootstrap p" not in text
    # the same seeds on both sides: the paired t-test
    assert "seeds: paired t p = " in text


def test_a_comparison_mixing_device_kinds_is_at_most_indicated(page):
    text = page(lambda data: full(data, stability_devices=("cuda", "cpu", "cpu")))
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **indicated**" in text
    assert "the runs trained on different device kinds (cpu, cuda)" in text
    # the 18+18 tables name the cells that mix
    assert "| DeepNorm | 1: 28.10 (GPU), 2: 27.70 (CPU), 3: 28.40 (CPU) | 28.07 ± 0.35 (3) |" \
           in text
    assert "| **mixed**: cpu (seeds 2, 3); cuda (seed 1) |" in text
    row = next(line for line in text.splitlines() if line.startswith("| DeepNorm − Post-LN |"))
    assert "| **mixed**: system: 1 cuda, 2 cpu, 3 cpu; baseline: 1 cpu, 2 cpu, 3 cpu | " \
           "indicated |" in row
    admin = next(line for line in text.splitlines()
                 if line.startswith("| Admin (profiled) − Post-LN |"))
    assert "| system: 1 cpu, 2 cpu, 3 cpu; baseline: 1 cpu, 2 cpu, 3 cpu | shown |" in admin


def test_one_device_kind_and_three_paired_seeds_are_shown(page):
    text = page(full)
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **shown**" in text
    assert "### 5. At 6+6, Post-LN ends higher than Pre-LN: **shown**" in text
    assert "95% interval of the difference [+" in text


def test_every_not_shown_carries_its_interval_and_equal_comes_only_from_the_margin(page):
    """Post-LN and Pre-LN 6+6 within a few tenths, seeds apart by more: not shown, with the
    interval; "equal" only by the two one-sided tests against the 1 BLEU margin."""
    def fill(data):
        full(data)
        for tier, scheme in (("ceiling", "post"), ("ceiling", "pre")):
            for folder in (data / tier).glob(f"*residual-{scheme}"):
                for path in folder.iterdir():
                    path.unlink()
                folder.rmdir()
        three(data, "ceiling", "post", (30.0, 31.0, 30.4), EVEN)
        three(data, "ceiling", "pre", (30.1, 30.8, 30.5), ODD)

    text = page(fill)
    heading = next(line for line in text.splitlines() if line.startswith("### 5."))
    assert heading.startswith("### 5. At 6+6, Post-LN ends higher than Pre-LN: **not shown "
                              "either way: the 95% interval of the difference, [")
    assert "equal within ± 1 BLEU: shown (TOST p = " in heading
    assert "equal within ± 1 BLEU (the page's margin): shown (two one-sided tests, paired t, " \
           "p = " in text
    assert "do not differ" not in text and "no difference beyond" not in text
    assert verdicts.MARGIN == 1.0


def test_a_not_shown_without_equivalence_says_so():
    verdict = tables.judge([34.0, 35.0, 33.0], [33.5, 36.0, 35.0], 0.4, devices=["cpu"] * 6,
                           paired=True)
    result = tables.Comparison("Post-LN", "Pre-LN", [33.5, 36.0, 35.0], [34.0, 35.0, 33.0],
                               verdict, tables.seed_test([34.0, 35.0, 33.0],
                                                         [33.5, 36.0, 35.0], True, 1.0),
                               0.4, {"system": ["1 cpu"] * 3, "baseline": ["1 cpu"] * 3})
    text = result.text()
    assert "**not shown**" in text and "95% interval of the difference [" in text
    assert "equal within ± 1 BLEU (the page's margin): not shown (two one-sided tests" in text


def _comparison(seed_p: float | None, boot_p: float | None) -> tables.Comparison:
    return tables.Comparison("A", "B", [1.0, 2.0, 3.0], [0.0, 1.0, 2.0],
                             tables.Verdict("shown", "test"),
                             {"seed_p": seed_p, "seed_interval": (0.5, 1.5), "paired": True,
                              "equivalence_p": 0.9}, boot_p,
                             {"system": ["1 cpu"], "baseline": ["1 cpu"]})


def test_holm_over_each_table_keeps_by_the_larger_of_the_two_p_values():
    # rule p-values 0.001, 0.04, 0.03: 0.001 < 0.05/3 kept; 0.03 >= 0.05/2 stops there. Alone,
    # 0.04 and 0.03 would each pass; the untested one is not counted among the three.
    rows = [("a", _comparison(0.001, 0.001)), ("b", _comparison(0.001, 0.04)),
            ("c", _comparison(0.03, 0.001)), ("d", _comparison(None, 0.001)), ("e", None)]
    lines = tables.comparison_table(rows)
    assert lines[0].endswith("| Holm over this table's 3 |")
    assert [line.rsplit("|", 2)[-2].strip() for line in lines[2:]] == [
        "kept", "not kept", "not kept", "– (not tested)"]


def test_the_claims_and_the_fixes_have_their_holm_columns(page):
    text = page(full)
    assert text.count("Holm over this table's") == 2
    claims = [line for line in text.splitlines() if line.startswith(("| 2.", "| 4.", "| 5."))]
    assert len(claims) == 3 and all(line.endswith("| kept |") for line in claims), claims


def test_verdict_3_judges_the_cross_attention_branch_where_measured(page):
    text = page(full)
    heading = next(line for line in text.splitlines() if line.startswith("### 3."))
    assert "self-attention shown" in heading
    # the decoder's cross-attention branch grows 3x against the stream's 4x: it keeps up
    assert "the decoder's cross-attention not shown: it grows more than half as much as the " \
           "stream" in heading
    assert "cross-attention branch norm last/first 3.00 (seed 1), 3.00 (seed 2), 3.00 (seed 3)" \
        in text


def test_verdict_3_says_the_cross_attention_branch_is_untested_without_its_norms(page):
    def fill(data):
        full(data)
        for folder in (data / "stability").glob("*residual-pre"):
            _diagnose(folder, "pre", cross=False)

    heading = next(line for line in page(fill).splitlines() if line.startswith("### 3."))
    assert "the decoder's cross-attention untested (no cell recorded its norm)" in heading


def test_verdict_2_says_its_budgets_are_unmatched(page):
    text = page(full)
    assert "**shown at a 1,500-update cap; the budgets are unmatched (7,000 with warm-up)**" \
        in text
    assert "The budgets are unmatched: the no-warm-up cells stop at a 1,500-update cap" in text


def test_unscored_gpu_cells_say_they_need_a_gpu(page):
    def fill(data):
        full(data)
        folder = cell(data, "stability", "subln", "1", 0.0, GOOD, device="cuda")
        (folder / "cell.json").unlink()  # trained, cut off before its final test: no score
        summary = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**summary, "test": {}}))

    text = page(fill)
    assert "| Sub-LN | 1: – (GPU) | trained, not scored: its test needs a GPU " \
           "(`studies/depth/gpu.sh`), not scored this session |" in text
    assert "Scoring them needs a GPU (`studies/depth/gpu.sh`); they were not scored " \
           "this session." in text


REFS = study_depth.REFERENCES


@pytest.mark.skipif(not REFS.is_file(), reason="the Multi30k test2016 references are not here")
def test_the_committed_page_is_rendered_from_the_committed_cells(tmp_path, monkeypatch):
    """The verdicts of docs/study-depth.md are what the committed cells give under the rule."""
    monkeypatch.setattr(study_depth, "FIGURES", tmp_path / "study-depth")
    monkeypatch.setattr(study_depth.plots, "draw_all", lambda *a, **k: {})
    refs = REFS.read_text(encoding="utf-8").removesuffix("\n").split("\n")
    fresh = study_depth.render(study_depth.load_cells(), refs)
    committed = study_depth.REPORT.read_text(encoding="utf-8")

    def section(text: str) -> str:
        return text[text.index("## Verdicts"):text.index("### The papers' figures")]

    assert section(fresh) == section(committed)
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **indicated**" \
        in committed
    assert "| Admin (profiled) − Post-LN | +28.46 |" in committed


def test_one_seed_a_side_is_at_most_indicated_and_has_no_interval(page):
    def fill(data):
        full(data)
        for folder in (data / "stability").glob("seed-[23]_*"):
            for path in folder.iterdir():
                path.unlink()
            folder.rmdir()

    text = page(fill)
    assert "### 4. DeepNorm trains deep Post-LN where plain Post-LN fails: **indicated**" in text
    assert "DeepNorm 28.10 (one seed) vs Post-LN 1.20 (one seed): +26.90 BLEU, no 95% interval " \
           "(fewer than two seeds a side, or no spread), **indicated** (one seed a side" in text
