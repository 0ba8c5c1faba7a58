"""A beam the machine cannot hold is refused before anything is allocated (issue 59, item 6):
``translate --beam 1000000000`` and ``evaluate --beam 100000`` ended in the allocator's
traceback asking for terabytes; now exit 2 with one line that names the beam and the memory its
decoding state needs against the device's. A recipe's ``eval.beam`` is refused before training.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tiny import tiny
from typer.testing import CliRunner

from normzoo.cli import app
from normzoo.data import builtin
from normzoo.inference import translate
from normzoo.inference.beams import beam_state_bytes
from normzoo.models.config import ModelConfig

runner = CliRunner()
HUGE = "1000000000"


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beam search must not start: the refusal comes before anything is allocated."""
    def refused(*args, **kwargs):
        raise AssertionError("beam search started")

    monkeypatch.setattr(translate, "beam_search", refused)


def refused_cleanly(output: str, beam: str) -> None:
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert f"beam {beam} does not fit this machine" in output
    assert "needs at least" in output and "TiB" in output and "use a smaller beam" in output


def test_translate_refuses_a_beam_the_machine_cannot_hold(tiny_checkpoint: Path, no_search):
    result = runner.invoke(app, ["translate", str(tiny_checkpoint), "--beam", HUGE],
                           input="the dog .\n")
    assert result.exit_code == 2, result.output
    refused_cleanly(result.output, HUGE)
    assert "one sentence of" in result.output and "memory" in result.output


def test_the_python_api_refuses_it_as_a_value_error(tiny_checkpoint: Path, no_search):
    import normzoo

    loaded = normzoo.load(tiny_checkpoint)
    with pytest.raises(ValueError, match=f"^beam {HUGE} does not fit this machine: beam search "
                       "over one sentence of"):
        loaded.translate(["the dog ."], beam=int(HUGE))


def test_evaluate_refuses_a_beam_the_machine_cannot_hold(tiny_checkpoint: Path, tmp_path: Path,
                                                         no_search):
    src, ref = builtin.write_split(tmp_path, "test", size=4)
    hyps = tmp_path / "hyps.txt"
    beam = "100000000"
    result = runner.invoke(app, ["evaluate", str(tiny_checkpoint), "--src", str(src), "--ref",
                                 str(ref), "--hyps", str(hyps), "--beam", beam])
    assert result.exit_code == 2, result.output
    refused_cleanly(result.output, beam)
    assert not hyps.exists()


def test_an_ordinary_beam_still_decodes(tiny_checkpoint: Path, tmp_path: Path):
    result = runner.invoke(app, ["translate", str(tiny_checkpoint), "--beam", "4"],
                           input="the dog .\na cat .\n")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.split("\n")) == 3
    src, ref = builtin.write_split(tmp_path, "test", size=4)
    result = runner.invoke(app, ["evaluate", str(tiny_checkpoint), "--src", str(src), "--ref",
                                 str(ref), "--hyps", str(tmp_path / "h.txt"), "--beam", "4"])
    assert result.exit_code == 0, result.output
    assert "beam 4" in result.output


def test_a_recipes_eval_beam_is_refused_before_training(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    for command in (["recipe", "validate", "tiny.yaml"], ["train", "tiny.yaml", "run.dir=run"]):
        result = runner.invoke(app, [*command, f"eval.beam={HUGE}"])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert f"eval.beam: {HUGE} does not fit this machine" in result.output
        assert "use a smaller eval.beam" in result.output
    assert not (tmp_path / "run").exists()
    assert runner.invoke(app, ["recipe", "validate", "tiny.yaml", "eval.beam=4"]).exit_code == 0


def test_the_estimate_counts_the_cache_the_scores_and_the_hypotheses():
    """beam_state_bytes, by hand: 2 sentences of 5 tokens, beam 3, 7 steps, float32."""
    config = ModelConfig(vocab_size=100, d_model=32, heads=4, kv_heads=2, decoder_layers=2)
    rows = 2 * 3
    encoder_output = rows * 5 * 32 * 4
    cache = 2 * 2 * rows * (2 * 8) * (5 + 7) * 4  # layers, k and v, kv heads x head dim
    scores = rows * 100 * (4 + 4)  # the logits and their log-probabilities
    tokens = (rows + 2 * 4) * 7 * 8  # live beams, and k + 1 finished slots per sentence
    assert beam_state_bytes(config, 3, 2, 5, 7) == encoder_output + cache + scores + tokens
