"""What ``peers.py`` reports: normzoo's rate over each peer's for the same job, the model FLOPs
utilisation on a GPU, and the Markdown report with how each peer is configured.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import torch
from common import device_slug, machine_lines, table
from frameworks import FRAMEWORKS, JOB_KINDS, bf16, size_of
from gpu_flops import MFU_DEFINITION


def peak_flops() -> tuple[float, str] | None:
    """The GPU's dense bf16 peak, looked up from its name, and which entry matched."""
    if not torch.cuda.is_available():
        return None
    from normzoo.run.hardware import peak_bf16_flops

    return peak_bf16_flops(torch.cuda.get_device_name())


def add_ratios(results: list[dict[str, Any]]) -> None:
    """normzoo's median over each row's median, for rows of the same job."""
    ours = {r["job"]: r["rate"]["median"] for r in results
            if r["framework"] == "normzoo" and "rate" in r}
    for r in results:
        if "rate" in r and r["job"] in ours:
            r["normzoo_over_this"] = ours[r["job"]] / r["rate"]["median"]


def add_mfu(results: list[dict[str, Any]], peak: tuple[float, str] | None) -> None:
    """Model FLOPs utilisation over the GPU's bf16 peak: ``mfu`` from the model FLOPs of each
    timed step's batch (:mod:`gpu_flops`; the median over the steps), ``mfu_6nd`` from 6 ×
    parameters × the median target tokens/s."""
    if peak is None:
        return
    for r in results:
        if r["job"] == "train" and "rate" in r:
            r["mfu_6nd"] = 6 * r["params"] * r["rate"]["median"] / peak[0]
            if r.get("model_flops"):
                r["mfu"] = statistics.median(
                    flops / seconds for flops, (_, seconds) in zip(
                        r["model_flops"], r["samples"], strict=True)) / peak[0]


def ratio_text(row: dict[str, Any]) -> str:
    return f"{row['normzoo_over_this']:.2f}" if "normzoo_over_this" in row else "n/a"


def training_rows(results: list[dict[str, Any]], gpu: bool) -> list[list[str]]:
    rows = []
    for r in results:
        if r["job"] != "train":
            continue
        if "error" in r:
            rows.append([r["framework"], "failed", "", "", "", "", ""] + ["", "", ""] * gpu)
            continue
        rate = r["rate"]
        row = [r["label"], f"{r['params'] / 1e6:.2f} M", f"{rate['median']:,.0f}",
               f"{rate['min']:,.0f}–{rate['max']:,.0f}", ratio_text(r),
               f"{len(r.get('first_visit_ms', {}))}, max {r.get('first_visit_ms_max', 0):,.0f}",
               f"{r['peak_rss_mib']:,.0f}"]
        if gpu:
            row += [f"{r['cuda_peak_mib']:,.0f}", _percent(r.get("mfu")),
                    _percent(r.get("mfu_6nd"))]
        rows.append(row)
    return rows


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def first_visit_lines(results: list[dict[str, Any]]) -> list[str]:
    """Each trained framework's first visit of each batch shape, in milliseconds."""
    lines = []
    for r in results:
        if r["job"] == "train" and r.get("first_visit_ms"):
            visits = "; ".join(f"{shape}: {ms:,.0f}" for shape, ms in r["first_visit_ms"].items())
            lines.append(f"- {r['label']}: {visits}")
    return lines


def decoding_rows(results: list[dict[str, Any]], gpu: bool) -> list[list[str]]:
    rows = []
    for r in results:
        if r["job"] == "train":
            continue
        if "error" in r:
            rows.append([r["job"], r["framework"], "failed", "", "", "", ""] + [""] * gpu)
            continue
        rate = r["rate"]
        row = [r["job"], r["label"], f"{rate['median']:,.2f}",
               f"{rate['min']:,.2f}–{rate['max']:,.2f}", ratio_text(r),
               f"{r['generated_tokens']:,}", f"{r['peak_rss_mib']:,.0f}"]
        if gpu:
            row.append(f"{r['cuda_peak_mib']:,.0f}")
        rows.append(row)
    return rows


def _options(args: argparse.Namespace) -> str:
    """The command's options beyond the size and repetitions, as they were given."""
    options = [f"--max-tokens {args.max_tokens}"] if args.max_tokens else []
    options += ([f"--train-batches {args.train_batches}"]
                if getattr(args, "train_batches", args.reps) != args.reps else [])
    options += [f"--precision {args.precision}"] if args.precision != "auto" else []
    options += ["--compile"] if args.compile else []
    for name, everything in (("frameworks", FRAMEWORKS), ("jobs", JOB_KINDS)):
        chosen = getattr(args, name)
        if tuple(chosen) != tuple(everything):
            options.append(f"--{name} {','.join(chosen)}")
    if excluded := getattr(args, "exclude", ()):
        options.append(f"--exclude {','.join(f'{job}/{name}' for job, name in excluded)}")
    return "".join(f" {o}" for o in options)


