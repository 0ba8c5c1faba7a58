"""Each of torch's SDPA kernels, and normzoo's explicit path, on the attention normzoo runs:
first-visit and steady milliseconds, and which one the policy picks (issue 50).

    python benchmarks/attention_backends.py [--out PATH] [--reps 20] [--threads N] [--dry-run]

On a GPU (bf16, Transformer-base: d_model 512, 8 heads) it measures flash, memory-efficient,
cuDNN, math and the explicit path (``normzoo.nn.attention.explicit_attention``), forward and
backward, on four cases shaped as normzoo's attention shapes them (q, k and v views into one
fused projection): short padded self-attention (B=128, T=24), long padded self-attention
(B=8, T=512), causal self-attention (B=32, T=128) and cross-attention with a source mask
(B=128, T=24, S=26). A kernel that refuses a case is recorded as refused, with torch's reason.

* **first visit**: one forward and backward on a shape that kernel has not met (T + 1 + the
  kernel's index, so no kernel inherits another's plan for it), after the kernel has warmed
  up on the case's own shape: what a token-budget batch of a new shape costs. cuDNN builds a
  plan there.
* **steady**: the median of ``--reps`` calls on the case's shape after warm-up.

Each case prints the kernel a measurement picks (the fastest steady) beside the one
:func:`normzoo.nn.sdpa_choice.sdpa_backends` puts first. On a CPU it times the math kernel and
the explicit path only, in float32 on smaller shapes (a few seconds). ``--out`` is the JSON
report (default ``benchmarks/results/attention-<device>.json``); its Markdown twin is written
beside it (``.md``). ``--dry-run`` checks the arguments, prints the plan and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import RESULTS, device_slug, machine, machine_lines, table

D_MODEL, HEADS = 512, 8
KERNELS = ("flash", "efficient", "cudnn", "math", "explicit")
CPU_KERNELS = ("math", "explicit")
SAID_OF_EVERY_KERNEL = ("not used because", "runtime disabled", "has been disabled")


@dataclass(frozen=True)
class Case:
    """One attention shape: ``source`` keys for cross-attention (else the queries' own),
    ``padded`` rows of the batch whose last quarter of keys is padding."""

    name: str
    batch: int
    length: int
    causal: bool = False
    source: int | None = None
    padded: bool = True

    def attention_case(self) -> Any:
        from normzoo.nn.sdpa_choice import AttentionCase

        if self.source is not None:
            return AttentionCase.CROSS
        if self.causal:
            return AttentionCase.CAUSAL_PADDED if self.padded else AttentionCase.CAUSAL
        return AttentionCase.SELF_PADDED


GPU_CASES = (Case("short padded self-attention", 128, 24),
             Case("long padded self-attention", 8, 512),
             Case("causal self-attention", 32, 128, causal=True, padded=False),
             Case("cross-attention, source mask", 128, 24, source=26))
CPU_CASES = (Case("short padded self-attention", 16, 24),
             Case("long padded self-attention", 2, 128),
             Case("causal self-attention", 4, 64, causal=True, padded=False),
             Case("cross-attention, source mask", 16, 24, source=26))


def inputs(case: Case, length: int, device: Any, dtype: Any) -> dict[str, Any]:
    """q, k, v as normzoo's attention makes them (head views into fused projections, leaves of
    the autograd graph) and the boolean mask it passes (None where it passes ``is_causal``)."""
    import torch

    from normzoo.nn.attention import attention_mask

    b, hd, keys = case.batch, D_MODEL // HEADS, case.source or length

    def heads(x: Any) -> Any:
        return x.view(b, x.shape[1], HEADS, hd).transpose(1, 2)

    if case.source is None:
        fused = torch.randn(b, length, 3 * D_MODEL, device=device, dtype=dtype,
                            requires_grad=True)
        q, k, v = (heads(x) for x in fused.split(D_MODEL, dim=-1))
        leaves = [fused]
    else:
        query = torch.randn(b, length, D_MODEL, device=device, dtype=dtype, requires_grad=True)
        kv = torch.randn(b, keys, 2 * D_MODEL, device=device, dtype=dtype, requires_grad=True)
        q, (k, v) = heads(query), (heads(x) for x in kv.chunk(2, dim=-1))
        leaves = [query, kv]
    padding = None
    if case.padded:
        padding = torch.zeros(b, keys, dtype=torch.bool, device=device)
        padding[::2, keys - keys // 4:] = True  # every other row a quarter shorter
    # Causal without padding: no mask, is_causal (the call flash takes), as normzoo makes it.
    mask = None if case.causal and padding is None else attention_mask(
        padding, case.causal, length, keys, device)
    return {"q": q, "k": k, "v": v, "mask": mask, "leaves": leaves}


def step(kernel: str, case: Case, x: dict[str, Any]) -> None:
    """One forward and backward through ``kernel`` (only that one allowed)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    from normzoo.nn.attention import attention_mask, explicit_attention
    from normzoo.nn.sdpa_choice import KERNELS as SDPA

    for leaf in x["leaves"]:
        leaf.grad = None
    q, k, v, mask = x["q"], x["k"], x["v"], x["mask"]
    causal_flag = case.causal and mask is None
    if kernel == "explicit":
        if causal_flag:
            mask = attention_mask(None, True, q.shape[2], k.shape[2], q.device)
        out = explicit_attention(q, k, v, mask, 0.0)
    else:
        with sdpa_kernel([SDPA[kernel]]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal_flag)
    out.float().square().mean().backward()
    if q.device.type == "cuda":
        torch.cuda.synchronize()


