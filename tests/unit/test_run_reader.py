"""The store's run queries on a store the real tracker wrote (driven by hand, no Tune): the runs
found by their tags, newest first, with their tags, params, latest metrics (a NaN kept) and
metric histories, through MLflow's public client; a store that does not exist yet reads as
empty and is not created."""

import math

import pytest

from sweeper.track._book import SweepBook, TrialRecord
from sweeper.names import RunKind, Tag
from sweeper.spec._load import validate_spec
from sweeper.track._store import SweepStore
from sweeper.track._tracker import MlflowTracker
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
        "gone": ("pruned", [(10, 3.0)]),  # deleted (BookKeeper.lost_trials): the store does not see it
    }, discard=("gone",))


def reader(uri):
    return SweepStore(uri)


@pytest.mark.parametrize("tags, sweeps", [
    ({Tag.KIND: RunKind.SWEEP}, ["second", "first"]),
    ({Tag.KIND: RunKind.SWEEP, Tag.SWEEP_NAME: "second"}, ["second"]),
    ({Tag.SWEEP_NAME: "nope"}, []),
])
def test_runs_are_found_by_their_tags_newest_first(uri, tags, sweeps):
    runs = reader(uri).find_runs(tags, newest_first=True)
    assert [run.data.tags[Tag.SWEEP_NAME] for run in runs] == sweeps


def test_a_sweeps_trial_runs_come_with_their_tags_params_and_latest_metrics(uri):
    runs = reader(uri).find_runs({Tag.KIND: RunKind.TRIAL, Tag.SWEEP_NAME: "second"})
    by_trial = {run.data.tags[Tag.TRIAL_ID]: run for run in runs}
    assert sorted(by_trial) == ["c", "d"]  # "gone" was deleted (BookKeeper.lost_trials)
    c = by_trial["c"]
    assert c.data.params["training.learning_rate"] == "0.1"
    assert c.data.metrics["eval_loss"] == 1.9
    assert c.info.status == "FINISHED" and c.info.end_time >= c.info.start_time
    assert by_trial["d"].info.status == "FAILED"


def test_metric_histories_keep_every_step_and_a_nan(uri):
    runs = reader(uri).find_runs({Tag.KIND: RunKind.TRIAL, Tag.SWEEP_NAME: "second"})
    ids = {run.data.tags[Tag.TRIAL_ID]: run.info.run_id for run in runs}
    histories = reader(uri).metric_histories(list(ids.values()), "eval_loss")
    c = sorted((point.step, point.value) for point in histories[ids["c"]])
    assert [step for step, _ in c] == [10, 20, 30] and math.isnan(c[1][1]) and c[2][1] == 1.9
    assert histories[ids["d"]] == []


def test_a_store_that_does_not_exist_reads_as_empty_and_is_not_created(tmp_path):
    path = tmp_path / "mlflow.db"
    store = SweepStore(f"sqlite:///{path}")
    assert not store.exists and store.find_runs({Tag.KIND: RunKind.SWEEP}) == [] and store.sweeps().is_empty()
    assert not path.exists()


def test_the_store_frames_list_the_sweeps_newest_first(uri):
    store = SweepStore(uri)
    assert store.sweeps()["sweep"].to_list() == ["second", "first"]
    assert sorted(store.trials("first")["trial_id"].to_list()) == ["a", "b"]


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
