"""``studies/depth/eval_gap.py`` and the depth study's section built on it: the eval path is checked
against train mode with dropout at 0, each kind of dropout is found and switched on alone, a
collapsed model (the same prediction at every position) is told apart from a working one, and
the report's findings follow the measured files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: studies/
from normzoo.models.assemble import assemble
from studies.depth import eval_gap
from studies.depth import gap_text as study_eval_gap

VOCAB = 50


def _model(**changes) -> torch.nn.Module:
    config = {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 2, "decoder_layers": 2,
              "vocab_size": VOCAB, "dropout": 0.3, "attention_dropout": 0.2,
              "activation_dropout": 0.1, **changes}
    torch.manual_seed(0)
    return assemble(config)


def _batches(n: int = 2) -> list[dict]:
    torch.manual_seed(1)
    batches = []
    for _ in range(n):
        src = torch.randint(5, VOCAB, (3, 7))
        tgt = torch.randint(5, VOCAB, (3, 9))
        tgt[0, -2:] = 0  # padding, left out of every measure
        batches.append({"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]})
    return batches


def test_every_kind_of_dropout_is_found() -> None:
    groups = eval_gap.dropout_groups(_model())
    assert set(groups) == {"residual", "activation", "embedding", "attention"}
    # 2 encoder + 2 decoder layers, one residual dropout each; self- and cross-attention
    assert len(groups["residual"]) == 4
    assert len(groups["attention"]) == 2 * 2 + 2
    assert "attention" not in eval_gap.dropout_groups(_model(attention_dropout=0.0))


def test_train_mode_with_dropout_at_zero_is_eval_mode_and_dropout_comes_back() -> None:
    model = _model()
    results = {r["mode"]: r for r in eval_gap.rows(model, _batches(), smoothing=0.1)}
    assert results["train mode, every dropout p=0"]["max_abs_diff_to_eval"] == 0.0
    assert results["train mode (all dropout on)"]["loss"] != results["eval mode"]["loss"]
    for kind in ("residual", "activation", "embedding", "attention"):
        # each kind switched on alone changes what the model computes
        assert results[f"eval mode, {kind} dropout on"]["loss"] != results["eval mode"]["loss"]
    assert all("logits" not in r for r in results.values())  # not kept in the records
    # the probabilities are restored and the model is left in eval mode
    assert not model.training
    groups = eval_gap.dropout_groups(model)
    assert {m.p for m in groups["residual"]} == {m.p for m in groups["embedding"]} == {0.3}
    assert {m.p for m in groups["activation"]} == {0.1}
    assert {m.dropout for m in groups["attention"]} == {0.2}


def test_a_model_blind_to_position_and_input_reads_as_collapsed() -> None:
    model = _model(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0).eval()
    working = eval_gap.measure(model, _batches(), smoothing=0.0)
    collapsed = eval_gap.measure(_Constant(model.pad_id), _batches(), smoothing=0.0)
    assert working["tv_neighbours"] > 0.01 and working["distinct_argmax"] > 1
    assert collapsed["tv_neighbours"] == pytest.approx(0.0, abs=1e-6)
    assert collapsed["distinct_argmax"] == 1.0


class _Constant(torch.nn.Module):
    """A model that predicts one fixed distribution at every position."""

    def __init__(self, pad_id: int) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.logits = torch.randn(VOCAB)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(*tgt.shape, VOCAB).clone()


def _record(residual: str, layers: int, step: int, eval_tv: float, eval_loss: float,
            train_loss: float = 6.1, diff: float = 0.0) -> dict:
    def row(mode: str, loss: float, tv: float) -> dict:
        return {"mode": mode, "loss": loss, "loss_smoothed": loss + 0.3, "entropy": 3.0,
                "top_p": 0.5, "tv_neighbours": tv, "distinct_argmax": 1.0 + 10 * tv,
                "top_predictions": [["▁Ein", 1.0]]}
    rows = [row("eval mode", eval_loss, eval_tv),
            {**row("train mode, every dropout p=0", eval_loss, eval_tv),
             "max_abs_diff_to_eval": diff},
            row("train mode (all dropout on)", train_loss, 0.2),
            row("eval mode, embedding dropout on", eval_loss, eval_tv),
            row("eval mode, residual dropout on", train_loss + 0.01, 0.2)]
    return {"checkpoint": f"step-{step}.ckpt", "step": step, "uniform_loss": 8.7,
            "label_smoothing": 0.1, "batches": 6, "rows": rows,
            "recipe": {"model": {"residual": residual, "encoder_layers": layers,
                                 "decoder_layers": layers}}}


def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir()
    for i, record in enumerate(records):
        (folder / f"{i}.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def test_the_section_names_what_the_files_show(tmp_path: Path) -> None:
    folder = _write(tmp_path / "gap", [
        _record("post", 18, 1, eval_tv=0.001, eval_loss=9.2, train_loss=9.18),
        _record("post", 18, 500, eval_tv=0.0, eval_loss=10.0),
        _record("pre", 18, 1, eval_tv=0.18, eval_loss=9.18, train_loss=9.18),
        _record({"name": "post"}, 6, 1, eval_tv=0.07, eval_loss=9.17, train_loss=9.17),
    ])
    text = "\n".join(study_eval_gap.section(folder))
    assert "as good as initialisation), Post-LN 18+18 predicts the same distribution" in text
    assert "Post-LN 6+6 and Pre-LN 18+18 keep positions apart" in text
    assert "Pre-LN 18+18 0.180" in text and "Post-LN 6+6 0.070" in text
    assert "only the residual dropout switched on gives 6.11" in text
    assert "eval mode scores 10.00" in text and "by at most 0.0e+00" in text
    assert "One kind of dropout makes the gap" in text
    assert "so its loss exceeds a uniform guess" in text
    assert "nor the checkpoint scored (the lowest eval-mode loss measured, at step 500, " \
        "already collapsed)" in text and "first 6 validation batches" in text
    assert text.count("| Post-LN 18+18 | 500 |") == 4  # the p=0 check is in the text, not a row


def test_the_section_says_so_where_nothing_collapsed_at_initialisation(tmp_path: Path) -> None:
    folder = _write(tmp_path / "gap", [
        _record("post", 18, 1, eval_tv=0.05, eval_loss=9.2, diff=1e-3),
        _record("post", 18, 500, eval_tv=0.0, eval_loss=10.0),
    ])
    text = "\n".join(study_eval_gap.section(folder))
    assert "as good as initialisation), no setting predicts the same distribution" in text
    assert "The likely mechanism" not in text  # no collapse at the start to explain
    assert "The eval path differs from training beyond dropout" in text  # 1e-3 > EXACT
    assert "by up to 1.0e-03" in text
    assert "do not explain the reading by a collapse" in text


def test_the_section_says_what_the_files_show_where_nothing_collapsed(tmp_path: Path) -> None:
    """A checkpoint that keeps positions apart, and a gap no one kind of dropout closes: the
    text says so rather than the first study's story."""
    record = _record("post", 18, 500, eval_tv=0.09, eval_loss=7.0, train_loss=6.0)
    record["rows"][-1]["loss"] = 6.8  # residual dropout alone closes a fifth of the gap
    text = "\n".join(study_eval_gap.section(_write(tmp_path / "gap", [record])))
    assert "The highest eval-mode loss is not a collapse" in text
    assert "No one kind of dropout makes the gap alone" in text
    assert "Training does not undo it" not in text and "already collapsed" not in text


