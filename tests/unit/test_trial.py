"""sweeper/trial.py runs Ray Train's controller in the trial's own thread and stops it
when Tune stops the trial. It leans on private parts of Ray 2.60; these tests fail when a
Ray upgrade moves them, and check our stop and report logic with stand-ins for Ray."""

import asyncio
import inspect
import threading

import pytest
from ray.train._internal.session import _TrainSession
from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
from ray.train.v2._internal.execution.controller import TrainController
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

import sweeper.trial
from sweeper.launch import TRIAL_SETTINGS
from sweeper.trial import ReportToTune, SharedPlacementGroupCleaner, TrialTorchTrainer


def test_overridden_trainer_methods_still_exist_in_ray():
    for name in ("_initialize_and_run_controller", "_create_default_callbacks"):
        assert name in vars(DataParallelTrainer), name
        assert name in vars(TrialTorchTrainer), name


def test_controller_abort_is_still_what_our_abort_copies():
    source = inspect.getsource(TrainController.abort)
    for line in (
        'self._controller_callback_manager.invoke_best_effort("before_controller_abort")',
        "self._worker_group.abort()",
        "self._set_state(AbortedState())",
        "ray.actor.exit_actor()",
    ):
        assert line in source, line
    assert inspect.iscoroutinefunction(TrainController.run)


def test_the_shared_cleaner_overrides_what_ray_calls():
    for name in ("after_controller_start", "before_controller_shutdown", "before_controller_abort"):
        assert name in vars(PlacementGroupCleanerCallback), name
        assert name in vars(SharedPlacementGroupCleaner), name
    source = inspect.getsource(PlacementGroupCleanerCallback.after_worker_group_start)
    assert "self._cleaner" in source and "self._controller_actor_id" in source


def test_tune_function_sessions_still_signal_stop_with_an_event():
    assert "self.stop_event = threading.Event()" in inspect.getsource(_TrainSession.reset)
    assert "self.stop_event.set()" in inspect.getsource(_TrainSession.finish)


class FakeWorkerGroup:
    def __init__(self):
        self.aborted = False

    def has_started(self):
        return True

    def abort(self):
        self.aborted = True


class FakeController:
    """Stands in for TrainController: a run that never ends, or fails."""

    def __init__(self, error: Exception | None = None):
        self.error = error
        self.worker_group = FakeWorkerGroup()
        self.state = None
        self.hooks = []
        outer = self

        class Hooks:
            def invoke_best_effort(self, name):
                outer.hooks.append(name)

        self._controller_callback_manager = Hooks()

    async def run(self):
        if self.error:
            raise self.error
        await asyncio.sleep(3600)

    def get_state(self):
        class State:
            def is_terminal(inner):
                return self.state is not None

        return State()

    def get_worker_group(self):
        return self.worker_group

    def _set_state(self, state):
        self.state = state


def test_a_stopped_run_is_aborted_and_returns():
    trainer = TrialTorchTrainer.__new__(TrialTorchTrainer)
    trainer._stop = threading.Event()
    controller = FakeController()
    threading.Timer(0.2, trainer._stop.set).start()
    asyncio.run(asyncio.wait_for(trainer._run_until_stopped(controller), timeout=10))
    assert controller.worker_group.aborted
    assert controller.hooks == ["before_controller_abort"]
    assert type(controller.state).__name__ == "AbortedState"


def test_an_error_that_is_not_a_stop_is_raised():
    trainer = TrialTorchTrainer.__new__(TrialTorchTrainer)
    trainer._stop = threading.Event()
    with pytest.raises(ValueError, match="bad config"):
        asyncio.run(trainer._run_until_stopped(FakeController(ValueError("bad config"))))


def test_reports_reach_tune_with_the_checkpoint_path(monkeypatch):
    reported = []
    monkeypatch.setattr(sweeper.trial.tune, "report", reported.append)

    class Checkpoint:
        path = "/sweeps/x/trials/t1/checkpoint_000001"

    ReportToTune().after_report(None, [{"step": 10, "eval_loss": 4.2}, {"step": 10}], Checkpoint())
    ReportToTune().after_report(None, [{"step": 20, "eval_loss": 4.0}], None)
    assert reported == [
        {"step": 10, "eval_loss": 4.2, "checkpoint_path": Checkpoint.path},
        {"step": 20, "eval_loss": 4.0},
    ]


def test_trial_settings_are_strings_for_the_environment():
    assert all(isinstance(value, str) for value in TRIAL_SETTINGS.values())
    assert float(TRIAL_SETTINGS["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]) < 2.0
