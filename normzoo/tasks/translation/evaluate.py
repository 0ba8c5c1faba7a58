"""``normzoo evaluate`` for translation: decode a split (or a source file), score it against its
references with sacreBLEU, and keep the hypotheses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normzoo.contract.task import EvaluateRequest


def evaluate(loaded: Any, request: EvaluateRequest) -> tuple[dict[str, Any], list[str]]:
    """BLEU and chrF of ``loaded`` on the request's split or ``--src``/``--ref`` files; the
    hypotheses are written whole to ``--hyps`` (default ``hyps.SPLIT.evaluate.txt``)."""
    from normzoo.data.sources import DataError, load_parallel, read_lines
    from normzoo.errors import NormzooError
    from normzoo.inference.scoring import score
    from normzoo.io.atomic import atomic_write_text, check_output_file

    options = request.options
    src, ref, name = request.src, options.get("ref"), request.split
    if (src is None) != (ref is None):
        raise NormzooError("--src and --ref go together")
    if src is not None and ref is not None:
        sources, references = read_lines(src), read_lines(ref)
        if len(sources) != len(references):
            raise DataError(f"{src} has {len(sources)} lines but {ref} has {len(references)}")
        name = src.stem
    else:
        sources, references = load_parallel(loaded.recipe.data, name)
    config = loaded.eval_config(options.get("beam"), options.get("lenpen"))
    bf16 = bool(options.get("bf16"))
    hypotheses = loaded.translate(sources, beam=config.beam, lenpen=config.lenpen,
                                  max_tokens=request.batch_tokens, bf16=bf16)
    # Not hyps.SPLIT.txt: inside a run directory that is the training's final test, which
    # normzoo compare reads, and a re-scoring must leave the run's files as they were.
    out = options.get("hyps") or Path(f"hyps.{name}.evaluate.txt")
    check_output_file(out, "--hyps")
    atomic_write_text(out, "\n".join(hypotheses) + "\n", "hypotheses")  # whole or not at all
    result = score(hypotheses, references)
    report = {"checkpoint": request.checkpoint, "split": name, "beam": config.beam,
              "lenpen": config.lenpen, "precision": "bf16" if bf16 else "fp32",
              "hypotheses": str(out), **result.as_dict()}
    precision = ", bf16" if bf16 else ""
    return report, [f"BLEU = {result.bleu:.2f}  chrF = {result.chrf:.2f}  "
                    f"({result.sentences} sentences, beam {config.beam}{precision}, "
                    f"hypotheses in {out})",
                    f"BLEU signature: {result.bleu_signature}",
                    f"chrF signature: {result.chrf_signature}"]
