"""The GPU check's summary: every step's headline figure in one JSON file and a Markdown report
beside it, ``gpu-check-<device>.{json,md}``, written last by ``gpu_check.sh`` from what the
steps left. A step that failed or ran out of time leaves its figures as null, and the step
table says which and how.

    python benchmarks/gpu_summary.py --work DIR --results DIR --slug DEVICE --out PATH.json
        [--dry-run]

Reads from ``--work`` (the check's own scratch folder, which does not come back):
``steps.txt`` (a line ``NAME EXIT SECONDS LIMIT`` per step), ``step.json`` and
``step-compiled.json`` (``gpu_step.py``), ``train.json`` (``gpu_train.py``); and from
``--results``: ``peers-DEVICE.json`` and ``attention-DEVICE.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import machine, machine_lines, table
from gpu_flops import MFU_DEFINITION
from gpu_train import MFU_DEFINITION as TRAIN_MFU_DEFINITION

# The keys every summary has, null where the step behind one did not deliver it.
KEYS = ("step_tokens_per_s", "step_mfu", "step_mfu_6nd", "step_mfu_padded",
        "step_tokens_per_s_compiled", "step_mfu_compiled", "step_mfu_compiled_6nd",
        "compile_s", "compiles", "first_visit_ms_max", "first_visit_ms",
        "first_visit_ms_max_compiled", "train_tokens_per_s", "train_mfu", "train_mfu_6nd",
        "train_vs_step", "train_vs_step_compiled", "normzoo_vs_x_transformers",
        "greedy_vs_generate", "beam_vs_generate", "peers_first_visit_ms_max", "peak_flops")


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


def summarise(steps: list[dict[str, Any]], step: dict | None, compiled: dict | None,
              train: dict | None, peers: dict | None, attention: dict | None) -> dict[str, Any]:
    """The summary's figures (every key of :data:`KEYS`, null where missing)."""
    step, compiled, train = step or {}, compiled or {}, train or {}
    figures: dict[str, Any] = dict.fromkeys(KEYS)
    figures.update(
        step_tokens_per_s=step.get("tokens_per_s"), step_mfu=step.get("mfu"),
        step_mfu_6nd=step.get("mfu_6nd"), step_mfu_padded=step.get("mfu_padded"),
        first_visit_ms_max=step.get("first_visit_ms_max"),
        first_visit_ms=step.get("first_visit_ms"),
        step_tokens_per_s_compiled=compiled.get("tokens_per_s"),
        step_mfu_compiled=compiled.get("mfu"), step_mfu_compiled_6nd=compiled.get("mfu_6nd"),
        compile_s=compiled.get("compile_s"), compiles=compiled.get("compiles"),
        first_visit_ms_max_compiled=compiled.get("first_visit_ms_max"),
        train_tokens_per_s=train.get("tokens_per_s"), train_mfu=train.get("mfu"),
        train_mfu_6nd=train.get("mfu_6nd"),
        train_vs_step=_over(train.get("tokens_per_s"), step.get("tokens_per_s")),
        train_vs_step_compiled=_over(train.get("tokens_per_s"), compiled.get("tokens_per_s")),
        normzoo_vs_x_transformers=_ratio(peers, "train", "x-transformers"),
        greedy_vs_generate=_ratio(peers, "greedy", "transformers"),
        beam_vs_generate=_ratio(peers, "beam5", "transformers"),
        peers_first_visit_ms_max=_peers_row(peers, "train", "normzoo").get(
            "first_visit_ms_max"),
        peak_flops=step.get("peak_flops") or compiled.get("peak_flops")
        or train.get("peak_flops"))
    stopped = {name: part["stopped"] for name, part in (("step", step), ("compile", compiled))
               if part.get("stopped")}
    return {**figures, "peak_source": step.get("peak_source"),
            "mfu_definition": MFU_DEFINITION, "train_mfu_definition": TRAIN_MFU_DEFINITION,
            "ratios": "train_vs_step: normzoo train's target tokens/s over the bare step's "
                      "(the same model, vocabulary size and token budget); *_vs_*: normzoo's "
                      "rate over the other's, from peers.py (greedy and beam 5: sentences/s "
                      "against Hugging Face generate)",
            "steps": steps, "failed": [s["step"] for s in steps if s["exit"] != 0],
            "stopped": stopped, "train_window": train.get("window"),
            "recompile_reasons": compiled.get("recompile_reasons"),
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
         f"{_fmt(s['step_mfu_padded'], True)})"],
        ["bare step, compiled: target tokens/s", _fmt(s["step_tokens_per_s_compiled"]),
         f"MFU {_fmt(s['step_mfu_compiled'], True)} (6ND "
         f"{_fmt(s['step_mfu_compiled_6nd'], True)}); compile {_fmt(s['compile_s'], unit=' s')}"
         f", {_fmt(s['compiles'])} compiles"],
        ["first visit of a shape, eager (max)", _fmt(s["first_visit_ms_max"], unit=" ms"),
         f"compiled {_fmt(s['first_visit_ms_max_compiled'], unit=' ms')}; peers' normzoo "
         f"{_fmt(s['peers_first_visit_ms_max'], unit=' ms')}"],
        ["normzoo train: target tokens/s", _fmt(s["train_tokens_per_s"]),
         f"MFU as logged {_fmt(s['train_mfu'], True)} (6ND {_fmt(s['train_mfu_6nd'], True)}); "
         f"{s['train_window'] or 'no window'}"],
        ["train end to end vs the bare step", _fmt(s["train_vs_step"]),
         f"vs the compiled step {_fmt(s['train_vs_step_compiled'])}"],
        ["normzoo vs x-transformers, training", _fmt(s["normzoo_vs_x_transformers"]), ""],
        ["greedy vs Hugging Face generate", _fmt(s["greedy_vs_generate"]), "sentences/s"],
        ["beam 5 vs Hugging Face generate", _fmt(s["beam_vs_generate"]), "sentences/s"],
    ]
    lines = [f"# GPU check ({slug})", "", *machine_lines(info), "",
             *table(["figure", "value", "beside it"], rows), ""]
    if s["first_visit_ms"]:
        lines += ["First visit of each batch shape (eager bare step), ms: " + "; ".join(
            f"{shape}: {ms:,.0f}" for shape, ms in s["first_visit_ms"].items()), ""]
    if s["recompile_reasons"]:
        lines += ["Recompiles: " + "; ".join(f"`{r}`" for r in s["recompile_reasons"]), ""]
    lines += ["## Steps", "", *table(
        ["step", "outcome", "exit", "seconds", "limit"],
        [[x["step"], x["outcome"], str(x["exit"]), str(x["seconds"]), str(x["limit"])]
         for x in s["steps"]])]
    for name, why in s["stopped"].items():
        lines.append(f"\n{name}: {why}")
    lines += ["", "## Definitions", "", s["mfu_definition"], "", s["train_mfu_definition"], "",
              s["ratios"] + "."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--slug", required=True, help="the device, as the file names have it")
    parser.add_argument("--out", type=Path, required=True, help="the JSON; Markdown beside it")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    inputs = {"steps": args.work / "steps.txt", "step": args.work / "step.json",
              "compiled": args.work / "step-compiled.json", "train": args.work / "train.json",
              "peers": args.results / f"peers-{args.slug}.json",
              "attention": args.results / f"attention-{args.slug}.json"}
    print(f"summary of {', '.join(str(p) for p in inputs.values())} -> {args.out} and "
          f"{args.out.with_suffix('.md').name}")
    if args.dry_run:
        return 0
    summary = summarise(read_steps(inputs["steps"]), *(
        read_json(inputs[name]) for name in ("step", "compiled", "train", "peers",
                                             "attention")))
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
