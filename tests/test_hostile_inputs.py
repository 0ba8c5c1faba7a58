"""Hostile recipes, overrides, data and checkpoints: each is a clean user error, never a crash.

Property tests feed generated recipes (nested data, raw YAML text, both through the recipe file
loader the CLI uses) and overrides to validation: a bad one must raise :class:`ConfigError` with a
located, non-empty message, a valid one must pass. CLI tests then check that a bad recipe, bad
data files or a bad checkpoint exits with code 2 and one message, without a traceback and
without leaving a run directory (or an export) behind.
"""

from __future__ import annotations

import copy
import math
import string
import tracemalloc
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

# Lightning binds its log handler to sys.stderr when first imported: imported here, not inside
# a CliRunner call whose stream is closed afterwards (later calls would print logging errors).
import lightning.pytorch  # noqa: F401
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

from normzoo import recipe as recipes
from normzoo.cli import app
from normzoo.errors import ConfigError, NormzooError
from normzoo.inference.load import load_checkpoint, load_export
from normzoo.models.config import Component
from normzoo.recipe import Recipe, from_dict, load

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
runner = CliRunner()
PROPERTY = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# A small valid recipe the mutation strategies start from; every section is present.
BASE: dict[str, Any] = {
    "task": "translation",
    "seed": 1,
    "run": {"dir": "runs/hostile"},
    "model": {"d_model": 64, "heads": 4, "ffn_dim": 128, "encoder_layers": 2,
              "decoder_layers": 2, "dropout": 0.1, "norm": {"name": "layernorm", "eps": 1e-5},
              "residual": {"name": "pre"}},
    "data": {"max_tokens": 1024, "max_len": 64, "tokenizer": {"vocab_size": 400}},
    "optim": {"lr": 1e-3, "betas": [0.9, 0.98], "warmup_steps": 10},
    "trainer": {"max_steps": 10, "accelerator": "cpu"},
    "eval": {"beam": 2},
    "diagnostics": {"every_steps": 0},
}


# -- what a clean error is ------------------------------------------------------------------------


def clean_error(call: Callable[[], Any]) -> NormzooError | None:
    """Run ``call``; None if it succeeds, else its error, checked to be a clean user error.

    Any other exception propagates and fails the test: that is the bug these tests look for.
    """
    try:
        call()
    except NormzooError as error:
        assert error.exit_code == 2, f"a recipe problem is a user error: {error!r}"
        message = str(error)
        assert message.strip() and len(message) < 20_000, message[:500]
        if isinstance(error, ConfigError):
            assert error.problems, message
            for problem in error.problems:
                assert problem.message.strip(), message
                assert str(problem) in message  # every problem is printed, located
        return error
    return None


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root + ".")


def located(error: NormzooError | None, path: str) -> None:
    """``error`` is a ConfigError with a problem at ``path`` (or inside it), named in the text."""
    assert isinstance(error, ConfigError), f"expected a problem at {path}, got {error!r}"
    assert any(within(p.path, path) for p in error.problems), (path, str(error))
    assert path in str(error)


def write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the recipe files the properties write (one file, rewritten per example)."""
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def base_file(scratch: Path) -> Path:
    return write_text(scratch / "base.yaml", yaml.safe_dump(BASE, sort_keys=False))


# -- the recipe's fields, read from its pydantic models ------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """One settable key of a recipe, with its type and the bounds of its range."""

    path: str
    annotation: Any
    bounds: dict[str, float] = field(default_factory=dict)

    @property
    def optional(self) -> bool:
        return type(None) in get_args(self.annotation)

    @property
    def base(self) -> Any:
        """The annotation without ``| None``."""
        if get_origin(self.annotation) in (Union, types.UnionType):
            args = [a for a in get_args(self.annotation) if a is not type(None)]
            return args[0] if len(args) == 1 else self.annotation
        return self.annotation


def _bounds(info: Any, path: str) -> dict[str, float]:
    found = {attr: value for item in info.metadata for attr in ("gt", "ge", "lt", "le")
             if (value := getattr(item, attr, None)) is not None}
    limit = recipes.MODEL_LIMITS.get(path.removeprefix("model."))
    if path.startswith("model.") and limit is not None:
        found["le"] = limit
    return found


def _leaves(model: type[BaseModel], prefix: str = "") -> list[Leaf]:
    leaves = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and (
                annotation is not Component):
            leaves += _leaves(annotation, path + ".")
        else:
            leaves.append(Leaf(path, annotation, _bounds(info, path)))
    return leaves


def _sections(model: type[BaseModel], prefix: str = "") -> dict[str, list[str]]:
    """Key path of each section (``""`` is the top level) -> its field names."""
    found = {prefix.rstrip("."): list(model.model_fields)}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and (
                annotation is not Component):
            found.update(_sections(annotation, f"{prefix}{name}."))
    return found


LEAVES = {leaf.path: leaf for leaf in _leaves(Recipe)}
SECTIONS = _sections(Recipe)
NAMES = sorted({name for names in SECTIONS.values() for name in names} | {"name", "eps"})


def test_the_field_tables_cover_the_recipe():
    assert {"model.d_model", "optim.betas", "data.tokenizer.vocab_size", "seed",
            "trainer.devices", "model.norm"} <= LEAVES.keys()
    assert LEAVES["model.dropout"].bounds == {"ge": 0.0, "lt": 1.0}
    assert LEAVES["model.d_model"].bounds["le"] == recipes.MODEL_LIMITS["d_model"]
    assert {"", "model", "data.tokenizer", "optim"} <= SECTIONS.keys()


# -- values a leaf rejects, and values it accepts -------------------------------------------------

BAD_TYPED = {  # values of the wrong type, by the kind of a leaf
    int: ["wide", 1.5, True, [1], {"a": 1}],
    float: ["fast", True, [1.0], {"a": 1.0}],
    bool: ["maybe", 2, 0.5, [True], {"a": True}],
    str: [5, 1.5, True, [], {"a": "b"}],
    Component: [5, True, [], ["layernorm"], {"name": 5}, {"name": ""}],
    "literal": ["nope", 5, True, [], {"a": 1}],
    "tuple": ["x", 5, {"a": 1}, [0.5], [0.5, 0.5, 0.5], ["x", 0.5]],
    "devices": ["two", 1.5, [1], {"a": 1}, None],
    "compile": ["fast", 2, 0.5, [True], {"a": 1}, None],
    "loggers": ["csv", 5, {"a": 1}, [5], ["comet"], ["csv", "csv"], ["tensorboard"]],
    "buckets": ["wide", 1.5, True, {"a": 1}, [0], [16, 8], [8, 8], [1.5], [], 0, -3],
    "mapping": ["x", 5, 1.5, True, ["a"]],  # task_options: a mapping the task checks
}


def _kind(leaf: Leaf) -> Any:
    base = leaf.base
    if get_origin(base) is Literal:
        return "literal"
    if get_origin(base) is tuple:
        return "tuple"
    if get_origin(base) is list:  # trainer.loggers, the one list of names
        return "loggers"
    if get_origin(base) is dict:  # task_options, the one free mapping
        return "mapping"
    if leaf.path == "data.buckets":  # a count, a list of lengths, auto or null
        return "buckets"
    if get_origin(base) in (Union, types.UnionType):  # the two unions
        return "compile" if leaf.path == "trainer.compile" else "devices"
    return base


def wrong_types(leaf: Leaf) -> list[Any]:
    values = list(BAD_TYPED[_kind(leaf)])
    if not leaf.optional and _kind(leaf) not in ("devices", "compile", "buckets"):
        values.append(None)
    return values


def out_of_range(leaf: Leaf) -> list[Any]:
    """Values of the right type outside the leaf's range: at and past each bound."""
    kind = _kind(leaf)
    if kind not in (int, float):
        return []
    step = 1 if kind is int else 0.5
    values: list[Any] = [math.nan, math.inf, -math.inf] if kind is float else []
    bounds = leaf.bounds
    if "gt" in bounds:
        values += [kind(bounds["gt"]), kind(bounds["gt"] - step), -(10**30) * step]
    if "ge" in bounds:
        values += [kind(bounds["ge"] - step), -(10**30) * step]
    if "lt" in bounds:
        values += [kind(bounds["lt"]), kind(bounds["lt"] + step)]
    if "le" in bounds:
        values += [kind(bounds["le"] + step), 10**30 * step]
    return values


