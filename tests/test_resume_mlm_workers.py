"""A masked LM resumed mid-epoch with loader worker processes (the default on a GPU) trains on
the same masks as an uninterrupted run: the training masks are a function of the run's seed,
the epoch and the sentence, never of the process that collates the batch."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
import yaml
from test_resume import RECIPE, load, losses, normzoo, weights

MLM = {**RECIPE, "task": "mlm",
       "model": {**RECIPE["model"], "family": "encoder", "decoder_layers": 0,
                 "activation": "gelu"},
       "data": {**RECIPE["data"], "num_workers": 2}}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume-mlm")
    (root / "mlm.yaml").write_text(yaml.safe_dump(MLM))
    return root


def test_masks_do_not_depend_on_the_collating_process(workdir: Path):
    whole = normzoo(["train", "mlm.yaml", "run.dir=runs/whole"], workdir)
    assert whole.returncode == 0, whole.stderr
    inline = normzoo(["train", "mlm.yaml", "run.dir=runs/inline", "data.num_workers=0"],
                     workdir)
    assert inline.returncode == 0, inline.stderr
    assert losses(workdir / "runs" / "inline") == losses(workdir / "runs" / "whole")

    killed = normzoo(["train", "mlm.yaml", "run.dir=runs/killed"], workdir, ["step", "23"])
    assert killed.returncode == -signal.SIGKILL
    run = workdir / "runs" / "killed"
    assert load(run / "checkpoints" / "last.ckpt")["global_step"] == 20
    resumed = normzoo(["train", "mlm.yaml", "run.dir=runs/killed", "--resume", "auto"], workdir)
    assert resumed.returncode == 0, resumed.stderr
    assert losses(run) == losses(workdir / "runs" / "whole")
    a, b = weights(workdir / "runs" / "whole"), weights(run)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_forked_worker_does_not_keep_the_run_locked(tmp_path: Path):
    """A loader worker is a fork of the run: it lets go of the run's lock at once, so once the
    run is gone (a SIGKILL the workers notice only seconds later) a resume is not refused."""
    import os
    import time

    from normzoo.run.directory import RunLock

    lock = RunLock(tmp_path / "run").acquire()
    started, ready = os.pipe()
    child = os.fork()
    if child == 0:  # a worker that outlives its run for a while
        os.write(ready, b"x")  # it has started (and the fork's hooks have run)
        time.sleep(5)
        os._exit(0)
    try:
        assert os.read(started, 1) == b"x"
        lock.release()  # the run is gone; its worker still runs
        RunLock(tmp_path / "run").acquire().release()  # free all the same
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
