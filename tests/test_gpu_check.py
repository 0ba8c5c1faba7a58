"""``benchmarks/gpu_check.sh``, the prepared call a lent GPU machine runs first, checked here
without a GPU: its dry-run (every step's arguments checked, nothing measured), its time and
file budgets, the Python steps' parts that run on a CPU (each shape visited before timing,
the compile scopes, the throughput read back from a run's logs, the host syncs counted, the
summary with issue 61's goals and nulls where a step failed), so a lease is never spent on a
typo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_check.sh"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
sys.path.insert(0, str(BENCHMARKS))
import gpu_compile  # noqa: E402
import gpu_goals  # noqa: E402
import gpu_step  # noqa: E402
import gpu_summary  # noqa: E402
import gpu_syncs  # noqa: E402
import gpu_train  # noqa: E402
from common import first_visits, shape_of  # noqa: E402

CALL_S = 360  # one call's limit on the GPU machine, the install included
STEPS_S = 340  # what the steps' limits may take of it: the rest is the machine's start and exit
FILES_BACK = 8  # files that come back from $OUT
STEPS = ("install", "step", "train", "train-log1", "compile-layers", "compile-model", "peers",
         "summary", "tests")


def check(*args: str, out: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "WORK": str(out.parent / "work"),
           "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def script_limits() -> dict[str, int]:
    """Each step's limit as the script writes it (``step NAME SECONDS ...``)."""
    limits: dict[str, set[int]] = {}
    for name, seconds in re.findall(r"^\s*step ([\w-]+) (\d+) ", SCRIPT.read_text(),
                                    re.MULTILINE):
        limits.setdefault(name, set()).add(int(seconds))
    assert all(len(s) == 1 for s in limits.values()), limits  # a step has one limit
    return {name: s.pop() for name, s in limits.items()}


@pytest.mark.slow  # about 70 s on 2 busy cores: a python process per step, each importing torch
def test_the_dry_run_checks_every_step_and_measures_nothing(tmp_path: Path):
    out = tmp_path / "out"
    data = MULTI30K if (MULTI30K / "train.en").is_file() else tmp_path / "none"
    done = check("dry-run", out=out, DATA=str(data))
    log = (out / "gpu_check.log").read_text()
    for step in STEPS:
        assert f"== {step}: exit 0" in log, log[-3000:]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tests/test_gpu_schemes.py" in log  # the gpu-marked tests are the ones collected
    assert "size base (25000 tokens a batch), precision bf16, compile False" in log
    assert "bare step, eager: size base (25,000 tokens a batch), precision bf16" in log
    for scope in gpu_compile.SCOPES:  # through the recipe's key where this normzoo has it
        assert (f"bare step, compiled (trainer.compile's step), scope: "
                f"{gpu_compile.scope_plan(scope)}: size base" in log)
    assert "train  normzoo" in log and "train  x-transformers" in log
    assert "beam5" not in log and "greedy" not in log  # the peers step trains only
    assert "trainer.precision=bf16-mixed" in log and log.count("recipe valid") == 2
    assert "trainer.log_every_steps=10" in log and "trainer.log_every_steps=1 " in log
    assert "host syncs counted" in log and "train-log1-syncs.json" in log
    assert f"== limits: {sum(script_limits().values())} s of the call's {CALL_S} s" in log
    assert not list((out / "benchmarks" / "results").iterdir())  # nothing measured


def test_the_limits_sum_to_under_one_call_with_the_install():
    limits = script_limits()
    assert set(STEPS) == set(limits)
    order = re.findall(r"^\s*step ([\w-]+) \d+ ", SCRIPT.read_text(), re.MULTILINE)
    assert [s for s in dict.fromkeys(order) if s != "install"][-2:] == ["summary", "tests"]
    # Two shapes a scope: the whole model took 68 s to compile two on an H200 (2026-11-28).
    assert limits["compile-model"] >= 75 and limits["compile-layers"] >= 45
    assert sum(limits.values()) <= STEPS_S < CALL_S
    assert f"CALL_S={CALL_S}" in SCRIPT.read_text()
    assert f"The limits sum to {sum(limits.values())} s" in SCRIPT.read_text()  # the header
    for name, seconds in limits.items():  # and each step's entry in the header
        entry = rf"^#   {re.escape(name)} (?:(?!^#   \S).)*?\({seconds}\)$"
        assert re.search(entry, SCRIPT.read_text(), re.MULTILINE | re.DOTALL), name