RANGED = [leaf for leaf in LEAVES.values() if out_of_range(leaf)]

# Leaves the valid-value strategy leaves alone: their valid values depend on other keys.
CROSS_FIELD = {"task", "model.family", "model.d_model", "model.heads", "model.vocab_size",
               "task_options", "model.pad_id", "model.encoder_layers", "model.decoder_layers",
               "optim.lr",
               "optim.min_lr", "data.source", "model.norm", "model.residual", "data.streaming",
               "data.max_len", "data.max_tokens", "eval.average_last",
               "trainer.keep_checkpoints", "model.kv_heads", "model.positions",
               # a registered norm's name (any text is not one)
               "model.qk_norm",
               # the schedule's rules tie it to trainer.max_steps and the warm-up; a tokenizer
               # path goes with type: file
               "optim.schedule", "optim.warmup_steps", "optim.decay_steps",
               "optim.decay_fraction", "data.tokenizer.type", "data.tokenizer.path",
               # an SDPA kernel is named only for an attention that runs SDPA
               "model.attention_impl", "model.attention_backend"}
SAFE_TEXT = st.text(string.ascii_letters + string.digits + "_-/", min_size=1, max_size=12).filter(
    lambda s: s.lower() not in {"null", "~", "true", "false"})
SPECIAL_VALID = {
    "trainer.max_time": st.builds("{:02d}:{:02d}:{:02d}:{:02d}".format, *(
        [st.integers(0, 99)] * 4)),
    "trainer.devices": st.one_of(st.just("auto"), st.just(-1), st.integers(1, 64)),
    "trainer.compile": st.sampled_from([True, False, "default", "reduce-overhead",
                                        "max-autotune"]),
    "data.num_workers": st.one_of(st.just("auto"), st.integers(0, 64)),
    # at most the base recipe's data.max_len (64), which the valid changes leave alone
    "data.buckets": st.one_of(st.just("auto"), st.none(), st.integers(1, 64),
                              st.lists(st.integers(1, 64), min_size=1, unique=True).map(sorted)),
}


def valid_values(leaf: Leaf) -> st.SearchStrategy[Any]:
    if leaf.path in SPECIAL_VALID:
        return SPECIAL_VALID[leaf.path]
    kind, bounds = _kind(leaf), leaf.bounds
    if kind is int:
        low = bounds["ge"] if "ge" in bounds else bounds.get("gt", -(10**9) - 1) + 1
        values: st.SearchStrategy[Any] = st.integers(int(low), int(bounds.get("le", 10**12)))
    elif kind is float:
        values = st.floats(bounds.get("ge", bounds.get("gt", -1e6)),
                           bounds.get("le", bounds.get("lt", 1e6)),
                           exclude_min="gt" in bounds, exclude_max="lt" in bounds,
                           allow_nan=False, allow_infinity=False)
    elif kind is bool:
        values = st.booleans()
    elif kind == "literal":
        values = st.sampled_from(get_args(leaf.base))
    elif kind == "tuple":
        beta = st.floats(0, 1, exclude_max=True)
        values = st.lists(beta, min_size=2, max_size=2)
    elif kind == "loggers":  # csv always, any others once each (all installed for the tests)
        values = st.lists(st.sampled_from(["tensorboard", "wandb", "mlflow"]),
                          unique=True).map(lambda others: ["csv", *others])
    else:
        values = SAFE_TEXT
    return st.one_of(st.none(), values) if leaf.optional else values


# -- mutations of the base recipe -----------------------------------------------------------------

DELETE = object()


@dataclass(frozen=True)
class Mutation:
    """Changes to the base recipe and the key path the error must name.

    ``reads``: keys the expected problem depends on, which no other mutation may change.
    """

    expect: str
    changes: tuple[tuple[str, Any], ...]
    reads: tuple[str, ...] = ()
    says: str = ""

    def touched(self) -> set[str]:
        return {path for path, _ in self.changes} | set(self.reads)

    def clashes(self, other: Mutation) -> bool:
        mine = {path for path, _ in self.changes}
        return any(_overlap(a, b) for a in mine for b in other.touched()) or any(
            _overlap(a, b) for a in {p for p, _ in other.changes} for b in self.touched())


