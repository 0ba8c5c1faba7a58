"""normzoo against its peers on one model size and the same batches: training tokens/s,
decoding sentences/s (greedy and beam 5) and peak memory.

    python benchmarks/peers.py [--size base|small|tiny] [--reps N] [--warmup N] [--threads N]
                               [--train-batches N] [--data DIR] [--out PATH]

Peers: x-transformers' XTransformer, Hugging Face's mBART (pre-LN) and a plain
``torch.nn.Transformer(norm_first=True)`` loop for training; Hugging Face ``generate`` for
decoding. The batches are real sentence pairs (Multi30k train from ``--data``, or normzoo's
built-in corpus where that folder is missing), BPE-tokenized and packed by token budget once,
then every framework steps through the same ones. Each measurement runs in its own process, so
its peak memory is its own: peak RSS minus the RSS after imports and data (and on CUDA the peak
of ``torch.cuda.max_memory_allocated``). Training first visits every shape among its
``--train-batches`` batches once, each visit timed and reported apart (a GPU pays for a new
shape), so the timed steps meet only shapes already seen. Every figure is the median of
``--reps`` repetitions after ``--warmup`` untimed ones, and every ratio compares figures from
the same run.
Writes benchmarks/results/peers-<device>.md (and .json beside it) unless ``--out`` says where;
the report is ``peers_report.py``'s.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from itertools import cycle
from pathlib import Path
from typing import Any

import torch

from normzoo.data.tokenizer import PAD

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is no package
from common import (
    MULTI30K,
    RESULTS,
    device_slug,
    first_visits,
    machine,
    rate_summary,
    timed,
    write_report,
)
from frameworks import (
    DECODERS,
    FRAMEWORKS,
    JOB_KINDS,
    SEARCHES,
    SIZES,
    TRAINERS,
    Size,
    TrainSetup,
    bf16,
    size_of,
)
from gpu_flops import EncoderDecoder, batch_lengths, step_flops
from peers_data import prepare_data
from peers_report import add_mfu, add_ratios, peak_flops, report

JOBS = [("train", name) for name in TRAINERS] + [
    (search, name) for search in SEARCHES for name in DECODERS]

# -- measurements (worker processes) ---------------------------------------------------------


def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def rss_baseline_mib() -> float:
    """The RSS now, with the kernel's peak reset to it, so that the later peak counts from here.

    Without the reset (not Linux) the peak so far is the baseline, and a measurement whose
    memory stays under an earlier transient peak reads as 0.
    """
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM, which ru_maxrss reports
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return peak_rss_mib()


def autocast(device: torch.device, precision: str = "auto"):
    """bf16 autocast where ``precision`` says so (every framework alike), else float32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16(precision, device))


def train_step(setup: TrainSetup, batch: dict[str, Any], device: torch.device,
               precision: str = "auto") -> float:
    """One optimizer step; returns the batch's target tokens."""
    setup.optimizer.zero_grad(set_to_none=True)
    with autocast(device, precision):
        total, count = setup.loss_terms(batch)
    (total / count.clamp(min=1)).backward()
    setup.optimizer.step()
    if setup.scheduler is not None:
        setup.scheduler.step()
    return batch["ntokens"]


def measure_training(name: str, size: Size, data: dict, device: torch.device,
                     args: argparse.Namespace) -> tuple[torch.nn.Module, list, dict, list]:
    """The model, the timed steps' ``(tokens, seconds)``, each shape's first visit (ms) and the
    timed steps' batches (indices into ``data["train"]``).

    --compile: each model with its loss as one compiled region, as trainer.compile compiles
    normzoo's; the compiles fall in the first visits."""
    setup = TRAINERS[name].build(size, data["vocab_size"], compiled=args.compile)
    setup.model.to(device).train()
    train = data["train"]
    visits = first_visits(train, lambda batch: train_step(setup, batch, device, args.precision),
                          sync(device))
    order, stepped = cycle(range(len(train))), []

    def step() -> float:
        stepped.append(next(order))
        return train_step(setup, train[stepped[-1]], device, args.precision)

    samples = timed(step, args.reps, args.warmup, sync(device))
    return setup.model, samples, visits, stepped[len(stepped) - args.reps:]


def measure_decoding(name: str, beam: int, size: Size, data: dict, device: torch.device,
                     args: argparse.Namespace) -> tuple[torch.nn.Module, list, int]:
    model, decode = DECODERS[name].build(size, data["vocab_size"], beam)
    model.to(device)
    sources = data["decode"]
    generated = []

    def one_pass() -> float:
        with torch.no_grad(), autocast(device, args.precision):
            generated.append(sum(decode(src) for src in sources))
        return sum(src.shape[0] for src in sources)

    return model, timed(one_pass, args.reps, args.warmup, sync(device)), generated[-1]


def sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else lambda: None


