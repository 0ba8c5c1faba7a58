"""Why ``trainer.compile`` lost to eager on a CPU: inductor writes boolean tensors slowly.

    python benchmarks/compile_masks.py [--rounds 5] [--reps 20] [--threads 1] [--out PATH]

Two measurements, each eager and through ``torch.compile`` (inductor), one torch thread:

- a comparison over 2^20 float32 elements written to a boolean tensor (``y <= 0``) and the
  same comparison written as 0/1 floats: inductor's vectorised kernels store a boolean mask
  element by element through generic conversions;
- the depth study's feed-forward sublayer (2,040 tokens, d_model 128, ffn 512, dropout 0.1 on
  the activations and on the output, bf16 autocast), forward and backward, in two forms: with
  boolean masks (``F.relu``, whose compiled backward keeps ``out <= 0``, and a dropout mask made
  by a comparison of float draws, as ``F.dropout``'s) and as normzoo compiles it
  (``normzoo.nn.feedforward.relu`` and ``normzoo.nn.dropout``: nothing boolean saved for the
  backward).

Rounds take turns; the report gives the median and range of each over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from common import RESULTS, machine, machine_lines, table, timed, write_report

TOKENS, DIM, HIDDEN, P = 2040, 128, 512, 0.1


def _per_call_ms(fn: Any, reps: int) -> float:
    """Mean ms per call of ``fn`` over ``reps`` calls after two untimed ones."""
    samples = timed(lambda: (fn(), 1.0)[1], reps, warmup=2)
    return sum(seconds for _, seconds in samples) / reps * 1e3


def cases() -> dict[str, Any]:
    """Name -> a no-argument callable doing one timed unit of work."""
    import torch
    import torch.nn.functional as F

    from normzoo.nn.dropout import dropout
    from normzoo.nn.feedforward import relu

    y = torch.randn(1 << 20)

    def boolean_dropout(x: torch.Tensor) -> torch.Tensor:
        return x * (torch.rand_like(x) >= P) * (1 / (1 - P))

    torch.manual_seed(0)
    w1 = torch.nn.Linear(DIM, HIDDEN)
    w2 = torch.nn.Linear(HIDDEN, DIM)
    x = torch.randn(TOKENS, DIM, requires_grad=True)

    def sublayer(act: Any, drop: Any) -> Any:
        def forward() -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return drop(w2(drop(act(w1(x)))))
        return forward

    def step(forward: Any) -> Any:
        return lambda: forward().float().sum().backward()

    forms = {
        "comparison to bool (2^20)": lambda t: t <= 0,
        "comparison to float (2^20)": lambda t: (t <= 0).float(),
    }
    out: dict[str, Any] = {}
    for name, fn in forms.items():
        compiled = torch.compile(fn)
        out[f"{name}, eager"] = lambda fn=fn: fn(y)
        out[f"{name}, compiled"] = lambda c=compiled: c(y)
    for name, (act, drop) in {"FFN sublayer, boolean masks": (F.relu, boolean_dropout),
                              "FFN sublayer, normzoo's": (relu, lambda t: dropout(t, P))}.items():
        forward = sublayer(act, drop)
        out[f"{name}, eager"] = step(forward)
        out[f"{name}, compiled"] = step(torch.compile(forward))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=20, help="calls timed per case and round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "compile-masks-cpu.md")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    work = cases()
    times: dict[str, list[float]] = {name: [] for name in work}
    for r in range(args.rounds):
        names = list(work) if r % 2 == 0 else list(reversed(work))
        for name in names:
            times[name].append(_per_call_ms(work[name], args.reps))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    info = machine(args.threads)
    med = {name: statistics.median(v) for name, v in times.items()}
    rows = []
    for name in work:
        if name.endswith(", eager"):
            base = name[: -len(", eager")]
            e, c = med[name], med[f"{base}, compiled"]
            rng = lambda v: f"{min(v):.2f}-{max(v):.2f}"  # noqa: E731
            rows.append([base, f"{e:.2f} ({rng(times[name])})",
                         f"{c:.2f} ({rng(times[f'{base}, compiled'])})", f"{e / c:.2f}"])
    lines = ["# Compiled on a CPU: boolean masks", "", *machine_lines(info), "",
             f"`python benchmarks/compile_masks.py --rounds {args.rounds} --reps {args.reps} "
             f"--threads {args.threads}`: ms per call, median over {args.rounds} rounds taking "
             f"turns (range in brackets), {args.reps} calls a round after two untimed ones. "
             "The sublayer rows are forward and backward of the depth study's feed-forward "
             f"sublayer ({TOKENS} tokens, {DIM} -> {HIDDEN} -> {DIM}, dropout {P} twice, bf16 "
             "autocast).", "",
             *table(["case", "eager (ms)", "compiled (ms)", "eager / compiled"], rows)]
    settings = {k: str(v) for k, v in vars(args).items()}
    write_report(args.out, lines, {"machine": info, "args": settings, "ms": times})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
