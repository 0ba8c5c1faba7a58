"""What the precision study runs: the depth study's recipe at 6+6 layers with three seeds
(``shallow``) and at 18+18 with one (``deep``), Post-LN and Pre-LN, in ``32-true`` and in
``bf16-mixed``, as the commands that ran them. ``report.py`` collects and reports
their cells.
"""

from __future__ import annotations

RECIPE = "recipes/studies/multi30k_depth.yaml"
STUDIES = ("shallow", "deep")
PRECISIONS = {"32-true": "fp32", "bf16-mixed": "bf16-mixed"}
SCHEMES = {"post": "Post-LN", "pre": "Pre-LN"}
SEEDS = {"shallow": ("1", "2", "3"), "deep": ("1",)}
DEPTH = {"shallow": "6+6", "deep": "18+18"}
COMMANDS = {
    "shallow": f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE} data.dir=../shared/data/multi30k "
               "--set seed=1,2,3 --set model.residual=post,pre "
               "--set trainer.precision=32-true,bf16-mixed --out runs/study-precision/shallow",
    "deep": f"OMP_NUM_THREADS=1 normzoo sweep {RECIPE} data.dir=../shared/data/multi30k "
            "--set model.encoder_layers,model.decoder_layers=18 --set model.residual=post,pre "
            "--set trainer.precision=32-true,bf16-mixed --out runs/study-precision/deep",
}
