"""The GPU check's summary: every step's headline figure in one JSON file and a Markdown report
beside it, ``gpu-check-<device>.{json,md}``, written last by ``gpu_check.sh`` from what the
steps left, with issue 61's goals (``gpu_goals.py``) each met, not met or unmeasured. A step
that failed or ran out of time leaves its figures as null, and the step table says which and how.

    python benchmarks/gpu_summary.py --work DIR --results DIR --slug DEVICE --out PATH.json
        [--dry-run]

Reads from ``--work`` (the check's own scratch folder, which does not come back):
``steps.txt`` (a line ``NAME EXIT SECONDS LIMIT`` per step), ``step.json`` (``gpu_step.py``,
eager), ``step-layers.json`` and ``step-model.json`` (``gpu_step.py --compile
--compile-scope``), ``train.json`` (``gpu_train.py``, logging every 10 steps) and
``train-log1.json`` (every step, host synchronisations counted); and from ``--results``:
``peers-DEVICE.json`` and, where a call ran it, ``attention-DEVICE.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import machine, machine_lines, table
from gpu_compile import SCOPES, auto_scope
from gpu_flops import MFU_DEFINITION
from gpu_goals import RATIOS, verdicts
from gpu_train import MFU_DEFINITION as TRAIN_MFU_DEFINITION

# The figures of each compiled step, by scope: f"{name}_{scope}".
SCOPED = ("step_tokens_per_s", "step_mfu", "step_mfu_6nd", "compiled_vs_eager", "compile_s",
          "compile_s_first", "compile_s_new_shape", "compile_s_per_shape", "compiles",
          "first_visit_ms_max_compiled")
# The keys every summary has, null where the step behind one did not deliver it.
KEYS = ("step_tokens_per_s", "step_mfu", "step_mfu_6nd", "step_mfu_padded",
        "first_visit_ms_max", "first_visit_ms",
        *(f"{name}_{scope}" for scope in SCOPES for name in SCOPED),
        "train_tokens_per_s", "train_mfu", "train_mfu_6nd", "train_vs_step",
        "train_tokens_per_s_log1", "train_mfu_log1", "train_vs_step_log1",
        "syncs_per_step", "syncs_steps_counted",
        "normzoo_vs_x_transformers", "greedy_vs_generate", "beam_vs_generate",
        "peers_first_visit_ms_max", "peak_flops")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_steps(path: Path) -> list[dict[str, Any]]:
    """``NAME EXIT SECONDS LIMIT`` lines, as ``gpu_check.sh``'s ``step`` writes them."""
    steps = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return steps
    for line in lines:
        name, code, seconds, limit = line.split()
        code = int(code)
        steps.append({"step": name, "exit": code, "seconds": int(seconds), "limit": int(limit),
                      "outcome": "ok" if code == 0 else "timed out" if code in (124, 137)
                      else "failed"})
    return steps


def _ratio(peers: dict[str, Any] | None, job: str, framework: str) -> float | None:
    """normzoo's rate over ``framework``'s for ``job`` in a ``peers.py`` result."""
    for row in (peers or {}).get("results", []):
        if row.get("job") == job and row.get("framework") == framework:
            return row.get("normzoo_over_this")
    return None


def _peers_row(peers: dict[str, Any] | None, job: str, framework: str) -> dict[str, Any]:
    return next((r for r in (peers or {}).get("results", [])
                 if r.get("job") == job and r.get("framework") == framework), {})


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _new_shape(compiled: dict[str, Any]) -> float | None:
    """The slowest first visit after the first, from a finished step or one its limit stopped
    (``first_visits_done_ms``, written after each visit)."""
    if compiled.get("compile_s_new_shape") is not None:
        return compiled["compile_s_new_shape"]
    done = compiled.get("first_visits_done_ms") or []
    return max(done[1:]) / 1000 if len(done) > 1 else None


def _first(compiled: dict[str, Any]) -> float | None:
    if compiled.get("compile_s_first") is not None:
        return compiled["compile_s_first"]
    done = compiled.get("first_visits_done_ms") or []
    return done[0] / 1000 if done else None


def scoped_figures(scope: str, compiled: dict[str, Any], step: dict[str, Any]) -> dict[str, Any]:
    """One compile step's figures, named ``*_{scope}``."""
    eager = step.get("model_flops_per_s") or None
    ratio = (_over(compiled.get("model_flops_per_s"), eager) if eager
             else _over(compiled.get("tokens_per_s"), step.get("tokens_per_s")))
    figures = {"step_tokens_per_s": compiled.get("tokens_per_s"),
               "step_mfu": compiled.get("mfu"), "step_mfu_6nd": compiled.get("mfu_6nd"),
               "compiled_vs_eager": ratio, "compile_s": compiled.get("compile_s"),
               "compile_s_first": _first(compiled), "compile_s_new_shape": _new_shape(compiled),
               "compile_s_per_shape": compiled.get("compile_s_per_shape"),
               "compiles": compiled.get("compiles"),
               "first_visit_ms_max_compiled": compiled.get("first_visit_ms_max")}
    return {f"{name}_{scope}": value for name, value in figures.items()}


