"""`sweep promote` checks the model name and alias before it logs anything, with MLflow's
documented rules; each verdict is held here against what the installed MLflow's registry
does with the same name, so an MLflow upgrade that changes a rule fails here, not after a
model was logged."""

import pytest
from mlflow.exceptions import MlflowException

from sweeper.promote._registry import alias_problem, model_name_problem

GOOD_NAMES = ["qa-lora", "team.qa_lora 2"]
BAD_NAMES = ["", " ", "a/b", "a:b"]
GOOD_ALIASES = ["champion", "best-2026_12", "v3a", "latest1"]
BAD_ALIASES = ["", "latest", "Latest", "v3", "V12", "a/b", "has space", "é!", "a" * 256]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from sweeper.track import client_for

    client = client_for(f"sqlite:///{tmp_path_factory.mktemp('registry') / 'mlflow.db'}")
    client.create_registered_model("m")
    version = client.create_model_version("m", source=str(tmp_path_factory.mktemp("adapter")))
    return client, version.version


@pytest.mark.parametrize("name", GOOD_NAMES + BAD_NAMES)
def test_a_model_name_is_refused_exactly_when_mlflow_refuses_it(registry, name):
    client, _ = registry
    try:
        client.create_registered_model(name)
        refused_by_mlflow = False
    except MlflowException:
        refused_by_mlflow = True
    assert (model_name_problem(name) is not None) == refused_by_mlflow
    assert refused_by_mlflow == (name in BAD_NAMES)


@pytest.mark.parametrize("alias", GOOD_ALIASES + BAD_ALIASES)
def test_an_alias_is_refused_exactly_when_mlflow_refuses_it(registry, alias):
    client, version = registry
    try:
        client.set_registered_model_alias("m", alias, version)
        refused_by_mlflow = False
    except MlflowException:
        refused_by_mlflow = True
    assert (alias_problem(alias) is not None) == refused_by_mlflow
    assert refused_by_mlflow == (alias in BAD_ALIASES)
