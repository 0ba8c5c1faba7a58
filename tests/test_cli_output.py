"""What the command line prints and reads (issue 25, items 6 to 9).

6. A run whose standard output is a file or a pipe logs plain lines, not progress-bar frames.
7. ``--help`` reads as ``git``'s and ``pip``'s: value names, not Python types; choices; defaults;
   docstrings not broken mid-sentence.
8. ``python -m normzoo``; ``--device``; ``translate`` and ``generate`` batch a file, answer a
   terminal line by line, give an empty line for an empty line, and name a line they cut.
9. ``normzoo diagnose --vary``: the sweep's grid (mappings, several axes); refused on a checkpoint.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml
from terminal import TerminalInput
from tiny import tiny, toy_text
from typer.testing import CliRunner

import normzoo
from normzoo.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
LONG = "the dog sees a small cat . " * 20  # 140 words: more than the tiny models' 64 positions


def normzoo_process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m normzoo ARGS``, its standard output and error pipes (unless ``kwargs``
    say otherwise)."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.run([sys.executable, "-m", "normzoo", *args], stdin=subprocess.DEVNULL,
                          env={**ENV, **kwargs.pop("env", {})}, timeout=600,
                          **{**streams, **kwargs})


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``last.ckpt`` of a few steps of a tiny causal LM (64 positions) on toy text."""
    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    root = toy_text(tmp_path_factory.mktemp("lm"))
    recipe = from_dict(tiny(task="causal_lm", model={"family": "decoder", "encoder_layers": 0},
                            run={"dir": str(root / "run")},
                            data={"source": "files", "dir": str(root), "train_limit": 300,
                                  "valid_limit": 20},
                            trainer={"max_steps": 4, "val_every_steps": 4}))
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NORMZOO_CACHE", str(root / "cache"))
        train.run(recipe, "lm.yaml")
    torch.set_num_threads(threads)
    return root / "run" / "checkpoints" / "last.ckpt"


# -- 6. logs that are not a terminal ---------------------------------------------------------------


def test_a_piped_quick_start_logs_a_few_plain_lines(tmp_path: Path):
    """The quick start, made small, with standard output and error to one pipe (``2>&1 |``):
    one plain line per log interval and per validation, no ``\\r`` frames, no Lightning bars."""
    overrides = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64",
                 "model.encoder_layers=1", "model.decoder_layers=1", "data.train_limit=400",
                 "data.valid_limit=20", "data.test_split=valid", "data.max_tokens=512",
                 "data.tokenizer.vocab_size=200", "trainer.max_steps=20",
                 "trainer.log_every_steps=5", "trainer.val_every_steps=10",
                 "trainer.accelerator=cpu", f"run.dir={tmp_path / 'run'}"]
    result = normzoo_process("train", str(ROOT / "recipes" / "quickstart.yaml"), *overrides,
                             stderr=subprocess.STDOUT, cwd=tmp_path,
                             env={"NORMZOO_CACHE": str(tmp_path / "cache")})
    log = result.stdout
    assert result.returncode == 0, log.decode(errors="replace")[-3000:]
    text = log.decode()
    assert b"\r" not in log and "\x1b[" not in text
    assert len(log) < 4096, f"{len(log)} bytes:\n{text}"
    lines = text.splitlines()
    validations = [line for line in lines if "| validation |" in line]
    steps = [line for line in lines if line.startswith("step ") and line not in validations]
    assert [line.split(" | ")[0] for line in steps] == [f"step {n}/20" for n in (5, 10, 15, 20)]
    assert all(" | loss " in line and " | tok/s " in line and " | eta " in line
               for line in steps), steps
    assert [line.split(" | ")[0] for line in validations] == ["step 10/20", "step 20/20"]
    assert all("| loss " in line for line in validations)
    for noise in ("Sanity Checking", "Validation DataLoader", "it/s]", "Epoch"):
        assert noise not in text, noise


def test_the_bar_is_kept_at_a_terminal_and_plain_lines_follow_the_log_interval():
    from normzoo.run.console import StepProgressBar, duration

    assert not StepProgressBar(plain=False).is_disabled
    assert StepProgressBar(plain=True).is_disabled  # every Lightning bar off
    assert StepProgressBar(stream=io.StringIO()).plain  # standard output not a terminal
    assert (duration(5), duration(125), duration(3725)) == ("00:05", "02:05", "1:02:05")


# -- 7. help that reads well -----------------------------------------------------------------------

