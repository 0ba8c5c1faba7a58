"""Recipes: one YAML file describes a whole run; ``key=value`` overrides change it from the CLI.

Loading goes YAML (safe loader) -> overrides applied to the plain dict -> pydantic validation ->
registry check. Every problem is collected and reported at once with its key path and, for an
unknown key, a close-match suggestion (spaCy-style). Nothing in a recipe is ever imported or
executed.
"""

from __future__ import annotations

import contextlib
import copy
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from normzoo.errors import ConfigError, Problem
from normzoo.models.config import ModelConfig
from normzoo.options import boolean_numbers, close_match, key_name, pydantic_problems

Task = Literal["translation", "mlm", "causal_lm"]
FAMILY_OF_TASK = {"translation": "encoder_decoder", "mlm": "encoder", "causal_lm": "decoder"}


def _family_problem(task: Any, family: Any) -> Problem | None:
    """The problem with ``model.family`` if it does not fit ``task`` (both already valid)."""
    expected = FAMILY_OF_TASK.get(task)
    if expected is None or family not in FAMILY_OF_TASK.values() or family == expected:
        return None
    return Problem("model.family", f"task '{task}' needs family '{expected}', not '{family}'")


class _Section(BaseModel):
    # nan and infinity pass range checks such as gt=0 (inf > 0) and mean nothing in a recipe.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TokenizerConfig(_Section):
    """Subword tokenizer trained on the training split (cached by content hash).

    Translation uses one joint source/target vocabulary, so embeddings can be shared.
    """

    type: Literal["bpe", "unigram"] = "bpe"
    vocab_size: int = Field(default=8000, ge=64, le=2**24)
    min_frequency: int = Field(default=2, ge=1)
    lowercase: bool = False
    sample_size: int | None = Field(
        default=1_000_000, gt=0,
        description="train on a seeded sample of this many training examples (null: all)")
    sample_seed: int = Field(default=0, description="seed of that sample")


class DataConfig(_Section):
    """Where the text comes from and how it is batched.

    * ``source: builtin`` — the toy corpus shipped with normzoo (no network, no files).
    * ``source: files`` — line-aligned files ``{dir}/{split}.{lang}`` (translation) or
      ``{dir}/{split}.txt`` (mlm / causal_lm).
    * ``source: hub`` — a Hugging Face dataset ``path`` / ``name`` (network, or a local folder
      in the hub's layout given as ``path``).
    """

    source: Literal["builtin", "files", "hub"] = "builtin"
    dir: str | None = None
    path: str | None = None
    name: str | None = None
    src_lang: str = "en"
    tgt_lang: str = "xx"
    train_split: str = "train"
    valid_split: str = "valid"
    test_split: str = "test"
    text_field: str = "text"
    max_tokens: int = Field(default=4096, gt=0, description="token budget of one batch")
    max_len: int = Field(default=256, gt=1, description="longer examples are dropped")
    train_limit: int | None = Field(default=None, gt=0, description="use the first N examples")
    valid_limit: int | None = Field(
        default=None, gt=0, description="use the first N examples of the validation and test splits"
    )
    mask_prob: float = Field(default=0.15, gt=0, lt=1, description="MLM: fraction masked")
    num_workers: int = Field(default=0, ge=0)
    streaming: bool = Field(
        default=False,
        description="hub corpora too large to prepare: stream and tokenize while training")
    shuffle_buffer: int = Field(default=10_000, gt=0, description="streaming: shuffle buffer")
    tokenizer: TokenizerConfig = TokenizerConfig()

    @model_validator(mode="after")
    def _source_fields(self) -> DataConfig:
        if self.source == "files" and not self.dir:
            raise ValueError(ConfigError([Problem("dir", "required when source is 'files'")]))
        if self.source == "hub" and not self.path:
            raise ValueError(ConfigError([Problem("path", "required when source is 'hub'")]))
        if self.streaming and self.source != "hub":
            raise ValueError(ConfigError([Problem("streaming", "streams hub datasets only; "
                                                  "prepare local files with `normzoo prepare`")]))
        return self


Beta = Annotated[float, Field(ge=0, lt=1)]  # what torch.optim.AdamW accepts