def measure(kernel: str, case: Case, index: int, reps: int, device: Any,
            dtype: Any) -> dict[str, Any]:
    """Steady and first-visit ms of ``kernel`` on ``case``; ``refused`` with torch's reason
    where the kernel cannot run it."""
    x = inputs(case, case.length, device, dtype)
    with warnings.catch_warnings(record=True) as said:  # torch warns why a kernel refuses
        warnings.simplefilter("always")
        try:
            for _ in range(3):
                step(kernel, case, x)
        except RuntimeError as error:
            # torch says why each kernel was not used; the others were turned off here
            reasons = [str(w.message) for w in said
                       if not any(skip in str(w.message) for skip in SAID_OF_EVERY_KERNEL)]
            return {"refused": (reasons or [str(error).strip()])[0][:300]}
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step(kernel, case, x)
        times.append(1e3 * (time.perf_counter() - start))
    fresh = case.length + 1 + index  # a shape no kernel has met
    y = inputs(case, fresh, device, dtype)
    start = time.perf_counter()
    step(kernel, case, y)
    first = 1e3 * (time.perf_counter() - start)
    return {"steady_ms": statistics.median(times), "steady_range_ms": [min(times), max(times)],
            "first_visit_ms": first, "first_visit_length": fresh}


def policy_pick(case: Case, device_type: str, dtype: Any) -> str:
    """The kernel normzoo's default policy puts first for ``case`` (``sdpa (cpu)`` on a CPU)."""
    from normzoo.nn.sdpa_choice import NAMES, sdpa_backends

    chosen = sdpa_backends(case.attention_case(), device_type, dtype, D_MODEL // HEADS)
    return "sdpa (cpu)" if chosen is None else NAMES[chosen[0]]


def report(results: list[dict[str, Any]], kernels: tuple[str, ...], info: dict[str, Any],
           command: str) -> list[str]:
    def cell(r: dict[str, Any]) -> str:
        if "refused" in r:
            return "refused"
        return f"{r['steady_ms']:.2f} / {r['first_visit_ms']:.1f}"

    rows = [[r["case"], r["shape"], *(cell(r["kernels"][k]) for k in kernels),
             r["fastest"] or "-", r["policy"]] for r in results]
    return ["# Attention kernels: steady and first-visit ms", "", *machine_lines(info), "",
            f"`{command}`: forward and backward, ms: steady (median) / first visit (a new "
            f"shape). d_model {D_MODEL}, {HEADS} heads, {results[0]['dtype']}.", "",
            *table(["case", "shape", *kernels, "fastest (steady)", "policy"], rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON report (default benchmarks/results/attention-<device>.json)")
    parser.add_argument("--reps", type=int, default=20, help="timed calls per kernel and case")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on a CPU")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the arguments and print the plan; measure nothing")
    args = parser.parse_args(argv)
    if args.reps < 1 or (args.threads is not None and args.threads < 1):
        parser.error("--reps and --threads must be at least 1")
    import torch

    gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    kernels, cases = (KERNELS, GPU_CASES) if gpu else (CPU_KERNELS, CPU_CASES)
    out = args.out or RESULTS / f"attention-{device_slug()}.json"
    if args.dry_run:
        print(f"would measure {', '.join(kernels)} on {len(cases)} cases "
              f"({', '.join(c.name for c in cases)}) on {device} in {dtype}, "
              f"{args.reps} reps each; report: {out}")
        return 0
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    for case in cases:
        measured = {k: measure(k, case, i, args.reps, device, dtype)
                    for i, k in enumerate(kernels)}
        ran = {k: r["steady_ms"] for k, r in measured.items() if "refused" not in r}
        shape = f"B={case.batch}, T={case.length}" + (f", S={case.source}" if case.source else "")
        results.append({"case": case.name, "shape": shape, "dtype": str(dtype).split(".")[-1],
                        "attention_case": case.attention_case().value, **asdict(case),
                        "kernels": measured, "fastest": min(ran, key=ran.get) if ran else None,
                        "policy": policy_pick(case, device, dtype)})
        print(f"{case.name}: fastest {results[-1]['fastest']}, policy {results[-1]['policy']}",
              file=sys.stderr)
    info = machine(torch.get_num_threads())
    command = "python benchmarks/attention_backends.py " + " ".join(argv or sys.argv[1:])
    lines = report(results, kernels, info, command.strip())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "command": command.strip(), "device": device,
                               "results": results}, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
