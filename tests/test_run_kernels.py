"""What a run records about its kernels (:mod:`normzoo.run.kernels`): per attention case the
kernel that runs it, and AdamW's implementation, in ``summary.json`` always and on stderr on a
GPU."""

from __future__ import annotations

import json

import pytest
from tiny import tiny

from normzoo.nn.sdpa_choice import AttentionCase
from normzoo.recipe import from_dict
from normzoo.run import training as train
from normzoo.run.kernels import attention_backends, kernel_line, kernel_record

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
CASES = [case.value for case in AttentionCase]


def _recipe(precision: str = "32-true", **model):
    # Transformer-base's heads: d_model 512 / 8 = 64 channels each
    return from_dict(tiny(model={"d_model": 512, "heads": 8, **model},
                          trainer={"precision": precision}))


def _every(name: str) -> dict[str, str]:
    return dict.fromkeys(CASES, name)


def test_a_gpu_run_records_the_kernel_each_case_starts_with():
    record = kernel_record(_recipe("bf16-mixed"), "cuda")
    assert record == {"attention_backends": {
        "self-attention, key padding mask": "efficient", "causal, no mask": "flash",
        "causal, padding mask": "efficient", "cross-attention, source mask": "efficient",
        "incremental decoding, query length 1": "flash"}, "optimizer_impl": "fused"}
    # float32 has no flash; fp16 keeps the multi-tensor AdamW (its GradScaler)
    assert kernel_record(_recipe("32-true"), "cuda")["attention_backends"] == _every("efficient")
    assert kernel_record(_recipe("16-mixed"), "cuda")["optimizer_impl"] == "foreach"
    # the recipe's kernel first, where it can run the case
    assert attention_backends(_recipe("bf16-true", attention_backend="cudnn"), "cuda") == \
        _every("cudnn")
    assert attention_backends(_recipe("bf16-mixed", attention_impl="explicit"), "cuda") == \
        _every("explicit")


def test_a_cpu_run_records_what_runs_there():
    assert kernel_record(_recipe("32-true"), "cpu") == {
        "attention_backends": _every("sdpa (cpu)"), "optimizer_impl": "fused"}
    assert kernel_record(_recipe("16-mixed"), "cpu")["optimizer_impl"] == "foreach"
    # bf16 on a CPU takes the explicit path (its SDPA backward is slow there)
    assert attention_backends(_recipe("bf16-mixed"), "cpu") == _every("explicit")
    assert attention_backends(_recipe("bf16-mixed", attention_impl="sdpa"), "cpu") == \
        _every("sdpa (cpu)")
    # a kernel named for a GPU changes nothing on a CPU
    assert attention_backends(_recipe("32-true", attention_backend="flash"), "cpu") == \
        _every("sdpa (cpu)")


def test_the_gpu_header_line_names_each_case_and_adamw():
    line = kernel_line(_recipe("bf16-mixed"), "cuda")
    assert line.startswith("kernels: attention (model.attention_backend=auto) ")
    assert "causal, no mask: flash" in line and "cross-attention, source mask: efficient" in line
    assert line.endswith("· AdamW fused")


def test_summary_json_records_the_kernels_of_a_cpu_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    train.run(from_dict(tiny(run={"dir": str(run_dir)})), "tiny.yaml")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["attention_backends"] == _every("sdpa (cpu)")
    assert summary["optimizer_impl"] == "fused"  # AdamW's fused kernel on a CPU too
    assert "kernels:" not in capsys.readouterr().err  # said on a GPU only
