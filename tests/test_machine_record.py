"""Every run records the machine it ran on (``summary.json``'s ``machine``), with the CPU's family
and model beside its name: "AMD EPYC" alone covered a Zen 4 and a Zen 5 whose bf16 training
speeds differed 1.63x against 2.31x fp32 (benchmarks/results/precision-cpu.md)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest

from normzoo.run import hardware as machine


def test_the_cpu_name_carries_family_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "_cpuinfo", lambda: {
        "model name": "AMD EPYC", "cpu family": "26", "model": "2"})
    assert machine.cpu_name() == "AMD EPYC (family 26, model 2)"
    monkeypatch.setattr(machine, "_cpuinfo", lambda: {"model name": "Apple M2"})
    assert machine.cpu_name() == "Apple M2"


def test_cpuinfo_reads_the_first_processor_only(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: First\ncpu family\t: 25\n\n"
                       "processor\t: 1\nmodel name\t: Second\ncpu family\t: 26\n")
    real_path = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo"
                        else real_path(p))
    assert machine._cpuinfo() == {"processor": "0", "model name": "First", "cpu family": "25"}


def test_describe_says_what_sets_the_speed() -> None:
    import torch

    record = machine.describe("cpu")
    assert record["cores"] >= 1 and record["torch_threads"] == torch.get_num_threads()
    assert record["torch"] == torch.__version__ and record["gpu"] is None
    assert isinstance(record["cpu_bf16"], bool) and record["cpu"]
    json.dumps(record)  # it goes into summary.json as it is


def test_a_finished_run_records_its_machine(tiny_checkpoint: Path) -> None:
    summary = json.loads((tiny_checkpoint.parents[1] / "summary.json").read_text())
    assert summary["machine"]["cpu"] == machine.cpu_name()
    assert summary["machine"]["torch_threads"] == 1  # the fixture trains on one thread
    expected = "reuse" if platform.libc_ver()[0] == "glibc" else "system"  # run.allocator
    assert summary["machine"]["cpu_malloc"] == expected


def test_the_record_says_what_the_cpu_has_not_what_an_override_asks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``NORMZOO_CPU_BF16=1`` makes a run train in bf16 on a CPU without it; the record must
    still say the CPU lacks it, and say the override was set."""
    from normzoo.run import machine as run_machine

    monkeypatch.delenv(run_machine.CPU_BF16_OVERRIDE, raising=False)
    real = machine.describe("cpu")
    assert "cpu_bf16_override" not in real
    monkeypatch.setenv(run_machine.CPU_BF16_OVERRIDE, "0" if real["cpu_bf16"] else "1")
    forced = machine.describe("cpu")
    assert forced["cpu_bf16"] == real["cpu_bf16"]
    assert forced["cpu_bf16_override"] == ("0" if real["cpu_bf16"] else "1")
    assert run_machine.cpu_supports_bf16() != real["cpu_bf16"]  # the fallback obeys it


def test_cores_are_this_process_share(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from normzoo.sweep.local import threads_per_job

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert machine.usable_cores() == 4 and machine.describe("cpu")["cores"] == 4
    assert threads_per_job(2) == 2 and threads_per_job(8) == 1
