"""Faults a new user met on a fresh clone (issue 60, item 5): a bound the machine could not run,
messages in pydantic's or typer's words rather than normzoo's, a file reported under the wrong
heading, weights loaded under names the announcement called unloaded, and a shipped recipe
``normzoo diagnose`` could not measure.

Each is a command line (or the API a run calls) with what the user now sees.
"""

from __future__ import annotations

from pathlib import Path

# Lightning binds its log handler to sys.stderr when first imported: imported here, not inside
# a CliRunner call whose stream is closed afterwards.
import lightning.pytorch  # noqa: F401
import pytest
import torch
from tiny import TINY
from typer.testing import CliRunner

from normzoo.cli import app

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = str(ROOT / "recipes" / "quickstart.yaml")
CLASSIFY = str(ROOT / "recipes" / "classify.yaml")
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}\n{result.output}"
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# -- 1. a bound: loader processes ----------------------------------------------------------------


def test_more_loader_workers_than_the_machine_can_run_are_refused(tmp_path: Path, cache: Path):
    """``data.num_workers=100000`` validated and forked until something killed the run, while
    ``trainer.devices=64`` was refused: now refused as that is, naming this machine's CPUs and
    what to use instead, before anything is written; ``auto`` and a sane count pass."""
    from normzoo.run.workers import WORKERS_PER_CPU, usable_cores

    cpus = usable_cores()
    run_dir = tmp_path / "run"
    for command in (["recipe", "validate"], ["train"]):
        code, output = invoke(*command, QUICKSTART, f"run.dir={run_dir}",
                              "data.num_workers=100000")
        assert code == 2, output
        assert "data.num_workers" in output and f"has {cpus} CPU" in output, output
        assert "data.num_workers=auto" in output and f"{WORKERS_PER_CPU * cpus} or fewer" \
            in output, output
    assert not run_dir.exists()
    for fine in ("auto", "0", str(WORKERS_PER_CPU * cpus)):
        code, output = invoke("recipe", "validate", QUICKSTART, f"data.num_workers={fine}")
        assert code == 0, output


# -- 2. messages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "words"), [
    ("data.buckets=0", "0: a ladder has at least one rung"),
    ("task=", "an empty value is no task; name one of the registered tasks: "),
    ("task=transltion", "unknown task 'transltion' (did you mean 'translation'?)"),
])
def test_recipe_errors_read_as_normzoos_own_words(override: str, words: str):
    """pydantic's "Value error, " prefix (and, for an empty task, "Input should be a valid
    string") stood before normzoo's own message."""
    code, output = invoke("recipe", "validate", QUICKSTART, override)
    assert code == 2, output
    assert "Value error" not in output and "valid string" not in output, output
    assert words in output, output


@pytest.mark.parametrize("margin", ["nan", "0", "inf", "-inf", "-1"])
def test_compare_says_which_margins_it_takes(margin: str):
    """``--margin nan`` was told "greater than or equal to 0", and 0 is refused too: every
    value outside the accepted ones gets the one message that says what is accepted."""
    code, output = invoke("compare", "-b", "a", "-s", "b", "--margin", margin)
    assert code == 2, output
    text = " ".join(output.replace("│", " ").split())
    assert "--margin" in text and "use a finite number above 0" in text, output
    assert "greater than or equal" not in text, output


def test_a_latin1_data_file_is_reported_as_not_utf8_with_its_byte(tmp_path: Path, cache: Path):
    """A Latin-1 ``train.tsv`` came under "inputs not found", without where the bad byte is."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_bytes("the café is open\tA\nthe dog runs\tB\n".encode("latin-1"))
    for split in ("valid", "test"):
        (data / f"{split}.tsv").write_text("a dog\tA\na cat\tB\n", encoding="utf-8")
    files = ["data.source=files", f"data.dir={data}", f"run.dir={tmp_path / 'run'}"]
    for command in (["recipe", "validate"], ["train"]):
        code, output = invoke(*command, CLASSIFY, *files)
        assert code == 2, output
        assert "error: data files not UTF-8 text:" in output, output
        assert "inputs not found" not in output, output
        assert f"is not UTF-8 text: {data / 'train.tsv'}" in output, output
        assert "invalid continuation byte at byte 7" in output, output  # "the caf" is 7 bytes
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("share", "tie"), [(True, True), (True, False), (False, True),
                                            (False, False)])
def test_a_classifier_from_a_translation_checkpoint_loads_its_encoders_embeddings(
        share: bool, tie: bool):
    """``init.from`` a translation checkpoint into a classifier: the encoder-decoder names its
    token table ``encoder_embeddings``, the encoder ``embeddings``. They were loaded only by
    chance, through a tied output projection (the decoder's table where the two were not
    shared; none where the output was not tied), while the announcement listed
    ``encoder_embeddings.tokens.weight`` as not loaded. The run trains on the checkpoint's
    tokenizer, so the encoder's table is loaded by its model name, and said so."""
    from normzoo import recipe as recipes
    from normzoo.contract import task_of
    from normzoo.run.init_weights import InitWeights, _model_shapes

    vocab = 120
    model = {**TINY["model"], "share_embeddings": share, "tie_output": tie}
    translation = recipes.from_dict({**TINY, "model": model})
    torch.manual_seed(0)
    trained = task_of(translation).build_model(translation, vocab)
    state = {name: tensor.detach().clone() for name, tensor in trained.state_dict().items()}
    encoder_table = state["encoder_embeddings.tokens.weight"].clone()
    classifier = recipes.from_dict({
        "task": "classification", "task_options": {"labels": ["A", "B"]},
        "model": {key: TINY["model"][key] for key in ("d_model", "heads", "ffn_dim",
                                                       "encoder_layers", "max_positions")},
        "init": {"from": "translation.ckpt", "strict": False}})
    init = InitWeights("translation.ckpt", 2, "", state, strict=False)
    init.fit(*_model_shapes(classifier, vocab))
    built = task_of(classifier).build_model(classifier, vocab)
    init.load_into(built)
    assert torch.equal(built.embeddings.tokens.weight, encoder_table)
    assert not any(name.startswith("encoder_embeddings.") for name in init.unexpected)
    assert "embeddings.tokens.weight" not in init.missing
    first = init.announcement().splitlines()[0]
    assert "encoder's embeddings, encoder_embeddings.* loaded as embeddings.*" in first, first
    assert init.record()["renamed"], init.record()


# -- 3. advice that failed ------------------------------------------------------------------------


def test_diagnose_measures_the_shipped_classifier_recipe(tmp_path: Path, cache: Path):
    """``normzoo diagnose recipes/classify.yaml`` exited 2, "labels not resolved", with no way
    forward: the label set comes from the training data, which diagnose reads anyway, as a
    run resolves it (``Task.resolved``)."""
    out = tmp_path / "diag"
    code, output = invoke("diagnose", CLASSIFY, "data.train_limit=200", "data.valid_limit=20",
                          "--vary", "task_options.pooling=first,mean", "--out", str(out))
    assert code == 0, output
    assert "### pooling=first" in output and "### pooling=mean" in output, output
    assert "| encoder.layers.1 |" in output, output
    assert (out / "diagnostics.md").is_file()
