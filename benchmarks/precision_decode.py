"""Decoding in bf16 against fp32: ``normzoo evaluate`` of a translation checkpoint on test2016 in
fp32 and with ``--bf16`` (beam 5 and greedy), each in a process of its own: BLEU, chrF, the
sentences translated differently and the wall time (``python benchmarks/precision.py --decode
CKPT`` writes ``precision-decode-cpu.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import REPO, machine_lines, table


def measure_decoding(checkpoint: Path, data: Path, threads: int) -> list[dict[str, Any]]:
    """``normzoo evaluate`` of ``checkpoint`` on test2016 in fp32 and under ``--bf16``, beam 5
    and greedy: BLEU, chrF and the command's wall time, each in a process of its own."""
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as tmp:
        for beam in (5, 1):
            for bf16 in (False, True):
                hyps = Path(tmp) / f"hyps-{beam}-{bf16}.txt"
                command = [sys.executable, "-m", "normzoo", "evaluate", str(checkpoint),
                           "--data-dir", str(data), "--beam", str(beam), "--hyps", str(hyps),
                           "--json", *(["--bf16"] if bf16 else [])]
                started = time.perf_counter()
                done = subprocess.run(command, env=env, capture_output=True, text=True,
                                      cwd=REPO)
                wall = time.perf_counter() - started
                if done.returncode != 0:
                    raise SystemExit(f"normzoo evaluate exited {done.returncode}:\n"
                                     f"{done.stderr[-3000:]}")
                result = json.loads(done.stdout)
                rows.append({"beam": beam, "precision": "bf16" if bf16 else "fp32",
                             "bleu": result["bleu"], "chrf": result["chrf"],
                             "wall_s": round(wall, 1),
                             "hypotheses": hyps.read_text(encoding="utf-8").splitlines()})
    for row in rows:  # how many sentences bf16 translates differently from fp32
        fp32 = next(r for r in rows if r["beam"] == row["beam"] and r["precision"] == "fp32")
        row["differing_sentences"] = sum(a != b for a, b in zip(row["hypotheses"],
                                                                fp32["hypotheses"], strict=True))
    for row in rows:
        del row["hypotheses"]
    return rows


def decoding_report(checkpoint: Path, info: dict, rows: list[dict]) -> list[str]:
    lines = ["# Decoding in bf16 against fp32 (`normzoo evaluate --bf16`)", "",
             *machine_lines(info), "", f"Checkpoint: `{checkpoint}`; test2016 (1,000 "
             "sentences); each command a process of its own, its wall time start-up included.",
             ""]
    lines += table(["beam", "precision", "BLEU", "chrF", "sentences unlike fp32's",
                    "wall (s)"],
                   [[str(r["beam"]), r["precision"], f"{r['bleu']:.2f}", f"{r['chrf']:.2f}",
                     str(r["differing_sentences"]), f"{r['wall_s']:.0f}"] for r in rows])
    return lines
