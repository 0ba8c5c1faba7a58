"""Issue 61's goals for the GPU check, each a figure of ``gpu_summary.py``'s summary against a
target, and what the ratios among those figures mean: kept apart from the summary's reading and
writing so that the goals, which change with the issue, are one table to read and edit."""

from __future__ import annotations

from typing import Any

from gpu_compile import SCOPES

# Issue 61's goals: (name, the figure, at least or at most, the target).
GOALS = (
    ("normzoo train >= 0.9x the bare step, logging every 10 steps", "train_vs_step", ">=", 0.9),
    ("normzoo train >= 0.85x the bare step, logging every step", "train_vs_step_log1", ">=",
     0.85),
    ("0 host synchronisations per training step", "syncs_per_step", "<=", 0.0),
    ("MFU >= 20% eager", "step_mfu", ">=", 0.20),
    *((f"compiled >= 1.3x eager ({scope})", f"compiled_vs_eager_{scope}", ">=", 1.3)
      for scope in SCOPES),
    *((f"<= 5 s to compile a new shape ({scope})", f"compile_s_new_shape_{scope}", "<=", 5.0)
      for scope in SCOPES),
    *((f"MFU >= 30% compiled ({scope})", f"step_mfu_{scope}", ">=", 0.30) for scope in SCOPES),
)
RATIOS = ("train_vs_step: normzoo train's target tokens/s over the bare eager step's (the same "
          "model, vocabulary size and token budget), logging every 10 steps (_log1: every "
          "step); compiled_vs_eager_SCOPE: the compiled step's model FLOPs per second over the "
          "eager step's (per model FLOP, so that the batches' mix counts less: the compiled "
          "steps time 2 of the eager step's 6 batches), trainer.compile_scope SCOPE; "
          "compile_s_new_shape_SCOPE: the slowest first visit of a shape after the first (its "
          "compile and the step), compile_s_first_SCOPE the first (inductor's start included), "
          "each in a process with an empty inductor cache; syncs_per_step: torch's "
          "synchronisation warnings (sync debug mode warn) from each training batch's start to "
          "its end, the first batch left out, over the batches watched, in normzoo train "
          "logging every step; *_vs_*: normzoo's rate over the other's, from peers.py")


def verdicts(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of :data:`GOALS` against its figure: met, not met, or unmeasured (null)."""
    rows = []
    for name, key, sense, target in GOALS:
        value = figures.get(key)
        if value is None:
            verdict = "unmeasured"
        else:
            verdict = "met" if (value >= target if sense == ">=" else value <= target) \
                else "not met"
        rows.append({"goal": name, "figure": key, "value": value, "target": target,
                     "verdict": verdict})
    return rows
