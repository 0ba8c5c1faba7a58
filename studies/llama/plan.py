"""What the Llama-style decoder study runs: its two parts, their groups of cells and the commands
that ran them. ``report.py`` collects and reports the cells; ``run.sh`` runs the second part's
sweeps, two at a time.

* **First part** (from a clone at ``FIRST_COMMIT``): Pre-LN, Peri-LN, Mix-LN and DeepNorm at 6
  layers, three seeds, on the built-in corpus and on Multi30k's German side.
* **Second part** (issue 36, from a clone at ``SCHEMES_COMMIT``): the schemes of the contract's
  new hooks, Pre-LN, Pre-LN + QK-norm, LNS, Peri-LN, HC (n = 4), mHC (n = 4) and nGPT, at 6 and
  12 layers, three seeds, on Multi30k's German side.
"""

from __future__ import annotations

RECIPE = "recipes/studies/llama_schemes.yaml"
_SWEEP = f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE}"
_MULTI30K = ("data.source=files data.dir=../shared/data/multi30k data.train_split=train.de "
             "data.valid_split=val.de data.test_split=test2016.de data.tokenizer.vocab_size=4000")

# -- first part ------------------------------------------------------------------------------
FIRST_COMMIT = "0d0ecfe"
SEED_RUNS = (  # (--set seed=..., when and how): what ran, in order
    ("1,2", "seeds 1 and 2, the study as first run"),
    ("3", "seed 3, added on 2026-11-26 from a fresh clone at the same commit"),
)
_GRID = "--set seed={seeds} --set model.residual=pre,peri,mixln,deepnorm --diagnose"
DATASETS = {  # folder under runs/study-llama and docs/study-llama/data: (what, command with
    # {seeds} for each of SEED_RUNS)
    "builtin": ("the built-in corpus (20,000 generated sentences, 2,000-entry BPE)",
                f"{_SWEEP} {_GRID} --out runs/study-llama/builtin"),
    "multi30k-de": ("Multi30k's German side (29,000 sentences, 4,000-entry BPE; test2016)",
                    f"{_SWEEP} {_MULTI30K} {_GRID} --out runs/study-llama/multi30k-de"),
}

# -- second part (issue 36) ------------------------------------------------------------------
SCHEMES_COMMIT = "f5670b6"  # the clone studies/llama/run.sh runs the second part's sweeps from
DEPTHS = (6, 12)
_HYPER = "'{name: hyper, streams: 4}'"
_MHC = "'{name: mhc, streams: 4}'"
# (group of cells, sweep folder, what the sweep sets, slot): a group is one depth's cells, from
# three sweeps (QK-norm is its own axis; HC and mHC, the slow ones, balance the two slots).
SWEEPS = [
    (f"schemes-{depth}", f"schemes-{depth}-{part}", grid, slot)
    for depth in DEPTHS
    for part, grid, slot in (
        ("a", "--set seed=1,2,3 --set model.residual=pre,lns,peri,ngpt", "a"),
        ("qk", "--set seed=1,2,3 --set model.qk_norm=rmsnorm --set model.residual=pre", "a"),
        ("hc", f"--set seed=1,2,3 --set model.residual={_HYPER},{_MHC}", "b"),
    )
]
GROUPS = {f"schemes-{depth}": f"{depth} layers" for depth in DEPTHS}
# (label, residual name, QK-norm) in the order the report lists them; Pre-LN is the baseline.
SCHEMES = [
    ("Pre-LN", "pre", False),
    ("Pre-LN + QK-norm", "pre", True),
    ("LNS", "lns", False),
    ("Peri-LN", "peri", False),
    ("HC (n = 4)", "hyper", False),
    ("mHC (n = 4)", "mhc", False),
    ("nGPT", "ngpt", False),
]


def depth_of(group: str) -> int:
    return int(group.rsplit("-", 1)[1])


def command(group: str, folder: str, grid: str) -> str:
    """The sweep of one SWEEPS entry, as it ran."""
    layers = f"model.decoder_layers={depth_of(group)}"
    return f"{_SWEEP} {_MULTI30K} {layers} {grid} --diagnose --out runs/study-llama/{folder}"


def commands(slot: str) -> list[str]:
    """The sweeps of one slot, 6 layers before 12, in the order they run."""
    return [command(group, folder, grid) for group, folder, grid, s in SWEEPS if s == slot]


if __name__ == "__main__":
    import sys

    print("\n".join(commands(sys.argv[1])))
