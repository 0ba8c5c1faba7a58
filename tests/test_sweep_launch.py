"""``normzoo sweep --jobs N`` and ``--launcher slurm``: cells as submitit jobs, N at a time on
this machine with the cores shared out, or as a SLURM job array (the submission it would make is
checked without a cluster)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny import tiny

from normzoo.sweep import launch
from normzoo.sweep.cell_job import CellJob
from normzoo.sweep.local import GpuShare, _StopSignals, threads_per_job
from normzoo.sweep.slurm import Slurm


def _two_seed_sweep(tmp_path: Path, **trainer) -> tuple[list[str], dict[str, str], Path]:
    """The command of a --jobs 2 sweep over seeds 1 and 2 of the tiny recipe, its environment
    and its output folder."""
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny(trainer=trainer)), encoding="utf-8")
    out = tmp_path / "sweep"
    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache")}
    return ([sys.executable, "-m", "normzoo", "sweep", str(path), "--set", "seed=1,2",
             "--jobs", "2", "--out", str(out)], env, out)


def test_two_jobs_run_both_cells_as_separate_processes(tmp_path: Path):
    command, env, out = _two_seed_sweep(tmp_path, max_steps=2, val_every_steps=2)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["seed"] for r in rows] == ["1", "2"]
    assert all(r["status"] == "ok" and r["steps"] == "2" for r in rows)
    # Each cell ran in a submitit job of its own (its own log folder), not in the sweep process.
    assert len(list((out / ".submitit").glob("*_0_log.out"))) == 2
    assert "2 cells, 0 diverged" in done.stdout


@pytest.mark.parametrize("whom", [pytest.param("group", marks=pytest.mark.slow), "sweep"])
def test_a_stopped_sweep_stops_its_jobs_cells_with_a_checkpoint(tmp_path: Path, whom: str):
    # Ctrl-C reaches the terminal's whole process group: once, submitit's controllers printed
    # KeyboardInterrupt tracebacks and SIGKILLed the cells a second later, before they saved.
    # SIGTERM to the sweep alone (kill, a scheduler) reaches the cells through it.
    import signal
    import time

    command, env, out = _two_seed_sweep(tmp_path, max_steps=100_000, val_every_steps=100_000)
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, start_new_session=True)
    logs = [out / f"seed-{seed}" / "logs" / "csv" / "metrics.csv" for seed in (1, 2)]
    deadline = time.monotonic() + 300
    while not all(log.is_file() and log.stat().st_size > 200 for log in logs):  # both training
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[0]
        time.sleep(0.5)
    if whom == "group":
        os.killpg(sweep.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    else:
        os.kill(sweep.pid, signal.SIGTERM)
    output, _ = sweep.communicate(timeout=120)
    assert sweep.returncode == (130 if whom == "group" else 143), output
    assert "Traceback" not in output, output
    assert "stopping 2 running cell(s) at the end of their current step" in output
    for seed in (1, 2):
        assert (out / f"seed-{seed}" / "checkpoints" / "last.ckpt").is_file()
    job_logs = "".join(p.read_text() for p in (out / ".submitit").glob("*_0_log.err"))
    stopped_by = "SIGINT" if whom == "group" else "SIGTERM"
    assert job_logs.count(f"stopped by {stopped_by} at step") == 2, job_logs


def _slow_cell(marks: Path):
    """A cell's work that is not training yet (as while its data is prepared): it marks its
    start, then after 60 s its end, which a stopped sweep must never let it reach."""
    import time

    def work(cell):
        (marks / f"started-{cell['seed']}").touch()
        time.sleep(60)
        (marks / f"finished-{cell['seed']}").touch()

    return work


def test_sigterm_to_the_sweep_ends_cells_that_are_not_training_yet(tmp_path: Path):
    # submitit's job ignores SIGTERM: a cell stopped before it trained once went on to train
    # to its end while the sweep waited for it.
    import signal
    import time

    script = tmp_path / "sweep.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_sweep_launch import _slow_cell\nfrom normzoo.sweep import launch\n"
        "marks = Path(sys.argv[1])\n"
        "launch.run_cells([{'seed': '1'}, {'seed': '2'}], _slow_cell(marks), marks / 'sweep',"
        " jobs=2, poll_s=0.1)\n", encoding="utf-8")
    sweep = subprocess.Popen([sys.executable, str(script), str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"started-{seed}").exists() for seed in (1, 2)):
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[0]
        time.sleep(0.2)
    began = time.monotonic()
    sweep.send_signal(signal.SIGTERM)
    output, _ = sweep.communicate(timeout=50)
    assert sweep.returncode == 143, output
    assert time.monotonic() - began < 40, output  # not the cells' 60 s
    assert not list(tmp_path.glob("finished-*")), output
    assert "Traceback" not in output, output


def test_a_ctrl_c_while_a_job_starts_still_stops_that_job(tmp_path: Path, monkeypatch):
    # Raised inside submit, the interrupt would leave the job just started out of the ones
    # stopped, running on after the sweep had gone.
    import signal

    import submitit

    submit = submitit.LocalExecutor.submit

    def submit_then_ctrl_c(self, *args, **kwargs):
        job = submit(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return job

    monkeypatch.setattr(submitit.LocalExecutor, "submit", submit_then_ctrl_c)
    # As at a terminal, whatever started pytest: a shell's background job (`cmd &`, CI
    # scripts) inherits SIGINT ignored, which a sweep keeps ignoring (the next test).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            launch.run_cells([{"seed": "1"}], _slow_cell(tmp_path), tmp_path / "sweep",
                             jobs=2, poll_s=0.1)
    finally:
        signal.signal(signal.SIGINT, before)
    # run_cells returned only once the job had ended: no process is left to finish the cell.
    folder = str(tmp_path / "sweep" / ".submitit")
    assert not [cmdline for cmdline in _command_lines() if folder in cmdline]
    assert not list(tmp_path.glob("finished-*"))


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # ended meanwhile
            continue
    return lines


def test_a_sweep_started_with_ctrl_c_ignored_keeps_ignoring_it():
    # As a run does: a shell starts its background jobs with SIGINT ignored, so that Ctrl-C
    # at the terminal stops only the job in the foreground.
    import signal

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _StopSignals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_the_cores_are_shared_among_the_jobs(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)  # the machine's; the process may use 8
    assert [threads_per_job(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_a_failed_cell_is_reported_after_the_others_finish(tmp_path: Path):
    finished = []

    def work(cell):
        if cell["seed"] == "1":
            raise ValueError("cell 1 broke")
        return cell

    with pytest.raises(Exception, match="cell 1 broke"):
        launch.run_cells([{"seed": "1"}, {"seed": "2"}], work, tmp_path, jobs=2,
                         after_each=lambda: finished.append(1), poll_s=0.2)
    assert len(finished) == 2  # the second cell still ran to the end


def test_a_cell_that_fails_in_one_sweep_and_finishes_in_another_keeps_no_failure(
        tmp_path: Path):
    """A second sweep over a cell that a first is still training fails it (its run directory
    is in use) and records ``failed.json``; once the first sweep finishes the cell, that
    record is gone and the cell reads as finished."""
    import time

    command, env, out = _two_seed_sweep(tmp_path, max_steps=2, val_every_steps=2)
    command = [c for c in command if c not in ("--jobs", "2", "seed=1,2")]
    command.insert(command.index("--set") + 1, "seed=1")
    # The first sweep stands still at step 1 (tests/crash.py pause) until ./go appears.
    first = subprocess.Popen([sys.executable, str(Path(__file__).parent / "crash.py"), "pause",
                              "1", *command[3:]], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "paused").is_file():
            assert first.poll() is None, first.communicate()[1]
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)
        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
        assert second.returncode == 2, second.stderr
        assert "seed-1: run directory" in second.stderr and "is in use by process" in \
            second.stderr
        assert (out / "seed-1" / "failed.json").is_file()
        (tmp_path / "go").touch()
        _, stderr = first.communicate(timeout=240)
    finally:
        first.kill()
    assert first.returncode == 0, stderr
    assert (out / "seed-1" / "cell.json").is_file()
    assert not (out / "seed-1" / "failed.json").exists()
    assert "| 1 | ok |" in (out / "results.md").read_text()


def _gpu_of_each_cell(tmp_path: Path, cells: int, jobs: int) -> dict[str, str]:
    """Run ``cells`` cells as local jobs, ``jobs`` at a time; each writes the
    ``CUDA_VISIBLE_DEVICES`` its run sees (the GPU it would train on), then, after a space,
    the one its process started with (``/proc/self/environ``)."""
    seen = tmp_path / "seen"
    seen.mkdir(parents=True)

    def work(cell):
        start = dict(line.split("=", 1) for line in
                     Path("/proc/self/environ").read_text().split("\0") if "=" in line)
        (seen / cell["seed"]).write_text(f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
                                         f"{start.get('CUDA_VISIBLE_DEVICES', '<unset>')}")
        return cell

    launch.run_cells([{"seed": str(i)} for i in range(cells)], work, tmp_path / "sweep",
                     jobs=jobs, poll_s=0.1)
    return {path.name: path.read_text() for path in seen.iterdir()}


def test_each_local_job_gets_a_gpu_and_the_gpus_are_spread(tmp_path: Path, monkeypatch):
    # submitit's local executor hides every GPU from a job that asks for none: a sweep with
    # --jobs once trained all its cells on the CPU of a GPU machine.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    seen = _gpu_of_each_cell(tmp_path, cells=2, jobs=2)
    # By index, through submitit: the job's processes start with their GPU.
    assert sorted(seen.values()) == ["0 0", "1 1"]


def test_the_jobs_share_the_gpus_of_cuda_visible_devices_by_name(tmp_path: Path, monkeypatch):
    # Physical indexes as the parent sees them, and UUIDs (which submitit's own parameter does
    # not take) alike; more jobs than GPUs share them.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    seen = _gpu_of_each_cell(tmp_path / "a", cells=2, jobs=2)
    assert sorted(seen.values()) == ["3 3", "5 5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f1c2a7e")
    seen = _gpu_of_each_cell(tmp_path / "b", cells=2, jobs=2)
    # A name submitit does not take: the cell's job sets it before its run starts CUDA.
    assert list(seen.values()) == ["GPU-8f1c2a7e "] * 2


def test_without_gpus_the_jobs_see_none(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert list(_gpu_of_each_cell(tmp_path, cells=2, jobs=2).values()) == [" "] * 2


def test_a_new_job_takes_the_least_held_gpu():
    class Job:
        def __init__(self, finished: bool) -> None:
            self.finished = finished

        def done(self) -> bool:
            return self.finished

    share = GpuShare(["0", "1"])
    running = Job(False)
    share.hold(running, share.take())           # GPU 0
    share.hold(Job(True), share.take())         # GPU 1, its job already finished
    assert share.take() == "1"                  # 1 is free again, 0 still held
    running.finished = True
    assert share.take() == "0"                  # both free: the first
    assert GpuShare([]).take() is None


def test_the_slurm_submission_is_one_array_of_single_node_jobs(tmp_path: Path, monkeypatch):
    import submitit

    # submitit's SLURM executor wants srun on the PATH; the script is only written, not run.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    slurm = Slurm(partition="gpu", time_min=600, gpus=1, cpus=8)
    executor = submitit.SlurmExecutor(folder=tmp_path / ".submitit")
    executor.update_parameters(**slurm.parameters(parallel=3))
    script = executor._make_submission_file_text("python -m submitit.core._submit X", "UID")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=600", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --nodes=1",
                 "#SBATCH --ntasks-per-node=1", "#SBATCH --job-name=normzoo-sweep",
                 "#SBATCH --signal=USR2@120"):
        assert line in script, (line, script)
    assert slurm.parameters(parallel=3)["array_parallelism"] == 3


def _fake_slurm_commands(tmp_path: Path, monkeypatch) -> None:
    """srun and sbatch on the PATH that only say what SLURM would: scripts are written, not
    run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho Submitted batch job 4242\n")
    for name in ("srun", "sbatch"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _mark(cell: dict[str, str]) -> dict[str, str]:
    return {**cell, "ran": "yes"}


def test_each_slurm_job_is_a_checkpointable_cell_that_requeues_itself(tmp_path: Path,
                                                                        monkeypatch):
    # What sbatch would be given, and the pickled callable each array task runs: submitit's
    # signal handler requeues a job only if that callable has a checkpoint() (for a plain
    # function it raises UncompletedJobError when the time limit nears), and the requeued job
    # runs what checkpoint() returned: the same cell again.
    from submitit import JobEnvironment
    from submitit.helpers import Checkpointable, DelayedSubmission

    _fake_slurm_commands(tmp_path, monkeypatch)
    submitted: list = []
    monkeypatch.setattr(launch, "_wait", lambda pending, *rest: submitted.extend(pending))
    cells = [{"seed": "1"}, {"seed": "2"}]
    launch.run_cells(cells, _mark, tmp_path, jobs=2, launcher="slurm",
                     slurm=Slurm(time_min=600))
    assert [job.job_id for job in submitted] == ["4242_0", "4242_1"]
    for job, cell in zip(submitted, cells, strict=True):
        task = DelayedSubmission.load(job.paths.submitted_pickle)
        assert isinstance(task.function, Checkpointable) and task.function.cell == cell
        assert task._timeout_min == 600
        again = task._checkpoint_function()  # what submitit's handler pickles for the requeue
        assert isinstance(again, DelayedSubmission)
        assert isinstance(again.function, CellJob) and again.function.cell == cell
        assert again.function.work is task.function.work
        assert again.result() == {**cell, "ran": "yes"}
    script = submitted[0].paths.submission_file.read_text()
    # The warning signal SLURM sends is the one submitit's handler in the job listens to.
    assert f"#SBATCH --signal={JobEnvironment.USR_SIG}@120" in script
    assert "#SBATCH --array=0-1%2" in script


def test_submitits_signal_checkpoints_the_current_step_and_requeues_the_cell(
        tmp_path: Path, monkeypatch, capfd):
    # submitit's own handler, as its job process installs it, with a stand-in for SLURM
    # (scontrol requeue recorded, not run). Its signal comes as step 1 starts: the run finishes
    # that step and saves it (step 2) before submitit pickles the cell and requeues the job;
    # the requeued job then resumes the cell from that checkpoint and finishes it.
    import functools
    import json
    import signal

    import torch
    from lightning.pytorch.callbacks import Callback
    from submitit import JobEnvironment
    from submitit.core.utils import DelayedSubmission, JobPaths

    from normzoo.run import training as train
    from normzoo.sweep import runner as sweeps

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(tiny(trainer={"max_steps": 6, "val_every_steps": 3})),
                      encoding="utf-8")
    out = tmp_path / "sweep"
    work = functools.partial(sweeps._cell_work, recipe_path=recipe, overrides=[], out=out,
                             steps=None, diagnose=False)
    cell = {"seed": "1"}
    run_dir = out / sweeps.cell_name(cell)

    class Signal(Callback):
        sent = False

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step == 1 and not Signal.sent:
                Signal.sent = True
                os.kill(os.getpid(), JobEnvironment._usr_sig())

    build = train.build_trainer

    def build_with_signal(*args, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.callbacks.append(Signal())
        return trainer

    monkeypatch.setattr(train, "build_trainer", build_with_signal)
    resumes: list = []
    run = train.run

    def recorded_run(*args, **kwargs):
        resumes.append(kwargs.get("resume"))
        return run(*args, **kwargs)

    monkeypatch.setattr(train, "run", recorded_run)

    requeues: list[int] = []

    class Cluster(JobEnvironment):
        global_rank = 0

        def _requeue(self, countdown: int) -> None:
            requeues.append(countdown)

    paths = JobPaths(tmp_path / ".submitit", job_id="4242_0", task_id=0)
    paths.folder.mkdir(parents=True)
    job = DelayedSubmission(CellJob(work, cell, None))
    job.set_timeout(600, 3)
    job.dump(paths.submitted_pickle)
    signals = (signal.SIGTERM, signal.SIGCONT, JobEnvironment._usr_sig())
    before = {signum: signal.getsignal(signum) for signum in signals}
    try:
        Cluster()._handle_signals(paths, job)  # what submitit's process_job does first
        with pytest.raises(SystemExit):  # submitit's handler: requeued, then exits
            job.result()
        assert requeues == [3]  # pre-empted, not timed out: no timeout used up
        saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
        assert saved["global_step"] == 2  # the step under way when the signal came: kept
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "preempted"
        assert not (run_dir / "cell.json").exists()
        assert "requeueing the cell" in capfd.readouterr().err
        # The requeued job (same job id) runs what the handler pickled: the same cell.
        requeued = DelayedSubmission.load(paths.submitted_pickle)
        assert isinstance(requeued.function, CellJob)
        assert requeued.function.cell == cell
        Cluster()._handle_signals(paths, requeued)
        row = requeued.result()
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert row["status"] == "ok" and row["steps"] == 6
    assert resumes == [None, "auto"]  # the second run continued from the checkpoint
    assert requeues == [3]


def test_results_name_the_compare_command_for_each_setting_against_the_first(tmp_path: Path):
    """The means over seeds are not a test: results.md ends with the ``normzoo compare`` line
    that judges each setting against the first on their finished cells, and it parses."""
    from test_docs_commands import parse

    from normzoo.sweep.seeds import compare_commands

    rows = [{"cell": f"seed-{s}_residual-{r}", "seed": s, "model.residual": r,
             "status": "failed" if (r, s) == ("sub ln", "3") else "ok"}
            for r in ("pre", "post", "sub ln") for s in ("1", "2", "3")]
    out = tmp_path / "my sweep"
    lines = compare_commands(rows, ["seed", "model.residual"], out)
    commands = [line for line in lines if line.startswith("normzoo compare")]
    assert lines[lines.index("# post against pre") + 1] == commands[0]
    assert commands[0].count(" -b ") == 3 and commands[0].count(" -s ") == 3
    assert f"-b '{out}/seed-1_residual-pre'" in commands[0]
    assert commands[1].count(" -s ") == 2  # its failed seed left out
    assert all(parse(command) is None for command in commands)
    assert compare_commands(rows, ["model.residual"], out) == []  # no seed axis
    one = [r for r in rows if r["model.residual"] == "pre"]
    assert compare_commands(one, ["seed", "model.residual"], out) == []  # one setting


def test_results_give_mean_and_sd_over_seeds_per_setting():
    from normzoo.sweep.seeds import over_seeds

    rows = [{"model.residual": "post", "seed": s, "status": "ok", "test_bleu": b,
             "metric_value": 3.0, "final_train_loss": 4.0, "steps": 1000}
            for s, b in (("1", 20.0), ("2", 22.0), ("3", 24.0))]
    rows.append({"model.residual": "pre", "seed": "1", "status": "ok", "test_bleu": 18.0,
                 "metric_value": 3.5, "final_train_loss": 4.5, "steps": 1000})
    rows.append({"model.residual": "pre", "seed": "2", "status": "diverged", "test_bleu": "",
                 "metric_value": "", "final_train_loss": None, "steps": 12})
    rows.append({"model.residual": "pre", "seed": "3", "status": "failed"})
    lines = over_seeds(rows, ["model.residual", "seed"])
    post = next(line for line in lines if line.startswith("| post |"))
    assert "| 1, 2, 3 | 0 | 0 | 22.00 ± 2.00 | 3.0000 ± 0.0000 |" in post
    pre = next(line for line in lines if line.startswith("| pre |"))
    # the seeds averaged (one: no spread), then how many diverged and failed
    assert "| 1 | 1 | 1 | 18.00 | 3.5000 |" in pre
    assert over_seeds(rows, ["model.residual"]) == []
    # a language model's test loss, first: the task's scores, whichever they are, lead
    lm = [{"model.residual": "pre", "seed": s, "status": "ok", "test_loss": v, "steps": 800}
          for s, v in (("1", 4.02), ("2", 4.05), ("3", 4.04))]
    lines = over_seeds(lm, ["model.residual", "seed"])
    assert lines[3].endswith("| failed | test loss | validation metric | final train loss | "
                             "steps |")
    assert lines[-1].endswith("| 4.0367 ± 0.0153 |  |  | 800 ± 0 |")


def test_compare_runs_at_the_command_line(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from normzoo.cli import app
    from normzoo.recipe import from_dict
    from normzoo.run import training as train

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    runs = []
    for seed in (1, 2):
        run_dir = tmp_path / f"run{seed}"
        train.run(from_dict(tiny(seed=seed, run={"dir": str(run_dir)},
                                 trainer={"max_steps": 3, "val_every_steps": 3})), "tiny.yaml")
        runs.append(run_dir)
    runner = CliRunner()
    result = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1]), "--json"])
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    assert report["score"] == "test bleu" and report["split"] == "test"
    assert report["example_p"] is None or 0.0 <= report["example_p"] <= 1.0
    same = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[0])])
    assert same.exit_code == 0 and "identical outputs: no difference" in same.output
    # Any number of runs a side: Welch's t-test takes them all.
    uneven = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1]),
                                 "-s", str(runs[0]), "--json"])
    assert uneven.exit_code == 0, uneven.output
    report = json.loads(uneven.output)
    assert len(report["system"]["scores"]) == 2
    assert report["verdict"] in ("not shown", "indicated")  # one run a side at most
    (runs[1] / "hyps.test.txt").unlink()
    (runs[1] / "summary.json").unlink()
    missing = runner.invoke(app, ["compare", "-b", str(runs[0]), "-s", str(runs[1])])
    assert missing.exit_code == 2 and "has no test bleu" in missing.output
    assert "Traceback" not in missing.output


