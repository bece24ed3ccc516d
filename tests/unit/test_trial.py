"""sweeper/trial.py leans on private parts of Ray 2.60 to stop a trial's Train run and
to skip the Ray Data actor; these tests fail when a Ray upgrade moves them."""

import inspect
import threading

from ray.train._internal.session import _TrainSession
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from sweeper.launch import TRIAL_SETTINGS
from sweeper.trial import StoppableTorchTrainer


def test_overridden_trainer_methods_still_exist_in_ray():
    for name in ("_initialize_and_run_controller", "_create_default_callbacks"):
        assert name in vars(DataParallelTrainer), name
        assert name in vars(StoppableTorchTrainer), name


def test_ray_controller_start_is_still_what_the_override_copies():
    source = inspect.getsource(DataParallelTrainer._initialize_and_run_controller)
    for line in (
        "env_vars = get_env_vars_to_propagate()",
        "controller = controller_actor_cls.remote(**controller_init_kwargs)",
        "ray.get(controller.run.remote())",
        "return ray.get(controller.get_result.remote())",
    ):
        assert line in source, line


def test_tune_function_sessions_still_signal_stop_with_an_event():
    assert "self.stop_event = threading.Event()" in inspect.getsource(_TrainSession.reset)
    assert "self.stop_event.set()" in inspect.getsource(_TrainSession.finish)


def test_a_stopped_fit_aborts_the_run_and_returns_false():
    class FakeController:
        aborted = threading.Event()

        class abort:
            @staticmethod
            def remote():
                FakeController.aborted.set()

    trainer = StoppableTorchTrainer.__new__(StoppableTorchTrainer)
    trainer._controller = FakeController()

    def fit():
        FakeController.aborted.wait(timeout=5)
        raise RuntimeError("controller died")

    trainer.fit = fit
    stop = threading.Event()
    stop.set()
    assert trainer.fit_until(stop) is False
    assert FakeController.aborted.is_set()


def test_an_error_that_is_not_a_stop_is_raised():
    trainer = StoppableTorchTrainer.__new__(StoppableTorchTrainer)

    def fit():
        raise ValueError("bad config")

    trainer.fit = fit
    try:
        trainer.fit_until(threading.Event())
    except ValueError as exc:
        assert "bad config" in str(exc)
    else:
        raise AssertionError("the error was swallowed")


def test_trial_settings_are_strings_for_the_environment():
    assert all(isinstance(value, str) for value in TRIAL_SETTINGS.values())
    assert float(TRIAL_SETTINGS["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"]) < 2.0
