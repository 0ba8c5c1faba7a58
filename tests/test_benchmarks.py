"""The benchmark commands run on their tiny configurations and write complete reports.

Only that they run and report finite positive numbers for every framework: no timing
assertions (speed depends on the machine, and the test suite is no benchmark).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from frameworks import DECODERS, TRAINERS  # noqa: E402
from norms import CASES  # noqa: E402
from peers import SEARCHES  # noqa: E402
from quality import RECIPES  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def run(script: str, out: Path, *args: str) -> tuple[str, dict]:
    """Run ``benchmarks/script`` on one thread; its Markdown report and the JSON beside it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NORMZOO_CACHE": str(out.parent / "cache")}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--threads", "1", "--out", str(out), *args],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text(encoding="utf-8"), json.loads(out.with_suffix(".json").read_text())


def positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_peers_measures_every_framework(tmp_path: Path):
    markdown, data = run("peers.py", tmp_path / "peers.md", "--size", "tiny", "--reps", "2",
                         "--warmup", "1")
    rows = {(r["job"], r["framework"]): r for r in data["results"]}
    expected = [("train", name) for name in TRAINERS]
    expected += [(search, name) for search in SEARCHES for name in DECODERS]
    assert sorted(rows) == sorted(expected)
    for row in rows.values():
        assert "error" not in row, row.get("error")
        assert positive(row["rate"]["median"]) and positive(row["normzoo_over_this"])
        assert positive(row["params"]) and len(row["samples"]) == 2
        assert math.isfinite(row["peak_rss_mib"]) and row["peak_rss_mib"] >= 0
        assert row["label"] in markdown
    for name in TRAINERS:  # every shape visited before the timed steps, and reported apart
        row = rows["train", name]
        assert row["first_visit_ms"] and all(positive(ms) for ms in row["first_visit_ms"].values())
        assert row["first_visit_ms_max"] == max(row["first_visit_ms"].values())
        assert len(row["model_flops"]) == 2 and all(positive(f) for f in row["model_flops"])
    for search in SEARCHES:  # the same work on both sides: every sentence gets the same length
        generated = {rows[search, name]["generated_tokens"] for name in DECODERS}
        assert len(generated) == 1 and positive(generated.pop())
    assert data["machine"]["threads"] == 1 and "Decoding" in markdown


def test_norms_compares_every_norm_with_plain_pytorch(tmp_path: Path):
    markdown, data = run("norms.py", tmp_path / "norms.md", "--size", "tiny", "--reps", "2",
                         "--calls", "2")
    assert len(data["results"]) == len(CASES)
    for row, (name, _) in zip(data["results"], CASES, strict=True):
        assert row["norm"].startswith(name) and f"| {row['norm']} |" in markdown
        assert positive(row["normzoo_us"]) and positive(row["plain_us"])
        assert row["max_abs_difference"] < 1e-4  # the "equivalent" computes the same thing


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_quality_trains_every_recipe_within_its_budget(tmp_path: Path):
    markdown, data = run("quality.py", tmp_path / "quality.md", "--tiny", "--budget-min", "2")
    assert [r["scheme"] for r in data["results"]] == list(RECIPES)
    for row in data["results"]:
        summary = row["summary"]
        assert summary["steps"] == 20 and positive(row["cpu_s"])
        assert math.isfinite(summary["test"]["bleu"]) and summary["test"]["bleu"] >= 0
        assert f"`{row['recipe']}`" in markdown


def test_sweep_jobs_labels_threads_from_the_cells_records() -> None:
    """The report names each cell's threads as its summary.json recorded them, not as the
    machine's core count divided by the jobs (wrong on any machine but an unrestricted one)."""
    import sweep_jobs

    model = {"steps": 3, "overrides": [], "wall_s": {1: [10.0], 2: [7.0]},
             "median_s": {1: 10.0, 2: 7.0}, "cell_median_s": {1: 4.0, 2: 6.0},
             "thread_scaling": 1.5, "speedup": 10 / 7, "bound": 2 / 1.5,
             "threads": {1: [8], 2: [4]}, "results_md": "| seed | ... |"}
    record = {"repeats": 1, "cores": 8, "machine": {"cpu": "Some CPU (family 1, model 2)"},
              "models": {"micro": model}}
    text = "\n".join(sweep_jobs.render(record))
    assert "8 usable cores (Some CPU (family 1, model 2))" in text
    assert "| micro | 3 | 1 | 10.0 | 10.0 | 4.0 (8 threads) |" in text
    assert "| micro | 3 | 2 | 7.0 | 7.0 | 6.0 (4 threads) |" in text
    assert "4.0 s on 8 threads and 6.0 s on 4 threads" in text
    assert "1.43x faster" in text


