"""Where a translation run's final test decodes: on the device that trained it.

Lightning's teardown at the end of ``fit`` moves the model to the CPU. A GPU run's final test
then decoded test2016 four times on the host CPU (beam and greedy, best and averaged
checkpoint): an 18+18 cell of the depth study trained 4,500 updates on an H200 in nine minutes
and had not finished its test 200 s later. The end-to-end test records the device of every
decode (its ``gpu`` case is the one that can fail, on a GPU machine); the unit test below it
fails here too, with a stand-in task, if the decodes do not move to the strategy's device.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import tiny

from normzoo.inference import translate
from normzoo.recipe import from_dict
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.mark.parametrize("accelerator", [
    "cpu",
    pytest.param("gpu", marks=[pytest.mark.gpu, pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU")]),
])
def test_the_final_test_decodes_on_the_training_device(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       accelerator: str):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    decoded_on: list[torch.device] = []
    real = translate.translate_dataset

    def recording(model, *args, **kwargs):
        decoded_on.append(next(model.parameters()).device)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(translate, "translate_dataset", recording)
    from normzoo.tasks.translation import final_test

    # The best validation point at step 2, so steps 2 and 4 are the converged stretch averaged.
    monkeypatch.setattr(final_test, "best_checkpoint_step", lambda trainer: 2)
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            trainer={"max_steps": 4, "val_every_steps": 2, "keep_checkpoints": 2,
                                     "accelerator": accelerator, "devices": 1},
                            eval={"valid_bleu": False, "beam": 2, "average_last": 2}))
    summary = train.run(recipe, "tiny.yaml")
    # beam and greedy, for the best checkpoint and for the average of the last two
    assert [d.type for d in decoded_on] == ["cuda" if accelerator == "gpu" else "cpu"] * 4
    assert summary["test"]["averaged"]["checkpoints"] == ["step-2.ckpt", "step-4.ckpt"]
    assert "bleu" in summary["test"]


def test_the_decodes_run_on_the_strategys_root_device_and_the_model_returns_to_the_cpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Without a GPU here, a module that records where ``.to``/``.cpu`` put it stands for the
    task: the decodes must see it on the strategy's root device (a CUDA device here, as after a
    GPU fit), and it must end on the CPU, where Lightning's teardown left it."""
    from types import SimpleNamespace

    from normzoo.tasks.translation import final_test

    class Task(torch.nn.Module):
        place = "cpu"  # where Lightning's teardown leaves the model

        def to(self, device):  # type: ignore[override]
            self.place = str(device)
            return self

        def cpu(self):  # type: ignore[override]
            self.place = "cpu"
            return self

    task = Task()
    task.model = torch.nn.Linear(2, 2)
    seen = []
    monkeypatch.setattr(final_test, "_score_test",
                        lambda recipe, model, data, run_dir, suffix:
                        seen.append(task.place) or {"bleu": 1.0})
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 1)),
                              checkpoint_callback=SimpleNamespace(best_model_path=""),
                              default_root_dir=str(tmp_path), loggers=[], global_step=4)
    recipe = SimpleNamespace(eval=SimpleNamespace(average_last=1))
    from normzoo.plugin import FinalTest

    end = FinalTest(recipe, task, None, trainer, training_ended=lambda: None,
                    in_loops=lambda: ({}, {}), last_validation=dict, log_test=lambda scores: None)
    assert final_test.test_translation(end) == {"bleu": 1.0}
    assert seen == ["cuda:1"]
    assert task.place == "cpu"
