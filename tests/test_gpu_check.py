"""``benchmarks/gpu_check.sh``, the prepared call a lent GPU machine runs first, checked here
without a GPU: its dry-run (every step's arguments checked, nothing measured), its time and
file budgets, the Python steps' parts that run on a CPU (each shape visited before timing,
the throughput read back from a run's logs, the summary with nulls where a step failed), so a
lease is never spent on a typo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_check.sh"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
sys.path.insert(0, str(BENCHMARKS))
import gpu_summary  # noqa: E402
import gpu_train  # noqa: E402
from common import first_visits, shape_of  # noqa: E402

CALL_S = 360  # one call's limit on the GPU machine, the install included
FILES_BACK = 8  # files that come back from $OUT


def check(*args: str, out: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "WORK": str(out.parent / "work"),
           "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def script_limits() -> dict[str, int]:
    """Each step's limit as the script writes it (``step NAME SECONDS ...``)."""
    limits: dict[str, set[int]] = {}
    for name, seconds in re.findall(r"^\s*step (\w+) (\d+) ", SCRIPT.read_text(), re.MULTILINE):
        limits.setdefault(name, set()).add(int(seconds))
    assert all(len(s) == 1 for s in limits.values()), limits  # a step has one limit
    return {name: s.pop() for name, s in limits.items()}


@pytest.mark.slow  # about 20 s on 2 cores: a python process per step, each importing torch
def test_the_dry_run_checks_every_step_and_measures_nothing(tmp_path: Path):
    out = tmp_path / "out"
    data = MULTI30K if (MULTI30K / "train.en").is_file() else tmp_path / "none"
    done = check("dry-run", out=out, DATA=str(data))
    log = (out / "gpu_check.log").read_text()
    attention = (BENCHMARKS / "attention_backends.py").is_file()
    steps = ["install", "tests", "peers", "step", "compile", "train", "summary"]
    for step in steps + (["attention"] if attention else []):
        assert f"== {step}: exit 0" in log, log[-3000:]
    if not attention:  # not written yet: the step must still name it as the issue has it
        assert ('benchmarks/attention_backends.py --out "$results/attention-$slug.json"'
                in SCRIPT.read_text())
    assert done.returncode == (0 if attention else 2), done.stdout[-3000:] + done.stderr[-3000:]
    assert "tests/test_gpu_schemes.py" in log  # the gpu-marked tests are the ones collected
    assert "size base (25000 tokens a batch), precision bf16, compile False" in log
    assert "bare step, eager: size base (25,000 tokens a batch), precision bf16" in log
    assert "bare step, compiled (trainer.compile's step)" in log
    assert "train  normzoo" in log and "train  x-transformers" in log
    assert "beam5  transformers" in log and "train  transformers" not in log
    assert "trainer.precision=bf16-mixed" in log and "recipe valid" in log
    assert f"== limits: {sum(script_limits().values())} s of the call's {CALL_S} s" in log
    assert not list((out / "benchmarks" / "results").iterdir())  # nothing measured


def test_the_limits_sum_to_under_one_call_with_the_install():
    limits = script_limits()
    assert {"install", "tests", "peers", "step", "compile", "train", "attention",
            "summary"} <= set(limits)
    assert limits["attention"] <= 60 and limits["compile"] >= 90  # two shapes compile
    assert sum(limits.values()) < CALL_S
    assert f"CALL_S={CALL_S}" in SCRIPT.read_text()


