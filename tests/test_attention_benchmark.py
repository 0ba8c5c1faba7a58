"""``benchmarks/attention_backends.py``: its dry run, and its CPU run (math and the explicit
path) writing a complete report; a kernel that cannot run a case is recorded as refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "attention_backends.py"
sys.path.insert(0, str(BENCHMARKS))
import attention_backends as bench  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_the_dry_run_checks_its_arguments_and_measures_nothing(tmp_path):
    out = tmp_path / "results" / "attention-cpu.json"
    done = _run("--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "would measure math, explicit on 4 cases" in done.stdout and not out.parent.exists()
    assert _run("--dry-run", "--reps", "0").returncode == 2
    assert _run("--dry-run", "--kernels", "flash").returncode == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's kernels")
def test_a_cpu_run_reports_math_and_the_explicit_path_for_every_case(tmp_path):
    out = tmp_path / "attention-cpu.json"
    done = _run("--threads", "1", "--reps", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [r["case"] for r in data["results"]] == [c.name for c in bench.CPU_CASES]
    for row in data["results"]:
        assert set(row["kernels"]) == {"math", "explicit"}
        for result in row["kernels"].values():
            assert result["steady_ms"] > 0 and result["first_visit_ms"] > 0
            assert result["first_visit_length"] > row["length"]  # a shape not met before
        assert row["fastest"] in ("math", "explicit") and row["policy"] == "sdpa (cpu)"
    markdown = out.with_suffix(".md").read_text()
    assert "| short padded self-attention | B=16, T=24 |" in markdown


def test_a_kernel_that_cannot_run_a_case_is_recorded_as_refused():
    case = bench.CPU_CASES[0]
    assert "refused" in bench.measure("efficient", case, 1, 1, "cpu", torch.float32)
    causal = bench.GPU_CASES[2]  # as normzoo calls it: is_causal, no mask (flash takes it)
    assert bench.inputs(causal, 8, "cpu", torch.float32)["mask"] is None
    assert bench.inputs(bench.GPU_CASES[0], 8, "cpu", torch.float32)["mask"].shape == (128, 1, 1, 8)
    assert bench.policy_pick(causal, "cuda", torch.bfloat16) == "flash"
    assert bench.policy_pick(bench.GPU_CASES[0], "cuda", torch.bfloat16) == "efficient"