def _translation_run(run_dir: Path, hypotheses: list[str], seed: int = 1, **settings) -> Path:
    """A finished tiny translation run as ``normzoo compare`` reads it: the resolved recipe
    (tiny's, with ``settings``) and the test translations, written as the final test writes
    them (no summary: compare scores the translations themselves)."""
    from normzoo.recipe import from_dict

    run_dir.mkdir(parents=True)
    recipe = from_dict(tiny(seed=seed, run={"dir": str(run_dir)}, **settings))
    (run_dir / "recipe.yaml").write_text(recipe.to_yaml(), encoding="utf-8")
    (run_dir / "hyps.test.txt").write_bytes(("\n".join(hypotheses) + "\n").encode("utf-8"))
    return run_dir


def _test_references() -> list[str]:
    from normzoo.data.sources import load_parallel
    from normzoo.recipe import from_dict

    data = from_dict(tiny()).data
    return load_parallel(data, data.test_split, data.valid_limit)[1]


def test_compare_says_which_run_scores_higher_and_tests_both_ways(tmp_path: Path,
                                                                  monkeypatch):
    import json

    from normzoo.verdicts.runs import compare_runs, format_comparison

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _test_references()
    good = _translation_run(tmp_path / "good", refs)
    poor = _translation_run(tmp_path / "poor", [" ".join(r.split()[:-1]) for r in refs])
    # The example-level p-value is two-sided: the same either way round, so the direction
    # is the sign of the difference, said in words.
    up, down = compare_runs([poor], [good]), compare_runs([good], [poor])
    assert up["example_p"] == down["example_p"]
    assert "the system is better (higher test bleu): the system is +" in format_comparison(up)
    assert "the baseline is better (higher test bleu): the system is -" in format_comparison(
        down)
    assert "two-sided p = " in format_comparison(up)
    report = json.loads(json.dumps(down, default=str))
    assert report["better_side"] == "baseline" and report["difference"] < 0
    one = format_comparison(up)
    assert "1 run, test bleu" in one and "nothing to test (fewer than two runs a side" in one
    # One seed a side is never shown: the example test cannot see what another seed gives.
    assert up["verdict"] != "shown" and "one seed a side" in up["reason"]
    poor2 = _translation_run(tmp_path / "poor2", [" ".join(r.split()[1:]) for r in refs], seed=2)
    good2 = _translation_run(tmp_path / "good2", [refs[0] + " x", *refs[1:]], seed=2)
    pooled = compare_runs([poor, poor2], [good, good2])
    text = format_comparison(pooled)
    assert pooled["paired"] and "seeds: paired t-test (the same seeds on both sides)" in text
    assert pooled["verdict"] != "shown" and "2 seeds a side" in pooled["reason"]
    assert not compare_runs([poor, poor2], [good])["paired"]