def test_at_most_eight_files_come_back_at_most_two_folders_down():
    """What the script writes under $OUT: its log, and in benchmarks/results/ the reports the
    steps write (peers' and the summary's come as a Markdown/JSON pair)."""
    text = SCRIPT.read_text()
    assert set(re.findall(r'\$OUT/([\w.]+)', text)) == {"gpu_check.log", "benchmarks"}
    assert "results=$OUT/benchmarks/results" in text
    written = set(re.findall(r'"\$results/([\w.$-]+)"', text))
    assert written == {"peers-$slug.md", "gpu-profile-$slug.md", "gpu-check-$slug.json"}
    twins = {"peers-$slug.md", "gpu-check-$slug.json"}
    assert 1 + len(written) + len(twins) <= FILES_BACK
    # Everything else goes to $WORK, which does not come back.
    assert not re.search(r"--out \"\$OUT", text)


def test_the_summary_reads_what_the_steps_write():
    text = SCRIPT.read_text()
    written = set(re.findall(r'--out "\$WORK/([\w.-]+)"', text))
    read = {path.name for name, path in gpu_summary.inputs(
        Path("WORK"), Path("results"), "slug").items() if path.parent.name == "WORK"}
    assert written == read - {"steps.txt"}
    assert {"step-layers.json", "step-model.json", "train-log1.json"} <= written
    for scope in gpu_summary.SCOPES:  # each compile step in a cold cache of its own
        assert f'TORCHINDUCTOR_CACHE_DIR="$WORK/inductor-{scope}"' in text
        assert f"--compile --compile-scope {scope}" in text


def test_a_step_that_fails_fails_the_check_and_the_others_still_run(tmp_path: Path):
    done = subprocess.run(
        ["bash", "-c", f'source <(sed -n "/^step()/,/^}}/p" {SCRIPT}); OUT={tmp_path}; '
         f'WORK={tmp_path}; FAILED=0; TOTAL=0; step one 5 false; step two 5 true; '
         'step three 1 sleep 5; echo "failed=$FAILED total=$TOTAL"'],
        capture_output=True, text=True, timeout=60)
    assert "== one: exit 1" in done.stdout and "== two: exit 0" in done.stdout
    assert "== three: exit 124" in done.stdout  # its limit stopped it
    assert "failed=1 total=11" in done.stdout
    steps = gpu_summary.read_steps(tmp_path / "steps.txt")
    assert [(s["step"], s["outcome"], s["limit"]) for s in steps] == [
        ("one", "failed", 5), ("two", "ok", 5), ("three", "timed out", 1)]


def test_an_unknown_command_is_a_usage_error(tmp_path: Path):
    done = check("measure", out=tmp_path)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_prepare_ignores_its_folder_and_copies_the_data_it_needs():
    text = SCRIPT.read_text()
    assert 'exclude="$(git rev-parse --git-dir)/info/exclude"' in text
    assert 'echo "/$CHECK/" >> "$exclude"' in text
    assert '"$MULTI30K"/train.{en,de} "$MULTI30K"/val.{en,de} $CHECK/multi30k/' in text
    assert "DATA=${DATA:-$(pwd)/$CHECK/multi30k}" in text  # the run reads the carried copy


@pytest.mark.parametrize("bad", [["--frameworks", "nope"], ["--jobs", "sample"],
                                 ["--exclude", "train/nope"]])
