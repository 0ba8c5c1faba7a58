"""The classifier study's page: does a masked LM's encoder (``recipes/classify_mlm.yaml``) make a
better start for ``recipes/classify.yaml`` than a random initialisation? Judged under the rule
of ``normzoo compare``: three seeds a side, the paired t-test over the seeds.

    python -m studies.classify_init.report CLONE/runs/classify-init   # collect, then render
    python -m studies.classify_init.report --render-only              # render from docs/ alone
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from normzoo.sweep.significance import judge, mean_sd, p_text, seed_test

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "study-classify" / "data"
REPORT = ROOT / "docs" / "study-classify.md"
SEEDS = (1, 2, 3)
SIDES = ("random", "mlm")
# The two arms: the recipe's 4,000 labelled sentences, and 400 of them (run.sh's "small").
ARMS = {"": "the recipe's labelled sentences", "small-": "a tenth of them"}
# The code the runs trained with: a snapshot of the working tree just before this commit (the
# classifier's training path is the same at it: it froze the MLM head no gradient reached).
RUN_AT = "b8e56d0"
METRICS = (("accuracy", "test accuracy", "higher"), ("macro_f1", "test macro-F1", "higher"),
           ("loss", "test loss (nats)", "lower"))


def collect(runs: Path) -> None:
    """Copy each run's ``summary.json`` and ``recipe.yaml`` into ``docs/study-classify/data``."""
    names = ["mlm", *(f"{side}-{arm}{seed}" for arm in ARMS for side in SIDES for seed in SEEDS)]
    for name in names:
        target = DATA / name
        target.mkdir(parents=True, exist_ok=True)
        for file in ("summary.json", "recipe.yaml"):
            shutil.copyfile(runs / name / file, target / file)


def _summary(name: str) -> dict[str, Any]:
    return json.loads((DATA / name / "summary.json").read_text(encoding="utf-8"))


def _recipe(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name / "recipe.yaml").read_text(encoding="utf-8"))


def _row(values: list[str]) -> str:
    return "| " + " | ".join(values) + " |"


def _arm(arm: str) -> list[str]:
    """One arm's section: the runs per seed, the tests, what they say."""
    names = {side: [f"{side}-{arm}{seed}" for seed in SEEDS] for side in SIDES}
    runs = {side: [_summary(name) for name in names[side]] for side in SIDES}
    recipes = [_recipe(name) for side in SIDES for name in names[side]]
    sentences = recipes[0]["data"]["train_limit"]
    lines = [f"## {sentences:,} labelled sentences", "",
             f"{recipes[0]['trainer']['max_steps']} updates each, every run stopped at its "
             "`max_steps` (wall s: the run's `train_wall_s`, its final test included).", "",
             _row(["seed", *[f"{m} ({s})" for s in ("random", "MLM") for m in
                             ("accuracy", "macro-F1", "loss", "wall s")]]),
             _row(["---"] * 9)]
    for i, seed in enumerate(SEEDS):
        cells = [str(seed)]
        for side in SIDES:
            run = runs[side][i]
            cells += [f"{run['test']['accuracy']:.4f}", f"{run['test']['macro_f1']:.4f}",
                      f"{run['test']['loss']:.4f}", f"{run['train_wall_s']:.0f}"]
        lines.append(_row(cells))
    lines += ["", _row(["score", "random (mean ± sd)", "from the MLM (mean ± sd)",
                        "paired t-test p", "95% interval of the difference", "verdict"]),
              _row(["---"] * 6)]
    verdicts = []
    for key, label, _better in METRICS:
        base = [run["test"][key] for run in runs["random"]]
        system = [run["test"][key] for run in runs["mlm"]]
        test = seed_test(base, system, paired=True)
        verdict = judge(base, system, None, sentence_test=False, paired=True,
                        precisions=[r["trainer"]["precision"] for r in recipes],
                        devices=[(r.get("machine") or {}).get("device", "cpu")
                                 for r in [*runs["random"], *runs["mlm"]]])
        (m0, s0), (m1, s1) = mean_sd(base), mean_sd(system)
        low, high = test["seed_interval"] or (float("nan"), float("nan"))
        lines.append(_row([label, f"{m0:.4f} ± {s0:.4f}", f"{m1:.4f} ± {s1:.4f}",
                           p_text(test["seed_p"]), f"[{low:+.4f}, {high:+.4f}]",
                           f"**{verdict.label}** ({'higher' if m1 > m0 else 'lower'} from "
                           "the MLM)"]))
        verdicts.append((label, verdict))
    shown = [label for label, verdict in verdicts if verdict.shown]
    accuracy = mean_sd([r["test"]["accuracy"] for r in runs["random"]])[0]
    lines += ["", "What it says: " + (
        f"starting from the MLM is shown to change the {', '.join(shown)}." if shown else
        "no difference is shown on any score; a difference not shown is no finding of "
        "equality (the intervals above bound it).")
        + f" The randomly initialised classifier reaches {accuracy:.1%} test accuracy here.",
        ""]
    lines += [f"- {label}: {verdict.label}: {verdict.reason}." for label, verdict in verdicts]
    command = " ".join([*(f"-b docs/study-classify/data/random-{arm}{s}" for s in SEEDS),
                        *(f"-s docs/study-classify/data/mlm-{arm}{s}" for s in SEEDS)])
    return [*lines, "", "From the command line (`normzoo compare` judges a classifier by its "
            "test accuracy; the collected folders are run directories as far as it reads them):",
            "", "```",
            f"normzoo compare {command}", "```", ""]


def render() -> str:
    mlm = _summary("mlm")
    machine = mlm["machine"]
    lines = ["# A classifier from a masked LM's encoder", "",
             "*Generated by `python -m studies.classify_init.report` from the files the runs "
             "wrote (`docs/study-classify/data/`); do not edit by hand.*", "",
             "Does `init.from` a masked LM trained on the same sentences (without their labels) "
             "give `recipes/classify.yaml` a better classifier than a random initialisation? "
             "One MLM run (`recipes/classify_mlm.yaml`, all 20,000 training sentences of the "
             f"built-in corpus, {mlm['steps']} updates, test MLM accuracy "
             f"{mlm['test']['mlm_acc']:.4f}), then seeds {', '.join(map(str, SEEDS))} of the "
             "classifier each way (4 labels: the tense and number of the first clause; the "
             "test split's 500 sentences; `init.strict: false`: the encoder's weights load, "
             "the head starts fresh), on the recipe's labelled sentences and on a tenth of "
             "them (that second arm was added after the first arm's result was seen). "
             "`studies/classify_init/run.sh` ran them, one torch thread each, on "
             f"{machine.get('cpu', 'a CPU')} ({machine.get('torch', '')}), its other core "
             "running the test suite (so the wall times are loaded ones), from a clone of "
             f"the code as it stood just before commit {RUN_AT}; the judgement is "
             "`normzoo compare`'s rule: three seeds a side, the paired t-test below 0.05.", ""]
    for arm in ARMS:
        lines += _arm(arm)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=Path, help="the study's runs folder")
    parser.add_argument("--render-only", action="store_true",
                        help="render the page from docs/study-classify/data alone")
    args = parser.parse_args()
    if not args.render_only:
        if args.runs is None:
            parser.error("give the runs folder, or --render-only")
        collect(args.runs)
    REPORT.write_text(render(), encoding="utf-8")


if __name__ == "__main__":
    main()