def test_compare_refuses_one_seed_counted_twice_on_a_side(tmp_path: Path, monkeypatch):
    """Three copies of one run a side passed as three seeds were called *shown* (Welch's
    t-test on three equal BLEUs a side, p = 0). A side's runs must be distinct runs of
    distinct seeds; the same run on both sides stays allowed (nothing to test)."""
    from typer.testing import CliRunner

    from normzoo.cli import app

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _test_references()
    good = _translation_run(tmp_path / "good", refs)
    poor = _translation_run(tmp_path / "poor", [" ".join(r.split()[:-1]) for r in refs])
    copy = _translation_run(tmp_path / "copy", refs)  # seed 1 again, in another folder
    runner = CliRunner()
    thrice = runner.invoke(app, ["compare", *["-b", str(poor)] * 3, *["-s", str(good)] * 3])
    assert thrice.exit_code == 2, thrice.output
    assert "the baseline runs must be one run per seed" in thrice.output
    assert thrice.output.count(f"{poor} is given twice") == 1 and "shown" not in thrice.output
    seeds = runner.invoke(app, ["compare", "-b", str(poor), "-s", str(good), "-s", str(copy)])
    assert seeds.exit_code == 2, seeds.output
    assert f"{good} and {copy} are both seed 1" in seeds.output
    across = runner.invoke(app, ["compare", "-b", str(good), "-s", str(good)])
    assert across.exit_code == 0 and "identical outputs" in across.output


