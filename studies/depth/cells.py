"""One cell of the depth study as the report reads it: its setting, how and where it ran and
ended, and what it scored, from the files ``report.py`` collected into
``docs/study-depth/data/`` (``studies/sweep_files.py``). A cell trained on a lent GPU and cut
off before its final test is read from its losses alone; the averaged checkpoint counts only
where it averages the converged stretch.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ..sweep_files import as_float, curve, read_csv, read_json, training_minutes
from .plan import SCHEMES

# Cells whose processes were suspended (SIGSTOP/SIGCONT) while they trained, so that a benchmark
# and the test suite had the cores to themselves, as {"tier/cell": minutes}; the minutes are left
# out of their training time (ThroughputMonitor's clock runs on through a suspension).
PAUSED_MIN: dict[str, float] = {
    "ceiling/seed-3_residual-post": 20.2,
    "ceiling/seed-3_residual-pre": 20.2,
    "stability/residual-post": 10.8,
    "stability/residual-admin-init-profiled": 10.8,
}
UNSCORED = ("not scored: the lent GPU's time ran out during its final test, which then decoded "
            "on the host's CPU (Lightning's teardown had moved the model there; fixed since)")
GPU_LOG = "GPU available: True (cuda), used: True"  # Lightning's line in the cell's sweep log


class Cell:
    """One cell of one tier: its setting, how and where it ran and ended, what it scored."""

    def __init__(self, tier: str, folder: Path) -> None:
        record = read_json(folder / "cell.json")
        summary = read_json(folder / "summary.json")
        self.tier, self.folder, self.name = tier, folder, folder.name
        recipe = (yaml.safe_load((folder / "recipe.yaml").read_text(encoding="utf-8"))
                  if (folder / "recipe.yaml").is_file() else {})
        residual = record.get("model.residual") or (recipe.get("model") or {}).get("residual")
        if isinstance(residual, dict):  # a saved recipe.yaml spells a scheme as a mapping
            residual = residual.get("name")
        residual = str(residual or "")
        self.scheme = "admin" if "admin" in residual else residual
        self.seed = str(record.get("seed") or recipe.get("seed") or "1")
        self.status = record.get("status", "")
        self.diverged_at = record.get("diverged_at_step", "")
        self.steps = record.get("steps") or summary.get("steps")
        self.stopped = record.get("stopped") or summary.get("stopped", "")
        self.precision = (recipe.get("trainer") or {}).get("precision", "")
        machine = summary.get("machine") or {}
        self.device_recorded = machine.get("device")
        log = folder / "sweep.log"  # cells run on a lent GPU keep their sweep's log
        self.on_gpu = machine.get("device") == "cuda" or (
            log.is_file() and GPU_LOG in log.read_text(encoding="utf-8"))
        self.machine = machine.get("gpu") if self.on_gpu else machine.get("cpu")
        self.threads = machine.get("torch_threads")  # its last process's, as recorded
        self.scored = (folder / "cell.json").is_file()
        test = summary.get("test") or {}
        self.bleu = as_float(test.get("bleu"))
        self.greedy = as_float(test.get("greedy_bleu"))
        self.averaged, self.averaged_note = _averaged(test.get("averaged") or {},
                                                      summary.get("best_checkpoint"))
        self.signature = test.get("signature", "")
        losses = read_csv(folder / "loss.csv")
        self.train, self.val = curve(losses, "train_loss"), curve(losses, "val_loss")
        self.best_val = min((v for _, v in self.val), default=None)
        if not self.scored:  # trained, cut off before the sweep wrote its row
            self.steps = max((s for s, _ in self.train), default=-1) + 1 or None
            cap = (recipe.get("trainer") or {}).get("max_steps")
            reached = f"step cap reached (trainer.max_steps={cap}); " if self.steps == cap else ""
            self.stopped = reached + UNSCORED
        self.train_min, self.processes = training_minutes(losses)
        self.paused_min = PAUSED_MIN.get(f"{tier}/{folder.name}", 0.0)
        if self.train_min is not None:
            self.train_min -= self.paused_min
        self.diagnose = read_csv(folder / "diagnose.csv")

    @property
    def label(self) -> str:
        return f"{SCHEMES.get(self.scheme, self.scheme)}, seed {self.seed}"

    @property
    def device_short(self) -> str:
        return "GPU" if self.on_gpu else "CPU"

    @property
    def device_kind(self) -> str:
        """The device kind the cell trained on, as ``normzoo compare`` reads it (cpu, cuda):
        cuda where its summary.json or its lane's sweep log says so; otherwise what its
        summary.json records, and cpu for the first study's cells, which recorded no machine
        and ran on the study's CPUs (every GPU cell keeps its lane's log)."""
        return "cuda" if self.on_gpu else str(self.device_recorded or "cpu")

    def hypotheses(self) -> list[str] | None:
        path = self.folder / "hyps.test2016.txt"
        if not path.is_file():
            return None
        return path.read_text(encoding="utf-8").removesuffix("\n").split("\n")

    def layer_metric(self, when: str, stack: str, metric: str) -> list[float]:
        rows = sorted((r for r in self.diagnose if r["when"] == when and r["stack"] == stack),
                      key=lambda r: int(r["layer"]))
        return [as_float(r.get(metric)) or 0.0 for r in rows]


def _step_of(name: str) -> int | None:
    digits = "".join(ch for ch in Path(name).stem.split("-")[-1] if ch.isdigit())
    return int(digits) if digits else None


def _averaged(averaged: dict, best: str | None) -> tuple[float | None, str]:
    """The averaged checkpoint's BLEU where it averages the converged stretch (from the best
    validation point on, as the papers average), else None and why. Runs before the papers'
    averaging averaged their newest five whatever the best: those count only where the best
    checkpoint is not newer than the oldest of the five."""
    if not averaged:
        return None, "not averaged"
    if averaged.get("skipped"):
        return None, "still improving at its end: nothing to average"
    bleu = as_float(averaged.get("bleu"))
    if "rule" in averaged:  # the papers' averaging
        return bleu, ""
    steps = [_step_of(n) for n in averaged.get("checkpoints", [])]
    best_step = _step_of(best) if best else None
    if bleu is None or best_step is None or not steps or None in steps:
        return None, "not averaged"
    if best_step <= min(s for s in steps if s is not None):
        return bleu, ""
    return None, (f"its newest five (from step {min(steps)}) precede or straddle the best "
                  f"(step {best_step}): mid-schedule, not reported")