def run_worker(job: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One framework's measurement, in a process of its own."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = torch.load(args.batches, weights_only=True)
    data["train"] = [{k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}
                     for b in data["train"]]
    data["decode"] = [src.to(device) for src in data["decode"]]
    size = size_of(args)
    entry = (TRAINERS if job == "train" else DECODERS)[name]
    importlib.import_module(entry.library)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base_rss, base_cuda = rss_baseline_mib(), cuda_mib(device)
    result: dict[str, Any] = {"job": job, "framework": name, "label": entry.label}
    if job == "train":
        model, samples, visits, stepped = measure_training(name, size, data, device, args)
        sizes = EncoderDecoder.of(size, data["vocab_size"])
        result.update(unit="target tokens/s", first_visit_ms=visits,
                      first_visit_ms_max=max(visits.values()),
                      model_flops=[step_flops(sizes, *batch_lengths(data["train"][i], PAD))
                                   for i in stepped])
    else:
        model, samples, generated = measure_decoding(name, SEARCHES[job], size, data, device,
                                                     args)
        result.update(unit="sentences/s", generated_tokens=generated)
    result.update(params=sum(p.numel() for p in model.parameters()), samples=samples,
                  rate=rate_summary(samples), peak_rss_mib=peak_rss_mib() - base_rss)
    if device.type == "cuda":
        result["cuda_peak_mib"] = cuda_mib(device) - base_cuda
    return result


def cuda_mib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else 0.0


# -- orchestration (parent process) ----------------------------------------------------------


def run_job(job: str, name: str, args: argparse.Namespace, batches: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; a failure becomes a row with its error."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_path = Path(f.name)
    command = [sys.executable, __file__, "--worker", job, name, "--batches", str(batches),
               "--result", str(result_path), "--size", args.size, "--reps", str(args.reps),
               "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--train-batches", str(args.train_batches),
               "--precision", args.precision, *(["--compile"] if args.compile else []),
               *(["--max-tokens", str(args.max_tokens)] if args.max_tokens else [])]
    print(f"{job:>6}  {name} ...", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        if done.returncode != 0:
            return {"job": job, "framework": name, "error": done.stderr.strip()[-2000:]}
        return json.loads(result_path.read_text())
    finally:
        result_path.unlink(missing_ok=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed repetitions before the timed ones (training: after the "
                        "first visit of every shape)")
    parser.add_argument("--train-batches", type=int, default=None,
                        help="training batches, cycled (default: --reps, so the timed steps "
                        "take each once); every shape among them is visited before timing")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--data", type=Path, default=MULTI30K)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="token budget of a training batch (default: the size's)")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="bf16 autocast or float32 for every framework (auto: bf16 on a "
                        "GPU, float32 on a CPU)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each trained model with its loss as one region, "
                        "dynamic shapes, as trainer.compile does (its compiles fall in the "
                        "untimed warm-up)")
    parser.add_argument("--frameworks", type=_names(FRAMEWORKS), default=FRAMEWORKS,
                        help=f"comma-separated, of {','.join(FRAMEWORKS)} (default: all)")
    parser.add_argument("--jobs", type=_names(JOB_KINDS), default=JOB_KINDS,
                        help=f"comma-separated, of {','.join(JOB_KINDS)} (default: all)")
    parser.add_argument("--exclude", type=_pairs, default=(),
                        help="comma-separated JOB/FRAMEWORK measurements to leave out, e.g. "
                        "train/transformers")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the arguments and print the measurements planned; run none")
    parser.add_argument("--worker", nargs=2, metavar=("JOB", "FRAMEWORK"), help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.train_batches = args.train_batches or args.reps
    args.planned = [(job, name) for job, name in JOBS
                    if job in args.jobs and name in args.frameworks
                    and (job, name) not in args.exclude]
    if not args.planned and not args.worker:
        parser.error("--frameworks and --jobs leave no measurement to run")
    return args


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    """An argparse type: comma-separated ``JOB/FRAMEWORK`` measurements that :data:`JOBS`
    has."""
    pairs = tuple(tuple(p.strip().split("/", 1)) for p in text.split(",") if p.strip())
    unknown = [p for p in pairs if p not in JOBS]
    if unknown or not pairs:
        raise argparse.ArgumentTypeError(
            f"{','.join('/'.join(p) for p in unknown) or text!r}: choose from "
            f"{','.join(f'{job}/{name}' for job, name in JOBS)}")
    return pairs  # type: ignore[return-value]


def _names(known: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of ``known``."""
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{','.join(unknown) or text!r}: choose from "
                                             f"{','.join(known)}")
        return names
    return parse


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        result = run_worker(*args.worker, args)
        args.result.write_text(json.dumps(result), encoding="utf-8")
        return 0
    if args.dry_run:
        print("\n".join(f"{job:>6}  {name}" for job, name in args.planned))
        found = (args.data / "train.en").is_file()
        print(f"size {args.size} ({size_of(args).max_tokens} tokens a batch), precision "
              f"{args.precision}, compile {args.compile}, reps "
              f"{args.reps} after {args.warmup} warm-up, {args.train_batches} training "
              f"batches (every shape visited first), {args.threads} threads, data "
              f"{args.data}{'' if found else ' (not found: the built-in corpus)'} -> "
              f"{args.out or RESULTS / f'peers-{device_slug()}.md'}")
        return 0
    torch.set_num_threads(args.threads)
    data = prepare_data(size_of(args), args.data, args.train_batches)
    with tempfile.TemporaryDirectory() as tmp:
        batches = Path(tmp) / "batches.pt"
        torch.save(data, batches)
        results = [run_job(job, name, args, batches) for job, name in args.planned]
    add_ratios(results)
    add_mfu(results, peak_flops())
    info = machine(args.threads)
    lines = report(args, data, results, info)
    out = args.out or RESULTS / f"peers-{device_slug()}.md"
    write_report(out, lines, {"machine": info, "size": args.size, "reps": args.reps,
                              "warmup": args.warmup, "train_batches": args.train_batches,
                              "precision": args.precision,
                              "compile": args.compile, "corpus": data["corpus"],
                              "results": results})
    print("\n".join(lines))
    failed = [f"{r['job']}/{r['framework']}: {r['error']}" for r in results if "error" in r]
    for failure in failed:
        print(f"\nFAILED {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
