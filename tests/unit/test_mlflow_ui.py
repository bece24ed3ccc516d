"""What the MLflow UI reads from the store we write: the experiment says it holds model
training runs (MLflow 3 opens such an experiment on its runs, not on the GenAI traces)."""

import pytest

from sweeper.track._book import SweepBook
from sweeper.track._mlflow_store import client_for
from sweeper.spec._load import validate_spec
from sweeper.track._tracker import MlflowTracker
from tests.conftest import REPO, small_sweep


def make_tracker(folder, experiment):
    spec = validate_spec(
        small_sweep("ui", output_dir=str(folder / "sweeps" / "ui"), tracking={"experiment": experiment}), base_dir=REPO
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        return MlflowTracker(
            spec, SweepBook(metric="eval_loss", goal="minimize", max_steps=30), f"sqlite:///{folder / 'mlflow.db'}",
            hardware="test",
        )


def test_the_experiment_opens_on_training_runs(tmp_path):
    tracker = make_tracker(tmp_path, "fresh")
    tags = client_for(tracker.uri).get_experiment_by_name("fresh").tags
    assert tags["mlflow.experimentKind"] == "custom_model_development"


def test_an_existing_experiment_is_tagged_when_a_sweep_uses_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client_for(uri).create_experiment("older", artifact_location=(tmp_path / "mlartifacts").as_uri())
    make_tracker(tmp_path, "older")
    assert client_for(uri).get_experiment_by_name("older").tags["mlflow.experimentKind"] == "custom_model_development"
