"""Loggers from the recipe (``trainer.loggers``), through Lightning's own classes, offline: W&B in
offline mode and MLflow with a local file store, with the logged values read back."""

from __future__ import annotations

import csv
import struct
from pathlib import Path
from typing import Any

import pytest
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.recipe import from_dict
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def wandb_records(run_file: Path) -> list[Any]:
    """The records of a W&B offline run file: wandb's transaction log, the LevelDB log format
    (a 7-byte file header, then 32 KiB blocks of records with a 7-byte header each)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    ident, _, _ = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loggers")
    recipe = from_dict(tiny(
        run={"dir": str(root / "run"), "name": "tiny-run", "project": "nz-test",
             "offline": True},
        trainer={"max_steps": 4, "val_every_steps": 2, "log_every_steps": 1,
                 "loggers": ["csv", "tensorboard", "wandb", "mlflow"]}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_SILENT", "true")
        patch.delenv("WANDB_API_KEY", raising=False)
        train.run(recipe, "tiny.yaml")
    return root / "run"


def csv_losses(run_dir: Path) -> dict[int, float]:
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        return {int(row["step"]): float(row["train/loss"]) for row in csv.DictReader(f)
                if row.get("train/loss")}


def test_mlflow_file_store_holds_the_metrics_and_the_recipe(logged_run: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(logged_run / "logs" / "mlruns").absolute().as_uri())
    experiment = client.get_experiment_by_name("nz-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "tiny-run"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id,
                                                                  "train/loss")}
    assert history == pytest.approx(csv_losses(logged_run), rel=1e-6)
    assert len(history) >= 3
    params = run.data.params
    assert params["recipe/model/d_model"] == "32" and params["recipe/task"] == "translation"


def test_wandb_offline_run_holds_the_metrics_and_the_recipe(logged_run: Path):
    import json

    (run_file,) = (logged_run / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    history: dict[int, float] = {}
    config: dict[str, Any] = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}
            if "train/loss" in items:
                history[int(items["trainer/global_step"])] = items["train/loss"]
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "run":
            assert record.run.display_name == "tiny-run" and record.run.project == "nz-test"
    assert history == pytest.approx(csv_losses(logged_run), rel=1e-6)
    assert config["recipe"]["model"]["d_model"] == 32
    # The file whole once train.run returns (close_loggers waits for W&B's service to write it
    # out), even on a loaded machine: it ends with the finished run's exit record.
    assert records[-1].WhichOneof("record_type") == "exit" and records[-1].exit.exit_code == 0


def test_tensorboard_and_csv_stay_the_default(logged_run: Path):
    assert list((logged_run / "logs" / "tb").glob("events.out.tfevents.*"))
    assert from_dict({}).trainer.loggers == ["csv", "tensorboard"]


@pytest.mark.parametrize(("loggers", "says"), [
    ("[csv,wandb]", None),
    ("[csv,csv]", "named twice"),
    ("[wandb]", "keep 'csv'"),
    ("[csv,comet]", "Input should be 'csv', 'tensorboard', 'wandb' or 'mlflow'"),
])
def test_recipe_validate_checks_the_loggers(loggers: str, says: str | None):
    quickstart = Path(__file__).parent.parent / "recipes" / "quickstart.yaml"
    result = CliRunner().invoke(app, ["recipe", "validate", str(quickstart),
                                      f"trainer.loggers={loggers}"])
    assert result.exit_code == (0 if says is None else 2), result.output
    if says:
        assert "trainer.loggers" in result.output and says in result.output


def test_a_logger_that_is_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    from normzoo.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'normzoo\[mlflow\]'"):
        from_dict({"trainer": {"loggers": ["csv", "mlflow"]}})


# -- what reaches other tools: the final test's scores, and the steps -------------------------

def tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the run's TensorBoard event files (TFRecord framing: a
    length, its CRC, an ``Event``, its CRC), read without TensorBoard installed."""
    from tensorboardX.proto import event_pb2

    scalars: dict[str, dict[int, float]] = {}
    for events in sorted((run_dir / "logs" / "tb").glob("events.out.tfevents.*")):
        data, pos = events.read_bytes(), 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos:pos + 8])
            event = event_pb2.Event()
            event.ParseFromString(data[pos + 12:pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def csv_metric(run_dir: Path, key: str) -> dict[int, float]:
    with open(run_dir / "logs" / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        return {int(row["step"]): float(row[key]) for row in csv.DictReader(f) if row.get(key)}


def test_test_bleu_and_chrf_reach_every_logger(logged_run: Path):
    import json

    from mlflow.tracking import MlflowClient

    summary = json.loads((logged_run / "summary.json").read_text(encoding="utf-8"))
    steps, test = summary["steps"], summary["test"]
    want = {"test/bleu": {steps: test["bleu"]}, "test/chrf": {steps: test["chrf"]}}
    assert test["chrf"] > 0  # not a vacuous comparison of zeros

    assert {key: csv_metric(logged_run, key) for key in want} == want

    scalars = tensorboard_scalars(logged_run)
    for key, values in want.items():
        assert scalars[key] == pytest.approx(values, rel=1e-6)

    client = MlflowClient(tracking_uri=(logged_run / "logs" / "mlruns").absolute().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("nz-test").experiment_id])
    for key, values in want.items():
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert history == pytest.approx(values)

    (run_file,) = (logged_run / "logs" / "wandb").glob("offline-run-*/run-*.wandb")
    logged: dict[str, dict[int, float]] = {}
    for record in wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                     for i in record.history.item}
            for key in want:
                if key in items:
                    logged.setdefault(key, {})[int(items["trainer/global_step"])] = items[key]
    assert logged.keys() == want.keys()
    for key, values in want.items():
        assert logged[key] == pytest.approx(values)


def test_tensorboard_has_the_steps_of_the_csv(logged_run: Path):
    """Every scalar sits at the same step in TensorBoard as in ``metrics.csv``: the 0-based
    index of the update for training and validation, the number of updates for the test."""
    scalars = tensorboard_scalars(logged_run)
    with open(logged_run / "logs" / "csv" / "metrics.csv", newline="", encoding="utf-8") as f:
        keys = [key for key in next(csv.reader(f)) if key not in ("step", "epoch")]
    assert {"train/loss", "train/lr", "val/loss", "test/bleu"} <= set(keys)
    for key in keys:
        assert scalars[key] == pytest.approx(csv_metric(logged_run, key), rel=1e-6), key


def test_the_final_test_keeps_tensorboards_training_scalars(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """tensorboardX names an events file by the second its writer opens: with the clock held
    at one second, a writer reopened for the final test would overwrite the training's file
    (as it did when the test began within the second after fit's end)."""
    import tensorboardX.event_file_writer as event_file_writer

    class Clock:
        @staticmethod
        def time() -> float:
            return 1_800_000_000.25

    monkeypatch.setattr(event_file_writer, "time", Clock)
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = from_dict(tiny(run={"dir": str(tmp_path / "run")},
                            trainer={"max_steps": 4, "val_every_steps": 2, "log_every_steps": 1,
                                     "loggers": ["csv", "tensorboard"]}))
    train.run(recipe, "tiny.yaml")
    scalars = tensorboard_scalars(tmp_path / "run")
    assert sorted(scalars["train/loss"]) == [0, 1, 2, 3]
    assert sorted(scalars["val/loss"]) == [1, 3]
    assert list(scalars["test/bleu"]) == [4]


def test_a_language_models_test_perplexity_reaches_mlflow(tmp_path: Path):
    from mlflow.tracking import MlflowClient
    from tiny import toy_text

    toy_text(tmp_path, (60, 8, 8))
    recipe = from_dict(tiny(
        task="causal_lm", model={"family": "decoder", "encoder_layers": 0},
        data={"source": "files", "dir": str(tmp_path)}, run={"dir": str(tmp_path / "run")},
        trainer={"max_steps": 2, "val_every_steps": 2, "loggers": ["csv", "mlflow"]}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
        summary = train.run(recipe, "lm.yaml")
    run_dir = tmp_path / "run"
    client = MlflowClient(tracking_uri=(run_dir / "logs" / "mlruns").absolute().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("normzoo").experiment_id])
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "test/ppl")}
    assert history == pytest.approx({summary["steps"]: summary["test"]["ppl"]})
    assert csv_metric(run_dir, "test/ppl") == pytest.approx(history)


def test_averaged_and_greedy_scores_go_to_every_logger():
    from types import SimpleNamespace

    from lightning.pytorch.loggers import Logger

    from normzoo.run.history import log_test_scores
    from normzoo.tasks.translation.final_test import logged_scores

    class Recording(Logger):
        name, version = "recording", 0

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[dict[str, float], int | None]] = []
            self.finalized: list[str] = []

        def log_metrics(self, metrics, step=None) -> None:
            self.calls.append((dict(metrics), step))

        def log_hyperparams(self, params, *args, **kwargs) -> None:
            pass

        def finalize(self, status: str) -> None:
            self.finalized.append(status)

    loggers = [Recording(), Recording()]
    summary = {"split": "test", "beam": 4, "bleu": 31.5, "chrf": 55.25, "greedy_bleu": 30.0,
               "signature": "nrefs:1|...", "copy_source_bleu": 1.0, "sentences": 10,
               "averaged": {"requested": 5, "checkpoints": ["step-10.ckpt"], "bleu": 32.0,
                            "chrf": 56.0, "greedy_bleu": 31.0}}
    log_test_scores(SimpleNamespace(loggers=loggers, global_step=120), logged_scores(summary))
    for logger in loggers:
        assert logger.calls == [({"test/bleu": 31.5, "test/chrf": 55.25, "test/greedy_bleu": 30.0,
                                  "test/averaged/bleu": 32.0, "test/averaged/chrf": 56.0,
                                  "test/averaged/greedy_bleu": 31.0}, 120)]
        assert logger.finalized == ["success"]
