"""One training process of ``data_scale.py``: ``normzoo`` that stops right after its first step.

    python benchmarks/data_scale_child.py OUT_DIR -- train RECIPE [OVERRIDES ...]

``data_scale.py`` starts every ``normzoo train`` and ``normzoo prepare`` it measures through this
file: it patches ``normzoo.run.training`` to stop the run right after the first optimizer step,
records the time and ``ru_maxrss`` in ``OUT_DIR``, and exits. With ``DATA_SCALE_TOKENIZER`` set,
the in-memory path of an earlier revision loads that tokenizer instead of training one.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def child(out_dir: str, argv: list[str]) -> None:
    """Run ``normzoo`` with ``argv``; at the first optimizer step write this rank's time and
    peak memory to ``out_dir`` and leave at once (no checkpoint, validation or test)."""
    from lightning.pytorch.callbacks import Callback

    from normzoo import cli
    from normzoo.run import training as train

    class FirstStep(Callback):
        batch_time = None

        def on_train_batch_start(self, trainer, *args) -> None:
            if self.batch_time is None:  # data mapped, model built, first batch in hand
                self.batch_time = time.time()

        def on_train_batch_end(self, trainer, *args) -> None:
            if trainer.global_step >= 1:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
                record = {"time": time.time(), "batch_time": self.batch_time,
                          "peak_rss": peak, "rank": trainer.global_rank}
                path = Path(out_dir) / f"rank{trainer.global_rank}.json"
                path.write_text(json.dumps(record))
                os._exit(0)

    build = train.build_trainer

    def build_and_arm(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.callbacks.append(FirstStep())
        return trainer

    train.build_trainer = build_and_arm
    if argv[0] == "prepare":  # its peak memory, whatever way it ends
        try:
            cli.app(args=argv, prog_name="normzoo")
        finally:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            (Path(out_dir) / "prepare.json").write_text(json.dumps({"peak_rss": peak}))
    if os.environ.get("DATA_SCALE_TOKENIZER"):
        warm_tokenizer(os.environ["DATA_SCALE_TOKENIZER"])
    # sys.argv stays this script's: Lightning's DDP launcher re-runs it for the second rank.
    cli.app(args=argv, prog_name="normzoo")


def warm_tokenizer(path: str) -> None:
    """The in-memory path with its tokenizer cache warm: it still reads and hashes the training
    text to find its tokenizer, as it did, but loads the prepared path's tokenizer (the same
    training text and settings) instead of training one for minutes."""
    from normzoo.data import tokenizer
    from normzoo.tasks import datamodule

    def cached(texts, **settings):
        tokenizer.corpus_key(texts, settings)  # the cost of finding the cache entry
        return tokenizer.Tokenizer.load(path)

    datamodule.train_tokenizer = cached


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[3:])
