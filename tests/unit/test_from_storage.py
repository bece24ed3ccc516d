"""`sweep resume NAME --storage URI`: what is fetched from a sweep's storage into a new
local folder, and the keyed refusals. The storage here is a folder, which goes through
the same pyarrow file-system calls as s3:// (tests/integration/test_multinode.py runs it
on S3)."""

from __future__ import annotations

import optuna
import pytest

from sweeper.errors import UserError
from sweeper.run._from_storage import fetch_sweep
from sweeper.search._study import study_url
from sweeper.spec._load import load_spec, spec_to_yaml, validate_spec
from tests.conftest import small_sweep


def stored_sweep(tmp_path, name="f", with_study=True):
    """What a started sweep leaves in its storage.uri (a folder here)."""
    store = tmp_path / "store"
    (store / "tune").mkdir(parents=True)
    spec = validate_spec(small_sweep(name, storage={"uri": str(store)}), base_dir=tmp_path)
    (store / "sweep.yaml").write_text(spec_to_yaml(spec.model_copy(update={"output_dir": tmp_path / "gone"})))
    if with_study:
        study = optuna.create_study(study_name=name, storage=study_url(store / "tune"))
        study.add_trial(optuna.trial.create_trial(value=1.5, params={}, distributions={}))
    return store


def test_the_sweep_yaml_and_the_study_are_fetched_into_the_new_folder(tmp_path):
    store = stored_sweep(tmp_path)
    fetched = fetch_sweep("f", str(store) + "/", tmp_path / "here")
    assert fetched.folder == tmp_path / "here" and fetched.notes == []
    spec = load_spec(tmp_path / "here" / "sweep.yaml")
    assert (spec.sweep_dir, spec.storage_uri) == (tmp_path / "here", str(store))
    (trial,) = optuna.load_study(study_name="f", storage=study_url(tmp_path / "here")).get_trials()
    assert trial.value == 1.5
    assert fetch_sweep("f", str(store), tmp_path / "here").folder == tmp_path / "here"  # again: the same sweep


def test_a_storage_without_a_study_copy_is_noted(tmp_path):
    store = stored_sweep(tmp_path, with_study=False)
    (note,) = fetch_sweep("f", str(store), tmp_path / "here").notes
    assert note.startswith(f"{store} holds no copy of the Optuna study yet")


def test_what_cannot_be_resumed_from_storage_is_a_keyed_line(tmp_path):
    store = stored_sweep(tmp_path)
    with pytest.raises(UserError, match=r"^--storage: no sweep at .*nothing \(no sweep.yaml there\)"):
        fetch_sweep("f", str(tmp_path / "nothing"), tmp_path / "here")
    with pytest.raises(UserError, match=r"^--storage: unsupported scheme ftp://"):
        fetch_sweep("f", "ftp://host/f", tmp_path / "here")
    with pytest.raises(UserError, match=r"^NAME: the sweep at .* is named 'f', not 'g'; give NAME f"):
        fetch_sweep("g", str(store), tmp_path / "here")
    other = validate_spec(small_sweep("f", storage={"uri": str(tmp_path / "other-store")}), base_dir=tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "sweep.yaml").write_text(spec_to_yaml(other))
    with pytest.raises(UserError, match=r"^--sweep-dir: .*taken holds a sweep whose storage is .*other-store"):
        fetch_sweep("f", str(store), tmp_path / "taken")
    assert not (tmp_path / "here").exists()  # nothing written by a refusal


def test_a_sweep_resumed_in_another_folder_reuses_the_mlflow_runs_of_its_storage(tmp_path, monkeypatch):
    """The resumed tracker finds the sweep's parent run by its storage, not its old folder,
    and records the folder it continues in; a same-named sweep of other storage is not it."""
    from sweeper.track._book import SweepBook, TrialRecord
    from sweeper.track._mlflow_store import client_for
    from sweeper.names import Tag
    from sweeper.track._tracker import MlflowTracker

    monkeypatch.chdir(tmp_path)  # the tracker puts a SQLite store's artifacts in ./mlartifacts
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def tracker(output_dir, storage):
        spec = validate_spec(small_sweep("f", output_dir=str(output_dir), storage={"uri": str(storage)}), base_dir=tmp_path)
        book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
        return MlflowTracker(spec, book, uri, hardware="test")

    first = tracker(tmp_path / "gone", tmp_path / "store")
    first.start_sweep(tmp_path)
    record = first.book.trials["a"] = TrialRecord("a", 1, {})
    first.trial_started(record)
    other = tracker(tmp_path / "other", tmp_path / "other-store")
    other.start_sweep(tmp_path)  # same name, other storage: started later

    resumed = tracker(tmp_path / "here", tmp_path / "store")
    resumed.reattach()
    assert resumed.parent_run_id == first.parent_run_id and list(resumed.book.trials) == ["a"]
    parent = client_for(uri).get_run(first.parent_run_id)
    assert parent.data.tags[Tag.SWEEP_DIR] == str(tmp_path / "here")


def test_a_trial_tagged_finished_by_a_driver_killed_before_it_ended_the_run_is_ended_on_resume(tmp_path, monkeypatch):
    """_end_trial writes the trial's state, then ends its run: a driver killed with -9
    between the two left the run RUNNING, which no later driver ended (seen in the
    kill -9 tests as 'a run left RUNNING')."""
    from sweeper.names import Tag, TrialState
    from sweeper.track._book import SweepBook, TrialRecord
    from sweeper.track._mlflow_store import client_for
    from sweeper.track._tracker import MlflowTracker

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def tracker():
        spec = validate_spec(small_sweep("k", output_dir=str(tmp_path / "k")), base_dir=tmp_path)
        return MlflowTracker(spec, SweepBook(metric="eval_loss", goal="minimize", max_steps=30), uri, hardware="test")

    killed = tracker()
    killed.start_sweep(tmp_path)
    record = killed.book.trials["a"] = TrialRecord("a", 1, {})
    killed.trial_started(record)
    run_id = killed.child_run_ids["a"]
    client = client_for(uri)
    client.set_tag(run_id, Tag.STATE, TrialState.COMPLETED)  # the first write; killed before the second
    assert client.get_run(run_id).info.status == "RUNNING"

    resumed = tracker()
    resumed.reattach()
    assert resumed.book.trials["a"].state == TrialState.COMPLETED
    assert client.get_run(run_id).info.status == "FINISHED"