def summarise(steps: list[dict[str, Any]], step: dict | None,
              compiled: dict[str, dict | None] | None, train: dict | None,
              train_log1: dict | None, peers: dict | None,
              attention: dict | None) -> dict[str, Any]:
    """The summary's figures (every key of :data:`KEYS`, null where missing) and the goals'
    verdicts. ``compiled``: each scope's compile step, by scope."""
    step, train, train_log1 = step or {}, train or {}, train_log1 or {}
    compiled = {scope: (compiled or {}).get(scope) or {} for scope in SCOPES}
    figures: dict[str, Any] = dict.fromkeys(KEYS)
    figures.update(
        step_tokens_per_s=step.get("tokens_per_s"), step_mfu=step.get("mfu"),
        step_mfu_6nd=step.get("mfu_6nd"), step_mfu_padded=step.get("mfu_padded"),
        first_visit_ms_max=step.get("first_visit_ms_max"),
        first_visit_ms=step.get("first_visit_ms"),
        train_tokens_per_s=train.get("tokens_per_s"), train_mfu=train.get("mfu"),
        train_mfu_6nd=train.get("mfu_6nd"),
        train_vs_step=_over(train.get("tokens_per_s"), step.get("tokens_per_s")),
        train_tokens_per_s_log1=train_log1.get("tokens_per_s"),
        train_mfu_log1=train_log1.get("mfu"),
        train_vs_step_log1=_over(train_log1.get("tokens_per_s"), step.get("tokens_per_s")),
        syncs_per_step=train_log1.get("syncs_per_step"),
        syncs_steps_counted=train_log1.get("syncs_steps_counted"),
        normzoo_vs_x_transformers=_ratio(peers, "train", "x-transformers"),
        greedy_vs_generate=_ratio(peers, "greedy", "transformers"),
        beam_vs_generate=_ratio(peers, "beam5", "transformers"),
        peers_first_visit_ms_max=_peers_row(peers, "train", "normzoo").get(
            "first_visit_ms_max"),
        peak_flops=step.get("peak_flops")
        or next((c["peak_flops"] for c in compiled.values() if c.get("peak_flops")), None)
        or train.get("peak_flops"))
    for scope, part in compiled.items():
        figures.update(scoped_figures(scope, part, step))
    parts = {"step": step, **{f"compile-{scope}": part for scope, part in compiled.items()}}
    stopped = {name: part["stopped"] for name, part in parts.items() if part.get("stopped")}
    return {**figures, "goals": verdicts(figures), "auto_scope_cuda": auto_scope(),
            "peak_source": step.get("peak_source"),
            "mfu_definition": MFU_DEFINITION, "train_mfu_definition": TRAIN_MFU_DEFINITION,
            "ratios": RATIOS,
            "steps": steps, "failed": [s["step"] for s in steps if s["exit"] != 0],
            "stopped": stopped, "train_window": train.get("window"),
            "train_window_log1": train_log1.get("window"),
            "syncs_where": train_log1.get("syncs_where"),
            "syncs_note": train_log1.get("syncs_note"),
            "scope_applied": {scope: part.get("scope_applied") for scope, part in
                              compiled.items()},
            "recompile_reasons": {scope: part.get("recompile_reasons") for scope, part in
                                  compiled.items()},
            "attention": attention}


def _fmt(value: Any, percent: bool = False, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if percent:
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:,.2f}{unit}" if abs(value) < 100 else f"{value:,.0f}{unit}"
    return f"{value}{unit}"