@pytest.mark.parametrize("args", [["--repeats", "0"], ["--models", "micro,huge"]])
def test_sweep_jobs_refuses_bad_arguments_before_running(args: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "sweep_jobs.py"), *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow  # in `-m slow`: keeps the default run under 15 minutes on 2 cores
def test_scheme_cost_times_each_scheme_against_pre_ln(tmp_path: Path):
    text, data = run("scheme_cost.py", tmp_path / "cost.md", "--rounds", "1", "--steps", "1",
                     "--schemes", "HC (n = 4)")
    assert set(data["schemes"]) == {"Pre-LN", "HC (n = 4)"}
    for figures in data["schemes"].values():
        assert all(positive(ms) for ms in figures["ms_per_step"]) and figures["params"] > 0
    assert "| HC (n = 4) |" in text and "/ Pre-LN" in text and "CPU:" in text


def test_step_profile_splits_a_step_by_phase_and_category(tmp_path: Path):
    quickstart = BENCHMARKS.parent / "recipes" / "quickstart.yaml"
    text, data = run("step_profile.py", tmp_path / "profile.md", "--steps", "1", "--recipe",
                     str(quickstart), "model.encoder_layers=1", "model.decoder_layers=1",
                     "data.max_tokens=256")
    assert set(data["results"]) == {"fp32", "bf16"}
    for result in data["results"].values():
        phases = result["phases"]
        assert set(phases) == {"forward", "backward", "optimizer"}
        assert all(positive(phases[p]["matrix products"]) for p in ("forward", "backward"))
        assert positive(phases["optimizer"]["optimizer kernels"])
        total = sum(sum(c.values()) for c in phases.values())
        assert math.isclose(total, result["step_ms"], rel_tol=1e-9)
        assert sum(op["ms"] for op in result["ops"]) == pytest.approx(total)
    assert "| matrix products |" in text and "AMX:" in text and "--recipe" in text


def test_precision_allocator_pairs_each_arm_going_first_and_reports_identical_losses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import precision
    from precision_allocator import ARMS

    calls = []

    def fake_train(precision_, steps, threads, data, run_dir, extra=(), env_extra=None):
        calls.append((precision_, dict(env_extra or {})))
        fast = 1.1 if not env_extra else 1.0  # reuse is the arm without an environment
        return {"precision": precision_, "compiles": None, "val_loss": 7.0,
                "tokens_per_s": (3000.0 if precision_ == "32-true" else 6000.0) * fast,
                "steps_timed": 50, "wall_s": 1.0, "peak_rss_mb": 900}

    monkeypatch.setattr(precision, "train_once", fake_train)
    args = precision.parse_args(["--allocator", "--pairs", "4", "--steps", "60"])
    runs = precision.measure_training(args)
    assert len(runs) == 16
    firsts = [runs[i]["arm"] for i in range(0, 16, 4)]
    assert sorted(firsts) == sorted(ARMS)  # every arm leads one round
    assert {c[1].get("NORMZOO_CPU_MALLOC") for c in calls} == {"system", None}
    summary = precision.summarise_allocator(runs)
    assert summary["fp32_reuse_over_system"]["median"] == pytest.approx(1.1)
    assert summary["bf16_over_fp32_reuse"] == pytest.approx(2.0)
    info = {"cpu": "cpu", "cores": 2, "threads": 1, "gpu": None, "python": "3", "versions": {},
            "date": "today"}
    text = "\n".join(precision.allocator_report(args, info, runs, summary))
    assert "fp32: reuse / system 1.10x" in text and "identical in every round" in text


