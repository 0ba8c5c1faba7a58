"""Saved checkpoints are usable on their own: evaluate, translate, export, and refuse bad input.

One tiny translation run (built-in corpus) and one tiny masked-LM run are trained once per module.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
import sacrebleu
import torch
from typer.testing import CliRunner

import normzoo
from normzoo.cli import app
from normzoo.data import builtin
from normzoo.export.writer import export
from normzoo.inference.decoding import beam_search, greedy
from normzoo.inference.load import CheckpointError, load_checkpoint, load_export
from normzoo.recipe import from_dict
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(tmp_path_factory.mktemp("nzcache")))
        yield


def _recipe(task: str, run_dir: Path, **data) -> dict:
    return {
        "task": task,
        "seed": 3,
        "run": {"dir": str(run_dir)},
        "model": {"d_model": 64, "heads": 4, "ffn_dim": 128, "encoder_layers": 2,
                  "decoder_layers": 2, "dropout": 0.0, "max_positions": 128},
        "data": {"train_limit": 3000, "valid_limit": 40, "max_tokens": 1024, "max_len": 64,
                 "tokenizer": {"vocab_size": 400, "min_frequency": 1}, **data},
        "optim": {"lr": 3e-3, "warmup_steps": 30},
        "trainer": {"max_steps": 300, "val_every_steps": 150, "progress_bar": False,
                    "accelerator": "cpu", "keep_checkpoints": 2},
        "eval": {"beam": 1, "valid_bleu_limit": 20},
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "translation"
    recipe = from_dict(_recipe("translation", path))
    train.run(recipe, "tiny.yaml")
    return path


@pytest.fixture(scope="module")
def ckpt(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def test_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("test")
    src, ref = builtin.write_split(folder, "test", size=40)
    return src, ref


def test_evaluate_bleu_equals_sacrebleu_on_the_written_hypotheses(ckpt, test_files, tmp_path):
    src, ref = test_files
    hyps = tmp_path / "hyps.txt"
    result = runner.invoke(app, ["evaluate", str(ckpt), "--src", str(src), "--ref", str(ref),
                                 "--hyps", str(hyps), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    written = hyps.read_text(encoding="utf-8").splitlines()
    references = ref.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(references) == report["sentences"] == 40
    expected = sacrebleu.corpus_bleu(written, [references])
    assert report["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    # The model learned something, so the equality is not the trivial 0 == 0.
    assert report["bleu"] > 0.0 and report["chrf"] > 10.0


def test_evaluate_in_bf16_decodes_under_autocast_and_says_so(ckpt, test_files, tmp_path):
    """--bf16 decodes under bf16 autocast: the model's products run in bf16 (so the hypotheses
    may differ from fp32's in places) while the beam's scores stay float32; on this trained
    tiny model both score alike."""
    src, ref = test_files
    reports = {}
    for flag in ([], ["--bf16"]):
        result = runner.invoke(app, ["evaluate", str(ckpt), "--src", str(src), "--ref",
                                     str(ref), "--hyps", str(tmp_path / "h.txt"), "--json",
                                     "--force", *flag])
        assert result.exit_code == 0, result.output
        reports[bool(flag)] = json.loads(result.output)
    assert (reports[False]["precision"], reports[True]["precision"]) == ("fp32", "bf16")
    assert reports[True]["bleu"] == pytest.approx(reports[False]["bleu"], abs=5.0)
    assert reports[True]["bleu"] > 0.0
    plain = runner.invoke(app, ["evaluate", str(ckpt), "--src", str(src), "--ref", str(ref),
                                "--hyps", str(tmp_path / "h.txt"), "--bf16", "--force"])
    assert "beam 1, bf16," in plain.output
    loaded = load_checkpoint(ckpt)
    seen = set()
    linear = loaded.model.decoder.layers[0].ffn.ffn_in
    linear.register_forward_hook(lambda module, args, out: seen.add(out.dtype))
    loaded.translate(src.read_text(encoding="utf-8").splitlines()[:2], bf16=True)
    assert seen == {torch.bfloat16}


def test_evaluate_on_a_split_of_the_recipe(ckpt, tmp_path):
    result = runner.invoke(app, ["evaluate", str(ckpt), "--split", "valid",
                                 "--hyps", str(tmp_path / "h.txt")])
    assert result.exit_code == 0, result.output
    assert "BLEU = " in result.output and "nrefs:1" in result.output


def test_export_round_trip_logits_and_bleu(ckpt, tmp_path, test_files):
    out = export(ckpt, tmp_path / "export")
    assert sorted(p.name for p in out.iterdir()) == [  # README.md: the model card
        "README.md", "config.json", "metadata.json", "model.safetensors", "tokenizer.json"]
    from_ckpt, from_export = load_checkpoint(ckpt), load_export(out)
    # Tied embeddings are stored once and still tied after loading.
    model = from_export.model
    assert model.output.tied is model.decoder_embeddings.tokens
    src = torch.randint(5, from_ckpt.tokenizer.vocab_size, (3, 9))
    tgt = torch.randint(5, from_ckpt.tokenizer.vocab_size, (3, 6))
    torch.testing.assert_close(from_ckpt.model(src, tgt), model(src, tgt), rtol=0, atol=0)
    sources = test_files[0].read_text(encoding="utf-8").splitlines()
    assert from_ckpt.translate(sources) == from_export.translate(sources)
    metadata = json.loads((out / "metadata.json").read_text())
    assert {p["name"] for p in metadata["plugins"]} == {"layernorm", "pre"}
    assert all(p["distribution"] == "normzoo" for p in metadata["plugins"])


def test_export_average_of_the_last_two_checkpoints(ckpt, tmp_path):
    steps = sorted(ckpt.parent.glob("step-*.ckpt"), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in steps] == ["step-150.ckpt", "step-300.ckpt"]
    out = export(ckpt, tmp_path / "avg", average=2)
    states = [torch.load(p, weights_only=True)["state_dict"] for p in steps]
    averaged = load_export(out).model.state_dict()
    key = "encoder.layers.0.ffn.ffn_in.weight"
    expected = (states[0]["model." + key].double() + states[1]["model." + key].double()) / 2
    torch.testing.assert_close(averaged[key].double(), expected, rtol=0, atol=1e-7)
    with pytest.raises(CheckpointError, match="--average 3 needs 3"):
        export(ckpt, tmp_path / "avg3", average=3)


def test_beam_one_equals_greedy_on_a_trained_model(ckpt, test_files):
    loaded = load_checkpoint(ckpt)
    lines = test_files[0].read_text(encoding="utf-8").splitlines()
    from normzoo.data.examples import pad
    from normzoo.data.tokenizer import EOS

    src = pad([[*ids, EOS] for ids in loaded.tokenizer.encode_batch(lines)])
    assert beam_search(loaded.model, src, beam=1) == greedy(loaded.model, src)


def test_translate_reads_stdin(ckpt):
    result = runner.invoke(app, ["translate", str(ckpt)],
                           input="The dog sees a cat.\nA small bird sings.\n")
    assert result.exit_code == 0, result.output
    assert len(result.output.strip().splitlines()) == 2


def test_python_api_load(ckpt):
    loaded = normzoo.load(ckpt)
    (out,) = loaded.translate(["The dog sees a cat."])
    assert isinstance(out, str) and out


# -- bad input ------------------------------------------------------------------------------------


def _fails(args: list[str], match: str, input: str | None = None) -> None:
    result = runner.invoke(app, args, input=input)
    assert result.exit_code == 2, result.output
    assert match in result.output
    assert "Traceback" not in result.output


def test_missing_checkpoint(tmp_path):
    _fails(["evaluate", str(tmp_path / "nope.ckpt")], "checkpoint not found")


def test_truncated_checkpoint(ckpt, tmp_path):
    broken = tmp_path / "truncated.ckpt"
    data = ckpt.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    _fails(["evaluate", str(broken)], "not a readable checkpoint")
    result = runner.invoke(app, ["evaluate", str(broken)])
    assert "failed finding central directory" in result.output  # the zip reader's reason
    assert "miniz" not in result.output  # not its note for torch's developers


def test_a_file_that_is_no_checkpoint_says_so_without_torchs_advice(tmp_path):
    """A JSON file handed as a checkpoint (the run's summary.json, say) is no pickle: the message
    gives the unpickler's reason, not torch's advice to load it with ``weights_only=False``."""
    summary = tmp_path / "summary.json"
    summary.write_text('{"status": "completed"}\n')
    result = runner.invoke(app, ["evaluate", str(summary)])
    assert result.exit_code == 2, result.output
    assert "not a readable checkpoint" in result.output
    assert "Unsupported operand 123" in result.output  # "{" is no pickle opcode
    assert "weights_only" not in result.output
    assert "Traceback" not in result.output


def test_checkpoint_whose_plugin_is_missing_names_the_distribution(ckpt, tmp_path):
    data = torch.load(ckpt, weights_only=True)
    data["normzoo"]["plugins"][1] = {"kind": "residual", "name": "fancy_residual",
                                     "distribution": "normzoo-fancy", "version": "1.2.3"}
    data["normzoo"]["recipe"]["model"]["residual"] = {"name": "fancy_residual"}
    crafted = tmp_path / "plugin.ckpt"
    torch.save(data, crafted)
    _fails(["evaluate", str(crafted)], "pip install 'normzoo-fancy==1.2.3'")


def test_reference_with_a_different_line_count(ckpt, test_files, tmp_path):
    src, ref = test_files
    short = tmp_path / "short.ref"
    short.write_text("\n".join(ref.read_text().splitlines()[:-3]) + "\n")
    _fails(["evaluate", str(ckpt), "--src", str(src), "--ref", str(short)], "lines")


def test_empty_input_to_translate(ckpt):
    _fails(["translate", str(ckpt)], "empty", input="")


def test_pickle_payload_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    crafted = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "normzoo": Payload()}, crafted, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="refused"):
        load_checkpoint(crafted)
    assert not marker.exists()


def test_export_refuses_a_non_empty_directory(ckpt, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not empty"):
        export(ckpt, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


# -- language-model checkpoints -------------------------------------------------------------------


def text_folder(folder: Path) -> Path:
    """``{split}.txt`` files (the toy corpus's source side) for the language-model tasks."""
    for split, size in (("train", 300), ("valid", 30), ("test", 30)):
        lines = [s for s, _ in builtin.generate(split, size=size)]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_mlm_checkpoint_reports_accuracy(tmp_path_factory):
    folder = text_folder(tmp_path_factory.mktemp("text"))
    run = folder / "run"
    recipe = _recipe("mlm", run, source="files", dir=str(folder))
    recipe["trainer"]["max_steps"] = 20
    recipe["trainer"]["val_every_steps"] = 10
    recipe["data"]["train_limit"] = 300
    train.run(from_dict(recipe), "mlm.yaml")
    result = runner.invoke(app, ["evaluate", str(run / "checkpoints" / "last.ckpt"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["task"] == "mlm" and 0.0 <= report["mlm_acc"] <= 1.0 and report["tokens"] > 0
    again = runner.invoke(app, ["evaluate", str(run / "checkpoints" / "last.ckpt"), "--json"])
    assert json.loads(again.output)["loss"] == report["loss"]  # fixed masks: same number


def test_bleu_from_the_export_equals_bleu_from_the_checkpoint(ckpt, test_files, tmp_path):
    src, ref = test_files
    out = export(ckpt, tmp_path / "export")
    scores = []
    for target in (ckpt, out):
        result = runner.invoke(app, ["evaluate", str(target), "--src", str(src), "--ref",
                                     str(ref), "--hyps", str(tmp_path / "h.txt"), "--json",
                                     "--force"])
        assert result.exit_code == 0, result.output
        scores.append(json.loads(result.output)["bleu"])
    assert scores[0] == scores[1]


def test_causal_lm_checkpoint_generates_and_reports_perplexity(tmp_path_factory):
    folder = text_folder(tmp_path_factory.mktemp("lmtext"))
    run = folder / "run"
    recipe = _recipe("causal_lm", run, source="files", dir=str(folder))
    recipe["trainer"].update(max_steps=20, val_every_steps=10)
    recipe["data"]["train_limit"] = 300
    train.run(from_dict(recipe), "lm.yaml")
    last = run / "checkpoints" / "last.ckpt"
    loaded = normzoo.load(last)
    first = loaded.generate(["The dog"], max_new_tokens=6, seed=0)
    assert first == loaded.generate(["The dog"], max_new_tokens=6, seed=0)
    assert isinstance(first[0], str)
    result = runner.invoke(app, ["evaluate", str(last), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["task"] == "causal_lm" and 1.0 < report["ppl"] < 400  # vocab is 400


def test_averaging_names_a_checkpoint_of_another_model_or_a_damaged_one(tmp_path: Path):
    from normzoo.export.writer import average_state

    def step_file(name: str, state) -> Path:
        path = tmp_path / name
        torch.save({"normzoo": {"recipe": {}}, "state_dict": state}, path)
        return path

    a = step_file("step-1.ckpt", {"model.w": torch.ones(2, 2)})
    b = step_file("step-2.ckpt", {"model.w": torch.full((2, 2), 3.0)})
    assert torch.equal(average_state([a, b])["w"], torch.full((2, 2), 2.0))
    other = step_file("step-3.ckpt", {"model.w": torch.ones(3, 2)})
    with pytest.raises(CheckpointError, match=r"step-3\.ckpt.*differ in names or shapes"):
        average_state([a, other])
    damaged = step_file("step-4.ckpt", {"model.w": "not a tensor"})
    with pytest.raises(CheckpointError, match=r"step-4\.ckpt.*damaged"):
        average_state([a, damaged])


def test_evaluate_inside_a_run_directory_leaves_the_runs_files_as_they_were(
        tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Re-scoring a run from inside its folder writes hyps.SPLIT.evaluate.txt beside the
    training's hyps.SPLIT.txt (its final test, which normzoo compare reads), never over it
    (issue 37, item 6)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_checkpoint.parent.parent, run)
    split = "valid"
    theirs = run / f"hyps.{split}.txt"
    theirs.write_text("the training's final test\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    monkeypatch.chdir(run)
    monkeypatch.setenv("NORMZOO_CACHE", str(tiny_checkpoint.parent.parent.parent / "cache"))
    result = runner.invoke(app, ["evaluate", "checkpoints/last.ckpt", "--split", split,
                                 "--beam", "1"])
    assert result.exit_code == 0, result.output
    assert f"hypotheses in hyps.{split}.evaluate.txt" in " ".join(result.output.split())
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {f"hyps.{split}.evaluate.txt"}