def report_lines(summary: dict[str, Any], info: dict[str, Any], slug: str) -> list[str]:
    s = summary
    rows = [
        ["bare step, eager: target tokens/s", _fmt(s["step_tokens_per_s"]),
         f"MFU {_fmt(s['step_mfu'], True)} (6ND {_fmt(s['step_mfu_6nd'], True)}, padded "
         f"{_fmt(s['step_mfu_padded'], True)})"]]
    for scope in SCOPES:
        rows.append(
            [f"bare step, compiled ({scope}): target tokens/s",
             _fmt(s[f"step_tokens_per_s_{scope}"]),
             f"MFU {_fmt(s[f'step_mfu_{scope}'], True)} (6ND "
             f"{_fmt(s[f'step_mfu_6nd_{scope}'], True)}); "
             f"{_fmt(s[f'compiled_vs_eager_{scope}'], unit='x')} eager"])
        rows.append(
            [f"compile ({scope}): a new shape", _fmt(s[f"compile_s_new_shape_{scope}"], unit=" s"),
             f"the first {_fmt(s[f'compile_s_first_{scope}'], unit=' s')}; "
             f"{_fmt(s[f'compiles_{scope}'])} compiles"])
    rows += [
        ["first visit of a shape, eager (max)", _fmt(s["first_visit_ms_max"], unit=" ms"),
         f"peers' normzoo {_fmt(s['peers_first_visit_ms_max'], unit=' ms')}"],
        ["normzoo train, logging every 10 steps: target tokens/s",
         _fmt(s["train_tokens_per_s"]),
         f"{_fmt(s['train_vs_step'], unit='x')} the bare step; MFU as logged "
         f"{_fmt(s['train_mfu'], True)} (6ND {_fmt(s['train_mfu_6nd'], True)}); "
         f"{s['train_window'] or 'no window'}"],
        ["normzoo train, logging every step: target tokens/s",
         _fmt(s["train_tokens_per_s_log1"]),
         f"{_fmt(s['train_vs_step_log1'], unit='x')} the bare step; MFU as logged "
         f"{_fmt(s['train_mfu_log1'], True)}; {s['train_window_log1'] or 'no window'}"],
        ["host synchronisations per training step", _fmt(s["syncs_per_step"]),
         s["syncs_note"] or f"over {_fmt(s['syncs_steps_counted'])} steps, logging every step"],
        ["normzoo vs x-transformers, training", _fmt(s["normzoo_vs_x_transformers"]), ""],
    ]
    for key, label in (("greedy_vs_generate", "greedy"), ("beam_vs_generate", "beam 5")):
        if s[key] is not None:  # the check's peers step trains only
            rows.append([f"{label} vs Hugging Face generate", _fmt(s[key]), "sentences/s"])
    goals = [[g["goal"], _fmt(g["value"], percent="MFU" in g["goal"]), g["verdict"]]
             for g in s["goals"]]
    lines = [f"# GPU check ({slug})", "", *machine_lines(info), "",
             *table(["figure", "value", "beside it"], rows), "",
             "## Goals (issue 61)", "", *table(["goal", "measured", "verdict"], goals), ""]
    if s.get("auto_scope_cuda"):
        lines += [f"`trainer.compile_scope: auto` compiles `{s['auto_scope_cuda']}` on a CUDA "
                  "device.", ""]
    for scope, applied in s["scope_applied"].items():
        if applied:
            lines.append(f"- compiled, {scope}: {applied}")
    if any(s["scope_applied"].values()):
        lines.append("")
    if s["syncs_where"]:
        lines += ["Where the training steps synchronised (innermost frames first):", ""]
        lines += [f"- {w['count']} x (first at step {w['first_step']}): "
                  + " < ".join(f"`{f}`" for f in w["frames"]) for w in s["syncs_where"]]
        lines.append("")
    if s["first_visit_ms"]:
        lines += ["First visit of each batch shape (eager bare step), ms: " + "; ".join(
            f"{shape}: {ms:,.0f}" for shape, ms in s["first_visit_ms"].items()), ""]
    for scope in SCOPES:
        if s[f"compile_s_per_shape_{scope}"]:
            lines += [f"First visit of each batch shape, compiled ({scope}), s: " + "; ".join(
                f"{shape}: {sec:,.1f}"
                for shape, sec in s[f"compile_s_per_shape_{scope}"].items()), ""]
    for scope, reasons in s["recompile_reasons"].items():
        if reasons:
            lines += [f"Recompiles ({scope}): " + "; ".join(f"`{r}`" for r in reasons), ""]
    lines += ["## Steps", "", *table(
        ["step", "outcome", "exit", "seconds", "limit"],
        [[x["step"], x["outcome"], str(x["exit"]), str(x["seconds"]), str(x["limit"])]
         for x in s["steps"]])]
    for name, why in s["stopped"].items():
        lines.append(f"\n{name}: {why}")
    lines += ["", "## Definitions", "", s["mfu_definition"], "", s["train_mfu_definition"], "",
              s["ratios"] + "."]
    return lines


def inputs(work: Path, results: Path, slug: str) -> dict[str, Path]:
    """What the summary reads, by name."""
    return {"steps": work / "steps.txt", "step": work / "step.json",
            **{scope: work / f"step-{scope}.json" for scope in SCOPES},
            "train": work / "train.json", "train_log1": work / "train-log1.json",
            "peers": results / f"peers-{slug}.json",
            "attention": results / f"attention-{slug}.json"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--slug", required=True, help="the device, as the file names have it")
    parser.add_argument("--out", type=Path, required=True, help="the JSON; Markdown beside it")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    paths = inputs(args.work, args.results, args.slug)
    print(f"summary of {', '.join(str(p) for p in paths.values())} -> {args.out} and "
          f"{args.out.with_suffix('.md').name}")
    if args.dry_run:
        return 0
    read = {name: read_json(path) for name, path in paths.items() if name != "steps"}
    summary = summarise(read_steps(paths["steps"]), read["step"],
                        {scope: read[scope] for scope in SCOPES}, read["train"],
                        read["train_log1"], read["peers"], read["attention"])
    import torch

    info = machine(torch.get_num_threads())
    summary = {"device": args.slug, "machine": info, **summary}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    lines = report_lines(summary, info, args.slug)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