COMMANDS = [[], ["list"], ["train"], ["prepare"], ["evaluate"], ["translate"], ["generate"],
            ["export"], ["diagnose"], ["sweep"], ["compare"], ["recipe"], ["recipe", "show"],
            ["recipe", "validate"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "normzoo")
def test_help_names_values_not_python_types(command: list[str]):
    result = runner.invoke(app, [*command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    for typed in ("<bool>", "<path>", "<str>", "<int", "<float", "<list[", "x>="):
        assert typed not in result.output, (typed, result.output)
    assert not re.search(r"<[a-z][a-z_ |\[\]]*>", result.output), result.output
    usage = next(line for line in result.output.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage  # Typer's {checkpoint} for a required argument


def test_help_lists_choices_and_defaults():
    def helps(*command: str) -> str:
        return runner.invoke(app, [*command, "--help"], terminal_width=200).output

    assert "[normzoo|hf]" in helps("export") and "[default: normzoo]" in helps("export")
    assert "normzoo list [OPTIONS] [all|norms|residuals|tasks]" in helps("list")
    assert "[default: all]" in helps("list")
    assert "[local|slurm]" in helps("sweep")
    assert "--hyps" in helps("evaluate") and "FILE" in helps("evaluate")
    assert "[default: 4096]" in helps("translate")
    assert "normzoo diagnose [OPTIONS] RECIPE_OR_CKPT [KEY=VALUE]..." in helps("diagnose")


def test_docstrings_are_not_broken_mid_sentence():
    """Every paragraph of every command's help is one line, for the terminal to wrap: the list
    of commands showed ``trains or`` / ``loads the tokenizer`` on two lines."""
    import typer

    root = typer.main.get_command(app)
    groups = [root, root.commands["recipe"]]
    for group in groups:
        for name, command in group.commands.items():
            for paragraph in (command.help or "").split("\n\n"):
                assert "\n" not in paragraph, (name, paragraph)


def test_help_stays_quick_without_torch():
    """``normzoo --help`` and a command's help import neither torch nor Lightning."""
    code = ("import sys\nfrom normzoo.cli import app\n"
            "for args in (['--help'], ['evaluate', '--help'], ['recipe', 'show', '--help']):\n"
            "    try:\n        app(args)\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules, 'lightning' in sys.modules, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == "False False", result.stderr


# -- 8. python -m normzoo, --device, batches, a terminal, empty and long lines --------------------


def test_python_m_normzoo_is_the_command():
    result = normzoo_process("--help", text=True)
    assert result.returncode == 0, result.stderr
    assert "Usage: python -m normzoo [OPTIONS] COMMAND" in result.stdout
    assert "translate" in result.stdout
    version = normzoo_process("--version", text=True)
    from importlib.metadata import version as installed

    assert version.stdout.strip() == (  # what a bug report needs, as `pip --version` says
        f"normzoo {normzoo.__version__} (torch {installed('torch')}, lightning "
        f"{installed('lightning')}, Python {sys.version.split()[0]})")


@pytest.mark.parametrize("command", ["evaluate", "translate", "generate"])
def test_evaluate_translate_and_generate_take_a_device(command: str):
    output = runner.invoke(app, [command, "--help"], terminal_width=200).output
    assert "--device" in output and "cuda:N" in output and "[default: cpu]" in output


@pytest.mark.gpu  # "auto" takes the GPU where there is one
def test_load_takes_a_device(tiny_checkpoint: Path):
    from normzoo.errors import NormzooError

    assert normzoo.load(tiny_checkpoint, device="cpu").device == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert normzoo.load(tiny_checkpoint, device="auto").device.type in (expected, "mps")
    with pytest.raises(NormzooError, match="unknown device 'tpu'"):
        normzoo.load(tiny_checkpoint, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(NormzooError, match="no CUDA GPU"):
            normzoo.load(tiny_checkpoint, device="cuda:1")


@pytest.mark.parametrize("device", ["tpu", "cuda:99"])
def test_a_device_this_machine_lacks_is_a_user_error(tiny_checkpoint: Path, device: str):
    result = runner.invoke(app, ["translate", str(tiny_checkpoint), "--device", device],
                           input="the dog .\n")
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and device in result.output


def test_translate_answers_every_line_an_empty_one_with_an_empty_one(tiny_checkpoint: Path,
                                                                    tmp_path: Path):
    loaded = normzoo.load(tiny_checkpoint)
    alone = [loaded.translate([s])[0] for s in ("the dog .", "a cat .")]
    one_empty = runner.invoke(app, ["translate", str(tiny_checkpoint)], input="\n")
    assert one_empty.exit_code == 0, one_empty.output
    assert one_empty.stdout == "\n"  # was: error, no input sentences
    mixed = runner.invoke(app, ["translate", str(tiny_checkpoint)],
                          input="the dog .\n\n   \na cat .\n")
    assert mixed.exit_code == 0, mixed.output
    assert mixed.stdout.split("\n") == [alone[0], "", "", alone[1], ""]
    assert loaded.translate(["", "the dog ."]) == ["", alone[0]]
    nothing = runner.invoke(app, ["translate", str(tiny_checkpoint)], input="")
    assert nothing.exit_code == 2 and "is empty" in nothing.output  # no line at all


def test_input_may_be_a_pipe(tiny_checkpoint: Path, tmp_path: Path):
    """``--input <(cmd)`` hands over a named pipe (``/dev/fd/N``), not a file: it is read like
    one (it was "input file /dev/fd/63 not found"), and ``/dev/null`` is an empty input."""
    expected = normzoo.load(tiny_checkpoint).translate(["the dog ."])[0]
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=("the dog .\n",))
    writer.start()
    result = runner.invoke(app, ["translate", str(tiny_checkpoint), "--input", str(pipe)])
    if writer.is_alive():  # the command never opened the pipe: open it, so the writer ends
        pipe.read_bytes()
    writer.join()
    assert result.exit_code == 0, result.output
    assert result.stdout == expected + "\n"
    empty = runner.invoke(app, ["translate", str(tiny_checkpoint), "--input", os.devnull])
    assert empty.exit_code == 2 and f"no input lines ({os.devnull} is empty)" in empty.output


def test_a_line_too_long_for_the_model_is_cut_with_a_warning_naming_it(
        tiny_checkpoint: Path, lm_checkpoint: Path, tmp_path: Path):
    source = tmp_path / "in.txt"
    source.write_text(f"the dog .\n{LONG}\na cat .\n", encoding="utf-8")
    for command, checkpoint, part in (("translate", tiny_checkpoint, "first"),
                                      ("generate", lm_checkpoint, "last")):
        result = normzoo_process(command, str(checkpoint), "--input", str(source), text=True)
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.split("\n")) == 4  # three lines and the last line end
        warnings = [line for line in result.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1, result.stderr
        assert warnings[0].startswith("warning: line 2: ") and "64 positions" in warnings[0]
        assert f"only its {part} " in warnings[0]


@pytest.mark.parametrize(("extra", "says"), [
    (["--beam", "4"], "--beam applies to translation only"),
    (["--hyps", "h.txt", "--bf16"], "--bf16, --hyps apply to translation only"),
])
def test_evaluate_refuses_translation_options_for_a_language_model(lm_checkpoint: Path,
                                                                    extra: list[str], says: str):
    """They were ignored without a word: ``--beam 4`` printed the same perplexity as without."""
    result = runner.invoke(app, ["evaluate", str(lm_checkpoint), *extra])
    assert result.exit_code == 2, result.output
    assert says in result.output and "is a language model (task causal_lm)" in result.output


def test_generate_gives_an_empty_line_for_an_empty_prompt(lm_checkpoint: Path):
    result = runner.invoke(app, ["generate", str(lm_checkpoint), "--seed", "1",
                                 "--max-new-tokens", "8"], input="the dog\n\nthe\n")
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    assert normzoo.load(lm_checkpoint).generate(["", " "], seed=0) == ["", ""]


def test_generate_batches_without_changing_a_line(lm_checkpoint: Path):
    """Prompts of different lengths sampled together give what each gives alone, on its own
    generator (seed + line index), whatever the batch size; and equal the Python API's."""
    prompts = ["the dog", "a small cat saw the", "the", "a dog sees a"]
    loaded = normzoo.load(lm_checkpoint)
    alone = [loaded.generate([p], seed=5 + i, max_new_tokens=8)[0]
             for i, p in enumerate(prompts)]
    streamed = ["".join(loaded.stream(p, generator=loaded.generator(5 + i), max_new_tokens=8))
                for i, p in enumerate(prompts)]
    assert streamed == alone
    together = loaded.generate(prompts, seed=5, max_new_tokens=8)
    assert together == alone
    for size in ("1", "3"):
        result = runner.invoke(app, ["generate", str(lm_checkpoint), "--seed", "5",
                                     "--max-new-tokens", "8", "--batch-size", size],
                               input="\n".join(prompts) + "\n")
        assert result.exit_code == 0, result.output
        assert result.stdout.split("\n")[:-1] == alone, size
    greedy = loaded.generate(prompts, temperature=0, max_new_tokens=8, batch_size=4)
    assert greedy == [loaded.generate([p], temperature=0, max_new_tokens=8)[0]
                      for p in prompts]


@pytest.mark.parametrize("command", ["translate", "generate"])
def test_at_a_terminal_each_line_is_answered_as_it_is_typed(command: str, tiny_checkpoint: Path,
                                                            lm_checkpoint: Path):
    """Standard input a terminal: the answer to a line comes before the next line is typed
    (the command used to wait for the end of input); an empty line gets an empty line."""
    checkpoint = tiny_checkpoint if command == "translate" else lm_checkpoint
    options = ["--seed", "2", "--max-new-tokens", "6"] if command == "generate" else []
    loaded = normzoo.load(checkpoint)
    if command == "translate":
        expected = loaded.translate(["the dog .", "", "a cat ."])
    else:
        expected = loaded.generate(["the dog .", "", "a cat ."], seed=2, max_new_tokens=6)
    session = TerminalInput([sys.executable, "-m", "normzoo", command, str(checkpoint),
                             *options], ENV)
    answers = []
    for line in ("the dog .", "", "a cat ."):
        session.type(line)
        answers.append(session.read_line(timeout=120))
        assert answers[-1] is not None, f"no answer to {line!r} before the end of input"
    finished = session.end()
    assert finished.code == 0, finished.stderr
    assert answers == expected
    assert finished.stdout == ""  # nothing more after the end of input
    assert "> " in finished.stderr  # the prompt is on standard error


# -- 9. normzoo diagnose --vary --------------------------------------------------------------------


def test_vary_takes_mappings_and_several_axes():
    from normzoo.diagnostics.diagnose import recipe_variants
    from normzoo.errors import NormzooError

    def labels(*vary: str) -> list[str]:
        return [v.label for v in recipe_variants(tiny(), list(vary), "tiny", lambda d: d)]

    assert labels() == ["tiny"]
    assert labels("model.residual=post,{name: admin, init: profiled}") == [
        "residual=post", "residual={name: admin, init: profiled}"]
    assert labels("model.residual=pre,post", "model.norm=layernorm,rmsnorm") == [
        "residual=pre, norm=layernorm", "residual=pre, norm=rmsnorm",
        "residual=post, norm=layernorm", "residual=post, norm=rmsnorm"]
    tied = recipe_variants(tiny(), ["model.encoder_layers,model.decoder_layers=1,2"], "tiny",
                           lambda d: d)
    assert [(v.recipe["model"]["encoder_layers"], v.recipe["model"]["decoder_layers"])
            for v in tied] == [(1, 1), (2, 2)]
    mapping = recipe_variants(tiny(), ["model.residual={name: admin, init: profiled}"], "tiny",
                              lambda d: d)[0]
    assert mapping.recipe["model"]["residual"] == {"name": "admin", "init": "profiled"}
    for bad, says in (("nonsense", "must look like"), ("model.residual=", "must look like"),
                      ("=post", "must look like")):
        with pytest.raises(NormzooError, match=says):
            labels(bad)
    with pytest.raises(NormzooError, match="more than once"):
        labels("model.residual=pre", "model.residual=post")


def test_diagnose_measures_every_variant_of_the_grid(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    result = runner.invoke(app, ["diagnose", str(recipe), "--out", str(tmp_path / "out"),
                                 "--vary", "model.residual=pre,{name: admin, init: profiled}",
                                 "--vary", "model.norm=layernorm,rmsnorm"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "out" / "diagnostics.md").read_text(encoding="utf-8")
    headings = [line for line in table.splitlines() if line.startswith("### ")]
    assert headings == ["### residual=pre, norm=layernorm", "### residual=pre, norm=rmsnorm",
                        "### residual={name: admin, init: profiled}, norm=layernorm",
                        "### residual={name: admin, init: profiled}, norm=rmsnorm"]


def test_diagnose_refuses_an_output_folder_it_cannot_make_before_measuring(tmp_path: Path,
                                                                           monkeypatch):
    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    result = runner.invoke(app, ["diagnose", str(recipe), "--out", str(blocker / "out")])
    assert result.exit_code == 2, result.output
    assert f"--out {blocker / 'out'} is under {blocker}, a file, not a folder" in result.output
    assert "| layer" not in result.output  # refused before measuring, not after


@pytest.mark.parametrize("extra", [["--vary", "model.residual=pre,post"], ["model.norm=rmsnorm"]])
def test_diagnose_refuses_to_vary_a_checkpoint(tiny_checkpoint: Path, tmp_path: Path,
                                               extra: list[str]):
    result = runner.invoke(app, ["diagnose", str(tiny_checkpoint), *extra,
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "applies to a recipe, not to the checkpoint" in result.output
    assert not (tmp_path / "out").exists()
