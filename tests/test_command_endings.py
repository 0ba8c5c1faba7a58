"""Every ending says what happened and what to do next (issue 37, item 6).

A Ctrl-C (or SIGTERM) while ``prepare``, the data build of ``train``, ``evaluate``,
``translate`` or ``generate`` works prints one line saying what it stopped and what to do, and
exits 128 + the signal, with no traceback and nothing half-written; once a run has completed, a
Ctrl-C in the rest of its shutdown leaves its exit 0; a language-model run ends with its test
line, as translation does.

Each test runs the real command in a process of its own. ``tests/hold.py`` stands it still
inside a chosen function, so that the signal comes at a known point of its work, sent as a
terminal sends Ctrl-C.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from foreground import start_foreground, wait_for
from tiny import tiny, toy_text

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

HERE = Path(__file__).parent
LM = {"task": "causal_lm", "model": {"family": "decoder", "encoder_layers": 0},
      "data": {"source": "files", "dir": ".", "train_limit": 300, "valid_limit": 20},
      "trainer": {"max_steps": 4, "val_every_steps": 4}}


def environment(folder: Path) -> dict[str, str]:
    return {**os.environ, "NORMZOO_CACHE": str(folder / "cache"), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def start(args: list[str], cwd: Path, hold: str | None = None) -> subprocess.Popen:
    """``normzoo ARGS`` in ``cwd`` (standing still at ``hold``, tests/hold.py), its standard
    output and error in ``cwd/stdout.txt`` and ``cwd/stderr.txt``."""
    prefix = [sys.executable, str(HERE / "hold.py"), hold] if hold else \
        [sys.executable, "-m", "normzoo"]
    with open(cwd / "stdout.txt", "w") as out, open(cwd / "stderr.txt", "w") as err:
        return start_foreground([*prefix, *args], cwd, environment(cwd), out, err)


def stopped_at(hold: str, args: list[str], cwd: Path, signum: int = signal.SIGINT,
               then_go: bool = False) -> tuple[int, str, str]:
    """Run ``normzoo ARGS`` until it stands at ``hold``, send ``signum``, and return its exit
    code, standard output and error; ``then_go`` lets it go on after the signal (where the
    signal is only noted)."""
    process = start(args, cwd, hold)
    try:
        wait_for((cwd / "held").is_file, process)
        process.send_signal(signum)
        if then_go:
            time.sleep(1.0)
            (cwd / "go").touch()
        code = process.wait(timeout=120)
    finally:
        process.kill()
    return code, (cwd / "stdout.txt").read_text(), (cwd / "stderr.txt").read_text()


def one_line(stderr: str, start: str) -> str:
    """The one line of ``stderr`` that starts with ``start`` (no traceback anywhere)."""
    assert "Traceback" not in stderr and "graceful shutdown" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(start)]
    assert len(lines) == 1, stderr
    return lines[0]


def leftovers(folder: Path) -> list[Path]:
    """Temporary files or staging folders a stopped write left in ``folder``."""
    return [p for p in folder.rglob("*") if ".tmp" in p.name]


@pytest.fixture
def translation(tmp_path: Path) -> Path:
    """A folder holding the tiny translation recipe ``t.yaml``."""
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(tiny()), encoding="utf-8")
    return tmp_path


@pytest.fixture(scope="module")
def language_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A causal LM trained by ``normzoo train`` on the toy text (its folder; the run is R)."""
    folder = toy_text(tmp_path_factory.mktemp("lm"))
    (folder / "lm.yaml").write_text(yaml.safe_dump(tiny(**LM)), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "normzoo", "train", "lm.yaml", "run.dir=R"],
                          cwd=folder, env=environment(folder), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    (folder / "train.out").write_text(done.stdout)
    return folder


