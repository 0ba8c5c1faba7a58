"""The compiled bare step of ``gpu_step.py --compile``: how ``--compile-scope`` is applied, and
what each shape's first visit costs in compiling.

``--compile-scope`` sets ``trainer.compile_scope``: ``model`` compiles the loss and the model as
one region, ``layers`` each Transformer layer class once and the model's ends (without it,
``auto``: the scope the recipe picks for the device). A normzoo whose recipe has no
``trainer.compile_scope`` compiles the whole step for ``model`` and, for ``layers``, each encoder
and decoder layer in place (``nn.Module.compile``), the loss eager, so that the check still
measures something on a normzoo from before the key; the result says which ran
(``scope_applied``).

Compiled, a first visit that compiles (the first, and any shape that recompiles) is what a new
shape costs: its seconds are kept as it ends (:class:`VisitCompiles`), so that a time limit that
stops a later visit, a compile, still leaves the earlier ones measured.
"""

from __future__ import annotations

from typing import Any

SCOPES = ("layers", "model")  # trainer.compile_scope's choices other than auto


def has_compile_scope() -> bool:
    """Whether this normzoo's recipe has ``trainer.compile_scope`` (issue 61)."""
    from normzoo.recipe.schema import TrainerConfig

    return "compile_scope" in TrainerConfig.model_fields


def auto_scope() -> str | None:
    """The scope ``trainer.compile_scope: auto`` picks on a CUDA device, where this normzoo has
    the key."""
    try:
        from normzoo.tasks.compiled import scope_for
    except ImportError:
        return None
    return scope_for("auto", "cuda")


def scope_plan(scope: str | None) -> str:
    """How ``--compile-scope`` will be applied, as the dry run and the result say it."""
    if scope is None:
        return ("trainer.compile_scope as the recipe has it (auto)" if has_compile_scope()
                else "the whole step (this normzoo's recipe has no trainer.compile_scope)")
    if has_compile_scope():
        return f"trainer.compile_scope={scope}"
    if scope == "model":
        return "the whole step (this normzoo's recipe has no trainer.compile_scope)"
    return ("each encoder and decoder layer compiled in place, the loss eager (this normzoo's "
            "recipe has no trainer.compile_scope)")


def stack_layers(model: Any) -> list[Any]:
    """Every layer of the model's encoder and decoder stacks."""
    from normzoo.models.stacks import DecoderStack, EncoderStack

    return [layer for stack in model.modules() if isinstance(stack, (EncoderStack, DecoderStack))
            for layer in stack.layers]


def scoped_setup(size: Any, vocab_size: int, scope: str) -> tuple[Any, str]:
    """``frameworks.normzoo_train``'s compiled step with ``trainer.compile_scope`` ``scope``
    (the same model, loss, optimizer and schedule; the recipe's key passed only where it
    exists), and what was compiled."""
    from frameworks import BETAS, EPS, LABEL_SMOOTHING, LR, TrainSetup, normzoo_config

    from normzoo.recipe import from_dict
    from normzoo.run.machine import batch_ladder
    from normzoo.tasks.optim import build_optimizer
    from normzoo.tasks.translation.module import TranslationModule

    keyed = has_compile_scope()
    whole = keyed or scope == "model"  # else: the layers compiled here, the loss eager
    trainer: dict[str, Any] = {"compile": whole}
    if keyed:
        trainer["compile_scope"] = scope
    recipe = from_dict({"task": "translation", "model": normzoo_config(size),
                        "optim": {"lr": LR, "betas": list(BETAS), "eps": EPS,
                                  "label_smoothing": LABEL_SMOOTHING},
                        "trainer": trainer})
    recipe = batch_ladder(recipe)  # as peers_data pads the batches: static shapes on a GPU
    task = TranslationModule(recipe, vocab_size)
    if whole:  # TaskModule compiled it: a RegionalStep has regions, a whole step none
        regions = getattr(getattr(task, "_compiled", None), "regions", None)
        applied = (f"layers: {regions} regions a shape (each layer class once, the ends)"
                   if regions else "model: the loss and the model as one region")
    else:
        from normzoo.tasks.compiled import BACKEND

        layers = stack_layers(task.model)
        for layer in layers:  # static shapes, as the recipe's step compiles on the ladder
            layer.compile(dynamic=False, **({} if BACKEND == "inductor" else {"backend": BACKEND}))
        applied = f"layers: {len(layers)} layers compiled in place, the loss eager"
    optimizer, scheduler = build_optimizer(task.model, recipe.optim, recipe.trainer.max_steps)

    def loss_terms(batch: dict[str, Any]) -> tuple[Any, Any]:
        terms = task.step_terms(batch, recipe.optim.label_smoothing)  # as training_step
        return terms.loss_sum, terms.tokens

    setup = TrainSetup(task.model, loss_terms, optimizer, scheduler)
    return setup, f"{applied} ({scope_plan(scope)})"


def compile_per_shape(visits_ms: list[float], compiled_at: list[int]) -> dict[str, Any]:
    """The compile figures of the first visits so far (ms each, in the order met, and the
    compiles each made): ``compile_s`` the visits that compiled, summed; ``compile_s_first``
    the first visit; ``compile_s_new_shape`` the slowest later one (a shape met mid-run), None
    before a second."""
    seconds = [ms / 1000 for ms in visits_ms]
    return {"compile_s": sum(s for s, made in zip(seconds, compiled_at, strict=True) if made),
            "compile_s_per_visit": seconds,
            "compile_s_first": seconds[0] if seconds else None,
            "compile_s_new_shape": max(seconds[1:]) if len(seconds) > 1 else None}


class VisitCompiles:
    """TorchDynamo's compiles over a compiled step's first visits: :meth:`start` before a
    visit, :meth:`visited` after it (the figures so far, for a result written as each visit
    ends), :meth:`figures` once every shape is visited, :meth:`while_timed` after the timing
    (a compile there would be a shape the first visits missed)."""

    def __init__(self) -> None:
        from normzoo.tasks.compiled import CompileCount

        self.count = CompileCount()
        self.compiled_at: list[int] = []  # the compiles each first visit made
        self._before = 0

    def start(self) -> None:
        self._before = self.count.compiles

    def visited(self, done_ms: list[float]) -> dict[str, Any]:
        """The visit that just ended counted; the figures of the visits done (``done_ms``)."""
        self.compiled_at.append(self.count.compiles - self._before)
        return compile_per_shape(done_ms, self.compiled_at)

    def figures(self, visits: dict[str, float]) -> dict[str, Any]:
        """Compile time: the first visits that compiled (forward, backward), by shape
        (``visits``: ms each), with TorchDynamo's compiles and its reasons."""
        compiles, reasons = self.count.new_since()
        return {**compile_per_shape(list(visits.values()), self.compiled_at),
                "compile_s_per_shape": {shape: ms / 1000 for shape, ms in visits.items()},
                "compiles": compiles, "compiles_per_visit": self.compiled_at,
                "recompile_reasons": reasons[:10]}

    def while_timed(self) -> int:
        return self.count.new_since()[0]
