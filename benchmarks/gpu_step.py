"""normzoo's bare training step on a GPU, eager or compiled: what ``gpu_check.sh`` times against
``normzoo train`` and profiles.

    python benchmarks/gpu_step.py --out STEP.json [--compile [--compile-scope layers|model]]
        [--size base] [--max-tokens N] [--train-batches N] [--reps N] [--warmup N]
        [--precision bf16] [--data DIR] [--batches PATH] [--profile PATH.md] [--dry-run]

The step is ``peers.py``'s normzoo step (``frameworks.normzoo_train``: ``TranslationModule``'s
loss, backward, normzoo's AdamW and schedule, no Lightning), on ``peers.py``'s batches
(Multi30k packed by token budget, padded to a ladder of 12 lengths as ``normzoo train`` pads
them on a GPU). ``--compile`` runs it through ``trainer.compile``'s own
compiled step (``normzoo.tasks.compiled``); ``--compile-scope`` sets
``trainer.compile_scope`` (``model`` or ``layers``; how each is applied, on a normzoo without
the key too, and each shape's compile timed: :mod:`gpu_compile`).
``--backend eager`` traces with TorchDynamo and runs the graphs as they are, without inductor's
code generation: the compiled path checked on a CPU in seconds (the tests).

In order, each phase written to ``--out`` as it ends, so a step stopped by its time limit
still leaves what it measured (and the phase it was in):

1. **first visits**: one step on one batch of each shape among the batches, each timed (ms):
   what a new shape costs. Compiled, the visits that compiled (the first, and any shape that
   recompiles) add up to ``compile_s``, with TorchDynamo's compiles and its reasons; each
   visit's seconds in ``compile_s_per_visit`` (the step itself included: under 0.1 s on an
   H200), the first's apart (``compile_s_first``: the process's first compile pays for
   starting inductor) from the most a later new shape cost (``compile_s_new_shape``);
2. **timing**: ``--warmup`` untimed steps, then ``--reps`` timed ones, every one on a shape
   already seen: target tokens/s and MFU by :mod:`gpu_flops` (model FLOPs over real lengths,
   6ND and padded beside it);
3. **profile** (``--profile``): ``--profile-steps`` more steps under torch's profiler; the 20
   kernels with the most device time (self time, per step) as a Markdown table
   (:mod:`gpu_profile`).

``--batches PATH`` keeps the tokenized, packed batches: read from PATH where it exists, else
made and written there, so a second run (the compiled one) skips the tokenizer;
``--prepare-only`` makes them and stops (``gpu_check.sh prepare`` carries them to the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from itertools import cycle
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import MULTI30K, first_visits, rate_summary, timed
from frameworks import SIZES, bf16, normzoo_train, size_of
from gpu_compile import SCOPES, VisitCompiles, scope_plan, scoped_setup
from gpu_flops import EncoderDecoder, batch_lengths, six_nd, step_flops, utilisation
from gpu_profile import KERNELS, write_profile


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="the figures, as JSON")
    parser.add_argument("--compile", action="store_true",
                        help="trainer.compile's step (static shapes on the ladder)")
    parser.add_argument("--compile-scope", choices=SCOPES, default=None,
                        help="trainer.compile_scope: the loss and model as one region (model) "
                        "or each layer class and the model's ends (layers); default the "
                        "recipe's auto")
    parser.add_argument("--backend", choices=("inductor", "eager"), default="inductor",
                        help="what turns the traced graphs into code (eager: TorchDynamo's "
                        "tracing alone, for a check on a CPU)")
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--max-tokens", type=int, default=25000,
                        help="token budget of a batch (padding included)")
    parser.add_argument("--train-batches", type=int, default=6)
    parser.add_argument("--reps", type=int, default=6, help="timed steps")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed steps after the first visits")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--data", type=Path, default=MULTI30K)
    parser.add_argument("--batches", type=Path, default=None,
                        help="the packed batches: read if there, else written there")
    parser.add_argument("--profile", type=Path, default=None,
                        help="write the top kernels of the step to this Markdown file")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the arguments and print what would run; run nothing")
    parser.add_argument("--prepare-only", action="store_true",
                        help="write the batches to --batches and stop")
    args = parser.parse_args(argv)
    if args.prepare_only and args.batches is None:
        parser.error("--prepare-only needs --batches")
    if not args.prepare_only and args.out is None:
        parser.error("--out is required")
    if args.compile_scope and not args.compile:
        parser.error("--compile-scope needs --compile")
    for name in ("train_batches", "reps", "profile_steps", "max_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


class Phases:
    """The result so far, written to ``path`` at the end of each phase, and on SIGTERM (a
    time limit) with the phase it stopped in."""

    def __init__(self, path: Path, result: dict[str, Any]) -> None:
        self.path, self.result, self.start = path, result, time.perf_counter()
        self.phase = "setup"
        signal.signal(signal.SIGTERM, self._stopped)

    def begin(self, phase: str) -> None:
        self.phase = phase
        self.result["phase"] = phase
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(self.result, indent=2) + "\n", encoding="utf-8")
        partial.replace(self.path)

    def _stopped(self, signum: int, frame: object) -> None:
        self.result["stopped"] = (f"stopped by its time limit in {self.phase}, "
                                  f"{time.perf_counter() - self.start:.0f} s after it started")
        self.write()
        print(self.result["stopped"], file=sys.stderr, flush=True)
        os._exit(124)


def load_batches(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from peers_data import prepare_data

    from normzoo.data.shapes import DEFAULT_RUNGS

    # The GPU's ladder, also where `gpu_check.sh prepare` makes the batches on a CPU.
    made_with = {"size": args.size, "max_tokens": size_of(args).max_tokens,
                 "data": args.data.resolve().name, "buckets": DEFAULT_RUNGS}
    if args.batches is not None and args.batches.is_file():
        data = torch.load(args.batches, weights_only=True)
        if data.get("made_with") == made_with and len(data["train"]) >= args.train_batches:
            data["train"] = data["train"][:args.train_batches]
            return data
    data = {**prepare_data(size_of(args), args.data, args.train_batches, DEFAULT_RUNGS),
            "made_with": made_with}
    if args.batches is not None:
        args.batches.parent.mkdir(parents=True, exist_ok=True)
        torch.save(data, args.batches)
    return data


def measure(args: argparse.Namespace, phases: Phases) -> None:
    import torch
    from peers import sync, train_step

    from normzoo.data.tokenizer import PAD
    from normzoo.run.hardware import peak_bf16_flops

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    result = phases.result
    result["device"] = torch.cuda.get_device_name() if cuda else "cpu"
    data = load_batches(args)
    train = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}
             for b in data["train"]]
    size = size_of(args)
    if args.compile:
        from normzoo.tasks import compiled

        compiled.BACKEND = args.backend
    if args.compile_scope:
        setup, result["scope_applied"] = scoped_setup(size, data["vocab_size"],
                                                      args.compile_scope)
    else:
        setup = normzoo_train(size, data["vocab_size"], compiled=args.compile)
    setup.model.to(device).train()
    sizes = EncoderDecoder.of(size, data["vocab_size"])
    params = sum(p.numel() for p in setup.model.parameters())
    half = bf16(args.precision, device)
    peak = peak_bf16_flops(result["device"]) if cuda and half else None
    result.update(params=params, vocab_size=data["vocab_size"], batches=len(train),
                  corpus=data["corpus"], bf16=half,
                  peak_flops=peak[0] if peak else None, peak_source=peak[1] if peak else None)
    wait = sync(device)
    compiles = VisitCompiles() if args.compile else None

    phases.begin("first visits")

    def visit(batch: dict[str, Any]) -> None:
        """A first visit, its cost kept as it ends: a limit that stops a later one (a compile)
        leaves the earlier ones in ``--out``."""
        if compiles is not None:
            compiles.start()
        start = time.perf_counter()
        train_step(setup, batch, device, args.precision)
        wait()
        done = result.setdefault("first_visits_done_ms", [])
        done.append(1000 * (time.perf_counter() - start))
        if compiles is not None:
            result.update(compiles.visited(done))
        phases.write()

    visits = first_visits(train, visit, wait)
    result.update(shapes=len(visits), first_visit_ms=visits,
                  first_visit_ms_max=max(visits.values()))
    if compiles is not None:
        result.update(compiles.figures(visits))

    phases.begin("timing")
    order, stepped = cycle(range(len(train))), []

    def step() -> float:
        stepped.append(next(order))
        return train_step(setup, train[stepped[-1]], device, args.precision)

    samples = timed(step, args.reps, args.warmup, wait)
    batches = [train[i] for i in stepped[len(stepped) - args.reps:]]
    seconds = sum(s for _, s in samples)
    tokens = sum(t for t, _ in samples)
    flops = sum(step_flops(sizes, *batch_lengths(b, PAD)) for b in batches)
    padded = sum(step_flops(sizes, *batch_lengths(b, PAD, padded=True)) for b in batches)
    result.update(
        samples=samples, rate=rate_summary(samples), tokens_per_s=tokens / seconds,
        step_s=seconds / len(samples),
        model_flops_per_s=flops / seconds, flops_per_target_token=flops / tokens,
        mfu=utilisation(flops / seconds, result["peak_flops"]),
        mfu_padded=utilisation(padded / seconds, result["peak_flops"]),
        mfu_6nd=utilisation(six_nd(params, tokens) / seconds, result["peak_flops"]))
    if compiles is not None:
        result["compiles_while_timed"] = compiles.while_timed()
    if cuda:
        result["cuda_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20

    if args.profile is not None:
        phases.begin("profile")
        heading = [f"# normzoo's bare training step{' (compiled)' if args.compile else ''}: "
                   f"the top {KERNELS} kernels ({result['device']})", "",
                   f"Transformer-{args.size} (d_model {size.d_model}, {size.layers}+"
                   f"{size.layers} layers, vocabulary {data['vocab_size']}), batches of up to "
                   f"{size.max_tokens:,} tokens, "
                   f"{'bf16 autocast' if half else 'float32'}; every shape visited before.", ""]
        write_profile(args.profile, heading, step, args.profile_steps, wait, cuda)
        result["profile"] = args.profile.name
    phases.begin("done")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = size_of(args)
    kind = "compiled (trainer.compile's step)" if args.compile else "eager"
    if args.compile:
        kind += f", scope: {scope_plan(args.compile_scope)}"
        if args.backend != "inductor":
            kind += f", backend {args.backend}"
    found = (args.data / "train.en").is_file()
    print(f"bare step, {kind}: size {args.size} ({size.max_tokens:,} tokens a batch), "
          f"precision {args.precision}, {args.train_batches} batches (every shape visited "
          f"first), {args.reps} timed steps after {args.warmup}; data {args.data}"
          f"{'' if found else ' (not found: the built-in corpus)'}; batches "
          f"{args.batches or 'made here'}; profile {args.profile or 'none'} -> "
          f"{args.out or args.batches}",
          flush=True)
    if args.dry_run:
        return 0
    if args.prepare_only:
        data = load_batches(args)
        print(f"{len(data['train'])} batches of {data['corpus']} -> {args.batches}")
        return 0
    phases = Phases(args.out, {"compiled": args.compile, "compile_scope": args.compile_scope,
                               "size": args.size,
                               "max_tokens": size.max_tokens, "precision": args.precision,
                               "reps": args.reps, "warmup": args.warmup})
    measure(args, phases)
    result = phases.result
    print(f"{result['tokens_per_s']:,.0f} target tokens/s, MFU "
          f"{_percent(result['mfu'])} (6ND {_percent(result['mfu_6nd'])}), first visits "
          f"{result['shapes']} shapes, max {result['first_visit_ms_max']:,.0f} ms"
          + (f", compile {result['compile_s']:.1f} s ({result['compiles']} compiles; a new "
             f"shape after the first {_seconds(result['compile_s_new_shape'])})"
             if args.compile else ""), flush=True)
    if args.compile:
        # On an H200 (2026-11-28) the compiled step printed its figures and then did not exit
        # within the 20 s left of its limit: the interpreter's shutdown waited on something
        # compile left behind (inductor's compile workers, most likely; not traced). The
        # figures are written by then; end now.
        sys.stderr.flush()
        os._exit(0)
    return 0


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
