"""What the depth study runs: its tiers, and the sweeps of each, as the commands that ran them.

``studies/depth/report.py`` collects and reports their cells; ``studies/depth/run.sh`` (CPU) and
``studies/depth/gpu.sh`` (a lent GPU) run them.
"""

from __future__ import annotations

RECIPE = "recipes/studies/multi30k_papers.yaml"
TIERS = ("ceiling", "stability", "nowarmup", "nowarmup6")
PRECISION = "bf16-mixed"  # every comparison's cells share it (the 18+18 no-warm-up pair: 32-true)
SCHEMES = {"post": "Post-LN", "pre": "Pre-LN", "deepnorm": "DeepNorm",
           "admin": "Admin (profiled)", "resi_dual": "ResiDual", "subln": "Sub-LN"}
PLANNED = {"ceiling": 6, "stability": 18, "nowarmup": 2, "nowarmup6": 6}
_SWEEP = f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE} data.dir=../shared/data/multi30k"
_DEEP = "model.encoder_layers=18 model.decoder_layers=18"
_STABLE = f"{_DEEP} trainer.max_steps=4500"
_NOWARMUP = f"{_DEEP} optim.warmup_steps=0 trainer.max_steps=1500"
_NOWARMUP6 = "optim.warmup_steps=0 trainer.max_steps=1500"
_ADMIN = "'{name: admin, init: profiled}'"
# The first study (2026-11-24 to 26, from a clone at STUDY_COMMIT, runs/study-papers/<folder>):
# one seed a deep cell; Pre-LN and DeepNorm 18+18 and the no-warm-up pair fell back to 32-true
# on a CPU without bf16. (tier, folder, args); all finished.
SWEEPS = [
    ("ceiling", "ceiling-post", "--set seed=1,2,3 --set model.residual=post"),
    ("ceiling", "ceiling-pre", "--set seed=1,2,3 --set model.residual=pre"),
    ("nowarmup", "nowarmup-post", f"{_NOWARMUP} --set model.residual=post --diagnose"),
    ("nowarmup", "nowarmup-pre", f"{_NOWARMUP} --set model.residual=pre --diagnose"),
    ("stability", "stability-a", f"{_STABLE} --set 'model.residual=post,pre' --diagnose"),
    ("stability", "stability-b", f"{_STABLE} --set 'model.residual={{name: admin, init: "
                                 "profiled},deepnorm' --diagnose"),
    ("stability", "stability-c", f"{_STABLE} --set model.residual=resi_dual --diagnose"),
    ("stability", "stability-d", f"{_STABLE} --set model.residual=subln --diagnose"),
]
STUDY_COMMIT = "2a99efa"
# Issue 35 (from 2026-11-26, runs/study-seeds/<folder>): the 18+18 comparisons to three seeds,
# all bf16-mixed, and the 6+6 no-warm-up control. (tier, folder, args, residual, seeds, slot,
# commit). Post-LN and Admin seed 2 ran from a clone at 181c692, which trains bit for bit as the
# study's commit (an 18+18 Post-LN cell's first 100 losses equal); the rest from 3fd4a6b, the
# same training code with the absolute branch norms in diagnose.csv and the papers' averaging.
# Pre-LN and DeepNorm seed 1 trained on a lent H200 instead (studies/depth/gpu.sh, 181c692).
STABLE_ARGS = f"{_STABLE} --diagnose"
SEED_SWEEPS = [
    ("stability", "stability-post", STABLE_ARGS, "post", (2,), "a", "181c692"),
    ("nowarmup6", "nowarmup6-post", f"{_NOWARMUP6} --diagnose", "post", (1, 2, 3), "a",
     "3fd4a6b"),
    ("stability", "stability-pre", STABLE_ARGS, "pre", (2, 3), "a", "3fd4a6b"),
    ("stability", "stability-post", STABLE_ARGS, "post", (3,), "a", "3fd4a6b"),
    ("stability", "stability-admin", STABLE_ARGS, _ADMIN, (2,), "b", "181c692"),
    ("nowarmup6", "nowarmup6-pre", f"{_NOWARMUP6} --diagnose", "pre", (1, 2, 3), "b",
     "3fd4a6b"),
    ("stability", "stability-deepnorm", STABLE_ARGS, "deepnorm", (2, 3), "b", "3fd4a6b"),
    ("stability", "stability-admin", STABLE_ARGS, _ADMIN, (3,), "b", "3fd4a6b"),
]
SEED_COMMIT = "3fd4a6b"  # the clone studies/depth/run.sh runs the remaining sweeps from


def command(folder: str, args: str, residual: str, seeds: tuple[int, ...]) -> str:
    """The sweep of one SEED_SWEEPS entry, for the given seeds."""
    return (f"{_SWEEP} {args} --set seed={','.join(map(str, seeds))} "
            f"--set model.residual={residual} --out runs/study-seeds/{folder}")


COMMANDS = [f"{_SWEEP} {args} --out runs/study-papers/{folder}" for _, folder, args in SWEEPS]
SEED_COMMANDS = [command(folder, args, residual, seeds)
                 for _, folder, args, residual, seeds, _, _ in SEED_SWEEPS]
