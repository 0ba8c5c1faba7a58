"""``benchmarks/gpu_check.sh``, the prepared call a lent GPU machine runs first, dry-run here:
its steps' arguments are checked (the gpu-marked tests collected, each peers measurement
planned with its precision and compile settings) without measuring anything, so a lease is
never spent on a typo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def check(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_dry_run_checks_every_step_and_measures_nothing(tmp_path: Path):
    done = check("dry-run", out=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = (tmp_path / "gpu_check.log").read_text()
    for step in ("tests", "peers", "compile"):
        assert f"== {step}: exit 0" in log
    assert "tests/test_gpu_schemes.py" in log  # the gpu-marked tests are the ones collected
    assert "size base (25000 tokens a batch), precision bf16, compile False" in log
    assert "size base (25000 tokens a batch), precision bf16, compile True" in log
    assert "train  normzoo" in log
    assert not list((tmp_path / "benchmarks" / "results").iterdir())  # nothing measured


def test_a_step_that_fails_fails_the_check_and_the_others_still_run(tmp_path: Path):
    done = subprocess.run(
        ["bash", "-c", f'source <(sed -n "/^step()/,/^}}/p" {SCRIPT}); OUT={tmp_path}; '
         'FAILED=0; step one 5 false; step two 5 true; echo "failed=$FAILED"'],
        capture_output=True, text=True, timeout=60)
    assert "== one: exit 1" in done.stdout and "== two: exit 0" in done.stdout
    assert "failed=1" in done.stdout


def test_an_unknown_command_is_a_usage_error(tmp_path: Path):
    done = check("measure", out=tmp_path)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_peers_refuses_a_framework_or_job_it_does_not_have():
    for bad in (["--frameworks", "nope"], ["--jobs", "sample"]):
        done = subprocess.run([sys.executable, "benchmarks/peers.py", "--dry-run", *bad],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "choose from" in done.stderr
