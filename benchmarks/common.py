"""What the benchmarks share: the machine description, timed repetitions, Markdown tables and
writing a report (Markdown with a JSON twin beside it).

A report must say what it was measured on, or its numbers can't be compared with anyone
else's; so every report starts with the CPU, cores, threads, GPU and library versions.
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from normzoo.run import hardware

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MULTI30K = REPO.parent / "shared" / "data" / "multi30k"
VERSIONED = ("torch", "lightning", "transformers", "x-transformers", "normzoo")


def cpu_model() -> str:
    """The CPU's name with its family and model (``normzoo.run.hardware.cpu_name``): "AMD EPYC"
    alone covers generations whose bf16 speed differs twofold."""
    from normzoo.run.hardware import cpu_name

    return cpu_name()


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def device_slug() -> str:
    """``cpu`` or the GPU's name as a file-name part (``nvidia-h100-80gb-hbm3``)."""
    name = gpu_name()
    return "cpu" if name is None else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def machine(threads: int) -> dict[str, Any]:
    """Everything a reader needs to compare these numbers with their own."""
    return {
        "cpu": cpu_model(),
        "cores": hardware.usable_cores(),
        "threads": threads,
        "gpu": gpu_name(),
        "python": platform.python_version(),
        "versions": {name: package_version(name) for name in VERSIONED},
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def machine_lines(info: dict[str, Any]) -> list[str]:
    versions = ", ".join(f"{name} {v}" for name, v in info["versions"].items())
    return [
        f"- CPU: {info['cpu']}, {info['cores']} cores, {info['threads']} torch threads",
        f"- GPU: {info['gpu'] or 'none'}",
        f"- Python {info['python']}; {versions}",
        f"- Date: {info['date']}",
    ]


def timed(run: Callable[[], float], reps: int, warmup: int,
          sync: Callable[[], None] = lambda: None) -> list[tuple[float, float]]:
    """``(units, seconds)`` of each of ``reps`` calls of ``run`` after ``warmup`` untimed ones.

    ``run`` returns how much work it did (tokens, sentences); ``sync`` waits for the device, so
    an asynchronous GPU's work lands in the repetition that queued it.
    """
    for _ in range(warmup):
        run()
    sync()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        units = run()
        sync()
        samples.append((units, time.perf_counter() - start))
    return samples


def shape_of(batch: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A batch's shapes: each tensor's name and shape (host-side values, such as a token count,
    left out). Two batches of one shape run the same kernels."""
    return tuple((name, tuple(value.shape)) for name, value in sorted(batch.items())
                 if hasattr(value, "shape"))


def shape_label(shape: tuple[tuple[str, tuple[int, ...]], ...]) -> str:
    """``src 32x17, tgt_in 32x15, ...``: a shape from :func:`shape_of` as a report prints it."""
    return ", ".join(f"{name} {'x'.join(map(str, dims))}" for name, dims in shape)


def first_visits(batches: Iterable[Mapping[str, Any]], run: Callable[[Any], object],
                 sync: Callable[[], None] = lambda: None) -> dict[str, float]:
    """``run`` once on the first batch of each shape among ``batches``, each call timed: the
    milliseconds of each shape's first visit, by :func:`shape_label`, in the order met.

    A GPU pays for a shape the first time it meets it (kernel plans chosen, allocator blocks
    carved, a compiled step compiling); a warm-up that visits every shape before the timed
    steps keeps that cost out of them, and this reports it apart. Nothing here knows how the
    batches were made: they are grouped by their tensors' shapes alone.
    """
    costs: dict[tuple, float] = {}
    for batch in batches:
        shape = shape_of(batch)
        if shape in costs:
            continue
        sync()
        start = time.perf_counter()
        run(batch)
        sync()
        costs[shape] = 1000 * (time.perf_counter() - start)
    return {shape_label(shape): ms for shape, ms in costs.items()}


def rate_summary(samples: Sequence[tuple[float, float]]) -> dict[str, float]:
    """Median, min and max of units per second over the repetitions."""
    rates = [units / seconds for units, seconds in samples]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def write_report(path: Path, lines: Sequence[str], data: dict[str, Any]) -> None:
    """``path`` (Markdown) and the same name with ``.json``, the numbers behind the tables."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
