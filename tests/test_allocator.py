"""CPU training keeps freed memory in glibc's heap (``normzoo.run.allocator``): a step's large
tensors are reused instead of faulted in afresh, page by page, every step."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny import tiny

from normzoo.run import allocator

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="mallopt is glibc's")

# Fills a 64 MB tensor and frees it; prints the mode and the resident memory (MB) it left: none
# when malloc handed the block back to the kernel, all of it when the heap kept it for reuse.
KEPT_AFTER_FREE = """
import torch
from normzoo.run import allocator
def resident_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
print(allocator.keep_freed_memory())
before = resident_mb()
t = torch.empty(16 << 20, dtype=torch.float32)
t.fill_(1.0)
del t
print(resident_mb() - before)
"""


def _kept_after_free(env_value: str | None) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if k != allocator.ENV}
    if env_value is not None:
        env[allocator.ENV] = env_value
    out = subprocess.run([sys.executable, "-c", KEPT_AFTER_FREE], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], float(out[1])


@glibc
def test_a_freed_block_stays_in_the_heap_for_reuse() -> None:
    mode, kept_mb = _kept_after_free(None)
    assert mode == "reuse"
    assert kept_mb > 60  # of 64 MB: resident, so the next allocation it fits takes no faults


@glibc
def test_the_environment_can_leave_malloc_as_it_is() -> None:
    mode, kept_mb = _kept_after_free("system")
    assert mode == "system"
    # Unmapped on free (the next block of this size is faulted in anew); torch's first op may
    # leave a few MB of its own resident.
    assert kept_mb < 32


def test_the_mode_is_what_the_process_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_mode", "system")
    monkeypatch.setenv(allocator.ENV, "system")
    assert allocator.keep_freed_memory() == "system" == allocator.mode()  # left alone
    monkeypatch.setattr(allocator, "_mode", "reuse")
    monkeypatch.delenv(allocator.ENV)
    assert allocator.keep_freed_memory() == "reuse" == allocator.mode()  # idempotent


def test_a_mistyped_setting_is_refused_at_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           allocator.ENV: "sometimes"}
    result = subprocess.run([sys.executable, "-m", "normzoo", "train", str(path),
                             f"run.dir={tmp_path / 'run'}"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "NORMZOO_CPU_MALLOC='sometimes'" in result.stderr
    assert "reuse" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "summary.json").exists()
