"""A run keeps how it ended (issue 53, item 3): what a stop leaves is said from what the run
recorded, not from the files' times; a stop once its summary said completed is kept, not
raised, where ``normzoo train`` answers it; a sweep cell's job reaches the training run's stop
through :func:`~normzoo.run.preemption.request_stop`, not through a signal handler.

The end-to-end endings (the lines, the exit codes) are in test_command_endings.py and
test_interrupt.py; these check the run's side without training anything.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from normzoo.run.endings import RunEndings, exit_code, stop_raised
from normzoo.run.preemption import Preempted, StopSignal, request_stop, taking_stop_requests


class Run(RunEndings):
    """The attributes a TrainingRun gives its endings, with nothing trained."""

    def __init__(self, *, resume: str | None = None, force: bool = False) -> None:
        self.recipe_path, self.run_dir, self.overrides = "t.yaml", Path("R"), []
        self.resume, self.force = resume, force
        self.callbacks = SimpleNamespace(rolling=SimpleNamespace(saved_step=-1))
        self.complete = None
        self.closed: list[int] = []

    def close(self, exit_code: int = 0) -> None:
        self.closed.append(exit_code)


def lightning_caught_ctrl_c() -> SystemExit:
    """What Lightning raises after catching a Ctrl-C inside ``fit``."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemExit(1) from None  # the context stays: Lightning's sys.exit(1)
    except SystemExit as ended:
        return ended


def test_a_stop_is_the_signal_it_was_also_where_lightning_ended_it_as_exit_1():
    caught = lightning_caught_ctrl_c()
    assert isinstance(stop_raised(caught), KeyboardInterrupt)
    assert exit_code(caught) == 130
    assert exit_code(StopSignal(signal.SIGTERM)) == 143
    assert exit_code(Preempted("stopped", signal.SIGUSR1)) == 128 + signal.SIGUSR1
    assert stop_raised(SystemExit(1)) is None and exit_code(RuntimeError()) == 1


def test_a_stop_in_a_new_runs_folder_before_training_asks_for_force():
    run = Run()
    run.started_new = True
    with pytest.raises(KeyboardInterrupt) as stopped, run.ending(note_late_stops=True):
        raise lightning_caught_ctrl_c()
    assert stopped.value.note == ("before training started; R holds no checkpoint: run the "
                                  "same command again with --force")
    assert run.closed == [130]


def test_a_stop_after_training_before_the_summary_says_to_resume():
    run = Run()
    run.fitted = True
    with pytest.raises(StopSignal) as stopped, run.ending(note_late_stops=True):
        raise StopSignal(signal.SIGTERM)
    assert stopped.value.note == (
        "after training, before the run's summary was written; its checkpoints are in "
        "R/checkpoints: continue with: normzoo train t.yaml --resume auto run.dir=R")
    assert run.closed == [143]


def test_a_stop_before_the_run_started_anything_leaves_the_commands_own_line():
    run = Run(force=True)
    run.started_new = True  # --force: the same command again starts it again
    with pytest.raises(KeyboardInterrupt) as stopped, run.ending():
        raise KeyboardInterrupt
    assert getattr(stopped.value, "note", None) is None


def test_a_stop_once_the_summary_said_completed_is_kept_where_the_command_answers_it():
    run = Run()

    def completed_then_stopped() -> None:
        run.status = "completed"
        raise KeyboardInterrupt  # as the loggers close

    with run.ending(note_late_stops=True):
        completed_then_stopped()
    assert run.late_signal == signal.SIGINT
    run = Run()  # a sweep stops there: raised
    with pytest.raises(KeyboardInterrupt), run.ending():
        completed_then_stopped()
    assert run.late_signal == 0


def test_a_stop_is_requested_of_the_run_that_trains_and_of_no_other():
    asked: list[int] = []
    assert request_stop(signal.SIGTERM) is False  # no run trains in this process
    with taking_stop_requests(lambda signum: asked.append(signum) is None):
        assert request_stop(signal.SIGTERM) is True
    assert request_stop(signal.SIGTERM) is False
    assert asked == [signal.SIGTERM]


def test_the_stop_callback_takes_a_request_only_while_its_handlers_are_set(tmp_path: Path):
    from normzoo.run.callbacks import RollingCheckpoints, StopOnSignal

    stop = StopOnSignal(RollingCheckpoints(tmp_path, 1))
    assert stop.request(signal.SIGTERM) is False and stop.received is None
    stop._trainer = SimpleNamespace(is_global_zero=False, strategy=SimpleNamespace())
    stop.listening = True  # as on_train_start leaves it
    assert stop.request(signal.SIGTERM) is True and stop.received == signal.SIGTERM
    stop.on_fit_end(None, None)
    assert stop.request(signal.SIGTERM) is False


def test_a_preempted_error_keeps_what_happened_apart_from_its_advice():
    error = Preempted("stopped by SIGTERM at step 3: saved R/last.ckpt; continue with: X",
                      signal.SIGTERM, what="stopped by SIGTERM at step 3: saved R/last.ckpt")
    assert error.what == "stopped by SIGTERM at step 3: saved R/last.ckpt"
    assert Preempted("as said", signal.SIGTERM).what == "as said"