def report(args: argparse.Namespace, data: dict, results: list[dict[str, Any]],
           info: dict[str, Any]) -> list[str]:
    size = size_of(args)
    gpu = torch.cuda.is_available()
    peak = peak_flops()
    tokens = [b["ntokens"] for b in data["train"]]
    lines = [f"# normzoo vs peers: training and decoding speed ({args.size} size, "
             f"{device_slug()})", "", "Command: `python benchmarks/peers.py --size "
             f"{args.size} --reps {args.reps} --warmup {args.warmup} --threads {args.threads}"
             f"{_options(args)}`",
             "", *machine_lines(info), "",
             f"Model: encoder–decoder, d_model {size.d_model}, {size.heads} heads, FFN "
             f"{size.ffn_dim} (ReLU), {size.layers}+{size.layers} layers, Pre-LN with final "
             f"norms, dropout {size.dropout}, joint BPE vocabulary of {data['vocab_size']}, "
             "shared embeddings tied to the output projection. "
             + ("bf16 autocast" if bf16(args.precision, torch.device("cuda" if gpu else "cpu"))
                else "float32") + (", each trained model torch.compile'd (its compiles in the "
                                   "untimed warm-up)." if args.compile else "."), "",
             f"Data: {data['corpus']}, {data['pairs']:,} pairs; {len(data['train'])} "
             f"token-budget batches of at most {size.max_tokens:,} tokens (padding included; "
             f"{min(tokens):,}–{max(tokens):,} target tokens each), cycled in the same order "
             "for every framework.", "",
             "## Training: one optimizer step", "",
             "Forward, label-smoothed (0.1) cross-entropy over the target tokens, backward, "
             "AdamW. First, one step on one batch of each shape among the "
             f"{len(data['train'])} batches (its first visit, timed apart: a GPU pays for a "
             f"new shape); then {args.warmup} untimed steps, and the median over {args.reps} "
             "steps, every one on a shape already seen; the range is min–max. Memory: peak RSS "
             "of the measuring process minus its RSS after imports and data.", ""]
    header = ["framework", "parameters", "target tokens/s", "range", "normzoo / this",
              "first visits (shapes, max ms)", "peak RSS MiB"] + (
                  ["CUDA peak MiB", "MFU", "MFU 6ND"] if gpu else [])
    lines += table(header, training_rows(results, gpu))
    if peak is not None:
        lines += ["", f"Peak: {peak[0] / 1e12:.0f} TFLOP/s, the dense bf16 peak of the "
                  f"{peak[1]}. {MFU_DEFINITION}"]
    if visits := first_visit_lines(results):
        lines += ["", "First visit of each batch shape, milliseconds:", "", *visits]
    lines += ["", "## Decoding", "",
              f"{size.decode_sentences} source sentences in batches of {size.decode_batch}, "
              f"exactly {size.decode_len} tokens generated per sentence on both sides "
              "(normzoo: `min_len` = length limit; Hugging Face: `min_new_tokens` = "
              "`max_new_tokens`), so both do the same number of decoder steps on random-init "
              "weights. Median over passes over all sentences.", ""]
    header = ["search", "framework", "sentences/s", "range", "normzoo / this",
              "generated tokens", "peak RSS MiB"] + (["CUDA peak MiB"] if gpu else [])
    lines += table(header, decoding_rows(results, gpu))
    lines += ["", "## How each peer is configured", "",
              "- x-transformers: `XTransformer` with `attn_flash=True` (SDPA), ReLU FFN, "
              "embedding and sublayer dropout; no biases in attention and LayerNorms without a "
              "bias (its defaults); learned absolute positions; output projection tied by hand "
              "(`XTransformer` does not pass `tie_embedding` on).",
              "- Hugging Face: `MBartForConditionalGeneration` (mBART is BART with Pre-LN and "
              "final LayerNorms, plus a LayerNorm after the embeddings), SDPA attention, "
              "learned positions, `scale_embedding=True`; `generate` suppresses PAD and BOS as "
              "normzoo does.",
              "- torch: `nn.Transformer(norm_first=True, batch_first=True)` (final norms "
              "included), scaled embeddings plus learned positions, tied output; its "
              "`dropout` also drops attention weights and FFN activations, which the others "
              "leave alone (PyTorch offers no way to turn that off alone).",
              "- normzoo: `ModelConfig(residual=pre, norm=layernorm)`, sinusoidal positions, "
              "fused QKV, trained through `TranslationModule.loss_terms` and normzoo's own "
              "AdamW (`normzoo.tasks.optim`), outside Lightning.",
              "- Every framework steps the multi-tensor AdamW (`foreach=True`)."]
    return lines
