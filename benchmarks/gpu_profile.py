"""The top kernels of ``gpu_step.py``'s step under torch's profiler (``--profile``), as the
Markdown table ``gpu_check.sh`` brings back (``gpu-profile-<device>.md``): where a step's device
time goes, so that the figures beside it can be read against the kernels behind them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import table

KERNELS = 20  # rows of the profile table


def profile_table(setup_step, steps: int, sync, cuda: bool) -> list[str]:
    """The :data:`KERNELS` kernels (ops on a CPU) with the most self time over ``steps`` steps
    under torch's profiler, per step, as Markdown."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            setup_step()
        sync()

    def self_us(event: Any) -> float:
        if not cuda:
            return event.self_cpu_time_total
        return getattr(event, "self_device_time_total",
                       getattr(event, "self_cuda_time_total", 0.0))

    events = [e for e in prof.key_averages() if self_us(e) > 0]
    total = sum(self_us(e) for e in events)
    top = sorted(events, key=self_us, reverse=True)[:KERNELS]
    where = "device" if cuda else "CPU"
    rows = [[f"`{e.key[:100]}`", f"{self_us(e) / 1e3 / steps:,.3f}",
             f"{100 * self_us(e) / total:.1f}%", f"{e.count / steps:g}"] for e in top]
    return [f"Self {where} time per step, {steps} steps profiled; {len(events)} kernels in "
            f"all, {total / 1e3 / steps:,.2f} ms of {where} time per step.", "",
            *table(["kernel", "ms per step", f"of {where} time", "calls per step"], rows)]


def write_profile(path: Path, heading: list[str], setup_step: Callable[[], Any], steps: int,
                  sync: Callable[[], Any], cuda: bool) -> None:
    """``heading`` (what was stepped), then :func:`profile_table`'s table, to ``path``."""
    lines = [*heading, *profile_table(setup_step, steps, sync, cuda)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