def _overlap(a: str, b: str) -> bool:
    return within(a, b) or within(b, a)


def mutate(data: dict[str, Any], changes: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for path, value in changes:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def _fresh_key(names: list[str]) -> st.SearchStrategy[str]:
    return st.text(string.ascii_lowercase + "_", min_size=1, max_size=10).filter(
        lambda key: key not in names)


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    """One way to break the base recipe; see the ``kind`` list for every way."""
    kind = draw(st.sampled_from(["type", "type", "range", "range", "unknown", "section",
                                 "cross"]))
    if kind == "type":
        leaf = draw(st.sampled_from(list(LEAVES.values())))
        return Mutation(leaf.path, ((leaf.path, draw(st.sampled_from(wrong_types(leaf)))),))
    if kind == "range":
        leaf = draw(st.sampled_from(RANGED))
        return Mutation(leaf.path, ((leaf.path, draw(st.sampled_from(out_of_range(leaf)))),))
    if kind == "unknown":
        section = draw(st.sampled_from([*SECTIONS, "model.norm", "model.residual"]))
        names = SECTIONS.get(section, ["name"])
        key = draw(_fresh_key(names))
        path = f"{section}.{key}" if section else key
        # A norm's or scheme's options are checked against the one its name picks.
        reads = (f"{section}.name",) if section in ("model.norm", "model.residual") else ()
        return Mutation(path, ((path, draw(st.sampled_from([1, "x", None, [1]]))),), reads,
                        says="unknown")
    if kind == "section":
        section = draw(st.sampled_from([s for s in SECTIONS if s]))
        # `model:` with nothing under it (None) is read as an empty section, by design.
        nothing = [None] if section != "model" else []
        return Mutation(section, ((section, draw(st.sampled_from([5, "x", [1], *nothing]))),))
    return draw(st.sampled_from(CROSS_FIELD_MUTATIONS))


CROSS_FIELD_MUTATIONS = [
    Mutation("model.d_model", (("model.d_model", 30), ("model.heads", 4)),
             says="not divisible by heads"),
    Mutation("model.d_model", (("model.d_model", 100), ("model.heads", 8)),
             says="not divisible by heads"),
    Mutation("model.family", (("task", "mlm"), ("model.family", "decoder"))),
    Mutation("model.encoder_layers", (("model.encoder_layers", 0),),
             reads=("task", "model.family"), says="at least 1"),
    Mutation("model.decoder_layers", (("model.decoder_layers", 0),),
             reads=("task", "model.family"), says="at least 1"),
    Mutation("model.pad_id", (("model.vocab_size", 100), ("model.pad_id", 100))),
    Mutation("optim.min_lr", (("optim.lr", 1e-4), ("optim.min_lr", 1e-3))),
    Mutation("data.max_len", (("data.max_len", 512), ("data.max_tokens", 256)),
             says="exceeds max_tokens"),
    Mutation("eval.average_last", (("eval.average_last", 6), ("trainer.keep_checkpoints", 2)),
             says="keeps fewer"),
    Mutation("data.dir", (("data.source", "files"), ("data.dir", DELETE)),
             says="required"),
    Mutation("data.path", (("data.source", "hub"), ("data.path", DELETE)), says="required"),
    Mutation("data.streaming", (("data.streaming", True),), reads=("data.source",),
             says="streams hub datasets only"),
    Mutation("model.residual.name", (("model.residual.name", DELETE),), says="required"),
    Mutation("model.norm.name", (("model.norm.name", DELETE),), says="required"),
    Mutation("model.norm", (("model.norm", "no_such_norm"),), says="unknown norm"),
    Mutation("model.norm.eps", (("model.norm.eps", -1.0),), reads=("model.norm.name",)),
    Mutation("model.norm.eps", (("model.norm.eps", math.nan),), reads=("model.norm.name",)),
    Mutation("model.norm.eps", (("model.norm.eps", True),), reads=("model.norm.name",),
             says="boolean"),
    Mutation("trainer.max_time", (("trainer.max_time", "01:00:00"),), says="DD:HH:MM:SS"),
]


@st.composite
def several_mutations(draw: st.DrawFn) -> list[Mutation]:
    chosen: list[Mutation] = []
    for _ in range(draw(st.integers(1, 3))):
        candidate = draw(mutations())
        if not any(candidate.clashes(m) or _overlap(candidate.expect, m.expect)
                   for m in chosen):
            chosen.append(candidate)
    return chosen


def test_the_base_recipe_is_valid(base_file: Path):
    assert load(base_file) == from_dict(BASE)


@PROPERTY
@given(several_mutations())
def test_a_mutated_recipe_names_every_mutated_key(scratch: Path, chosen: list[Mutation]):
    data = mutate(BASE, tuple(change for m in chosen for change in m.changes))
    error = clean_error(lambda: from_dict(data))
    for mutation in chosen:
        located(error, mutation.expect)
        assert any(mutation.says in p.message for p in error.problems
                   if within(p.path, mutation.expect)), (mutation, str(error))
    # Through the file loader, as the CLI reads it (nan and inf survive YAML).
    path = write_text(scratch / "mutated.yaml", yaml.safe_dump(data))
    from_file = clean_error(lambda: load(path))
    assert isinstance(from_file, ConfigError)
    assert {p.path for p in from_file.problems} == {p.path for p in error.problems}


@st.composite
def valid_changes(draw: st.DrawFn) -> dict[str, Any]:
    """In-range values for some leaves, plus consistent values for the cross-field ones."""
    free = [leaf for leaf in LEAVES.values() if leaf.path not in CROSS_FIELD]
    chosen = draw(st.lists(st.sampled_from(free), max_size=6, unique_by=lambda leaf: leaf.path))
    changes = {leaf.path: draw(valid_values(leaf)) for leaf in chosen}
    if draw(st.booleans()):
        heads = draw(st.integers(1, 16))
        changes["model.heads"] = heads
        changes["model.d_model"] = heads * draw(st.integers(1, 256))
        divisors = [k for k in range(1, heads + 1) if heads % k == 0]
        changes["model.kv_heads"] = draw(st.sampled_from([None, *divisors]))
        even = changes["model.d_model"] // heads % 2 == 0  # rope rotates channel pairs
        changes["model.positions"] = draw(st.sampled_from(
            ["sinusoidal", "learned", *(["rope"] if even else [])]))
    if draw(st.booleans()):
        impl = draw(st.sampled_from(["auto", "sdpa", "explicit"]))
        changes["model.attention_impl"] = impl
        changes["model.attention_backend"] = "auto" if impl == "explicit" else draw(
            st.sampled_from(["auto", "flash", "efficient", "cudnn", "math"]))
    if draw(st.booleans()):
        lr = draw(st.floats(1e-8, 1.0))
        changes["optim.lr"] = lr
        changes["optim.min_lr"] = draw(st.floats(0, lr))
    if draw(st.booleans()):
        changes["model.encoder_layers"] = draw(st.integers(1, 48))
        changes["model.decoder_layers"] = draw(st.integers(1, 48))
    if draw(st.booleans()):
        keep = draw(st.integers(0, 20))
        changes["trainer.keep_checkpoints"] = keep
        changes["eval.average_last"] = draw(st.integers(1, max(keep, 1)))
    return changes


def _value_at(recipe: Recipe, path: str) -> Any:
    node: Any = recipe
    for part in path.split("."):
        node = getattr(node, part)
    return node


def _same(got: Any, want: Any) -> bool:
    return list(got) == want if isinstance(got, tuple) else got == want


@PROPERTY
@given(valid_changes())
def test_valid_changes_pass_and_are_kept(changes: dict[str, Any]):
    recipe = from_dict(mutate(BASE, tuple(changes.items())))
    for path, value in changes.items():
        assert _same(_value_at(recipe, path), value), path


@PROPERTY
@given(valid_changes())
def test_valid_changes_as_overrides_pass(base_file: Path, changes: dict[str, Any]):
    overrides = [f"{path}={render(value)}" for path, value in changes.items()]
    recipe = load(base_file, overrides)
    for path, value in changes.items():
        assert _same(_value_at(recipe, path), value), (path, overrides)


def render(value: Any) -> str:
    """``value`` as an override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


# -- random nested structures ---------------------------------------------------------------------

SCALARS = st.one_of(
    st.integers(), st.sampled_from([-1, 0, 2**31, 2**63, -(2**63) - 1, 10**30]),
    st.floats(), st.text(max_size=12), st.none(), st.booleans(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=8)), inner,
                        max_size=4),
    ),
    max_leaves=12,
)
KEYS = st.one_of(st.sampled_from([*SECTIONS[""], *NAMES]), st.text(max_size=8), st.integers(),
                 st.none(), st.booleans())
SECTION_VALUES = st.one_of(
    VALUES, st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=8), st.integers()),
                            VALUES, max_size=6))
RANDOM_RECIPES = st.dictionaries(KEYS, SECTION_VALUES, max_size=6)


@PROPERTY
@given(RANDOM_RECIPES)
def test_random_nested_recipes_are_valid_or_a_located_error(scratch: Path, data: dict):
    error = clean_error(lambda: from_dict(data))
    if error is not None:
        assert isinstance(error, ConfigError)
        assert all(p.path for p in error.problems), str(error)  # each problem is located
    path = write_text(scratch / "random.yaml", yaml.safe_dump(data))
    clean_error(lambda: load(path))


# -- raw YAML text --------------------------------------------------------------------------------

BASE_TEXT = yaml.safe_dump(BASE, sort_keys=False)


@st.composite
def damaged_text(draw: st.DrawFn) -> str:
    """The base recipe's YAML with a few edits: tabs, indentation, stray characters, lines
    duplicated, swapped or dropped."""
    lines = BASE_TEXT.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        edit = draw(st.sampled_from(["tab", "indent", "dedent", "char", "drop", "dup", "swap",
                                     "cut"]))
        if edit == "tab":
            lines[i] = "\t" + line
        elif edit == "indent":
            lines[i] = " " * draw(st.integers(1, 3)) + line
        elif edit == "dedent":
            lines[i] = line[draw(st.integers(1, 3)):]
        elif edit == "char":
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + draw(st.sampled_from(list(":-[]{}&*!|>'\"%@`#,?\t"))) + line[at:]
        elif edit == "drop":
            del lines[i]
        elif edit == "dup":
            lines.insert(i, line)
        elif edit == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = line[: draw(st.integers(0, len(line)))]
        if not lines:
            lines = [""]
    return "\n".join(lines) + "\n"


def _laughs(depth: int, fan: int, key: str) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, depth)]
    return "\n".join(lines) + f"\n{key}: *l{depth - 1}\n"


@st.composite
def aliased_text(draw: st.DrawFn) -> str:
    """Anchors and aliases: merges, references to undefined anchors, cycles, billion laughs."""
    key = draw(st.sampled_from(["model", "optim", "model_extra", "data"]))
    number = draw(st.integers(-3, 300))
    return draw(st.sampled_from([
        f"base: &b {{d_model: {number}, heads: 4}}\nmodel:\n  <<: *b\n  ffn_dim: 64\n",
        f"model: &m {{d_model: {number}}}\noptim: *m\n",
        f"{key}: *nowhere\n",
        f"{key}: &a {{x: *a}}\n",
        f"{key}: &a [1, *a]\n",
        "model: &m\n  norm:\n    name: layernorm\n    eps: *m\n",
        _laughs(draw(st.integers(2, 9)), draw(st.integers(2, 10)), key),
        f"model:\n  norm: {{name: layernorm, eps: &e [1, 2]}}\n  residual: {{name: pre, x: *e}}\n"
        f"{key}: {{<<: *undefined}}\n",
    ]))


PYTHON_TAGS = ["!!python/object:os.system", "!!python/object/apply:os.mkdir ['MARKER']",
               "!!python/name:os.system", "!!python/tuple [1, 2]", "!!python/module:os",
               "!!python/object/new:builtins.dict []", "!!python/bytes aGk="]


@st.composite
def python_tagged(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(["task", "seed", "model", "optim"]))
    tag = draw(st.sampled_from(PYTHON_TAGS))
    return draw(st.sampled_from([f"{key}: {tag}\n", f"model:\n  d_model: {tag}\n",
                                 f"{tag}\n", f"{key}:\n  - 1\n  - {tag}\n"]))


def _load_text(scratch: Path, text: str) -> NormzooError | None:
    path = write_text(scratch / "text.yaml", text)
    return clean_error(lambda: load(path))


@PROPERTY
@given(st.one_of(st.text(), damaged_text(), aliased_text()))
def test_any_text_is_a_recipe_or_a_clean_error(scratch: Path, text: str):
    error = _load_text(scratch, text)  # aliases that blew up would not come back at all
    if isinstance(error, ConfigError) and error.title == "cannot read recipe":
        assert str(scratch / "text.yaml") in str(error)  # names the file


@PROPERTY
@given(aliased_text().filter(lambda t: "*a" in t or "eps: *m" in t))
def test_a_structure_that_contains_itself_is_refused(scratch: Path, text: str):
    error = _load_text(scratch, text)
    assert error is not None and "contains itself" in str(error)


@PROPERTY
@given(python_tagged())
def test_python_tags_are_refused_without_running(scratch: Path, text: str):
    marker = scratch / "pwned"
    error = _load_text(scratch, text.replace("MARKER", str(marker)))
    assert error is not None and "python/" in str(error), text
    assert not marker.exists()


@PROPERTY
@given(st.one_of(st.lists(SCALARS, min_size=1), SCALARS.filter(lambda v: v is not None)))
def test_a_document_that_is_no_mapping_is_refused(scratch: Path, document: Any):
    error = _load_text(scratch, yaml.safe_dump(document))
    assert error is not None and "top level must be a mapping" in str(error)


@PROPERTY
@given(st.integers(0, len(BASE_TEXT)), st.sampled_from([b"\xff", b"\xfe\xfe", b"\xc3\x28",
                                                         b"\x80", b"\xe2\x82"]))
def test_bytes_that_are_no_utf8_are_refused(scratch: Path, at: int, junk: bytes):
    data = BASE_TEXT.encode()
    path = scratch / "bytes.yaml"
    path.write_bytes(data[:at] + junk + data[at:])
    error = clean_error(lambda: load(path))
    assert error is not None and "not UTF-8" in str(error) and str(path) in str(error)


@PROPERTY
@given(st.binary(max_size=200))
def test_random_bytes_are_a_recipe_or_a_clean_error(scratch: Path, data: bytes):
    path = scratch / "binary.yaml"
    path.write_bytes(data)
    clean_error(lambda: load(path))


# -- overrides ------------------------------------------------------------------------------------

KEY_PART = st.one_of(st.sampled_from([*SECTIONS[""], *NAMES]),
                     st.text(string.printable.replace("=", "").replace(".", ""), max_size=6))


@PROPERTY
@given(st.lists(st.one_of(
    st.text(max_size=30),
    st.builds("{}={}".format, st.lists(KEY_PART, min_size=1, max_size=4).map(".".join),
              st.one_of(st.text(max_size=12), SCALARS.map(str))),
), max_size=4))
def test_any_override_is_applied_or_a_clean_error(base_file: Path, overrides: list[str]):
    error = clean_error(lambda: load(base_file, overrides))
    if any("=" not in text for text in overrides):
        assert error is not None and "key=value" in str(error)


NOT_A_SECTION = [leaf for leaf in LEAVES.values() if _kind(leaf) is not Component]


@PROPERTY
@given(st.sampled_from(NOT_A_SECTION), st.text(string.ascii_lowercase, min_size=1, max_size=6),
       st.sampled_from(["1", "x", "[1]", "{a: 1}", ""]))
def test_an_override_into_a_value_names_the_value(base_file: Path, leaf: Leaf, key: str,
                                                  value: str):
    error = clean_error(lambda: load(base_file, [f"{leaf.path}.{key}={value}"]))
    located(error, leaf.path)


@PROPERTY
@given(st.lists(KEY_PART.filter(bool), max_size=3), st.integers(0, 3), st.text(max_size=5))
def test_an_override_with_an_empty_key_part_is_refused(base_file: Path, parts: list[str],
                                                       at: int, value: str):
    key = ".".join([*parts[:at], "", *parts[at:]])
    error = clean_error(lambda: load(base_file, [f"{key}={value}"]))
    assert error is not None and "empty key" in str(error), key


# -- regressions: each was accepted, or crashed, before --------------------------------------------


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    error = clean_error(lambda: from_dict(data))
    assert isinstance(error, ConfigError), data
    return {p.path: p.message for p in error.problems}


@pytest.mark.parametrize("path", ["optim.lr", "optim.eps", "optim.clip_norm", "optim.min_lr",
                                  "eval.max_len_a", "eval.lenpen", "diagnostics.max_loss"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_nan_and_infinity_are_refused(path: str, value: float):
    assert "finite number" in problems_of(mutate({}, ((path, value),)))[path]


def test_infinite_learning_rate_from_yaml_and_override(tmp_path: Path):
    path = write_text(tmp_path / "r.yaml", "optim: {lr: .inf}\n")
    with pytest.raises(ConfigError, match=r"optim\.lr: Input should be a finite number"):
        load(path)
    for text in ("optim.lr=.inf", "optim.lr=1e999", "optim.lr=nan", "optim.eps=infinity"):
        with pytest.raises(ConfigError, match="finite number"):
            load(write_text(tmp_path / "ok.yaml", "{}\n"), [text])


@pytest.mark.parametrize("betas", [[1.0, 0.98], [0.9, -0.1], [math.nan, 0.9], [0.9, 2]])
def test_adam_betas_must_lie_in_0_1(betas: list[float]):
    found = problems_of({"optim": {"betas": betas}})
    assert all(path.startswith("optim.betas.") for path in found), found


@pytest.mark.parametrize("seed", [-1, 2**32, 10**40])
def test_seed_outside_what_numpy_accepts(seed: int):
    assert "seed" in problems_of({"seed": seed})
    assert from_dict({"seed": 2**32 - 1}).seed == 2**32 - 1


@pytest.mark.parametrize(("path", "value"), [
    ("seed", True), ("model.heads", True), ("model.d_model", False),
    ("trainer.max_steps", True), ("optim.lr", True), ("model.dropout", False),
    ("trainer.devices", True), ("model.norm.eps", True),
])
def test_a_boolean_is_not_a_number(path: str, value: bool):
    data = mutate({"model": {"norm": {"name": "layernorm"}}}, ((path, value),))
    found = problems_of(data)
    assert "boolean" in found[path]


def test_yes_and_on_from_yaml_are_not_numbers(tmp_path: Path):
    path = write_text(tmp_path / "r.yaml", "model: {heads: on, d_model: 64}\n")
    with pytest.raises(ConfigError, match=r"model\.heads: expected a number, got the boolean"):
        load(path)
    with pytest.raises(ConfigError, match=r"trainer\.max_steps: expected a number"):
        load(path, ["model.heads=4", "trainer.max_steps=yes"])
    # Booleans stay booleans where the recipe wants one.
    assert load(path, ["model.heads=4", "model.bias=no"]).model.bias is False


@pytest.mark.parametrize("text", ["01:00:00", "garbage", "1:2:3:4:5", "1:2:3:4", "1h", ""])
def test_max_time_must_be_days_hours_minutes_seconds(text: str):
    assert "DD:HH:MM:SS" in problems_of({"trainer": {"max_time": text}})["trainer.max_time"]
    assert from_dict({"trainer": {"max_time": "00:12:00:00"}}).trainer.max_time == "00:12:00:00"


@pytest.mark.parametrize("devices", [0, -2])
def test_device_count(devices: int):
    assert "positive count" in problems_of({"trainer": {"devices": devices}})["trainer.devices"]
    for fine in (1, 8, -1, "auto"):
        assert from_dict({"trainer": {"devices": fine}}).trainer.devices == fine


def test_a_huge_width_is_refused_before_anything_is_allocated():
    found = problems_of({"model": {"d_model": 2**30, "heads": 8, "ffn_dim": 10**30}})
    assert found.keys() == {"model.d_model", "model.ffn_dim"}  # not a torch error at model.norm
    assert "above the limit" in found["model.d_model"]
    assert "less than or equal to 16777216" in problems_of(
        {"data": {"tokenizer": {"vocab_size": 2**64}}})["data.tokenizer.vocab_size"]


@pytest.mark.parametrize("depth", [40, 5000])
def test_deep_nesting_in_a_file_or_an_override(tmp_path: Path, depth: int):
    nested = "[" * depth + "]" * depth
    path = write_text(tmp_path / "deep.yaml", f"model:\n  norm: {{name: layernorm, x: {nested}}}\n")
    error = clean_error(lambda: load(path))
    assert error is not None and "levels deep" in str(error)
    error = clean_error(lambda: load(write_text(tmp_path / "ok.yaml", "{}\n"),
                                     [f"model.norm.x={nested}"]))
    assert error is not None and "levels deep" in str(error)
    deep: Any = 1
    for _ in range(depth):
        deep = {"a": deep}
    error = clean_error(lambda: from_dict({"model": deep}))  # the Python API too
    assert error is not None and "levels deep" in str(error)


def test_billion_laughs_in_a_known_key_is_quick(tmp_path: Path):
    path = write_text(tmp_path / "lol.yaml", _laughs(9, 10, "x0").replace(
        "x0: *l8", "model:\n  norm: {name: layernorm, eps: *l8}"))
    tracemalloc.start()
    try:
        error = clean_error(lambda: load(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20  # each shared node once: no 10^9-fold expansion in memory
    located(error, "model.norm.eps")


@pytest.mark.parametrize("text", ["seed: " + "9" * 5000 + "\n", "task: 2001-02-30\n",
                                  "seed: 0000-01-01\n"])
def test_values_yaml_cannot_construct(tmp_path: Path, text: str):
    error = clean_error(lambda: load(write_text(tmp_path / "r.yaml", text)))
    assert error is not None and "a value cannot be read" in str(error)
    key, _, value = text.strip().partition(": ")
    error = clean_error(lambda: load(write_text(tmp_path / "ok.yaml", "{}\n"), [f"{key}={value}"]))
    assert isinstance(error, ConfigError)


def test_duplicate_keys_are_refused(tmp_path: Path):
    text = "task: translation\nmodel:\n  d_model: 64\noptim: {lr: 1}\nmodel:\n  heads: 2\n"
    with pytest.raises(ConfigError, match=r"\(line 5, column 1\): found duplicate key 'model'"):
        load(write_text(tmp_path / "r.yaml", text))
    with pytest.raises(ConfigError, match="duplicate key 'd_model'"):
        load(write_text(tmp_path / "r.yaml", "model: {d_model: 64, d_model: 32}\n"))
    # A merge key may still be overridden: that is what it is for.
    merged = "sizes: &b {d_model: 64, heads: 4}\nmodel: {<<: *b, heads: 8}\n"
    with pytest.raises(ConfigError, match="sizes: unknown section"):
        load(write_text(tmp_path / "r.yaml", merged))


def test_tab_indentation_names_the_line(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"malformed YAML \(line 3, column 1\).*'\\t'"):
        load(write_text(tmp_path / "r.yaml", "task: translation\nmodel:\n\td_model: 64\n"))


def test_an_unreadable_recipe_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write_text(tmp_path / "r.yaml", "task: mlm\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", refuse)
    with pytest.raises(ConfigError, match=r"r\.yaml: Permission denied"):
        load(path)


@pytest.mark.parametrize(("option", "value"), [("eps", ".inf"), ("eps", ".nan")])
def test_plugin_options_must_be_finite(tmp_path: Path, option: str, value: str):
    path = write_text(tmp_path / "r.yaml", "model: {norm: layernorm}\n")
    with pytest.raises(ConfigError, match=f"model.norm.{option}: Input should be a finite"):
        load(path, [f"model.norm.{option}={value}"])


# -- the CLI: a bad recipe or bad data leaves nothing behind --------------------------------------


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fails_cleanly(args: list[str], *needles: str, input: str | None = None) -> str:
    """Run the CLI: exit code 2, one error message holding every needle, no traceback."""
    result = runner.invoke(app, args, input=input)
    output = result.output
    assert result.exit_code == 2, output
    assert "Traceback" not in output, output
    assert output.count("error:") == 1, output
    for needle in needles:
        assert needle in output, (needle, output)
    return output


TINY = ["trainer.accelerator=cpu", "trainer.progress_bar=false", "trainer.max_steps=2",
        "model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
        "model.decoder_layers=1", "data.tokenizer.vocab_size=100",
        "data.tokenizer.min_frequency=1", "eval.valid_bleu=false"]


def train_fails(tmp_path: Path, recipe_text: str, overrides: list[str], *needles: str) -> None:
    recipe = write_text(tmp_path / "recipe.yaml", recipe_text)
    run_dir = tmp_path / "runs" / "hostile"
    fails_cleanly(["train", str(recipe), f"run.dir={run_dir}", *TINY, *overrides], *needles)
    assert not run_dir.exists(), "no run directory is left behind"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("text", "overrides", "needles"), [
    ("task: translation\nmodel:\n  d_model: 64\n heads: 2\n", [], ["malformed YAML (line 4"]),
    ("task: translation\nmodel: {d_model: [64\n", [], ["malformed YAML"]),
    ("task: translation\n", ["model.d_model=wide", "trainer.max_steps=[1]"],
     ["model.d_model: Input should be a valid integer", "trainer.max_steps"]),
    ("task: translation\noptim: {warmup: 10}\n", [],
     ["optim.warmup: unknown key (did you mean 'warmup_steps'?)"]),
    ("task: translation\n", ["modle.d_model=64"], ["modle: unknown section"]),
    ("task: translation\n", ["model.ffn_dim=-64", "data.max_tokens=-1"],
     ["model.ffn_dim: Input should be greater than 0", "data.max_tokens"]),
    ("task: translation\n", ["model.d_model=30", "model.heads=4"],
     ["model.d_model: 30 is not divisible by heads=4"]),
    ("task: translation\n", ["model.dropout=1.0"], ["model.dropout: Input should be less than 1"]),
    ("task: translation\n", ["model.dropout=-0.1"],
     ["model.dropout: Input should be greater than or equal to 0"]),
    ("task: translation\n", ["optim.lr=.inf"], ["optim.lr: Input should be a finite number"]),
    ("task: translation\n", ["model.heads=on"], ["model.heads: expected a number"]),
])
def test_train_refuses_a_bad_recipe(tmp_path: Path, cache: Path, text: str,
                                    overrides: list[str], needles: list[str]):
    train_fails(tmp_path, text, overrides, *needles)


def _data_dir(tmp_path: Path, task: str = "translation") -> Path:
    """Line-aligned files for every split of ``task``: ``{split}.en`` / ``.xx`` or ``.txt``."""
    folder = tmp_path / "data"
    folder.mkdir()
    lines = [f"sentence number {i} is here ." for i in range(30)]
    for split in ("train", "valid", "test"):
        for suffix in (("en", "xx") if task == "translation" else ("txt",)):
            write_text(folder / f"{split}.{suffix}", "\n".join(lines) + "\n")
    return folder


def _break(path: Path, how: str) -> None:
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    else:  # misaligned: a line fewer than its partner
        lines = path.read_text(encoding="utf-8").splitlines()
        write_text(path, "\n".join(lines[:-1]) + "\n")


DATA_PROBLEMS = {"missing": "data file not found", "empty": "data file is empty",
                 "misaligned": "parallel files must be line-aligned"}


@pytest.mark.parametrize("split", ["train", "valid"])
@pytest.mark.parametrize("how", list(DATA_PROBLEMS))
def test_train_refuses_bad_parallel_files(tmp_path: Path, cache: Path, split: str, how: str):
    folder = _data_dir(tmp_path)
    _break(folder / f"{split}.xx", how)
    train_fails(tmp_path, "task: translation\n",
                ["data.source=files", f"data.dir={folder}"],
                DATA_PROBLEMS[how], f"{split}.xx")


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_train_refuses_bad_text_files(tmp_path: Path, cache: Path, how: str):
    folder = _data_dir(tmp_path, "causal_lm")
    _break(folder / "train.txt", how)
    train_fails(tmp_path, "task: causal_lm\n", ["data.source=files", f"data.dir={folder}"],
                DATA_PROBLEMS[how], "train.txt")


def test_train_refuses_a_missing_data_directory(tmp_path: Path, cache: Path):
    train_fails(tmp_path, "task: translation\ndata: {source: files}\n", [],
                "data.dir: required when source is 'files'")
    train_fails(tmp_path, "task: translation\n",
                ["data.source=files", f"data.dir={tmp_path / 'nowhere'}"],
                "data file not found", "nowhere")


def test_train_refuses_a_bad_test_split_before_training(tmp_path: Path, cache: Path):
    folder = _data_dir(tmp_path)
    _break(folder / "test.xx", "misaligned")
    train_fails(tmp_path, "task: translation\n",
                ["data.source=files", f"data.dir={folder}", "data.max_len=32",
                 "data.max_tokens=256"], DATA_PROBLEMS["misaligned"], "test.xx")


def test_recipe_validate_reports_every_problem_once(tmp_path: Path):
    path = write_text(tmp_path / "r.yaml", "task: translation\nmodel: {dropout: 1.0}\n")
    output = fails_cleanly(["recipe", "validate", str(path), "model.d_model=-1",
                            "optim.betas=[0.9,1.5]"], "model.dropout", "model.d_model",
                           "optim.betas.1")
    assert output.count("model.dropout") == 1


# -- the CLI: checkpoints that are damaged or do not fit -----------------------------------------


def _edited(ckpt: Path, tmp_path: Path, change: Callable[[dict], None]) -> Path:
    data = torch.load(ckpt, map_location="cpu", weights_only=True)
    change(data)
    out = tmp_path / "edited.ckpt"
    torch.save(data, out)
    return out


def _wider(data: dict) -> None:
    data["normzoo"]["recipe"]["model"].update(d_model=64, heads=2)


def _deeper(data: dict) -> None:
    data["normzoo"]["recipe"]["model"]["decoder_layers"] = 3


def _other_scheme(data: dict) -> None:
    data["normzoo"]["recipe"]["model"]["residual"] = {"name": "resi_dual"}


def _weights_cut(data: dict) -> None:
    state = data["state_dict"]
    state.pop(next(iter(state)))


def _no_tokenizer(data: dict) -> None:
    del data["normzoo"]["tokenizer"]


def _bad_tokenizer(data: dict) -> None:
    data["normzoo"]["tokenizer"] = "{not json"


def _weights_not_tensors(data: dict) -> None:
    data["state_dict"] = {key: 1 for key in data["state_dict"]}


def _weights_a_list(data: dict) -> None:
    data["state_dict"] = [1, 2]


def _plugins_broken(data: dict) -> None:
    data["normzoo"]["plugins"] = [{"kind": "norm"}]


def _recipe_not_a_mapping(data: dict) -> None:
    data["normzoo"]["recipe"] = "translation"


def _recipe_invalid(data: dict) -> None:
    data["normzoo"]["recipe"]["model"]["d_model"] = 33


def _metadata_not_a_mapping(data: dict) -> None:
    data["normzoo"] = ["recipe"]


EDITS = {
    "wider": (_wider, "does not fit the model its recipe describes", "of another shape"),
    "deeper": (_deeper, "does not fit the model its recipe describes", "missing"),
    "scheme": (_other_scheme, "does not fit the model its recipe describes", "unexpected"),
    "weights cut": (_weights_cut, "does not fit", "1 weight(s) missing"),
    "no tokenizer": (_no_tokenizer, "is damaged", "tokenizer is missing"),
    "bad tokenizer": (_bad_tokenizer, "is damaged", "tokenizer cannot be read"),
    "weights not tensors": (_weights_not_tensors, "is damaged", "state_dict"),
    "weights a list": (_weights_a_list, "is damaged", "state_dict"),
    "plugins": (_plugins_broken, "is damaged", "plugin list"),
    "recipe not a mapping": (_recipe_not_a_mapping, "is damaged", "recipe is missing"),
    "recipe invalid": (_recipe_invalid, "holds an invalid recipe",
                       "model.d_model: 33 is not divisible by heads=2"),
    "metadata": (_metadata_not_a_mapping, "is damaged", "metadata is not a mapping"),
}


def _commands(ckpt: Path, tmp_path: Path) -> dict[str, tuple[list[str], str | None]]:
    """Each command that reads a checkpoint: its arguments and stdin."""
    return {
        "evaluate": (["evaluate", str(ckpt), "--hyps", str(tmp_path / "hyps.txt")], None),
        "translate": (["translate", str(ckpt)], "The dog sees a cat.\n"),
        "export": (["export", str(ckpt), "--out", str(tmp_path / "export")], None),
    }


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "hyps.txt").exists()
    assert not (tmp_path / "export").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".export.")]


@pytest.mark.parametrize("command", ["evaluate", "translate", "export"])
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_checkpoint_that_does_not_fit_its_recipe(tiny_checkpoint: Path, tmp_path: Path,
                                                   command: str, edit: str):
    change, *needles = EDITS[edit]
    ckpt = _edited(tiny_checkpoint, tmp_path, change)
    args, stdin = _commands(ckpt, tmp_path)[command]
    fails_cleanly(args, str(ckpt), *needles, input=stdin)
    _nothing_written(tmp_path)


def _truncated(source: Path, folder: Path, fraction: float) -> Path:
    data = source.read_bytes()
    out = folder / f"cut{fraction}.ckpt"
    out.write_bytes(data[: int(len(data) * fraction)])
    return out


def _bytes(name: str, data: bytes) -> Callable[[Path, Path], Path]:
    def make(source: Path, folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name

    return make


def _folder(source: Path, folder: Path) -> Path:
    (folder / "folder.ckpt").mkdir()
    return folder / "folder.ckpt"


NOT_CHECKPOINTS: dict[str, Callable[[Path, Path], Path]] = {
    "text": _bytes("notes.ckpt", b"hello, not a checkpoint\n"),
    "yaml": _bytes("recipe.ckpt", b"task: mlm\n"),
    "empty": _bytes("empty.ckpt", b""),
    "pickle opcode": _bytes("opcode.ckpt", b"\x80\x05\x95"),
    "truncated 1%": lambda source, folder: _truncated(source, folder, 0.01),
    "truncated 50%": lambda source, folder: _truncated(source, folder, 0.5),
    "truncated 99%": lambda source, folder: _truncated(source, folder, 0.99),
    "a directory": _folder,
}


@pytest.mark.parametrize("command", ["evaluate", "translate", "export"])
@pytest.mark.parametrize("kind", list(NOT_CHECKPOINTS))
def test_a_file_that_is_no_checkpoint(tiny_checkpoint: Path, tmp_path: Path, command: str,
                                      kind: str):
    folder = tmp_path / "in"
    folder.mkdir()
    bad = NOT_CHECKPOINTS[kind](tiny_checkpoint, folder)
    args, stdin = _commands(bad, tmp_path)[command]
    needle = "is not a normzoo export" if bad.is_dir() and command != "export" else (
        "is not a readable checkpoint")
    output = fails_cleanly(args, str(bad), needle, input=stdin)
    assert "refused" not in output  # damaged bytes are not reported as a code-execution attempt
    _nothing_written(tmp_path)


def test_the_refusal_of_code_names_what_was_refused(tmp_path: Path):
    bad = tmp_path / "eval.ckpt"
    bad.write_bytes(b"c__builtin__\neval\n(S'1'\ntR.")
    output = fails_cleanly(["evaluate", str(bad)], "refused", "eval")
    assert "weights_only" not in output  # not torch's advice to load it unsafely


def test_a_fitting_checkpoint_still_loads(tiny_checkpoint: Path):
    loaded = load_checkpoint(tiny_checkpoint)
    assert loaded.recipe.model.d_model == 32
    assert isinstance(loaded.translate(["The dog sees a cat."])[0], str)


@pytest.fixture
def exported(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    from normzoo.export.writer import export

    return export(tiny_checkpoint, tmp_path / "good")


@pytest.mark.parametrize(("file", "content", "needle"), [
    ("config.json", "[1, 2]", "config.json has no recipe"),
    ("config.json", '{"vocab_size": 200}', "config.json has no recipe"),
    ("metadata.json", '"x"', "metadata.json is not a mapping"),
    ("config.json", None, "config.json says vocab_size 7"),
    ("metadata.json", '{"plugins": "x"}', "plugin list"),
    ("tokenizer.json", "{not json", "cannot read tokenizer"),
])
def test_a_damaged_export(exported: Path, tmp_path: Path, file: str, content: str | None,
                          needle: str):
    if content is None:  # vocab size that does not match the tokenizer
        import json

        config = json.loads((exported / file).read_text())
        config["vocab_size"] = 7
        content = json.dumps(config)
    write_text(exported / file, content)
    with pytest.raises(NormzooError, match=needle.replace("(", r"\(")):
        load_export(exported)
    fails_cleanly(["translate", str(exported)], needle, input="The dog.\n")

