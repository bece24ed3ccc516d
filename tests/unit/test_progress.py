from sweeper.track._book import SweepBook, TrialRecord
from sweeper.names import TrialState
from sweeper.run._janitor import AdapterJanitor, error_reason


def record(tmp_path, number, state, loss, step=30):
    checkpoint = tmp_path / f"trial{number}" / "checkpoint"
    checkpoint.mkdir(parents=True)
    return TrialRecord(f"t{number}", number, {}, state=state, history=[{"step": step, "eval_loss": loss}],
                       checkpoint_path=str(checkpoint))


def test_janitor_keeps_the_best_k_finished_adapters(tmp_path):
    """Told (as the driver tells its listeners) that a trial finished, the janitor removes
    the adapters of every finished trial outside the best keep_best."""
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    trials = [
        record(tmp_path, 1, "completed", 3.0),
        record(tmp_path, 2, "completed", 2.0),
        record(tmp_path, 3, "pruned", 1.0, step=10),  # low early loss, but pruned: ranks after completed
        record(tmp_path, 4, "failed", 0.5),
        record(tmp_path, 5, "running", 0.1),
    ]
    book.trials = {t.trial_id: t for t in trials}
    AdapterJanitor(book, keep_best=2).trial_finished(book.trials["t4"])  # the last to finish
    kept = {t.number for t in trials if (tmp_path / f"trial{t.number}" / "checkpoint").exists()}
    assert kept == {1, 2, 5}


def test_the_janitor_deletes_each_adapter_once_as_trials_finish(tmp_path, monkeypatch):
    """A sweep of many trials: each finish deletes only what newly fell out of the best
    (it once deleted every earlier one again: thousands of storage calls per finish)."""
    import sweeper.run._janitor as janitor_module

    deleted = []
    monkeypatch.setattr(janitor_module.storage, "delete", deleted.append)
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    janitor = AdapterJanitor(book, keep_best=2)
    for number in range(1, 21):
        trial = record(tmp_path, number, "completed", 10.0 - number / 10)  # each better than the last
        book.trials[trial.trial_id] = trial
        janitor.trial_finished(trial)
    assert len(deleted) == len(set(deleted)) == 18
    assert str(tmp_path / "trial19" / "checkpoint") not in deleted and str(tmp_path / "trial20" / "checkpoint") not in deleted


def test_book_best_and_unfinished():
    book = SweepBook(metric="eval_accuracy", goal="maximize", max_steps=30)
    book.trials = {
        "a": TrialRecord("a", 1, {}, state="completed", history=[{"step": 30, "eval_accuracy": 0.6}]),
        "b": TrialRecord("b", 2, {}, state="completed", history=[{"step": 30, "eval_accuracy": 0.8}]),
        "c": TrialRecord("c", 3, {}, state="pruned", history=[{"step": 10, "eval_accuracy": 0.9}]),
    }
    assert book.best().trial_id == "b"
    assert not book.unfinished(3) and book.unfinished(4)
    book.trials["b"].state = "running"
    assert book.unfinished(3)


def ray_wrapped(error):
    """`error` as Tune pickles a trial's failure: a RayTaskError (an instance of the cause's
    class too) around what the trial's fit() raised, through cloudpickle."""
    import ray.cloudpickle
    from ray.exceptions import RayTaskError

    wrapped = RayTaskError("run_trial", "Traceback ...", error).as_instanceof_cause()
    return ray.cloudpickle.loads(ray.cloudpickle.dumps(wrapped))


def test_error_reason_is_the_training_loops_own_error():
    from ray.train import WorkerGroupError

    from trainables.common import NonFiniteLossError

    raised = RuntimeError("chaos.fault: injected exception at step 15")
    assert error_reason(ray_wrapped(WorkerGroupError("Training failed", {0: raised}))) == (
        "RuntimeError: chaos.fault: injected exception at step 15"
    )
    nan = NonFiniteLossError("loss is nan at step 15; not training on it")
    failures = {1: ValueError("rank 1"), 0: nan}
    assert error_reason(ray_wrapped(WorkerGroupError("Training failed", failures))) == (
        "NonFiniteLossError: loss is nan at step 15; not training on it"
    )
    assert error_reason(ValueError("bad config\nmore")) == "ValueError: bad config"
    assert error_reason(None).startswith("unknown error")


def test_error_reason_of_a_worker_that_died():
    from ray.exceptions import ActorDiedError
    from ray.train import WorkerGroupError

    class HealthCheckFailed(Exception):  # Train's own wrapper keeps the actor's error here
        def __init__(self, failure):
            self.health_check_failure = failure

    died = WorkerGroupError("Training failed", {0: HealthCheckFailed(ActorDiedError())})
    assert error_reason(ray_wrapped(died)) == "a worker process died (killed, out of memory, or crashed)"


def test_a_state_is_the_enum_and_status_text_its_words():
    record = TrialRecord("t", 1, {}, history=[{"step": 10, "eval_loss": 4.0}])
    assert record.state is TrialState.RUNNING and not record.finished
    record.state = "pruned"  # as Tune's callbacks and MLflow's tags spell it
    assert record.state is TrialState.PRUNED and record.finished
    assert record.status_text == "pruned at step 10"
    record.state, record.error = TrialState.FAILED, "RuntimeError: boom"
    assert record.status_text == "failed: RuntimeError: boom"
    record.state, record.error = TrialState.STOPPED, None  # a user's stop
    assert record.status_text == "stopped" and not record.finished
    record.error = "no space left on device"  # a fault's stop says which
    assert record.status_text == "stopped: no space left on device"


def test_best_skips_trials_without_a_finite_value_and_counts_by_state():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials = {
        "nan": TrialRecord("nan", 1, {}, state="completed", history=[{"step": 30, "eval_loss": float("nan")}]),
        "none": TrialRecord("none", 2, {}, state="completed", history=[{"step": 30}]),
        "good": TrialRecord("good", 3, {}, state="completed", history=[{"step": 30, "eval_loss": 3.0}]),
        "early": TrialRecord("early", 4, {}, state="running", history=[{"step": 10, "eval_loss": 1.0}]),
    }
    assert book.best().trial_id == "good"
    assert book.best(states=(TrialState.COMPLETED, TrialState.RUNNING)).trial_id == "early"
    assert book.count(TrialState.COMPLETED) == 3 and book.count("running") == 1
