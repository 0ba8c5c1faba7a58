"""Language modelling: masked (BERT-style) on an encoder, causal (GPT-style) on a decoder. Both
read monolingual lines, may stream them, and are scored by their loss."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from normzoo.contract.task import Card, EvaluateRequest, Parts, Scores, Task

if TYPE_CHECKING:
    from normzoo.contract.outputs import ExampleOutputs
    from normzoo.data.tokenizer import Tokenizer
    from normzoo.recipe import Recipe


class _LanguageModel(Task):
    """What both language models share: lines in, the loss (and a metric) out."""

    kind = "a language model"

    def report(self, test: dict[str, Any]) -> str:
        scores = [f"loss {test['loss']:.4f}"]
        if "ppl" in test:
            scores.append(f"perplexity {test['ppl']:.2f}")
        if "mlm_acc" in test:
            scores.append(f"MLM accuracy {test['mlm_acc']:.4f}")
        return f"test {', '.join(scores)} on {test['split']}"

    def evaluate(self, loaded: Any, request: EvaluateRequest) -> Scores:
        """The module's test step (the default), its perplexity to 3 places."""
        return request.by_test_step(digits={"ppl": 3})

    def example_outputs(self, run_dir: Path, recipe: dict[str, Any],
                        data_dir: Path | None = None) -> ExampleOutputs | None:
        """Each line's summed token loss and token count (``examples.<test split>.tsv``), as
        ``[loss_sum, tokens]``: their column sums' ratio is the test loss per token. A line's
        loss is what tells two runs' outputs apart."""
        import numpy as np

        from normzoo.contract.outputs import ExampleOutputs
        from normzoo.contract.scores import ratio_score
        from normzoo.tasks.per_example import count, kept_outputs, number

        rows = kept_outputs(self, run_dir, recipe, data_dir, ("loss_sum", "tokens"),
                            (number, count))
        if rows is None:
            return None
        stats = np.array(rows, dtype=np.float64).reshape(len(rows), 2)
        return ExampleOutputs(stats, ratio_score, [loss for loss, _ in rows])

    _masked: ClassVar[bool] = False

    def _stream_collate(self, datamodule: Any) -> Callable:
        raise NotImplementedError

    def streaming_loader(self, datamodule: Any) -> Any:
        """Token-budget batches of the streamed training split
        (:class:`~normzoo.tasks.lm.streaming.StreamingBatches`)."""
        from normzoo.data.prepare import stream_rows
        from normzoo.tasks.lm.streaming import StreamingBatches, StreamingLoader

        recipe, data = datamodule.recipe, datamodule.recipe.data
        rank, world = datamodule.world()
        batches = StreamingBatches(
            stream_rows(recipe), task=self.name, encode=datamodule.tokenizer.encode_batch,
            max_len=data.max_len, max_tokens=data.max_tokens, seed=recipe.seed,
            buffer_size=data.shuffle_buffer, text_field=data.text_field,
            rank=rank, world_size=world, ladder=datamodule.ladder)
        return StreamingLoader(batches, self._stream_collate(datamodule),
                               num_workers=datamodule.workers,
                               pin_memory=datamodule.on_cuda())


class MaskedLM(_LanguageModel):
    """Masked LM (BERT-style) on an encoder: loss and accuracy on the masked tokens."""

    name = "mlm"
    family = "encoder"
    module = "normzoo.tasks.lm.module:MaskedLMModule"
    _masked = True

    def dropped(self, lengths: Sequence[Any], max_len: int, role: str) -> dict[str, int] | None:
        return {"empty after tokenization": int((lengths[0] == 0).sum())}

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        from normzoo.data.examples import SentenceData

        data = recipe.data
        # Seeded masks: validation and test mask each sentence the same way every time; the
        # training split anew each epoch (SentenceData.epoch_masks), whichever process collates.
        return SentenceData(prepared.table(role, "text"), data.max_len, tokenizer.vocab_size,
                            data.mask_prob, mask_seed=recipe.seed, epoch_masks=role == "train")

    def _stream_collate(self, datamodule: Any) -> Callable:
        from normzoo.data.examples import mask_tokens, pad

        vocab, prob = datamodule.tokenizer.vocab_size, datamodule.recipe.data.mask_prob
        return lambda rows, length: mask_tokens(pad(rows, length=length), vocab, prob, None)

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        return Card(tag="fill-mask", transformers=(
            'inputs = tokenizer(["A man is <mask> a bike."], return_tensors="pt")',
            "logits = model(**inputs).logits"))


class CausalLM(_LanguageModel):
    """Causal LM (GPT-style) on a decoder: loss and perplexity of the next token."""

    name = "causal_lm"
    family = "decoder"
    module = "normzoo.tasks.lm.module:CausalLMModule"

    def encode(self, parts: Parts, tokenizer: Tokenizer) -> list[list[list[int]]]:
        from normzoo.data.tokenizer import EOS

        # The stream: every line followed by EOS.
        return [[[*ids, EOS] for ids in tokenizer.encode_batch(parts[0])]]

    def dataset(self, prepared: Any, role: str, recipe: Recipe, tokenizer: Tokenizer) -> Any:
        from normzoo.data.examples import BlockData

        table = prepared.table(role, "text")  # its offsets: the line each token is in
        return BlockData(table.tokens, recipe.data.max_len, table.offsets)

    def _stream_collate(self, datamodule: Any) -> Callable:
        from normzoo.data.examples import collate_blocks

        return collate_blocks

    def card(self, recipe: Recipe, hf: Any | None) -> Card:
        return Card(
            tag="text-generation",
            python='model.generate(["Once upon a time"], max_new_tokens=20)',
            command="generate",
            transformers=('inputs = tokenizer(["Once upon a time", "The"], return_tensors="pt",',
                          "                   padding=True)  # on the left",
                          "out = model.generate(**inputs, do_sample=False, max_new_tokens=20)",
                          "new = out[:, inputs['input_ids'].shape[1]:]",
                          "print(tokenizer.batch_decode(new, skip_special_tokens=True))"))