def test_compare_notes_runs_of_a_side_that_differ_in_more_than_their_seed(tmp_path: Path,
                                                                           monkeypatch):
    """A side is one setting: runs that differ in, say, their beam or residual are named in a
    note beside the verdict; their seed, run folder, data folder and device are not."""
    from normzoo.verdicts.runs import compare_runs, format_comparison

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _test_references()
    poor = [" ".join(r.split()[:-1]) for r in refs]
    base = [_translation_run(tmp_path / f"base{seed}", [poor[0] + " x" * (seed - 1), *poor[1:]],
                             seed=seed) for seed in (1, 2)]
    other = [_translation_run(tmp_path / "sys1", refs, seed=1),
             _translation_run(tmp_path / "sys2", [refs[0] + " x", *refs[1:]], seed=2,
                              eval={"beam": 3},
                              model={"residual": "post"})]
    result = compare_runs(base, other)
    assert result["baseline_differences"] == {}
    assert result["system_differences"] == {"eval.beam": [1, 3],
                                            "model.residual.name": ["pre", "post"]}
    text = format_comparison(result)
    assert ("note: the system runs differ in more than their seed: eval.beam (1, 3); "
            "model.residual.name (pre, post)") in text
    assert "note: the baseline" not in text


def test_compare_reads_runs_whose_recipes_hold_keys_since_removed(tmp_path: Path, monkeypatch):
    """Only a run's data section is validated: the depth study's seed-1 cells were trained
    with ``model.bias_scope`` (removed since), and compare refused them as an invalid recipe."""
    import yaml

    from normzoo.verdicts.runs import compare_runs

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _test_references()
    old = _translation_run(tmp_path / "old", refs)
    recipe = yaml.safe_load((old / "recipe.yaml").read_text(encoding="utf-8"))
    recipe["model"]["bias_scope"] = "all"
    (old / "recipe.yaml").write_text(yaml.safe_dump(recipe), encoding="utf-8")
    new = _translation_run(tmp_path / "new", refs, seed=2)
    result = compare_runs([old], [new])
    assert result["example_note"].startswith("identical outputs")
    assert result["baseline"]["scores"] == [100.0]


