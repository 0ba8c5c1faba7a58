"""``init.from``: a new run that starts from trained weights, with a fresh optimizer and
schedule at step 0 (fairseq's ``--restore-file`` with ``--reset-optimizer``).

The weights are read, and checked against the model the recipe builds (on the meta device: no
memory, no compute), before anything is written: a misfit fails with every difference named,
not after the data is prepared, nor after ``--force`` cleared the run directory (``init.from``
may be a checkpoint of the run being replaced: it is read before that). The run trains on the
checkpoint's tokenizer, whose tokens its embedding rows are.

Nothing else is taken from the checkpoint: not the step, optimizer, schedule, generators or
callbacks' states. That is ``--resume``'s job, which refuses an ``init.from`` the run was not
started with (:mod:`normzoo.run.resume`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from normzoo.checkpoints.reading import (
    EXPORT_FILES,
    CheckpointError,
    check_finite,
    checkpoint_parts,
    checkpoint_tokenizer,
    read_checkpoint,
)
from normzoo.contract import task_of
from normzoo.data.tokenizer import Tokenizer
from normzoo.errors import NormzooError
from normzoo.recipe import Recipe

LISTED = 8  # names shown per kind of difference


class InitError(NormzooError):
    """``init.from`` cannot start this run (missing, unreadable, or does not fit the model)."""


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


@dataclass
class InitWeights:
    """The weights ``init.from`` names, read and checked, and what loading them keeps out."""

    source: str
    step: int | None
    tokenizer: str
    state: dict[str, torch.Tensor]
    strict: bool
    missing: list[str] = field(default_factory=list)  # the model's, not in the file
    unexpected: list[str] = field(default_factory=list)  # the file's, not in the model
    reshaped: list[str] = field(default_factory=list)  # "name (file [..], model [..])"
    renamed: list[str] = field(default_factory=list)  # "file's prefix as model's prefix"
    loaded: int = 0

    def differences(self) -> list[str]:
        return [text for text in (
            f"{len(self.missing)} weight(s) of the model missing from it "
            f"({_names(self.missing)})" if self.missing else "",
            f"{len(self.unexpected)} of its weights not in the model "
            f"({_names(self.unexpected)})" if self.unexpected else "",
            f"{len(self.reshaped)} of another shape ({_names(self.reshaped)})"
            if self.reshaped else "") if text]

    def fit_recipe(self, recipe: Recipe) -> None:
        """:meth:`fit` to the model ``recipe`` builds on this checkpoint's tokenizer: once the
        run has resolved what only its data says (a classifier's label set)."""
        self.fit(*_model_shapes(recipe, Tokenizer.from_str(self.tokenizer).vocab_size))

    def fit(self, expected: dict[str, torch.Size], tied: list[list[str]]) -> None:
        """Compare with the model's weight shapes; refuse a misfit when strict, or when
        nothing fits at all. ``tied``: names of one shared tensor (tied embeddings), of which
        an export keeps one; where the file holds several of them, the first (the model's own
        embedding, which owns the tensor) is what the model gets.

        An encoder-decoder's embeddings and an encoder's (or a decoder's) differ in name only
        (:func:`_embedding_renames`): the run trains on this checkpoint's tokenizer, so their
        rows are the same tokens, and they load where their shapes agree."""
        self.renamed = _embedding_renames(self.state, expected) or self.renamed  # once
        for names in tied:
            present = [name for name in names if name in self.state]
            for name in names:
                if present:
                    self.state[name] = self.state[present[0]]
        self.missing = [name for name in expected if name not in self.state]
        self.unexpected = [name for name in self.state if name not in expected]
        self.reshaped = [f"{name} (file {list(tensor.shape)}, model {list(expected[name])})"
                         for name, tensor in self.state.items()
                         if name in expected and tensor.shape != expected[name]]
        self.loaded = len(expected) - len(self.missing) - len(self.reshaped)
        differences = self.differences()
        if differences and self.strict:
            raise InitError(
                f"init.from={self.source} does not fit the model this recipe builds: "
                + "; ".join(differences) + ". Give the model section it was trained with, or "
                "init.strict=false to load the weights that fit and keep the fresh "
                "initialisation of the others")
        if self.loaded == 0:
            raise InitError(f"init.from={self.source}: none of its weights fits the model this "
                            "recipe builds (" + "; ".join(differences) + "); is it a checkpoint "
                            "of this task's model?")

    def load_into(self, model: torch.nn.Module) -> None:
        """Copy the weights that fit into ``model`` (all of them, when strict), then apply the
        constraint its residual scheme keeps on the weights (``after_step``, which the build
        applied to the fresh weights these replace): nGPT's unit rows hold from the first
        forward pass, whatever scheme trained the weights."""
        if self.strict:
            model.load_state_dict(self.state, strict=True)
        else:
            shapes = {name: value.shape for name, value in model.state_dict().items()}
            fitting = {name: tensor for name, tensor in self.state.items()
                       if shapes.get(name) == tensor.shape}
            model.load_state_dict(fitting, strict=False)
        scheme = getattr(model, "scheme", None)
        if scheme is not None:
            scheme.after_step(model)

    def announcement(self) -> str:
        step = f" (trained {self.step} steps)" if self.step is not None else ""
        text = (f"init: loaded {self.loaded} weights from {self.source}{step}; this run starts "
                "at step 0 with a fresh optimizer and schedule, on its tokenizer")
        if self.renamed:
            text += ("; among them its " + ", ".join(self.renamed) + " (the same tokenizer, "
                     "the same shapes)")
        skipped = self.differences()
        if skipped:
            text += "\ninit: not loaded (init.strict=false): " + "; ".join(skipped) + \
                "; the model's own keep their fresh initialisation"
        return text

    def record(self) -> dict[str, Any]:
        """For ``summary.json``."""
        record = {"from": self.source, "step": self.step, "strict": self.strict,
                  "loaded": self.loaded, "missing": self.missing,
                  "unexpected": self.unexpected, "reshaped": self.reshaped}
        return record | ({"renamed": self.renamed} if self.renamed else {})


# The token and position tables of one stack: an encoder-decoder's per stack, an encoder's or a
# decoder's (normzoo.models.families) under one name.
SINGLE, STACKS = "embeddings.", ("encoder", "decoder")


def _embedding_renames(state: dict[str, torch.Tensor], expected: dict[str, torch.Size]
                       ) -> list[str]:
    """Give ``state`` (in place) the model's names for the embeddings of the stack it shares
    with the model: an encoder-decoder checkpoint's ``encoder_embeddings.*`` for an encoder's
    ``embeddings.*`` (a classifier from a translation model), its ``decoder_embeddings.*`` for
    a decoder's; and an encoder's or decoder's ``embeddings.*`` for the matching stack of an
    encoder-decoder. Only names the model has and the file lacks, of the same shape; the file's
    own names go (they were listed as weights "not in the model", as if not loaded). Each
    rename in words, for the announcement."""
    def stack_of(names) -> str | None:
        found = [s for s in STACKS if any(n.startswith(f"{s}.") for n in names)]
        return found[0] if len(found) == 1 else None

    def two_tables(names) -> bool:
        return any(n.startswith(f"{s}_{SINGLE}") for n in names for s in STACKS)

    if two_tables(state) and not two_tables(expected):
        stack = stack_of(expected)
        theirs, ours = f"{stack}_{SINGLE}", SINGLE
    elif two_tables(expected) and not two_tables(state):
        stack = stack_of(state)
        theirs, ours = SINGLE, f"{stack}_{SINGLE}"
    else:
        return []
    if stack is None:
        return []
    moved = False
    for name in [n for n in state if n.startswith(theirs)]:
        target = ours + name.removeprefix(theirs)
        if target in expected and target not in state and \
                state[name].shape == expected[target]:
            state[target] = state.pop(name)
            moved = True
    return [f"{stack}'s embeddings, {theirs}* loaded as {ours}*"] if moved else []


def _read(path: Path) -> tuple[dict[str, torch.Tensor], str, int | None]:
    """The model weights, tokenizer (JSON) and step of a checkpoint or an export folder."""
    if path.is_dir():
        missing = [name for name in EXPORT_FILES if not (path / name).is_file()]
        if missing:
            raise InitError(f"init.from={path} is a folder but not a normzoo export (missing "
                            f"{', '.join(missing)}); give a .ckpt file or the folder `normzoo "
                            "export` wrote")
        try:
            state = load_file(path / "model.safetensors")
        except Exception as error:  # safetensors raises its own types for damaged files
            raise InitError(f"init.from={path}: model.safetensors cannot be read "
                            f"({type(error).__name__}: {error})") from None
        tokenizer = (path / "tokenizer.json").read_text(encoding="utf-8")
        checkpoint_tokenizer(tokenizer, str(path / "tokenizer.json"))
        step = None
    else:
        saved = read_checkpoint(path)
        meta, state = checkpoint_parts(saved, str(path))
        tokenizer = meta.get("tokenizer")
        checkpoint_tokenizer(tokenizer, str(path))
        step = saved.get("global_step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
    check_finite(state, str(path))
    return state, tokenizer, step


def _model_shapes(recipe: Recipe, vocab_size: int
                  ) -> tuple[dict[str, torch.Size], list[list[str]]]:
    """The weight shapes of the model ``recipe`` builds, and the names of each tensor it
    shares; built on the meta device (no memory, no computation), or on the CPU for a plugin
    that cannot be built there."""
    try:
        with torch.device("meta"):
            model = task_of(recipe).build_model(recipe, vocab_size)
    except NormzooError:
        raise
    except Exception:  # a plugin that computes while it builds
        model = task_of(recipe).build_model(recipe, vocab_size)
    names: dict[int, list[str]] = {}
    for name, tensor in [*model.named_parameters(remove_duplicate=False),
                         *model.named_buffers(remove_duplicate=False)]:
        names.setdefault(id(tensor), []).append(name)
    shapes = {name: value.shape for name, value in model.state_dict().items()}
    return shapes, [group for group in names.values() if len(group) > 1]


def initial_weights(recipe: Recipe) -> InitWeights | None:
    """The weights of ``init.from``, read and checked, or None when the recipe has none; the
    run fits them to its model (:meth:`InitWeights.fit_recipe`) once its data is read."""
    source = recipe.init.checkpoint
    if not source:
        return None
    path = Path(source).expanduser()
    if not path.exists():
        raise InitError(f"init.from={path}: no checkpoint or export folder there")
    try:
        state, tokenizer, step = _read(path)
    except CheckpointError as error:
        raise InitError(f"init.from: {error}") from None
    return InitWeights(str(path), step, tokenizer, state, recipe.init.strict)
