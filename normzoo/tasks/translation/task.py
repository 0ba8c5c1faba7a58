"""Translation on an encoder-decoder: parallel text in, BLEU and chrF (sacreBLEU) out."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from normzoo.contract.task import Card, EvaluateRequest, FinalTest, Parts, Scores, Task

if TYPE_CHECKING:
    from normzoo.data.split import Split
    from normzoo.data.tokenizer import Tokenizer
    from normzoo.recipe import Recipe
    from normzoo.recipe.data import DataConfig


class Translation(Task):
    """Translation on an encoder-decoder: label-smoothed cross-entropy, validation and test BLEU."""

    name = "translation"
    family = "encoder_decoder"
    kind = "a translation model"
    module = "normzoo.tasks.translation.module:TranslationModule"
    parts = ("src", "tgt")
    token_parts = ("src", "tgt")
    unit = "pairs"
    evaluate_options: ClassVar[frozenset[str]] = frozenset(
        {"src", "ref", "beam", "lenpen", "bf16", "hyps", "force"})
    compared_score = ("bleu", "max", "BLEU")

    def monitor(self, recipe: Recipe) -> tuple[str, str]:
        """BLEU where validation decodes it (``eval.valid_bleu``), else the validation loss."""
        return ("val/bleu", "max") if recipe.eval.valid_bleu else ("val/loss", "min")

    def decodes_in_validation(self, recipe: dict[str, Any]) -> bool:
        return bool((recipe.get("eval") or {}).get("valid_bleu", True))

    # -- data -------------------------------------------------------------------------------
    def split_files(self, data: DataConfig, split: str) -> list[Path]:
        folder = Path(data.dir or "")
        return [folder / f"{split}.{data.src_lang}", folder / f"{split}.{data.tgt_lang}"]

    def read(self, split: Split) -> Iterator[Parts]:
        from normzoo.data import chunks

        yield from chunks.parallel_chunks(split.recipe.data, split.name, split.limit,
                                          files=list(split.files) or None)

    def kept_texts(self, role: str) -> dict[str, str]:
        # The final test scores raw references, and compares with copying the raw sources.
        return {} if role == "train" else {"src": "src", "ref": "tgt"}

    def dropped(self, lengths: Sequence[Any], max_len: int, role: str) -> dict[str, int] | None:
        if role != "train":
            return None
        return {f"longer than data.max_len={max_len}":
                int(((lengths[0] >= max_len) | (lengths[1] >= max_len)).sum())}

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        from normzoo.data.examples import ParallelData

        return ParallelData(prepared.table(role, "src"), prepared.table(role, "tgt"),
                            recipe.data.max_len, drop_long=role == "train")

    # -- model and ending -------------------------------------------------------------------
    def final_test(self, end: FinalTest) -> tuple[dict[str, float], dict[str, Any]] | None:
        """Decoded by rank 0 alone, after training time ends (:mod:`.final_test`)."""
        from normzoo.tasks.translation.final_test import test_translation

        end.training_ended()
        if not end.trainer.is_global_zero:
            return None
        return end.last_validation(), test_translation(end)

    def report(self, test: dict[str, Any]) -> str:
        return (f"test BLEU {test['bleu']:.2f} on {test['split']} ({test['sentences']} "
                f"sentences; copying the source scores {test['copy_source_bleu']:.2f})  "
                f"{test['signature']}")

    # -- afterwards -------------------------------------------------------------------------
    def evaluate(self, loaded: Any, request: EvaluateRequest) -> Scores:
        from normzoo.tasks.translation.evaluate import evaluate

        return evaluate(loaded, request)

    def example_outputs(self, run_dir: Path, recipe: dict[str, Any],
                        data_dir: Path | None = None) -> Any:
        """The test translations (``hyps.<split>.txt``) against the references: per sentence,
        sacreBLEU's statistics (corpus BLEU from their sums); a sentence's key is its
        hypothesis where it differs from the reference (two good seeds both translating a
        sentence right is no sign of a copy), else None."""
        from normzoo.contract.outputs import ExampleOutputs
        from normzoo.contract.scores import bleu_score, bleu_stats

        split = str((recipe.get("data") or {}).get("test_split") or "test")
        hyps_file = run_dir / f"hyps.{split}.txt"
        if not hyps_file.is_file():
            return None
        from normzoo.data.sources import decode_lines

        hyps = decode_lines(hyps_file.read_bytes(), str(hyps_file))
        references = self.references(recipe, split, data_dir)
        if len(hyps) != len(references):
            from normzoo.errors import NormzooError

            raise NormzooError(f"{hyps_file} holds {len(hyps)} translations for "
                               f"{len(references)} references of {split}: not this test set")
        keys = [h if h != r else None for h, r in zip(hyps, references, strict=True)]
        return ExampleOutputs(bleu_stats(hyps, references), bleu_score, keys)

    def references(self, recipe: dict[str, Any], split: str, data_dir: Path | None) -> list[str]:
        """A split's references as the run's saved recipe reads them (``data_dir``: where a
        ``files`` corpus is now). Only the data section is read: a run trained before a key
        elsewhere was renamed is still scored."""
        from normzoo.data.sources import load_parallel
        from normzoo.recipe import DataConfig

        data = DataConfig.model_validate(recipe.get("data") or {})
        if data_dir is not None:
            data = data.model_copy(update={"dir": str(data_dir), "source": "files"})
        return load_parallel(data, split, data.valid_limit)[1]

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        data = recipe.data
        return Card(
            tag="translation", data_note=f", {data.src_lang}→{data.tgt_lang}",
            python='model.translate(["A man is riding a bike."])', command="translate",
            transformers=('inputs = tokenizer(["A man is riding a bike.", "Two dogs play."],',
                          '                   return_tensors="pt", padding=True)',
                          "out = model.generate(**inputs, num_beams=1)",
                          "print(tokenizer.batch_decode(out, skip_special_tokens=True))"))
