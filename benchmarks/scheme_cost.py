"""What a residual scheme costs per training step, against Pre-LN, in the Llama-style decoder.

    python benchmarks/scheme_cost.py [--rounds 3] [--steps 8] [--threads 1]

The model is ``recipes/studies/llama_schemes.yaml``'s (d_model 128, 6 layers, GQA 4/2, RoPE,
SwiGLU, RMSNorm, no bias) with each scheme in turn; a step is forward, backward and an AdamW
update on one batch of 16 sequences of 128 tokens, in the recipe's precision (bf16-mixed under
autocast; ``--fp32`` for float32). Each scheme runs in a process of its own (its peak resident
memory is that process's), ``--rounds`` times, the schemes taking turns so that a slower moment
of a shared machine falls on every scheme alike; a round's figure is the median of ``--steps``
timed steps after two untimed ones. Hyper-Connections' paper calls their overhead negligible:
this measures it here. Results, with the machine, go to
``benchmarks/results/scheme_cost-<device>.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common

SCHEMES = {  # label -> model overrides
    "Pre-LN": {"residual": "pre"},
    "Pre-LN + QK-norm": {"residual": "pre", "qk_norm": "rmsnorm"},
    "LNS": {"residual": "lns"},
    "Peri-LN": {"residual": "peri"},
    "HC (n = 4)": {"residual": {"name": "hyper", "streams": 4}},
    "mHC (n = 4)": {"residual": {"name": "mhc", "streams": 4}},
    "nGPT": {"residual": "ngpt"},
}
RECIPE = common.REPO / "recipes" / "studies" / "llama_schemes.yaml"


def one(label: str, steps: int, threads: int, fp32: bool) -> dict:
    """Time ``steps`` training steps of one scheme in this process."""
    import torch

    from normzoo.models import assemble
    from normzoo.recipe import load

    torch.set_num_threads(threads)
    model_config = load(RECIPE).model.model_dump(mode="json")
    model_config.update(SCHEMES[label], vocab_size=2000, family="decoder")
    torch.manual_seed(0)
    model = assemble(model_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    tokens = torch.randint(4, 2000, (16, 129))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not fp32):
            logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 2000),
                                                 targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return 1.0

    samples = common.timed(step, reps=steps, warmup=2)
    return {"ms": statistics.median(s * 1000 for _, s in samples),
            "params": sum(p.numel() for p in model.parameters()),
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--fp32", action="store_true", help="float32 instead of bf16 autocast")
    parser.add_argument("--schemes", nargs="+", choices=list(SCHEMES), default=list(SCHEMES),
                        metavar="LABEL", help="which schemes (Pre-LN is always measured)")
    parser.add_argument("--out", type=Path, help="report path (default: benchmarks/results/"
                        "scheme_cost-<device>.md)")
    parser.add_argument("--one", choices=list(SCHEMES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.one:
        print(json.dumps(one(args.one, args.steps, args.threads, args.fp32)))
        return 0
    results: dict[str, list[dict]] = {label: [] for label in SCHEMES
                                      if label == "Pre-LN" or label in args.schemes}
    started = time.time()
    for _ in range(args.rounds):
        for label in results:
            command = [sys.executable, __file__, "--one", label, "--steps", str(args.steps),
                       "--threads", str(args.threads), *(["--fp32"] if args.fp32 else [])]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            results[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["ms"] for r in results["Pre-LN"])
    rows, data = [], {}
    for label, runs in results.items():
        times = sorted(r["ms"] for r in runs)
        median = statistics.median(times)
        rss = max(r["maxrss_mib"] for r in runs)
        spread = f"{median:.0f} ({times[0]:.0f}–{times[-1]:.0f})"
        rows.append([label, f"{runs[0]['params']:,}", spread, f"{median / base:.2f}",
                     f"{rss:,.0f}"])
        data[label] = {"ms_per_step": times, "params": runs[0]["params"], "maxrss_mib": rss}
    info = common.machine(args.threads)
    precision = "float32" if args.fp32 else "bf16-mixed (autocast)"
    lines = [
        "# Per-step cost of residual schemes (Llama-style decoder)", "",
        f"`python benchmarks/scheme_cost.py --rounds {args.rounds} --steps {args.steps} "
        f"--threads {args.threads}{' --fp32' if args.fp32 else ''}`: "
        f"`{RECIPE.relative_to(common.REPO)}`'s model, one step = forward, backward and AdamW "
        f"on 16 × 128 tokens, {precision}; each scheme in its own process, {args.rounds} rounds "
        f"taking turns, a round's figure the median of {args.steps} steps "
        f"({time.time() - started:.0f} s in all).", "",
        *common.table(["scheme", "parameters", "ms per step, median (range over rounds)",
                       "/ Pre-LN", "peak RSS, MiB"], rows), "",
        *common.machine_lines(info),
    ]
    path = args.out or (common.REPO / "benchmarks" / "results"
                        / f"scheme_cost-{common.device_slug()}.md")
    common.write_report(path, lines, {"machine": info, "precision": precision, "schemes": data})
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