# -- a stop signal while a command works ---------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_prepare_says_so_and_keeps_nothing_half_built(translation: Path, signum: int):
    code, _, stderr = stopped_at("normzoo.data.prepare:_encode_role", ["prepare", "t.yaml"],
                                 translation, signum)
    assert code == 128 + signum, stderr
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    line = one_line(stderr, "interrupted by")
    assert line.startswith(f"interrupted by {by} while preparing the data; nothing half-built "
                           "was kept"), line
    assert line.endswith(": run the same command again")
    prepared = translation / "cache" / "prepared"
    assert not leftovers(prepared)  # SIGTERM used to leave the staging folder behind
    assert not [p for p in prepared.iterdir() if p.is_dir() and p.name != "tokenizers"]


def test_ctrl_c_in_the_data_build_of_train_leaves_no_run_directory(translation: Path):
    code, _, stderr = stopped_at("normzoo.data.prepare:_encode_role",
                                 ["train", "t.yaml", "run.dir=R"], translation)
    assert code == 130, stderr
    assert one_line(stderr, "interrupted by") == (
        "interrupted by Ctrl-C before training started (reading the data or building the "
        "model); no checkpoint was written: run the same command again")
    assert not (translation / "R").exists()
    assert not leftovers(translation / "cache")


def test_ctrl_c_as_training_starts_asks_for_force(translation: Path):
    """Inside ``fit`` but before the first step, where Lightning catches the Ctrl-C itself
    (its "graceful shutdown", exit 1): the run's folder holds its recipe and no checkpoint, so
    the same command would be refused without --force."""
    code, _, stderr = stopped_at("normzoo.run.callbacks.signals:StopOnSignal.on_train_start",
                                 ["train", "t.yaml", "run.dir=R"], translation)
    assert code == 130, stderr
    assert one_line(stderr, "interrupted by") == (
        "interrupted by Ctrl-C before training started; R holds no checkpoint: run the same "
        "command again with --force")
    assert not (translation / "R" / "checkpoints" / "last.ckpt").exists()


def test_ctrl_c_while_evaluating_writes_no_hypotheses(tiny_checkpoint: Path, tmp_path: Path):
    code, stdout, stderr = stopped_at("normzoo.inference.model:Loaded.translate",
                                      ["evaluate", str(tiny_checkpoint)], tmp_path)
    assert code == 130, stderr
    assert one_line(stderr, "interrupted by") == (
        "interrupted by Ctrl-C while evaluating; no hypotheses file was written: run the same "
        "command again")
    assert stdout == ""
    assert not list(tmp_path.glob("hyps*")) and not leftovers(tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_translate_says_so(tiny_checkpoint: Path, tmp_path: Path, signum: int):
    (tmp_path / "in.txt").write_text("the dog\na small cat\n")
    code, _, stderr = stopped_at("normzoo.inference.model:Loaded.translate",
                                 ["translate", str(tiny_checkpoint), "-i", "in.txt"], tmp_path,
                                 signum)
    assert code == 128 + signum, stderr
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert one_line(stderr, "interrupted by") == (
        f"interrupted by {by} while translating; the lines printed before it are whole: run "
        "the same command again")


def test_ctrl_c_while_generating_says_so(language_model: Path, tmp_path: Path):
    (tmp_path / "in.txt").write_text("the dog\na small cat\n")
    checkpoint = language_model / "R" / "checkpoints" / "last.ckpt"
    code, _, stderr = stopped_at("normzoo.inference.model:Loaded.generate",
                                 ["generate", str(checkpoint), "-i", "in.txt"], tmp_path)
    assert code == 130, stderr
    assert one_line(stderr, "interrupted by") == (
        "interrupted by Ctrl-C while generating; the lines printed before it are whole: run "
        "the same command again")


# -- a stop signal once the run has completed, or just before ----------------------------------


def completed(folder: Path) -> dict:
    summary = json.loads((folder / "R" / "summary.json").read_text())
    assert summary["status"] == "completed"
    return summary


def test_ctrl_c_while_a_completed_run_prints_its_lines_exits_0(translation: Path):
    code, stdout, stderr = stopped_at("normzoo.cli.train:_report",
                                      ["train", "t.yaml", "run.dir=R"], translation,
                                      then_go=True)
    assert code == 0, stderr
    assert "run directory: R" in stdout  # every line printed, whole
    assert one_line(stderr, "Ctrl-C came") == \
        "Ctrl-C came after the run had completed (R/summary.json): nothing is lost"
    completed(translation)


def test_ctrl_c_as_a_completed_run_closes_its_loggers_exits_0(translation: Path):
    # After summary.json says completed, inside run()'s close(): once, 130 and no line.
    code, stdout, stderr = stopped_at("normzoo.run.trainer:close_loggers",
                                      ["train", "t.yaml", "run.dir=R"], translation)
    assert code == 0, stderr
    assert "run directory: R" in stdout
    one_line(stderr, "Ctrl-C came after the run had completed (R/summary.json)")
    completed(translation)


def test_ctrl_c_right_after_the_run_directory_line_exits_0(translation: Path):
    # The case: a Ctrl-C in the second or so the process takes to exit after its last
    # line made the exit 130 (or a traceback from an exit hook) on a completed run.
    process = start(["train", "t.yaml", "run.dir=R"], translation)
    try:
        wait_for(lambda: "run directory:" in (translation / "stdout.txt").read_text(), process)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=120)
    finally:
        process.kill()
    stderr = (translation / "stderr.txt").read_text()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "interrupted" not in stderr, stderr
    completed(translation)


