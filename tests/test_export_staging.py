"""A killed ``normzoo export`` leaves its hidden staging folder beside ``--out``; the next
export into that folder removes it, and only what killed exports left: a staging folder another
export is still writing, and anything else hidden there, stay."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normzoo.io import atomic

pytest.importorskip("transformers")
HF_FILES = {"config.json", "model.safetensors", "generation_config.json", "normzoo.json",
            "README.md"}


def _export_command(checkpoint: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "normzoo", "export", str(checkpoint), "--format", "hf",
            "--out", str(out)]


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _kill_once_staging(checkpoint: Path, out: Path) -> Path:
    """Start an export to ``out`` and SIGKILL it while it writes its staging folder (once a
    file is in it); return the folder the killed export left."""
    process = subprocess.Popen(_export_command(checkpoint, out), env=_environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            busy = [p for p in out.parent.glob(f".{out.name}.*") if p.is_dir() and any(p.iterdir())]
            if busy:
                process.kill()
                process.wait()
                return busy[0]
            time.sleep(0.005)
        pytest.fail(f"the export finished (exit {process.returncode}) before it could be killed")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_next_export_removes_what_a_killed_export_left(tiny_checkpoint: Path,
                                                          tmp_path: Path):
    out = tmp_path / "hf_X"
    left = _kill_once_staging(tiny_checkpoint, out)
    assert left.is_dir() and not out.exists()  # as issue 52 found it: a hidden folder stays
    mine = tmp_path / ".hf_X.notes"  # hidden, but not an export's staging folder
    mine.mkdir()
    other = tmp_path / ".model.tmp-1"  # another writer's temporary file
    other.write_bytes(b"")

    done = subprocess.run(_export_command(tiny_checkpoint, out), env=_environment(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert not left.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hf_X.notes", ".model.tmp-1", "hf_X"]
    assert {p.name for p in out.iterdir()} >= HF_FILES  # the export is whole
    provenance = json.loads((out / "normzoo.json").read_text(encoding="utf-8"))
    assert provenance["max_abs_logit_diff"] <= 1e-4


def test_a_staging_folder_still_being_written_is_kept(tmp_path: Path):
    """Exports side by side into one folder: each one's tidying leaves the others' work."""
    running = atomic.staging_folder(tmp_path / "hf_A")  # this process's: it is running
    (running / "config.json").write_text("{}")
    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal, sys; from pathlib import Path; "
         "from normzoo.io.atomic import staging_folder; "
         "print(staging_folder(Path(sys.argv[1])), flush=True); "
         "os.kill(os.getpid(), signal.SIGKILL)", str(tmp_path / "hf_B")],
        capture_output=True, text=True, env=_environment(), timeout=120)
    assert killed.returncode == -signal.SIGKILL
    stale = Path(killed.stdout.strip())
    elsewhere = tmp_path / f".hf_C.staging-another-host-{os.getpid() + 1}-abcd1234"
    elsewhere.mkdir()  # written from another machine on a shared disk: cannot be asked
    assert atomic.remove_stale_staging(tmp_path) == [stale]
    assert sorted(tmp_path.iterdir()) == sorted([running, elsewhere])