def test_peers_refuses_a_framework_job_or_exclusion_it_does_not_have(bad: list[str]):
    done = subprocess.run([sys.executable, "benchmarks/peers.py", "--dry-run", *bad],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "choose from" in done.stderr


def test_first_visits_run_one_batch_of_each_shape_in_the_order_met():
    import torch

    def batch(rows: int, length: int, tokens: int) -> dict:
        return {"src": torch.zeros(rows, length), "ntokens": tokens}

    batches = [batch(4, 7, 20), batch(2, 9, 15), batch(4, 7, 25), batch(3, 5, 12)]
    ran = []
    costs = first_visits(batches, lambda b: ran.append(b["ntokens"]))
    assert ran == [20, 15, 12]  # the third batch has the first's shape: not visited again
    assert list(costs) == ["src 4x7", "src 2x9", "src 3x5"]
    assert all(ms >= 0 for ms in costs.values())
    assert shape_of(batches[0]) == shape_of(batches[2]) != shape_of(batches[1])


def test_the_bare_step_visits_every_shape_then_times_only_shapes_seen(tmp_path: Path):
    out, profile = tmp_path / "step.json", tmp_path / "profile.md"
    data = MULTI30K if (MULTI30K / "train.en").is_file() else tmp_path / "none"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_step.py", "--size", "tiny", "--max-tokens", "512",
         "--train-batches", "3", "--reps", "5", "--threads", "1", "--data", str(data),
         "--batches", str(tmp_path / "batches.pt"), "--profile", str(profile),
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "NORMZOO_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["phase"] == "done" and result["batches"] == 3
    assert 1 <= result["shapes"] == len(result["first_visit_ms"]) <= 3
    assert result["first_visit_ms_max"] == max(result["first_visit_ms"].values())
    assert len(result["samples"]) == 5 and result["tokens_per_s"] > 0
    assert result["flops_per_target_token"] > 6 * result["params"]  # plus encoder, attention
    assert result["mfu"] is None  # no GPU, no peak
    assert (tmp_path / "batches.pt").is_file()  # kept for the compiled run
    table = profile.read_text()
    assert table.count("\n| `") == 20 and "ms per step" in table


def test_the_throughput_of_a_run_is_read_after_its_first_epoch():
    def row(step: int, epoch: int, lengths: float, seconds: float, mfu: str = "") -> dict:
        return {"step": str(step), "epoch": str(epoch), "train/lengths": str(lengths),
                "train/time": str(seconds), "train/device/mfu": mfu}

    rows = [row(0, 0, 100, 1.0), row(1, 0, 200, 5.0),  # first visits: slow
            {"step": "1", "epoch": "0", "val/loss": "9.5"},
            row(2, 1, 300, 5.5, "0.2"), row(3, 1, 400, 6.0, "0.4"), row(4, 1, 500, 6.5, "0.3")]
    seen = gpu_train.throughput(rows, steps=5)
    assert seen["tokens_per_s"] == pytest.approx(200 / 1.0)
    assert seen["mfu"] == pytest.approx(0.35)  # the steps after the window's first
    assert seen["tokens_per_s_all"] == pytest.approx(400 / 5.5)
    assert "after the first epoch" in seen["window"]
    one_epoch = [row(s, 0, 100 * (s + 1), float(s + 1)) for s in range(6)]
    half = gpu_train.throughput(one_epoch, steps=6)
    assert half["window"].startswith("steps 3-5") and half["tokens_per_s"] == pytest.approx(100)


@pytest.mark.skipif(not (MULTI30K / "train.en").is_file(), reason="needs ../shared/data")
def test_the_train_step_validates_its_recipe_and_data_without_training(
        tmp_path: Path, capsys: pytest.CaptureFixture):
    args = ["--data", str(MULTI30K), "--out", str(tmp_path / "train.json"), "--dry-run"]
    assert gpu_train.main(args) == 0
    printed = capsys.readouterr().out
    assert "data.max_tokens=25000" in printed and "trainer.accumulate=1" in printed
    assert "trainer.log_every_steps=10" in printed and "host syncs" not in printed
    assert "recipe valid" in printed and not (tmp_path / "train.json").exists()
    assert gpu_train.main([*args, "--log-every", "1", "--count-syncs"]) == 0
    printed = capsys.readouterr().out
    assert "trainer.log_every_steps=1 " in printed
    assert "host syncs counted: the same command line run by gpu_train.py --syncs-child" \
        in printed and str(tmp_path / "train-syncs.json") in printed
    assert gpu_train.main(["--data", str(tmp_path), "--out", str(tmp_path / "t.json"),
                           "--dry-run"]) == 2  # no Multi30k there


def test_counting_syncs_runs_the_same_command_in_a_process_of_the_script(tmp_path: Path):
    args = gpu_train.parse_args(["--out", str(tmp_path / "t.json"), "--log-every", "1"])
    plain = gpu_train.command(args)
    assert plain[1:4] == ["-m", "normzoo", "train"]
    args.count_syncs = True
    counting = gpu_train.command(args)
    assert counting[1:4] == [str(BENCHMARKS / "gpu_train.py"), "--syncs-child",
                             str(tmp_path / "t-syncs.json")]
    assert counting[4:] == plain[3:]  # normzoo's own arguments, unchanged
    import normzoo.run.training as training

    assert callable(training.build_trainer)  # where the child adds its callbacks
    # No counts written (the child failed before training): nulls and why.
    assert gpu_syncs.read_syncs(tmp_path / "none.json")["syncs_per_step"] is None


def _sync_warning() -> None:
    warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_the_sync_log_counts_torch_sync_warnings_with_where_and_lets_others_pass():
    shown: list[str] = []
    log = gpu_syncs.SyncLog()
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *args: shown.append(str(message))
        log.install()
        try:
            log.step, log.steps = 3, 1
            for _ in range(3):  # one line three times: each counted, not once a line
                _sync_warning()
            warnings.warn("something else", UserWarning, stacklevel=1)
        finally:
            log.uninstall()
    assert shown == ["something else"]  # shown as before; the syncs are not
    report = log.report()
    assert report["syncs"] == 3 and report["syncs_per_step"] == 3.0
    [where] = report["syncs_where"]
    assert where["count"] == 3 and where["first_step"] == 3
    assert where["frames"][0].startswith("tests/test_gpu_check.py:")
    assert where["frames"][0].endswith(" _sync_warning")
    assert len(where["frames"]) == gpu_syncs.FRAMES


def _trainer(device: str, step: int) -> SimpleNamespace:
    return SimpleNamespace(global_step=step,
                           strategy=SimpleNamespace(root_device=SimpleNamespace(type=device)))


def test_the_sync_callbacks_watch_each_batch_after_the_first(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    import torch

    modes: list[str] = ["default"]
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    out = tmp_path / "syncs.json"
    ended: list[int] = []
    task = SimpleNamespace(on_train_batch_end=lambda outputs, batch, i: ended.append(i))
    opens, closes = gpu_syncs.sync_callbacks(out)
    opens.on_train_start(_trainer("cuda", 0), task)
    for step, syncs in enumerate([5, 0, 2, 0]):  # the first batch's five are not watched
        trainer = _trainer("cuda", step)
        opens.on_train_batch_start(trainer, task, None, step)
        for _ in range(syncs):
            if modes[-1] == "warn":  # as torch warns: only in the detector's warn mode
                _sync_warning()
        task.on_train_batch_end(None, None, step)  # the task's hook, after the callbacks'
        assert modes[-1] == "default"
    closes.on_train_end(_trainer("cuda", 4), task)
    assert modes[1:] == ["warn", "default"] * 3 and ended == [0, 1, 2, 3]
    report = json.loads(out.read_text())
    assert report["syncs"] == 2 and report["syncs_steps_counted"] == 3
    assert report["syncs_per_step"] == pytest.approx(2 / 3)
    assert report["syncs_where"][0]["first_step"] == 2
    assert warnings.showwarning is not None and not any(  # the filter went with the run
        f[1] is not None and "synchronizing" in f[1].pattern for f in warnings.filters)


def test_without_a_gpu_the_sync_callbacks_count_nothing_and_say_so(tmp_path: Path):
    out = tmp_path / "syncs.json"
    opens, closes = gpu_syncs.sync_callbacks(out)
    task = SimpleNamespace(on_train_batch_end=lambda outputs, batch, i: None)
    hook = task.on_train_batch_end
    opens.on_train_start(_trainer("cpu", 0), task)
    assert task.on_train_batch_end is hook  # not wrapped
    for step in range(3):
        opens.on_train_batch_start(_trainer("cpu", step), task, None, step)  # no CUDA call
    closes.on_train_end(_trainer("cpu", 3), task)
    report = json.loads(out.read_text())
    assert report["syncs_per_step"] is None and report["syncs_steps_counted"] == 0
    assert report["syncs_note"].startswith("no GPU")


def test_each_compile_scope_goes_through_the_recipe_where_it_has_the_key(
        monkeypatch: pytest.MonkeyPatch):
    from frameworks import SIZES

    from normzoo.tasks import compiled

    monkeypatch.setattr(compiled, "BACKEND", "eager")
    tiny = SIZES["tiny"]
    keyed = gpu_compile.has_compile_scope()
    setup, applied = gpu_compile.scoped_setup(tiny, 500, "model")
    assert applied.startswith("model: the loss and the model as one region")
    setup, applied = gpu_compile.scoped_setup(tiny, 500, "layers")
    if keyed:
        assert applied.startswith("layers: ") and "regions a shape" in applied
        assert "trainer.compile_scope=layers" in applied
    # A normzoo without the key: each layer compiled in place, the loss eager.
    monkeypatch.setattr(gpu_compile, "has_compile_scope", lambda: False)
    setup, applied = gpu_compile.scoped_setup(tiny, 500, "layers")
    layers = gpu_compile.stack_layers(setup.model)
    assert len(layers) == 2 * tiny.layers
    assert applied.startswith(f"layers: {len(layers)} layers compiled in place")
    assert all(layer._compiled_call_impl is not None for layer in layers)
    assert "no trainer.compile_scope" in gpu_compile.scope_plan("model")


def test_a_compile_scope_needs_compile():
    with pytest.raises(SystemExit):
        gpu_step.parse_args(["--out", "x.json", "--compile-scope", "layers"])
    assert gpu_step.parse_args(["--out", "x.json", "--compile", "--compile-scope",
                                "model"]).compile_scope == "model"


def test_each_first_visit_of_a_compiled_step_is_a_shape_s_compile():
    figures = gpu_compile.compile_per_shape([30_000.0, 4_000.0, 80.0], [4, 2, 0])
    assert figures["compile_s"] == pytest.approx(34.0)  # the visits that compiled
    assert figures["compile_s_first"] == pytest.approx(30.0)
    assert figures["compile_s_new_shape"] == pytest.approx(4.0)  # the slowest after the first
    assert gpu_compile.compile_per_shape([30_000.0], [4])["compile_s_new_shape"] is None


def test_the_bare_step_compiles_by_layers_on_a_cpu(tmp_path: Path):
    """The compile steps' path on a CPU, TorchDynamo tracing without inductor's code."""
    out = tmp_path / "layers.json"
    data = MULTI30K if (MULTI30K / "train.en").is_file() else tmp_path / "none"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_step.py", "--size", "tiny", "--max-tokens", "512",
         "--train-batches", "2", "--reps", "1", "--warmup", "0", "--threads", "1",
         "--compile", "--compile-scope", "layers", "--backend", "eager", "--data", str(data),
         "--batches", str(tmp_path / "batches.pt"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "NORMZOO_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["phase"] == "done" and result["compile_scope"] == "layers"
    assert result["scope_applied"].startswith("layers: ")
    assert result["compiles"] >= 1 and result["compile_s_first"] > 0
    assert len(result["compile_s_per_visit"]) == result["shapes"]
    assert list(result["compile_s_per_shape"]) == list(result["first_visit_ms"])
    assert result["tokens_per_s"] > 0 and result["model_flops_per_s"] > 0
    assert "a new shape after the first" in done.stdout


def test_the_summary_has_every_key_null_where_steps_left_nothing(tmp_path: Path):
    results = tmp_path / "results"
    (tmp_path / "steps.txt").write_text("peers 1 80 75\ncompile-model 124 75 75\n")
    assert gpu_summary.main(["--work", str(tmp_path), "--results", str(results),
                             "--slug", "cpu", "--out", str(results / "gpu-check-cpu.json")]) == 0
    summary = json.loads((results / "gpu-check-cpu.json").read_text())
    for key in gpu_summary.KEYS:
        assert key in summary and summary[key] is None, key
    for key in ("step_mfu", "step_mfu_layers", "step_mfu_model", "train_mfu",
                "train_vs_step", "train_vs_step_log1", "syncs_per_step",
                "compile_s_new_shape_layers", "compiled_vs_eager_model", "first_visit_ms_max",
                "greedy_vs_generate", "step_mfu_6nd"):
        assert key in gpu_summary.KEYS
    assert {g["verdict"] for g in summary["goals"]} == {"unmeasured"}
    assert len(summary["goals"]) == len(gpu_goals.GOALS) == 10
    assert summary["failed"] == ["peers", "compile-model"]
    assert "3 x forward" in summary["mfu_definition"] and "real" in summary["mfu_definition"]
    report = (results / "gpu-check-cpu.md").read_text()
    assert "| compile-model | timed out | 124 |" in report and "n/a" in report
    assert "| 0 host synchronisations per training step | n/a | unmeasured |" in report
    assert "generate" not in report.split("## Goals")[0]  # decoding not run: no row


STEP = {"tokens_per_s": 100_000.0, "mfu": 0.30, "mfu_6nd": 0.20, "mfu_padded": 0.35,
        "model_flops_per_s": 3.0e14, "first_visit_ms_max": 4300.0,
        "first_visit_ms": {"src 8x9": 4300.0}, "peak_flops": 989e12}
LAYERS = {"tokens_per_s": 150_000.0, "mfu": 0.45, "mfu_6nd": 0.30, "model_flops_per_s": 4.5e14,
          "compile_s": 14.0, "compile_s_first": 10.0, "compile_s_new_shape": 4.0,
          "compile_s_per_shape": {"src 8x9": 10.0, "src 4x20": 4.0}, "compiles": 12,
          "scope_applied": "layers: 6 regions a shape", "recompile_reasons": ["duck sizing"]}
# Stopped by its limit in the second first visit: the first visit's figures alone.
MODEL = {"first_visits_done_ms": [35_000.0], "compile_s": 35.0, "phase": "first visits",
         "stopped": "stopped by its time limit in first visits, 80 s after it started"}


def test_the_summary_sets_each_figure_beside_its_source():
    train = {"tokens_per_s": 92_000.0, "mfu": 0.25, "mfu_6nd": 0.16, "window": "steps 29-49"}
    train_log1 = {"tokens_per_s": 80_000.0, "mfu": 0.22, "window": "steps 21-49",
                  "syncs_per_step": 0.0, "syncs_steps_counted": 49, "syncs_where": []}
    peers = {"results": [
        {"job": "train", "framework": "normzoo", "first_visit_ms_max": 900.0},
        {"job": "train", "framework": "x-transformers", "normzoo_over_this": 0.9}]}
    s = gpu_summary.summarise([], STEP, {"layers": LAYERS, "model": MODEL}, train, train_log1,
                              peers, None)
    assert s["step_mfu"] == 0.30 and s["step_mfu_layers"] == 0.45 and s["train_mfu"] == 0.25
    assert s["train_vs_step"] == pytest.approx(0.92)
    assert s["train_vs_step_log1"] == pytest.approx(0.80)
    assert s["compiled_vs_eager_layers"] == pytest.approx(1.5)  # per model FLOP
    assert s["compile_s_new_shape_layers"] == 4.0 and s["compile_s_first_layers"] == 10.0
    assert s["compile_s_first_model"] == 35.0 and s["compile_s_new_shape_model"] is None
    assert s["step_tokens_per_s_model"] is None and s["compiled_vs_eager_model"] is None
    assert s["syncs_per_step"] == 0.0 and s["syncs_steps_counted"] == 49
    assert s["greedy_vs_generate"] is None and s["normzoo_vs_x_transformers"] == 0.9
    assert s["peers_first_visit_ms_max"] == 900.0 and s["first_visit_ms_max"] == 4300.0
    assert s["stopped"] == {"compile-model": MODEL["stopped"]}
    verdicts = {g["figure"]: g["verdict"] for g in s["goals"]}
    assert verdicts == {
        "train_vs_step": "met", "train_vs_step_log1": "not met", "syncs_per_step": "met",
        "step_mfu": "met", "compiled_vs_eager_layers": "met",
        "compiled_vs_eager_model": "unmeasured", "compile_s_new_shape_layers": "met",
        "compile_s_new_shape_model": "unmeasured", "step_mfu_layers": "met",
        "step_mfu_model": "unmeasured"}
    lines = "\n".join(gpu_summary.report_lines(
        s, {"cpu": "x", "cores": 1, "threads": 1, "gpu": "H100", "python": "3",
            "versions": {}, "date": "today"}, "nvidia-h100"))
    assert "| normzoo train, logging every 10 steps: target tokens/s | 92,000 | 0.92x" in lines
    assert "| compile (layers): a new shape | 4.00 s | the first 10.00 s; 12 compiles |" in lines
    assert "| MFU >= 30% compiled (layers) | 45.0% | met |" in lines
    assert "| normzoo train >= 0.85x the bare step, logging every step | 0.80 | not met |" \
        in lines
    assert "MFU 30.0% (6ND 20.0%, padded 35.0%)" in lines and "`duck sizing`" in lines
    assert "compiled, layers: layers: 6 regions a shape" in lines
    assert "compile-model: stopped by its time limit in first visits" in lines


def test_the_summary_says_where_the_steps_synchronised():
    where = [{"count": 49, "first_step": 1,
              "frames": ["normzoo/diagnostics/callbacks.py:120 on_before_optimizer_step",
                         "lightning/pytorch/core/module.py:900 optimizer_step"]}]
    s = gpu_summary.summarise([], STEP, {}, None, {"syncs_per_step": 1.0, "syncs_where": where,
                                                   "syncs_steps_counted": 49}, None, None)
    assert next(g for g in s["goals"] if g["figure"] == "syncs_per_step")["verdict"] == \
        "not met"
    lines = "\n".join(gpu_summary.report_lines(
        s, {"cpu": "x", "cores": 1, "threads": 1, "gpu": "H100", "python": "3",
            "versions": {}, "date": "today"}, "nvidia-h100"))
    assert ("- 49 x (first at step 1): `normzoo/diagnostics/callbacks.py:120 "
            "on_before_optimizer_step` < `lightning/pytorch/core/module.py:900 optimizer_step`"
            in lines)


def test_the_repository_ignores_what_prepare_makes_and_carries_little():
    """Where ``prepare`` ran here: its folder is ignored (so it travels only when carried), its
    wheels are WHEELS and normzoo, and the call carries well under 64 MiB."""
    check = ROOT / ".gpu-check"
    if not (check / "whl").is_dir():
        pytest.skip("bash benchmarks/gpu_check.sh prepare has not run here")
    import gpu_packages

    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu-check/whl"], cwd=ROOT)
    assert ignored.returncode == 0
    assert gpu_packages.wheel_problems(check / "whl", gpu_packages.script_wheels()) == []
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    repo = sum((ROOT / p).stat().st_size for p in listed.stdout.split("\0")
               if p and (ROOT / p).is_file())
    carried = sum(p.stat().st_size for p in check.rglob("*") if p.is_file())
    wheels = sum(p.stat().st_size for p in (check / "whl").glob("*.whl"))
    assert wheels < 16 * 2**20
    assert repo + carried < 48 * 2**20  # of 64 MiB: room for the repository to grow