def test_at_most_eight_files_come_back_at_most_two_folders_down():
    """What the script writes under $OUT: its log, and in benchmarks/results/ the reports the
    steps write (peers', the summary's and attention's come as a Markdown/JSON pair)."""
    text = SCRIPT.read_text()
    assert set(re.findall(r'\$OUT/([\w.]+)', text)) == {"gpu_check.log", "benchmarks"}
    assert "results=$OUT/benchmarks/results" in text
    written = set(re.findall(r'"\$results/([\w.$-]+)"', text))
    assert written == {"peers-$slug.md", "gpu-profile-$slug.md", "attention-$slug.json",
                       "gpu-check-$slug.json"}
    twins = {"peers-$slug.md", "attention-$slug.json", "gpu-check-$slug.json"}
    assert 1 + len(written) + len(twins) <= FILES_BACK
    # Everything else goes to $WORK, which does not come back.
    assert not re.search(r"--out \"\$OUT", text)


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
    assert "recipe valid" in printed and not (tmp_path / "train.json").exists()
    assert gpu_train.main(["--data", str(tmp_path), "--out", str(tmp_path / "t.json"),
                           "--dry-run"]) == 2  # no Multi30k there


def test_the_summary_has_every_key_null_where_steps_left_nothing(tmp_path: Path):
    results = tmp_path / "results"
    (tmp_path / "steps.txt").write_text("peers 1 80 75\ncompile 124 75 75\n")
    assert gpu_summary.main(["--work", str(tmp_path), "--results", str(results),
                             "--slug", "cpu", "--out", str(results / "gpu-check-cpu.json")]) == 0
    summary = json.loads((results / "gpu-check-cpu.json").read_text())
    for key in ("step_mfu", "step_mfu_compiled", "train_mfu", "first_visit_ms_max",
                "greedy_vs_generate", "beam_vs_generate", "step_mfu_6nd"):
        assert key in summary and summary[key] is None
    assert summary["failed"] == ["peers", "compile"]
    assert "3 x forward" in summary["mfu_definition"] and "real" in summary["mfu_definition"]
    report = (results / "gpu-check-cpu.md").read_text()
    assert "| compile | timed out | 124 |" in report and "n/a" in report


def test_the_summary_sets_each_figure_beside_its_source():
    step = {"tokens_per_s": 100_000.0, "mfu": 0.30, "mfu_6nd": 0.20, "mfu_padded": 0.35,
            "first_visit_ms_max": 4300.0, "first_visit_ms": {"src 8x9": 4300.0},
            "peak_flops": 989e12}
    compiled = {"tokens_per_s": 150_000.0, "mfu": 0.45, "mfu_6nd": 0.30, "compile_s": 61.0,
                "compiles": 2, "recompile_reasons": ["duck sizing"]}
    train = {"tokens_per_s": 80_000.0, "mfu": 0.25, "mfu_6nd": 0.16, "window": "steps 20-49"}
    peers = {"results": [
        {"job": "train", "framework": "normzoo", "first_visit_ms_max": 900.0},
        {"job": "train", "framework": "x-transformers", "normzoo_over_this": 0.9},
        {"job": "greedy", "framework": "transformers", "normzoo_over_this": 3.0},
        {"job": "beam5", "framework": "transformers", "normzoo_over_this": 1.5}]}
    s = gpu_summary.summarise([], step, compiled, train, peers, {"cases": []})
    assert s["step_mfu"] == 0.30 and s["step_mfu_compiled"] == 0.45 and s["train_mfu"] == 0.25
    assert s["train_vs_step"] == pytest.approx(0.8)
    assert s["train_vs_step_compiled"] == pytest.approx(80 / 150)
    assert s["greedy_vs_generate"] == 3.0 and s["beam_vs_generate"] == 1.5
    assert s["normzoo_vs_x_transformers"] == 0.9 and s["peers_first_visit_ms_max"] == 900.0
    assert s["compile_s"] == 61.0 and s["first_visit_ms_max"] == 4300.0
    lines = "\n".join(gpu_summary.report_lines(
        s, {"cpu": "x", "cores": 1, "threads": 1, "gpu": "H100", "python": "3",
            "versions": {}, "date": "today"}, "nvidia-h100"))
    assert "| train end to end vs the bare step | 0.80 |" in lines
    assert "MFU 30.0% (6ND 20.0%, padded 35.0%)" in lines and "`duck sizing`" in lines


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