class OptimConfig(_Section):
    """AdamW with a warm-up then inverse-square-root or cosine decay."""

    lr: float = Field(default=5e-4, gt=0)
    betas: tuple[Beta, Beta] = (0.9, 0.98)
    eps: float = Field(default=1e-8, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    schedule: Literal["inverse_sqrt", "cosine", "constant"] = "inverse_sqrt"
    warmup_steps: int = Field(default=4000, ge=0)
    min_lr: float = Field(default=0.0, ge=0)
    clip_norm: float = Field(default=0.0, ge=0, description="0 disables gradient clipping")
    label_smoothing: float = Field(default=0.1, ge=0, lt=1)

    @model_validator(mode="after")
    def _floor_below_peak(self) -> OptimConfig:
        if self.min_lr > self.lr:
            raise ValueError(ConfigError([Problem("min_lr", f"{self.min_lr} is above the peak "
                                                  f"learning rate lr={self.lr}")]))
        return self


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


class EvalConfig(_Section):
    """Decoding for validation BLEU and ``normzoo evaluate``."""

    beam: int = Field(default=1, gt=0)
    lenpen: float = Field(default=0.6, ge=0)
    max_len_a: float = Field(default=1.2, ge=0, description="max target length = a*src + b")
    max_len_b: int = Field(default=10, ge=0)
    valid_bleu: bool = Field(default=True, description="decode the validation split for BLEU")
    valid_bleu_limit: int | None = Field(default=None, gt=0, description="sentences decoded")


class DiagnosticsConfig(_Section):
    """Measurements logged during training, and when to stop a diverging run."""

    every_steps: int = Field(
        default=0, ge=0, description="log stream/branch/gradient diagnostics every N steps; 0: off"
    )
    guard: bool = Field(default=True, description="stop on a non-finite loss or gradient")
    max_loss: float | None = Field(default=None, gt=0, description="also stop above this loss")


class RunConfig(_Section):
    dir: str | None = Field(default=None, description="run directory; default runs/<recipe>")


class Recipe(_Section):
    """A whole run: task, model, data, optimisation, trainer and evaluation settings."""

    task: Task = "translation"
    # Lightning silently replaces a seed outside numpy's range with 0.
    seed: int = Field(default=1, ge=0, le=2**32 - 1)
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    trainer: TrainerConfig = TrainerConfig()
    eval: EvalConfig = EvalConfig()
    diagnostics: DiagnosticsConfig = DiagnosticsConfig()

    @model_validator(mode="after")
    def _task_fits_family(self) -> Recipe:
        problem = _family_problem(self.task, self.model.family)
        if problem is not None:
            raise ValueError(ConfigError([problem]))
        residual = self.model.residual
        if (self.trainer.strategy == "fsdp" and residual.name == "admin"
                and residual.options.get("init") == "profiled"):
            # Profiling writes w inside the sharded layers; not supported (nor tested) there.
            raise ValueError(ConfigError([Problem(
                "model.residual.init", "'profiled' is not supported with trainer.strategy=fsdp; "
                "use closed_form, or strategy ddp")]))
        if self.data.streaming and self.task == "translation":
            raise ValueError(ConfigError([Problem(
                "data.streaming", "streams causal_lm and mlm corpora; translation corpora are "
                "prepared once with `normzoo prepare` and memory-mapped")]))
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain data (YAML/JSON-safe) that :func:`from_dict` reads back to an equal recipe."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# -- plain data from YAML -------------------------------------------------------------------------

# A recipe is at most four levels deep (model.residual.option: [list]); anything far deeper is
# a mistake, and would exhaust Python's recursion limit in copying or validation.
MAX_DEPTH = 16


class _RecipeLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys: YAML forbids them, and PyYAML would otherwise
    keep the last of two ``model:`` sections without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            with contextlib.suppress(TypeError):  # an unhashable key: the base class says so
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key '{key}'", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


class _Unreadable(Exception):
    """YAML text that gives no plain data; the message says why, in one line."""


def _parse_yaml(text: str) -> Any:
    """``text`` as plain data (safe loader); :class:`_Unreadable` whatever the reason it is not."""
    try:
        data = yaml.load(text, Loader=_RecipeLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise _Unreadable(f"malformed YAML{where}: {problem}") from None
    except RecursionError:
        raise _Unreadable(f"malformed YAML: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as error:  # a constructor's own check: 2001-02-30, a 5000-digit number
        reason = str(error).split(";")[0]
        raise _Unreadable(f"malformed YAML: a value cannot be read ({reason})") from None
    problem = _shape_problem(data)
    if problem is not None:
        raise _Unreadable(problem)
    return data


def _containers(node: Any) -> list[Any]:
    values = node.values() if isinstance(node, dict) else node if isinstance(
        node, list | tuple) else ()
    return [value for value in values if isinstance(value, dict | list | tuple)]


def _shape_problem(data: Any) -> str | None:
    """Why ``data`` is no recipe-shaped plain data (too deep, or containing itself), or None.

    Iterative, and each shared node is visited once: YAML aliases can make a small file a
    structure with billions of paths ("billion laughs") or a cycle.
    """
    height: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, expanded = stack.pop()
        children = _containers(node)
        if expanded:
            on_path.discard(id(node))
            height[id(node)] = 1 + max((height[id(child)] for child in children), default=0)
        elif id(node) in on_path:
            return "contains itself (a YAML alias *x inside the anchor &x it refers to)"
        elif id(node) not in height:
            on_path.add(id(node))
            stack.append((node, True))
            stack += [(child, False) for child in children]
    depth = height.get(id(data), 0)
    if depth > MAX_DEPTH:
        return f"nested {depth} levels deep; a recipe needs at most 4 (the limit is {MAX_DEPTH})"
    return None


def _check_shape(data: Any, title: str) -> None:
    problem = _shape_problem(data)
    if problem is not None:
        raise ConfigError([Problem("", problem)], title)


# -- overrides ------------------------------------------------------------------------------------


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=3e-4"`` -> ``("optim.lr", 0.0003)``; the value is read as a YAML scalar."""
    if "=" not in text:
        raise ConfigError([Problem(text, "an override must look like key=value")],
                          "invalid override")
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError([Problem(text, "empty key")], "invalid override")
    try:
        value = _parse_yaml(raw) if raw.strip() else None
    except _Unreadable as error:
        raise ConfigError([Problem(key, f"value is not valid YAML ({error})")],
                          "invalid override") from None
    # YAML reads "1e-4" as a string (YAML 1.1); users mean a number.
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value) if any(c in value.lower() for c in ".e") else value
    return key, value


def _is_text_field(key: str) -> bool:
    """Whether the recipe field at ``key`` holds text (``data.tgt_lang``, ``run.dir``...)."""
    model: type[BaseModel] = Recipe
    parts = key.split(".")
    for part in parts[:-1]:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return False
        model = annotation
    field = model.model_fields.get(parts[-1])
    if field is None:
        return False
    return field.annotation is str or set(get_args(field.annotation)) == {str, type(None)}


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``key=value`` set, creating sections as needed."""
    _check_shape(data, "invalid recipe")
    data = copy.deepcopy(data)
    problems = []
    for text in overrides:
        try:
            key, value = parse_override(text)
        except ConfigError as error:
            problems += error.problems
            continue
        if value is not None and not isinstance(value, str) and _is_text_field(key):
            # YAML would read data.tgt_lang=no (Norwegian) as false, and
            # data.valid_split=2013 as a number: a text field takes the text as written.
            value = text.partition("=")[2].strip()
        node = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif isinstance(child, str) and parts[: i + 1] in (["model", "norm"],
                                                               ["model", "residual"]):
                child = node[part] = {"name": child}  # model.residual.alpha=... on a bare name
            elif not isinstance(child, dict):
                problems.append(Problem(".".join(parts[: i + 1]), "is a value, not a section"))
                break
            node = child
        else:
            # A new scheme or norm name replaces the old mapping with its options, which
            # belonged to the old one.
            node[parts[-1]] = value
    if problems:
        raise ConfigError(problems, "invalid override")
    return data


# -- loading --------------------------------------------------------------------------------------


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The recipe file as a dict; a clear error for a missing file or malformed YAML."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([Problem("", f"recipe file not found: {path}")], "cannot read recipe")
    try:
        data = _parse_yaml(path.read_text(encoding="utf-8"))
    except _Unreadable as error:
        raise ConfigError([Problem("", f"{path}: {error}")], "cannot read recipe") from None
    except UnicodeDecodeError:
        raise ConfigError([Problem("", f"{path}: not UTF-8 text")], "cannot read recipe") from None
    except OSError as error:  # unreadable (permissions, an I/O error)
        raise ConfigError([Problem("", f"{path}: {error.strerror or error}")],
                          "cannot read recipe") from None
    if data is None:  # no text, only whitespace or comments: not "every default" by mistake
        raise ConfigError([Problem("", f"recipe file {path} is empty; a recipe needs at least its "
                                   "task (write '{}' to mean every default)")],
                          "cannot read recipe")
    if not isinstance(data, dict):
        raise ConfigError([Problem("", f"{path}: the top level must be a mapping of sections")],
                          "cannot read recipe")
    return data


def _inner_config_error(item: Any) -> ConfigError | None:
    """The :class:`ConfigError` a model validator raised inside a pydantic error item, if any."""
    inner = item.get("ctx", {}).get("error")
    inner = inner.args[0] if isinstance(inner, ValueError) and inner.args else inner
    return inner if isinstance(inner, ConfigError) else None


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` cut where it leaves ``data``: pydantic adds the branch of a union
    (``trainer.devices.int``), which is no key of the recipe."""
    node = data
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list | tuple) and isinstance(part, int) and part < len(node)
        if in_dict or in_list:
            node = node[part]
        else:
            return loc[: i + 1] if isinstance(node, dict) else loc[:i]
    return loc


def _nested_problems(error: pydantic.ValidationError, data: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for item in error.errors():
        inner = _inner_config_error(item)
        if inner is not None:
            prefix = ".".join(str(p) for p in item["loc"])
            problems += inner.prefixed(prefix).problems if prefix else inner.problems
            continue
        loc = _data_loc(data, item["loc"])
        (problem,) = pydantic_problems([{**item, "loc": loc}], "", Recipe)
        union = [i for i, p in enumerate(problems) if p.path == problem.path]
        if loc != item["loc"] and union:  # another branch of the same union: one problem
            old = problems[union[0]]
            problems[union[0]] = Problem(old.path, f"{old.message}; or {problem.message}")
        else:
            problems.append(problem)
    return problems


TASK_OF_FAMILY = {family: task for task, family in FAMILY_OF_TASK.items()}

# What the registry check reads of the model section.
_REGISTRY_KEYS = ("family", "norm", "residual", "encoder_layers", "decoder_layers")


def _fill_family(data: dict[str, Any]) -> None:
    """``model.family`` follows from ``task`` when the recipe does not name it (in place)."""
    task = data.get("task")
    if not isinstance(task, str):
        return
    model = data.get("model")
    if isinstance(model, dict) and "family" not in model:
        data["model"] = {**model, "family": FAMILY_OF_TASK.get(task, "encoder_decoder")}
    elif model is None:
        data["model"] = {"family": FAMILY_OF_TASK.get(task, "encoder_decoder")}


def _drop(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """Delete the deepest key of ``data`` on ``loc``; its dotted path, or None if none is."""
    node: Any = data
    parent: dict[str, Any] | None = None
    key: Any = None
    path: list[str] = []
    for part in loc:
        if not (isinstance(node, dict) and part in node):
            break
        parent, key, node = node, part, node[part]
        path.append(str(part))
    if parent is None:
        return None
    del parent[key]
    return ".".join(path)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root + ".") for root in roots)


def _validate(
    data: dict[str, Any],
) -> tuple[Recipe | None, list[Problem], list[str], dict[str, Any]]:
    """Validate ``data``; on failure, keep validating what is left once the bad keys are dropped.

    pydantic skips a model's cross-field checks (``d_model`` divisible by ``heads``, ``task``
    versus ``model.family``, ``data.dir`` for files) as soon as one of its fields is invalid;
    dropping the invalid keys (their defaults stand in) lets those checks report their problems
    in the same error. Returns the recipe (None if invalid), every problem, the dropped key
    paths and what was left of ``data``.
    """
    data = copy.deepcopy(data)
    problems: list[Problem] = []
    dropped: list[str] = []
    for _ in range(100):  # each round drops at least one key
        try:
            recipe = Recipe.model_validate(data)
            return (None if problems else recipe), problems, dropped, data
        except pydantic.ValidationError as error:
            for problem in _nested_problems(error, data):
                if problem not in problems and not _under(problem.path, dropped):
                    problems.append(problem)
            removed = [
                path for item in error.errors() if _inner_config_error(item) is None
                for path in [_drop(data, item["loc"])] if path is not None
            ]
            if not removed:  # only cross-field problems are left: they are all reported
                break
            dropped += removed
            if "task" in removed:
                model = data.get("model")
                family = model.get("family") if isinstance(model, dict) else None
                if family in TASK_OF_FAMILY:
                    data["task"] = TASK_OF_FAMILY[family]
            _fill_family(data)  # a dropped model.family follows the task again
    return None, problems, dropped, data


# Upper bounds of model sizes, far above any real model. Validation builds a norm of width
# d_model, so without them a typo (d_model=5120000000) allocates gigabytes or overflows inside
# torch instead of being reported; layers and positions are built one by one at assembly.
MODEL_LIMITS = {"d_model": 2**20, "ffn_dim": 2**20, "max_positions": 2**20,
                "encoder_layers": 2**14, "decoder_layers": 2**14}
_INTEGER = pydantic.TypeAdapter(int)


def _limit_problems(data: dict[str, Any]) -> list[Problem]:
    """Model sizes above :data:`MODEL_LIMITS`, read as pydantic reads them (2e6 too)."""
    model = data.get("model")
    problems = []
    for key, limit in MODEL_LIMITS.items() if isinstance(model, dict) else ():
        try:
            value = _INTEGER.validate_python(model.get(key))
        except pydantic.ValidationError:
            continue  # absent or not a number: validation reports the latter
        if value > limit:
            problems.append(Problem(f"model.{key}", f"{value} is above the limit of {limit} "
                                    "(a typo?)"))
    return problems


def _prechecked(data: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """``data`` without the keys pydantic alone would let through: booleans given as numbers,
    model sizes above the limits; and their problems. Without those keys (their defaults
    stand in) validation and the registry check still report everything else."""
    problems = boolean_numbers(Recipe, data) + _limit_problems(data)
    if problems:
        data = copy.deepcopy(data)
        for problem in problems:
            _drop(data, tuple(problem.path.split(".")))
    return data, problems


def from_dict(data: dict[str, Any], check_registry: bool = True) -> Recipe:
    """Validate plain data as a recipe; raise :class:`ConfigError` with every problem."""
    if not isinstance(data, dict):
        raise ConfigError([Problem("", "the top level must be a mapping of sections, not "
                                   f"{type(data).__name__}")], "invalid recipe")
    _check_shape(data, "invalid recipe")
    problems: list[Problem] = []
    for key in data:
        if key not in Recipe.model_fields:
            problems.append(Problem(key_name(key), "unknown section"
                                    + close_match(str(key), list(Recipe.model_fields))))
    known, found = _prechecked({k: v for k, v in data.items() if k in Recipe.model_fields})
    problems += found
    _fill_family(known)
    recipe, found, dropped, left = _validate(known)
    problems += found
    if recipe is None and isinstance(left.get("model"), dict):
        # The recipe-wide check is skipped by pydantic while a section has problems.
        problem = _family_problem(left.get("task", "translation"), left["model"].get("family"))
        if problem is not None and problem not in problems:
            problems.append(problem)
    if check_registry:
        # Names and options are checked even when other sections have problems, so that
        # every error is reported in one go: on what is left of the model section, without
        # the keys that already have a problem.
        from normzoo.models.assemble import check

        model = recipe.model if recipe is not None else left.get("model")
        if not isinstance(model, ModelConfig):
            bad = {p.path.split(".")[1] for p in problems if p.path.startswith("model.")}
            model = {k: v for k, v in (model if isinstance(model, dict) else {}).items()
                     if k in _REGISTRY_KEYS and k not in bad}
        try:
            check(model)
        except ConfigError as error:
            problems += [p for p in error.problems
                         if p not in problems and not _under(p.path, dropped)]
    if problems:
        raise ConfigError(problems, "invalid recipe")
    assert recipe is not None
    return recipe


def load(path: str | Path, overrides: list[str] | None = None, *,
         machine: bool = False) -> Recipe:
    """Read, override and validate a recipe file; with ``machine`` (``train``, ``sweep`` and
    ``recipe validate`` ask for it), also check that this machine can hold the model and run
    the trainer settings (:func:`normzoo.machine.machine_problems`)."""
    data = apply_overrides(read_yaml(path), overrides or [])
    recipe = from_dict(data)
    if not machine:
        return recipe
    from normzoo.machine import check_machine

    return check_machine(recipe)
