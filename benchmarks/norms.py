"""Each built-in norm layer, forward + backward, against its plain PyTorch equivalent.

    python benchmarks/norms.py [--size base|tiny] [--reps N] [--warmup N] [--threads N]
                               [--out PATH]

base: activations of [8192 tokens, 512]; tiny: [256, 64]. A repetition times ``--calls``
forward+backward calls; the figure is the median time per call over ``--reps`` repetitions.
The plain equivalent gets the same parameters, and the table shows the largest difference
between the two outputs, so a faster "equivalent" that computes something else would show.
Writes benchmarks/results/norms-<device>.md (and .json) unless ``--out`` says where.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import (
    RESULTS,
    device_slug,
    machine,
    machine_lines,
    table,
    timed,
    write_report,
)

from normzoo import registry
from normzoo.nn.padding import padding_mask_context

SHAPES = {"base": (8192, 512), "tiny": (256, 64)}
# (norm, fraction of padding tokens): masked BatchNorm is also timed as normzoo's stacks run it.
CASES = [("layernorm", 0.0), ("rmsnorm", 0.0), ("scalenorm", 0.0), ("dyt", 0.0),
         ("batchnorm", 0.0), ("batchnorm", 0.1)]
Norm = Callable[[torch.Tensor], torch.Tensor]


def plain_equivalent(name: str, norm: nn.Module) -> tuple[str, Norm]:
    """What a user would write in plain PyTorch for ``norm``, sharing its parameters."""
    if name == "layernorm":
        return "F.layer_norm", lambda x: F.layer_norm(x, (norm.dim,), norm.weight, norm.bias,
                                                      norm.eps)
    if name == "rmsnorm":
        return "F.rms_norm", lambda x: F.rms_norm(x, (norm.dim,), norm.weight, norm.eps)
    if name == "scalenorm":
        return "g * F.normalize(x)", lambda x: norm.scale * F.normalize(x, dim=-1, eps=norm.eps)
    if name == "dyt":
        return "w * tanh(a x) + b", lambda x: norm.weight * torch.tanh(norm.alpha * x) + norm.bias
    if name == "batchnorm":
        plain = nn.BatchNorm1d(norm.dim, eps=norm.eps, momentum=norm.momentum).to(norm.weight)
        plain.weight, plain.bias = norm.weight, norm.bias
        return "nn.BatchNorm1d", plain
    raise ValueError(f"no plain equivalent for norm '{name}'")


def on_real_tokens(fn: Norm, keep: torch.Tensor) -> Norm:
    """``fn`` over the real tokens only, written back into a zero tensor (pads stay 0)."""
    def masked(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x).index_put((keep,), fn(x[keep]))

    return masked


def with_padding_mask(norm: nn.Module, mask: torch.Tensor) -> Norm:
    """``norm`` as a normzoo stack calls it, with the batch's padding mask published."""
    def masked(x: torch.Tensor) -> torch.Tensor:
        with padding_mask_context(mask):
            return norm(x)

    return masked


def per_call_seconds(fns: Sequence[Norm], x: torch.Tensor, args: argparse.Namespace,
                     sync: Callable[[], None]) -> list[list[float]]:
    """Seconds per forward+backward call of each of ``fns``, one figure per repetition.

    The functions take turns within each repetition, so a machine whose speed drifts (other
    jobs, clock changes) slows them alike instead of whichever ran last.
    """
    grad = torch.randn_like(x)

    def calls(fn: Norm) -> Callable[[], float]:
        def run() -> float:
            for _ in range(args.calls):
                fn(x).backward(grad)
                x.grad = None
            return args.calls
        return run

    for fn in fns:
        timed(calls(fn), 0, args.warmup, sync)
    seconds: list[list[float]] = [[] for _ in fns]
    for _ in range(args.reps):
        for fn, out in zip(fns, seconds, strict=True):
            [(n, s)] = timed(calls(fn), 1, 0, sync)
            out.append(s / n)
    return seconds


def measure(name: str, padding: float, shape: tuple[int, int], args: argparse.Namespace,
            device: torch.device) -> dict[str, Any]:
    """normzoo's norm and its plain equivalent on the same input; with ``padding``, that
    fraction of the tokens is padding (for the norms whose statistics must skip it)."""
    torch.manual_seed(0)
    norm = registry.norms.get(name)(shape[1]).to(device).train()
    label, plain = plain_equivalent(name, norm)
    ours: Norm = norm
    keep = torch.arange(shape[0], device=device) < round(shape[0] * (1 - padding))
    if padding:
        ours, plain = with_padding_mask(norm, ~keep), on_real_tokens(plain, keep)
        label += " on the real tokens"
    x = torch.randn(shape, device=device, requires_grad=True)
    with torch.no_grad():
        difference = (ours(x) - plain(x))[keep].abs().max().item()
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    ours_s, plain_s = per_call_seconds([ours, plain], x, args, sync)
    return {"norm": name + (f" ({padding:.0%} padding)" if padding else ""), "plain": label,
            "normzoo_us": 1e6 * statistics.median(ours_s),
            "plain_us": 1e6 * statistics.median(plain_s), "max_abs_difference": difference}


def report(args: argparse.Namespace, shape: tuple[int, int], results: list[dict[str, Any]],
           info: dict[str, Any]) -> list[str]:
    rows = [[r["norm"], r["plain"], f"{r['normzoo_us']:,.1f}", f"{r['plain_us']:,.1f}",
             f"{r['normzoo_us'] / r['plain_us']:.2f}", f"{r['max_abs_difference']:.1e}"]
            for r in results]
    return [f"# Norm layers: normzoo vs plain PyTorch ({args.size}, {device_slug()})", "",
            f"Command: `python benchmarks/norms.py --size {args.size} --reps {args.reps} "
            f"--warmup {args.warmup} --calls {args.calls} --threads {args.threads}`", "",
            *machine_lines(info), "",
            f"Forward + backward on float32 activations of shape {list(shape)} in training "
            f"mode; median time per call over {args.reps} repetitions of {args.calls} calls "
            "after warm-up. `normzoo / plain` above 1 means normzoo is slower. With padding, "
            "normzoo's masked BatchNorm gets the padding mask as its stacks publish it, and the "
            "plain version runs nn.BatchNorm1d on the gathered real tokens; the difference is "
            "over the real tokens.", "",
            *table(["norm", "plain equivalent", "normzoo µs", "plain µs", "normzoo / plain",
                    "max |difference|"], rows)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SHAPES), default="base")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    shape = SHAPES[args.size]
    results = [measure(name, padding, shape, args, device) for name, padding in CASES]
    info = machine(args.threads)
    lines = report(args, shape, results, info)
    out = args.out or RESULTS / f"norms-{device_slug()}.md"
    write_report(out, lines, {"machine": info, "size": args.size, "shape": list(shape),
                              "reps": args.reps, "calls": args.calls, "results": results})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
