"""The recipe's schema: every section, every field's range, and every rule that ties a section's
fields together, so that validating a recipe once catches all that a run would refuse; the rules
that tie one section to another are :mod:`normzoo.recipe.rules`, which the loader applies too.
Loading (YAML, overrides, error collection) lives in :mod:`normzoo.recipe.loading`.

A cross-field rule raises :func:`~normzoo.registry.options.rule_error` with the problems
located relative to its section; :func:`~normzoo.registry.options.located_problems` puts them
under the section's path.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import Field, create_model, field_validator, model_validator

from normzoo.errors import Problem
from normzoo.models.config import ModelConfig
from normzoo.recipe.data import DataConfig
from normzoo.recipe.optim import OptimConfig
from normzoo.recipe.rules import section_problems, task_problems
from normzoo.recipe.section import Section
from normzoo.registry.options import rule_error

_Section = Section


LoggerName = Literal["csv", "tensorboard", "wandb", "mlflow"]
# The modules a logger can run on (any one), and what to install for it.
LOGGER_PACKAGES = {"tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
                   "wandb": (("wandb",), "normzoo[wandb]"),
                   "mlflow": (("mlflow",), "normzoo[mlflow]")}


def logger_problems(loggers: list[str]) -> list[Problem]:
    """A logger named twice, CSV left out, or a logger whose package is not installed (looked
    up without importing it)."""
    import importlib.util

    problems = []
    if len(set(loggers)) != len(loggers):
        problems.append(Problem("loggers", f"{loggers}: a logger is named twice"))
    if "csv" not in loggers:
        # logs/csv/metrics.csv is normzoo's own record: a resumed run's history, sweep results.
        problems.append(Problem("loggers", f"{loggers}: keep 'csv', normzoo's own record of the "
                                "run (resume history, sweep results); add others beside it"))
    for name in dict.fromkeys(loggers):
        modules, extra = LOGGER_PACKAGES.get(name, ((), ""))
        if modules and all(importlib.util.find_spec(module) is None for module in modules):
            problems.append(Problem("loggers", f"'{name}' needs the {modules[0]} package, "
                                    f"which is not installed: pip install '{extra}'"))
    return problems


class TrainerConfig(_Section):
    """What ``lightning.Trainer`` gets: length, validation cadence, hardware, precision."""

    max_steps: int = Field(default=100_000, gt=0)
    max_epochs: int | None = Field(default=None, gt=0)
    max_time: str | None = Field(default=None, description="wall-clock limit, DD:HH:MM:SS")
    val_every_steps: int = Field(default=1000, gt=0)
    log_every_steps: int = Field(default=50, gt=0)
    accumulate: int = Field(default=1, gt=0)
    precision: Literal["32-true", "bf16-mixed", "16-mixed", "bf16-true"] = "32-true"
    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps"] = "auto"
    devices: int | Literal["auto"] = 1
    num_nodes: int = Field(default=1, gt=0)
    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    save_top_k: int = Field(default=1, ge=0, description="best checkpoints kept")
    keep_checkpoints: int = Field(
        default=5, ge=0,
        description="most recent step-N.ckpt kept (one per validation), for export --average",
    )
    progress_bar: bool = True
    # Early stopping, as fairseq's --patience: Lightning's EarlyStopping on the monitored
    # validation metric (validation loss, or BLEU for translation with eval.valid_bleu), its
    # state kept in checkpoints so that a resumed run counts on.
    patience: int | None = Field(
        default=None, gt=0, description="stop after this many validations without improvement "
        "of the monitored metric; unset: run to the step, time or epoch limit")
    min_delta: float = Field(default=0.0, ge=0, description="with patience: a smaller change "
                             "of the monitored metric is no improvement")
    loggers: list[LoggerName] = Field(
        default=["csv", "tensorboard"],
        description="Lightning loggers: csv, tensorboard, wandb, mlflow (options in `run`)")
    slurm_requeue: bool = Field(
        default=True,
        description="on SLURM, the warning signal (SIGUSR1) also requeues the job, which then "
        "resumes from the checkpoint saved at that signal",
    )
    # A bool as well as the modes: YAML reads a bare `off`/`on` as false/true.
    compile: bool | Literal["default", "reduce-overhead", "max-autotune"] = Field(
        default=False,
        description="torch.compile the model's forward: true (= 'default') or a mode "
        "(opt-in: compiling takes minutes and pays off only on long runs)",
    )
    compile_scope: Literal["auto", "layers", "model"] = Field(
        default="auto",
        description="with compile: 'model' compiles the model and its loss as one region; "
        "'layers' each Transformer layer (once per layer class: every layer of a stack shares "
        "its graph), the embeddings and final norms, the rest eager; 'auto': layers on a CPU "
        "(measured) and on CUDA (not yet measured there), model elsewhere "
        "(normzoo.tasks.compiled.AUTO_SCOPE)",
    )

    @field_validator("max_time")
    @classmethod
    def _days_hours_minutes_seconds(cls, value: str | None) -> str | None:
        # Lightning's own format check, which would otherwise fail only once the run starts.
        if value is not None and not re.fullmatch(r"\d+:\d\d:\d\d:\d\d", value.strip()):
            raise ValueError(f"'{value}' is not DD:HH:MM:SS (e.g. 00:12:00:00 for 12 hours)")
        return value

    @field_validator("devices")
    @classmethod
    def _device_count(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1 and value != -1:
            raise ValueError(f"{value} devices: use a positive count, -1 (all) or 'auto'")
        return value

    @model_validator(mode="after")
    def _loggers_installed(self) -> TrainerConfig:
        problems = logger_problems(self.loggers)
        if problems:
            raise rule_error(*problems)
        return self


class EvalConfig(_Section):
    """Decoding for validation BLEU and ``normzoo evaluate``."""

    beam: int = Field(default=1, gt=0)
    lenpen: float = Field(default=0.6, ge=0)
    max_len_a: float = Field(default=1.2, ge=0, description="max target length = a*src + b")
    max_len_b: int = Field(default=10, ge=0)
    valid_bleu: bool = Field(default=True, description="decode the validation split for BLEU")
    valid_bleu_limit: int | None = Field(default=None, gt=0, description="sentences decoded")
    average_last: int = Field(
        default=1, ge=1, description="also score the average of the newest N periodic "
        "checkpoints from the best validation point on (translation; none if the best is the "
        "newest; needs trainer.keep_checkpoints >= N)")


class DiagnosticsConfig(_Section):
    """Measurements logged during training, and when to stop a diverging run."""

    every_steps: int = Field(
        default=0, ge=0, description="log stream/branch/gradient diagnostics every N steps; 0: off"
    )
    guard: bool = Field(default=True, description="stop on a non-finite loss or gradient")
    max_loss: float | None = Field(default=None, gt=0, description="also stop above this loss")


class RunConfig(_Section):
    """Where the run lives, and what the experiment trackers call it."""

    dir: str | None = Field(default=None, description="run directory; default runs/<recipe>")
    name: str | None = Field(default=None, description="run name in W&B and MLflow; default: "
                             "the run directory's name")
    project: str | None = Field(default=None, description="W&B project, MLflow experiment; "
                                "default 'normzoo'")
    tracking_uri: str | None = Field(default=None, description="MLflow tracking server or store; "
                                     "default a file store in the run's logs/mlruns")
    entity: str | None = Field(default=None, description="W&B entity (team or user)")
    offline: bool = Field(default=False, description="W&B: log to the run directory only, "
                          "to upload later with `wandb sync`")


class _InitFields(_Section):
    """Start a new run from trained weights with a fresh optimizer and schedule (fairseq's
    ``--restore-file`` with ``--reset-optimizer``): to fine-tune, or to continue a study cell
    under another schedule.

    ``from`` is a ``normzoo train`` checkpoint (``.ckpt``) or a ``normzoo export`` folder; its
    weights are loaded into the model this recipe builds before the first step, and the run
    trains on its tokenizer (the embeddings' rows are its tokens). The run starts at step 0
    with the recipe's optimizer and schedule. ``strict`` (the default) refuses weights that do
    not fit the model exactly, naming each difference; ``strict: false`` loads the weights
    that fit and keeps the fresh initialisation of the others, saying which.

    Not to be confused with ``--resume``, which continues a run where it stopped: optimizer,
    schedule, step and generator states.
    """

    @property
    def checkpoint(self) -> str | None:
        """``from`` (a Python keyword, so not an attribute)."""
        return getattr(self, "from")


# Built by create_model: the recipe key is `from`, which class syntax cannot declare. A plain
# field name (no alias), so overrides, error locations and recipe.yaml all say `init.from`.
InitConfig = create_model(
    "InitConfig", __base__=_InitFields, __doc__=_InitFields.__doc__,
    **{"from": (str | None, Field(default=None, description="checkpoint (.ckpt) or export "
                                  "folder whose weights start this run (step 0, a fresh "
                                  "optimizer and schedule)")),
       "strict": (bool, Field(default=True, description="refuse weights that do not fit the "
                              "model exactly; false: load those that fit, keep the others' "
                              "fresh initialisation"))})


class Recipe(_Section):
    """A whole run: task, model, data, optimisation, trainer and evaluation settings."""

    # A registered task (normzoo.tasks entry points: normzoo list tasks) and its options.
    task: str = "translation"
    task_options: dict[str, Any] = Field(default_factory=dict)
    # Lightning silently replaces a seed outside numpy's range with 0.
    seed: int = Field(default=1, ge=0, le=2**32 - 1)
    run: RunConfig = RunConfig()
    # The defaults, valid by construction: built without validation, so that importing the
    # schema does not import torch and the plugins for the registry check.
    model: ModelConfig = ModelConfig.model_construct()
    init: InitConfig = InitConfig()  # type: ignore[valid-type]
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()
    eval: EvalConfig = EvalConfig()
    diagnostics: DiagnosticsConfig = DiagnosticsConfig()

    @field_validator("task", mode="before")
    @classmethod
    def _registered_task(cls, task: Any) -> str:
        """One of the registered tasks (read from package metadata: nothing is imported); an
        empty or non-text value is told the names too, not pydantic's "a valid string"."""
        from normzoo import registry
        from normzoo.registry.options import close_match

        names = registry.tasks.names()
        if not isinstance(task, str) or not task.strip():
            given = repr(task) if task else "an empty value"
            raise ValueError(f"{given} is no task; name one of the registered tasks: "
                             f"{', '.join(names)}")
        if task not in names:
            raise ValueError(f"unknown task '{task}'{close_match(task, names)}; registered: "
                             f"{', '.join(names)}")
        return task

    @model_validator(mode="after")
    def _sections_agree(self) -> Recipe:
        problems = self.cross_section_problems()
        if problems:
            raise rule_error(*problems)
        return self

    def cross_section_problems(self) -> list[Problem]:
        """The rules that tie one section to another (:mod:`~normzoo.recipe.rules`), on this
        recipe's typed sections: the one call of them, which the loader makes too on what is
        left of an invalid recipe (:func:`~normzoo.recipe.loading.from_dict`)."""
        return section_problems(self.task, self.model, self.data, self.optim, self.trainer,
                                self.eval) + task_problems(self.task, self.task_options)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (YAML/JSON-safe) that :func:`from_dict` reads back to an equal recipe."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


