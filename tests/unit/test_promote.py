"""Promotion and export logic without Ray: trial selection and refusals against a real
SQLite MLflow store written by the real tracker (driven by hand, no Tune), and the pure
helpers. The full path (a real sweep, the registry, loading the model) is in
tests/integration/test_promote.py."""


import pytest
import yaml
from mlflow.tracking import MlflowClient

from sweeper.errors import UserError
from sweeper.promote._export import export_trial
from sweeper.track._book import SweepBook, TrialRecord
from sweeper.promote._registry import check_registry, pinned_requirements, promote_trial, state_refusal
from sweeper.spec._overrides import single_run_spec, with_overrides
from sweeper.spec._load import validate_spec
from sweeper.track._store import SweepStore
from sweeper.track._tracker import MlflowTracker
from tests.conftest import REPO, small_sweep


def test_single_run_spec_takes_params_as_mlflow_stores_them():
    spec = validate_spec(small_sweep("s", search={"parameters": {
        "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2},
        "lora.r": {"distribution": "categorical", "values": [4, 8]},
        "training.lr_scheduler": {"distribution": "categorical", "values": ["cosine", "constant"]},
    }}, early_stopping={"startup_trials": 2, "rung_spacing": 4, "rungs": 1}), base_dir=REPO)
    typed = {"training.learning_rate": 1.5e-05, "lora.r": 4, "training.lr_scheduler": "constant"}
    as_strings = {key: str(value) for key, value in typed.items()}  # MLflow params are strings
    single = single_run_spec(spec, as_strings, name="s-trial-3")
    assert single == single_run_spec(spec, typed, name="s-trial-3")
    assert (single.training.learning_rate, single.lora.r, single.training.lr_scheduler) == (1.5e-05, 4, "constant")
    assert single.name == "s-trial-3" and single.output_dir is None
    assert single.search.parameters == {} and single.search.num_trials == 1
    assert single.early_stopping.scheduler == "none" and single.early_stopping.startup_trials is None
    assert single.early_stopping.rung_spacing is None and single.early_stopping.rungs is None  # refused under none
    assert single.data == spec.data and single.model == spec.model


def trial(state, status=None, number=2, steps=10):
    return {"trial_number": number, "state": state, "status": status or state, "steps": steps}


def test_state_refusal_gives_the_reason():
    assert state_refusal(trial("completed", steps=30), 30) is None
    assert state_refusal(trial("pruned", "pruned at step 10"), 30) == (
        "trial 2 was pruned at step 10 of 30 (early stopping judged it behind the others), "
        "so its adapter is under-trained"
    )
    assert state_refusal(trial("failed", "failed: RuntimeError: boom"), 30) == "trial 2 failed: RuntimeError: boom"
    assert "stopped at step 10 of 30 when its sweep was interrupted" in state_refusal(trial("stopped"), 30)
    assert "is running" in state_refusal(trial("running"), 30)


@pytest.mark.parametrize(
    "model_name, alias, expected",
    [
        ("a/b", "champion", "--model-name: a registered model's name cannot contain '/' or ':' (got 'a/b')"),
        ("m", "latest", "--alias: 'latest' and version names such as 'v3' are reserved by MLflow (got 'latest')"),
        ("m", "v3", "--alias: 'latest' and version names such as 'v3' are reserved by MLflow (got 'v3')"),
        ("m", "has space", "--alias: an alias may only contain letters, digits, '_' and '-' (got 'has space')"),
    ],
)
def test_registry_names_are_checked_before_the_store_is_asked(model_name, alias, expected):
    with pytest.raises(UserError) as caught:
        check_registry(None, model_name, alias)  # no client needed: names fail first
    (line,) = caught.value.lines
    assert line.startswith(expected)


def test_requirements_are_pinned_without_local_build_tags():
    pins = pinned_requirements()
    assert [p.split("==")[0] for p in pins] == ["torch", "transformers", "peft", "tokenizers", "safetensors", "filelock"]
    assert all("+" not in p for p in pins)


