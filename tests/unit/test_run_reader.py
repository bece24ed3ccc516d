"""The SQLite run reader answers as MLflow's client does, on a store the real tracker
wrote (driven by hand, no Tune): the same runs, in the same order, with the same tags,
params, latest metrics and metric histories. It reads MLflow's database tables, which are
no public API: this test is what tells us when an MLflow upgrade changes them."""

import math

import pytest

from sweeper.track.book import SweepBook, TrialRecord
from sweeper.track.mlflow_store import client_for
from sweeper.names import RunKind, Tag
from sweeper.track.run_reader import ClientRunReader, SqliteRunReader, reader_for
from sweeper.spec.load import validate_spec
from sweeper.track.store import SweepStore
from sweeper.track.tracker import MlflowTracker
from tests.conftest import REPO, small_sweep


def write_sweep(folder, name, results, discard=(), **sections):
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = validate_spec(small_sweep(name, output_dir=str(folder / "sweeps" / name), **sections), base_dir=REPO)
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)  # the tracker puts a SQLite store's artifacts in ./mlartifacts
        tracker = MlflowTracker(spec, book, uri, hardware="test")
    tracker.start_sweep(folder)
    for number, (trial_id, (state, losses)) in enumerate(results.items(), start=1):
        record = book.trials[trial_id] = TrialRecord(trial_id, number, {"training.learning_rate": 10.0 ** -number})
        tracker.trial_started(record)
        for step, loss in losses:
            record.history.append({"step": step, "eval_loss": loss, "train_tokens": 100})
            tracker.trial_result(record)
        if trial_id in discard:
            tracker.discard_trials([record])
            continue
        record.state = state
        tracker.trial_finished(record)
    tracker.finish_sweep()
    return uri


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    folder = tmp_path_factory.mktemp("readers")
    write_sweep(folder, "first", {"a": ("completed", [(10, 2.0), (20, 1.6), (30, 1.5)]), "b": ("pruned", [(10, 2.4)])})
    return write_sweep(folder, "second", {
        "c": ("completed", [(10, 2.2), (20, float("nan")), (30, 1.9)]),  # a NaN survives the round trip
        "d": ("failed", []),
        "gone": ("pruned", [(10, 3.0)]),  # deleted (BookKeeper.lost_trials): neither reader sees it
    }, discard=("gone",))


def readers(uri):
    sqlite = reader_for(uri, client_factory=lambda: pytest.fail("the SQLite reader needs no client"))
    assert isinstance(sqlite, SqliteRunReader)
    return sqlite, ClientRunReader(client_for(uri))


def same(value, other) -> bool:
    return value == other or (isinstance(value, float) and math.isnan(value) and math.isnan(other))


def described(run) -> tuple:
    info, data = run.info, run.data
    return (
        info.run_id, info.run_name, str(info.experiment_id), info.status, info.start_time, info.end_time,
        info.artifact_uri, dict(data.tags), dict(data.params),
        {key: "nan" if math.isnan(value) else value for key, value in data.metrics.items()},
    )


@pytest.mark.parametrize("tags", [
    {Tag.KIND: RunKind.SWEEP},
    {Tag.KIND: RunKind.SWEEP, Tag.SWEEP_NAME: "second"},
    {Tag.KIND: RunKind.TRIAL},
    {Tag.KIND: RunKind.TRIAL, Tag.SWEEP_NAME: "second"},
    {Tag.SWEEP_NAME: "nope"},
])
def test_both_readers_find_the_same_runs_in_the_same_order(uri, tags):
    sqlite, client = readers(uri)
    found = [described(run) for run in sqlite.find_runs(tags, newest_first=True)]
    assert found == [described(run) for run in client.find_runs(tags, newest_first=True)]
    if tags.get(Tag.KIND) == RunKind.TRIAL and Tag.SWEEP_NAME in tags:
        assert sorted(run[7][Tag.TRIAL_ID] for run in found) == ["c", "d"]


def test_both_readers_give_the_same_metric_histories(uri):
    sqlite, client = readers(uri)
    run_ids = [run.info.run_id for run in client.find_runs({Tag.KIND: RunKind.TRIAL})]
    for key in ("eval_loss", "train_tokens", "no_such_metric"):
        ours, theirs = sqlite.metric_histories(run_ids, key), client.metric_histories(run_ids, key)
        assert set(ours) == set(theirs) == set(run_ids)
        for run_id in run_ids:
            as_tuples = [(p.step, p.value, p.timestamp) for p in theirs[run_id]]
            assert len(ours[run_id]) == len(as_tuples)
            for point, (step, value, timestamp) in zip(ours[run_id], as_tuples):
                assert (point.step, point.timestamp) == (step, timestamp) and same(point.value, value)


def test_the_store_frames_are_the_same_through_either_reader(uri):
    fast = SweepStore(uri)
    assert isinstance(fast.runs, SqliteRunReader)
    slow = SweepStore(uri)
    slow.runs = ClientRunReader(slow.client)
    assert fast.sweeps().drop("started").equals(slow.sweeps().drop("started"))
    for name in ("first", "second"):
        trials = fast.trials(name)
        assert trials.equals(slow.trials(name))
        assert fast.history(name, trials=trials).sort("trial_number", "step").equals(
            slow.history(name, trials=trials).sort("trial_number", "step"))
        assert fast.record(name) == slow.record(name)
    assert fast.sweeps()["sweep"].to_list() == ["second", "first"]  # newest first


def test_a_file_that_is_no_mlflow_store_falls_back_to_the_client(tmp_path):
    import sqlite3

    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE runs (id INTEGER)").connection.commit()
    made = []
    reader = reader_for(f"sqlite:///{path}", client_factory=lambda: made.append(1) or "client")
    assert isinstance(reader, ClientRunReader) and made == [1]


def test_the_sweep_record_gives_the_rungs_the_sweep_ranked_at(tmp_path):
    # Spaced by 4 while keeping 1/2: rungs 10, 40 of 90 (by reduction_factor alone: 10, 20, 40, 80).
    uri = write_sweep(
        tmp_path, "spaced", {"a": ("completed", [(10, 2.0)])},
        training={"max_steps": 90}, early_stopping={"reduction_factor": 2, "rung_spacing": 4, "rungs": "all"},
    )
    assert SweepStore(uri).record("spaced").rungs == [10, 40]
    # One rung: the trials ranked at step 10 only (by reduction_factor alone: 10, 30).
    uri = write_sweep(
        tmp_path, "screen", {"a": ("completed", [(10, 2.0)])},
        training={"max_steps": 90}, early_stopping={"reduction_factor": 4, "rungs": 1},
    )
    assert SweepStore(uri).record("screen").rungs == [10]