def test_a_model_without_dropout_gets_no_dropout_finding(tmp_path: Path) -> None:
    record = _record("post", 18, 500, eval_tv=0.0, eval_loss=10.0)
    record["rows"] = [r for r in record["rows"] if not r["mode"].startswith("eval mode, ")]
    text = "\n".join(study_eval_gap.section(_write(tmp_path / "gap", [record])))
    assert "kind of dropout" not in text and "Training does not undo it" in text


def test_no_measured_checkpoint_no_section(tmp_path: Path) -> None:
    assert study_eval_gap.section(tmp_path / "missing") == []
    assert study_eval_gap.section(_write(tmp_path / "empty", [])) == []


def test_a_later_protocol_is_another_setting_read_after_the_first_study(tmp_path: Path) -> None:
    """A Post-LN 18+18 checkpoint trained without warm-up is not the first study's Post-LN
    18+18: its own label, its own line, and the first study's findings do not count it."""
    later = _record("post", 18, 1000, eval_tv=0.2, eval_loss=20.0, train_loss=7.0)
    later["recipe"]["optim"] = {"schedule": "inverse_sqrt", "warmup_steps": 0}
    folder = _write(tmp_path / "gap", [_record("post", 18, 500, eval_tv=0.0, eval_loss=10.0),
                                       later])
    text = "\n".join(study_eval_gap.section(folder))
    assert "eval mode scores 10.00" in text  # the worst of the first study, not the later 20.0
    assert ("**Post-LN 18+18, inverse_sqrt schedule, warm-up 0, step 1000**: eval mode tells "
            "positions apart (TV 0.200") in text
    assert "| Post-LN 18+18, inverse_sqrt schedule, warm-up 0 | 1000 | eval mode |" in text
    assert study_eval_gap.section(_write(tmp_path / "only-later", [later])) == []