def test_precision_before_runs_the_earlier_code_and_says_whether_now_is_slower(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import precision

    calls = []

    def fake_train(precision_, steps, threads, data, run_dir, extra=(), env_extra=None):
        before = "PYTHONPATH" in (env_extra or {})
        calls.append((precision_, (env_extra or {}).get("PYTHONPATH")))
        rate = 3000.0 if precision_ == "32-true" else 6000.0
        if precision_ == "bf16-mixed" and not before:
            rate *= 0.9  # made slower now
        return {"precision": precision_, "compiles": None, "val_loss": 7.0,
                "tokens_per_s": rate, "steps_timed": 50, "wall_s": 1.0, "peak_rss_mb": 900}

    monkeypatch.setattr(precision, "train_once", fake_train)
    args = precision.parse_args(["--before", str(tmp_path), "--pairs", "4", "--steps", "60"])
    runs = precision.measure_training(args, precision.before_arms(args.before))
    assert len(runs) == 16
    assert {path for _, path in calls} == {str(tmp_path.resolve()), None}
    assert len({runs[i]["arm"] for i in range(0, 16, 4)}) == 4  # every arm leads one round
    summary = precision.summarise_before(runs)
    assert not summary["32-true"]["slower"] and summary["32-true"]["ratio_median"] == 1.0
    assert summary["bf16-mixed"]["slower"]
    info = {"cpu": "cpu", "cores": 2, "threads": 1, "gpu": None, "python": "3", "versions": {},
            "date": "today"}
    text = "\n".join(precision.before_report(args, info, runs, summary))
    assert "32-true: now / before **1.00x**" in text and "**slower** in every pair" in text


@pytest.mark.parametrize("name", sorted(TRAINERS))
def test_peers_compile_the_model_with_its_loss_and_change_no_number(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Traced with the "eager" backend: the same graphs and guards as inductor's, without its
    # minutes of C++ generation on a CPU.
    import frameworks
    import torch

    from normzoo.tasks import compiled as normzoo_compiled

    monkeypatch.setattr(normzoo_compiled, "BACKEND", "eager")
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile",
                        lambda fn, **kw: real_compile(fn, **{**kw, "backend": "eager"}))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # so that only this test's compiles count
    size = frameworks.SIZES["tiny"]
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, size.vocab_size, (3, 7), generator=gen)
    tgt = torch.randint(4, size.vocab_size, (3, 6), generator=gen)
    batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:], "ntokens": 15}
    losses = []
    for compiled in (False, True):
        torch.manual_seed(0)
        setup = TRAINERS[name].build(size, size.vocab_size, compiled=compiled)
        setup.model.eval()  # no dropout: its masks differ under the compiler
        total, count = setup.loss_terms(batch)
        losses.append((total.item(), count.item()))
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-4)
    assert torch._dynamo.utils.counters["frames"]["ok"] >= 1  # the compiled region ran


@pytest.mark.slow  # inductor generates C++ for eight cases: about a minute on 2 cores
def test_compile_masks_reports_every_case_eager_and_compiled(tmp_path: Path):
    text, data = run("compile_masks.py", tmp_path / "masks.md", "--rounds", "1", "--reps", "1")
    assert len(data["ms"]) == 8
    assert all(positive(v) for times in data["ms"].values() for v in times)
    for case in ("comparison to bool", "comparison to float", "FFN sublayer, boolean masks",
                 "FFN sublayer, normzoo's"):
        assert case in text


@pytest.mark.slow  # five processes, about 80 s on 2 cores: kept out of the default run
def test_compile_regions_times_every_arm_and_reports_it(tmp_path: Path):
    """The quick start's model made small, traced by TorchDynamo's eager backend (inductor's
    C++ would take minutes): every arm reports its first step, its new shapes and a steady
    rate, and the compiled arms their compiles."""
    quickstart = BENCHMARKS.parent / "recipes" / "quickstart.yaml"
    text, data = run("compile_regions.py", tmp_path / "regions.md", "--backend", "eager",
                     "--steps", "1", "--shapes", "2", "--interleave", "2", "--recipe",
                     str(quickstart),
                     "model.encoder_layers=2", "model.decoder_layers=1", "data.max_tokens=256")
    assert [r["arm"] for r in data["runs"]] == ["eager", "model", "layers"]
    for row in data["runs"]:
        assert positive(row["to_first_step_s"]) and positive(row["steady_tokens_per_s"])
        assert len(row["shapes"]) == 2 and row["steady_steps"] == 1
        assert (row["compiles"] > 0) == (row["arm"] != "eager")
    assert set(data["summary"]) == {"eager", "model", "layers"}
    mixed = data["interleaved"]
    assert all(len(mixed["step_s"][arm]) == 2 for arm in ("eager", "model", "layers"))
    assert positive(mixed["layers_over_model"]) and positive(mixed["over_eager"]["layers"])
    assert "| layers |" in text and "--backend eager" in text and "in turn" in text