def _lm_run(run_dir: Path, loss: float | None, seed: int) -> Path:
    """A finished tiny causal-LM run as ``normzoo compare`` reads it: the resolved recipe and
    the ``summary.json`` with its test loss (None: the final test did not run)."""
    import json

    from normzoo.recipe import from_dict

    run_dir.mkdir(parents=True)
    recipe = from_dict(tiny(task="causal_lm", seed=seed, run={"dir": str(run_dir)},
                            model={"family": "decoder", "encoder_layers": 0}))
    (run_dir / "recipe.yaml").write_text(recipe.to_yaml(), encoding="utf-8")
    test = {} if loss is None else {"test": {"split": "test", "loss": loss}}
    (run_dir / "summary.json").write_text(json.dumps({"status": "completed", **test,
                                                      "machine": {"device": "cpu"}}),
                                          encoding="utf-8")
    return run_dir


def test_compare_judges_language_models_on_their_test_loss(tmp_path: Path):
    """Runs that kept no per-sentence losses: the seeds' t-test decides alone, and the lower
    test loss is the better."""
    import json

    from typer.testing import CliRunner

    from normzoo.cli import app

    runner = CliRunner()
    base = [_lm_run(tmp_path / f"pre{s}", loss, s) for s, loss in ((1, 4.03), (2, 4.05), (3, 4.02))]
    lower = [_lm_run(tmp_path / f"peri{s}", loss, s)
             for s, loss in ((1, 3.78), (2, 3.80), (3, 3.79))]
    args = [a for d in base for a in ("-b", str(d))] + [a for d in lower for a in ("-s", str(d))]
    result = runner.invoke(app, ["compare", *args])
    assert result.exit_code == 0, result.output
    assert "baseline: 3 runs, test loss 4.0333 ± 0.0153" in result.output
    assert "the system is better (lower test loss): the system is -0.2433 nats/token" in \
        result.output
    assert "shown: the seeds' test below 0.05" in result.output
    report = json.loads(runner.invoke(app, ["compare", *args, "--json"]).output)
    assert report["better_side"] == "system" and report["verdict"] == "shown"
    one = runner.invoke(app, ["compare", "-b", str(base[0]), "-s", str(lower[0])])
    assert one.exit_code == 0 and "not shown" in one.output and "one seed a side" in one.output
    unfinished = _lm_run(tmp_path / "unfinished", None, 4)
    for bad, says in (
            (["-b", str(base[0]), "-s", str(unfinished)], "has no test loss in summary.json"),
            (["-b", str(base[0]), "-b", str(base[0]), "-s", str(lower[0])], "is given twice"),
            (["-b", str(base[0]), "-s", str(_translation_run(tmp_path / "mt", ["a"]))],
             "the runs are of different tasks")):
        refused = runner.invoke(app, ["compare", *bad])
        assert refused.exit_code == 2 and says in refused.output, refused.output


def test_compare_reads_a_translation_holding_a_unicode_line_separator_as_one_line(
        tmp_path: Path, monkeypatch):
    # str.splitlines() also splits at U+2028, U+0085 and friends; the run wrote one
    # translation per "\n" (and so did the references): split there only.
    from normzoo.verdicts.runs import compare_runs

    monkeypatch.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
    refs = _test_references()
    odd = [refs[0].replace(" ", "\u2028", 1), refs[1] + "\x85", *refs[2:]]
    base = _translation_run(tmp_path / "base", refs)
    other = _translation_run(tmp_path / "other", odd)
    result = compare_runs([base], [other])  # was: "not the same test set" (6 lines)
    assert result["example_test"] is not None and result["baseline"]["scores"] == [100.0]
