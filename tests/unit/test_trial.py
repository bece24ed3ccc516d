"""A trial's Train reports reach Tune with their checkpoint path; the settings its
processes get are environment strings. How the trial's TorchTrainer runs and stops is
tested in tests/unit/test_ray_adapter.py and tests/integration/test_ray_adapter.py."""

import sweeper.trial
from sweeper.launch import TRIAL_SETTINGS
from sweeper.trial import ReportToTune


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