# ---------------------------------------------------------------- against a real store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A finished sweep 'hand' as the real tracker writes it: trial 1 completed (the best),
    trial 2 pruned at step 10, trial 3 failed before reporting. No adapters on disk."""
    folder = tmp_path_factory.mktemp("hand")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = validate_spec(small_sweep("hand", output_dir=str(folder / "sweeps" / "hand")), base_dir=REPO)
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # the tracker puts a SQLite store's artifacts in ./mlartifacts
        tracker = MlflowTracker(spec, book, uri, hardware="test")
    tracker.start_sweep(folder)
    results = {
        "t1_00001": ("completed", [(10, 2.0), (20, 1.6), (30, 1.5)]),
        "t1_00002": ("pruned", [(10, 2.4)]),
        "t1_00003": ("failed", []),
    }
    for number, (trial_id, (status, reports)) in enumerate(results.items(), start=1):
        record = book.trials[trial_id] = TrialRecord(trial_id, number, {"training.learning_rate": 10.0 ** -number})
        tracker.trial_started(record)
        for step, loss in reports:
            record.history.append({"step": step, "eval_loss": loss, "train_tokens": 100})
            record.checkpoint_path = str(folder / "gone" / trial_id)
            tracker.trial_result(record)
        record.state = status
        record.error = "RuntimeError: boom" if status == "failed" else None
        tracker.trial_finished(record)
    tracker.finish_sweep()
    return SweepStore(uri)


def test_trial_by_number_by_id_and_best(store):
    run = store.sweep_run("hand")
    assert store.trial(run)["trial_id"] == "t1_00001"
    assert store.trial(run, "2")["trial_id"] == "t1_00002"
    assert store.trial(run, "t1_00003")["trial_number"] == 3
    with pytest.raises(UserError) as caught:
        store.trial(run, "7")
    assert caught.value.lines == [
        "--trial: sweep 'hand' has no trial '7'; give a trial number or id: 1 (t1_00001), 2 (t1_00002), 3 (t1_00003)"
    ]


def test_a_trial_id_of_digits_is_an_id_not_a_number():
    """Tune's 8-hex-digit trial ids are all digits about once in 40 trials; the best trial
    is looked up by its id (a shared test sweep drew 83639739 and promote failed)."""
    import polars as pl

    from sweeper.track._store import matching_trials

    trials = pl.DataFrame({"trial_number": [1, 2], "trial_id": ["a1b2c3d4", "83639739"]})
    assert matching_trials(trials, "83639739")[0]["trial_number"] == 2
    assert matching_trials(trials, "1")[0]["trial_id"] == "a1b2c3d4"
    assert matching_trials(trials, "3") == []


def test_export_is_the_trials_config_as_one_run(store, tmp_path):
    text = export_trial(store, "hand", "2")
    assert text.startswith("# Trial 2 of sweep 'hand' (pruned at step 10, eval_loss=2.4) as one full run.")
    exported = validate_spec(yaml.safe_load(text), base_dir=tmp_path)
    sweep = store.sweep_spec(store.sweep_run("hand"))
    assert exported == single_run_spec(sweep, {"training.learning_rate": 0.01}, name="hand-trial-2")
    assert exported.training == with_overrides(sweep, {"training.learning_rate": 0.01}).training


@pytest.mark.parametrize(
    "ref, force, expected",
    [
        ("2", False, "--trial: trial 2 was pruned at step 10 of 30 (early stopping judged it behind the others), "
                     "so its adapter is under-trained; pass --force to promote it anyway"),
        ("3", False, "--trial: trial 3 failed: RuntimeError: boom; pass --force to promote it anyway"),
        ("3", True, "--trial: trial 3 has no adapter checkpoint (it ended before its first evaluation)"),
        (None, False, "--trial: the adapter checkpoint of trial 1 is not at"),
    ],
)
def test_refused_promotions_leave_the_registry_unchanged(store, ref, force, expected):
    runs_before = len(store.client.search_runs([e.experiment_id for e in store.client.search_experiments()]))
    with pytest.raises(UserError) as caught:
        promote_trial(store, "hand", ref, force=force)
    (line,) = caught.value.lines
    assert line.startswith(expected)
    assert MlflowClient(store.uri).search_registered_models() == []
    assert len(store.client.search_runs([e.experiment_id for e in store.client.search_experiments()])) == runs_before


def test_the_adapter_files_are_peft_s_own_names():
    """Promotion copies these files of a checkpoint and nothing else: they must be what
    peft's save_pretrained writes and from_pretrained reads."""
    from peft.utils import CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME

    from sweeper.promote._registry import ADAPTER_FILES

    assert ADAPTER_FILES == (CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME)
