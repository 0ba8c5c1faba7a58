"""``studies/depth/eval_gap.py`` and the depth study's section built on it: the eval path is
checked against train mode with dropout at 0, each kind of dropout is switched on alone, a
collapsed model (one prediction at every position) is told apart from a working one, and the
section's findings follow the measured files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository: studies/
from normzoo.models.assemble import assemble  # noqa: E402
from studies.depth import eval_gap  # noqa: E402

VOCAB = 50


def _model(**changes) -> torch.nn.Module:
    torch.manual_seed(0)
    return assemble({"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 2,
                     "decoder_layers": 2, "vocab_size": VOCAB, "dropout": 0.3,
                     "attention_dropout": 0.2, "activation_dropout": 0.1, **changes})


def _batches() -> list[dict]:
    torch.manual_seed(1)
    batches = []
    for _ in range(2):
        src, tgt = torch.randint(5, VOCAB, (3, 7)), torch.randint(5, VOCAB, (3, 9))
        tgt[0, -2:] = 0  # padding, left out of every measure
        batches.append({"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]})
    return batches


def test_each_kind_of_dropout_is_found_switched_on_alone_and_restored() -> None:
    model = _model()
    groups = eval_gap.dropout_groups(model)
    assert {k: len(v) for k, v in groups.items()} == {"residual": 4, "activation": 4,
                                                       "embedding": 2, "attention": 6}
    results = {r["mode"]: r for r in eval_gap.rows(model, _batches(), smoothing=0.1)}
    assert results["train mode, every dropout p=0"]["max_abs_diff_to_eval"] == 0.0
    for kind in ("residual", "activation", "embedding", "attention"):
        assert results[f"eval mode, {kind} dropout on"]["loss"] != results["eval mode"]["loss"]
    assert all("logits" not in r for r in results.values()) and not model.training
    assert {m.p for m in groups["residual"]} == {0.3} and {m.p for m in groups["activation"]} \
        == {0.1} and {m.dropout for m in groups["attention"]} == {0.2}


def test_a_model_blind_to_position_and_input_reads_as_collapsed() -> None:
    model = _model(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).eval()
    working = eval_gap.measure(model, _batches(), smoothing=0.0)
    constant = torch.nn.Module()
    constant.pad_id, logits = model.pad_id, torch.randn(VOCAB)
    constant.forward = lambda src, tgt: logits.expand(*tgt.shape, VOCAB).clone()
    collapsed = eval_gap.measure(constant, _batches(), smoothing=0.0)
    assert working["tv_neighbours"] > 0.01 and working["distinct_argmax"] > 1
    assert collapsed["tv_neighbours"] == pytest.approx(0.0, abs=1e-6)
    assert collapsed["distinct_argmax"] == 1.0


def _section(folder: Path, records: list[dict]) -> str:
    spec = importlib.util.spec_from_file_location("depth_gap",
                                                  ROOT / "studies" / "depth" / "gap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder.mkdir()
    for i, record in enumerate(records):
        (folder / f"{i}.json").write_text(json.dumps(record), encoding="utf-8")
    return "\n".join(module.gap_section(folder))


def _record(layers: int, step: int, tv: float, loss: float, train: float = 6.1,
            diff: float = 0.0, optim: dict | None = None) -> dict:
    def row(mode: str, loss: float, tv: float) -> dict:
        return {"mode": mode, "loss": loss, "loss_smoothed": loss + 0.3, "entropy": 3.0,
                "top_p": 0.5, "tv_neighbours": tv, "distinct_argmax": 1.0 + 10 * tv,
                "top_predictions": [["▁Ein", 1.0]]}
    return {"step": step, "uniform_loss": 8.7, "batches": 6, "rows": [
        row("eval mode", loss, tv), {**row("train mode, every dropout p=0", loss, tv),
                                     "max_abs_diff_to_eval": diff},
        row("train mode (all dropout on)", train, 0.2),
        row("eval mode, embedding dropout on", loss, tv),
        row("eval mode, residual dropout on", train + 0.01, 0.2)],
        "recipe": {"model": {"residual": "post", "encoder_layers": layers,
                             "decoder_layers": layers}, **({"optim": optim} if optim else {})}}


def test_the_section_names_what_the_files_show(tmp_path: Path) -> None:
    text = _section(tmp_path / "gap", [
        _record(18, 1, tv=0.001, loss=9.2, train=9.18), _record(18, 500, tv=0.0, loss=10.0),
        _record(6, 1, tv=0.07, loss=9.17, train=9.17),
        _record(18, 1000, tv=0.2, loss=20.0, optim={"schedule": "inverse_sqrt",
                                                     "warmup_steps": 0})])
    assert "initialisation), Post-LN 18+18 predicts the same distribution" in text
    assert "Post-LN 6+6 0.070 (1.7 distinct argmax a sentence)" in text
    assert "Post-LN 6+6 keep positions apart" in text and "by at most 0.0e+00" in text
    assert "One kind of dropout makes the gap" in text and "eval mode scores 10.00" in text
    assert "at step 500, already collapsed" in text and "exceeds a uniform guess" in text
    assert text.count("| Post-LN 18+18 | 500 |") == 4  # the p=0 check is in the text
    assert ("**Post-LN 18+18, inverse_sqrt schedule, warm-up 0, step 1000**: eval mode tells "
            "positions apart (TV 0.200") in text  # a later protocol: its own setting and line


def test_the_section_says_the_opposite_where_the_files_do(tmp_path: Path) -> None:
    record = _record(18, 500, tv=0.09, loss=7.0, train=6.0, diff=1e-3)
    record["rows"][-1]["loss"] = 6.8  # residual dropout alone closes a fifth of the gap
    text = _section(tmp_path / "gap", [_record(18, 1, tv=0.05, loss=6.5), record])
    assert "initialisation), no setting predicts" in text and "likely mechanism" not in text
    assert "differs from training beyond dropout" in text and "up to 1.0e-03" in text
    assert "No one kind of dropout makes the gap alone" in text
    assert "The highest eval-mode loss is not a collapse" in text
    assert "do not explain the reading by a collapse" in text
    assert _section(tmp_path / "empty", []) == ""