RACE = """
import signal
from normzoo.cli.ending import Ending

def first(signum, frame):  # the exit hook runs while SIGTERM's C handler has already run
    Ending().ignore_signals()

signal.signal(signal.SIGTERM, lambda *_: None)
signal.signal(signal.SIGINT, first)
both = {signal.SIGINT, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, both)
signal.raise_signal(signal.SIGTERM)
signal.raise_signal(signal.SIGINT)
signal.pthread_sigmask(signal.SIG_UNBLOCK, both)  # both arrive; SIGINT's handler runs first
print("done")
"""


def test_a_signal_that_finds_the_exit_hook_ignoring_it_prints_nothing():
    """The race CI once hit right after "run directory:": a stop signal whose C handler had run
    when the last exit hook set the handlers to ignore it. Python then reported "Signal N
    ignored due to race condition" with a traceback; the hook drops that report."""
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"
    assert done.stderr == "", done.stderr


def test_ctrl_c_before_the_summary_says_how_to_finish_the_run(translation: Path):
    # Training is over and checkpointed, the summary not written: --resume auto finishes it.
    code, _, stderr = stopped_at("normzoo.run.training:TrainingRun.write_summary",
                                 ["train", "t.yaml", "run.dir=R"], translation)
    assert code == 130, stderr
    assert one_line(stderr, "interrupted by") == (
        "interrupted by Ctrl-C after training, before the run's summary was written; its "
        "checkpoints are in R/checkpoints: continue with: normzoo train t.yaml --resume auto "
        "run.dir=R")
    assert not (translation / "R" / "summary.json").exists()


# -- what a language-model run ends with -------------------------------------------------------


def test_a_language_model_run_ends_with_its_test_line(language_model: Path):
    test = json.loads((language_model / "R" / "summary.json").read_text())["test"]
    lines = (language_model / "train.out").read_text().splitlines()
    assert f"test loss {test['loss']:.4f}, perplexity {test['ppl']:.2f} on test" in lines
    assert lines[-1] == "run directory: R"


def test_a_masked_lm_run_ends_with_its_test_line(tmp_path: Path):
    toy_text(tmp_path)
    recipe = tiny(task="mlm", model={"family": "encoder", "decoder_layers": 0},
                  data={"source": "files", "dir": ".", "train_limit": 300},
                  trainer={"max_steps": 2, "val_every_steps": 2})
    (tmp_path / "mlm.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "normzoo", "train", "mlm.yaml", "run.dir=R"],
                          cwd=tmp_path, env=environment(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    test = json.loads((tmp_path / "R" / "summary.json").read_text())["test"]
    line = f"test loss {test['loss']:.4f}, MLM accuracy {test['mlm_acc']:.4f} on test"
    assert re.search(rf"^{re.escape(line)}$", done.stdout, re.MULTILINE), done.stdout
