from sweeper.progress import AdapterJanitor, SweepBook, TrialRecord, error_reason


def record(tmp_path, number, status, loss, step=30):
    checkpoint = tmp_path / f"trial{number}" / "checkpoint"
    checkpoint.mkdir(parents=True)
    return TrialRecord(f"t{number}", number, {}, status=status, history=[{"step": step, "eval_loss": loss}],
                       checkpoint_path=str(checkpoint))


def test_janitor_keeps_the_best_k_finished_adapters(tmp_path):
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    trials = [
        record(tmp_path, 1, "completed", 3.0),
        record(tmp_path, 2, "completed", 2.0),
        record(tmp_path, 3, "pruned", 1.0, step=10),  # low early loss, but pruned: ranks after completed
        record(tmp_path, 4, "failed", 0.5),
        record(tmp_path, 5, "running", 0.1),
    ]
    book.trials = {t.trial_id: t for t in trials}
    AdapterJanitor(book, keep_best=2)._sweep()
    kept = {t.number for t in trials if (tmp_path / f"trial{t.number}" / "checkpoint").exists()}
    assert kept == {1, 2, 5}


def test_book_best_and_unfinished():
    book = SweepBook(metric="eval_accuracy", goal="maximize", max_steps=30)
    book.trials = {
        "a": TrialRecord("a", 1, {}, status="completed", history=[{"step": 30, "eval_accuracy": 0.6}]),
        "b": TrialRecord("b", 2, {}, status="completed", history=[{"step": 30, "eval_accuracy": 0.8}]),
        "c": TrialRecord("c", 3, {}, status="pruned", history=[{"step": 10, "eval_accuracy": 0.9}]),
    }
    assert book.best().trial_id == "b"
    assert not book.unfinished(3) and book.unfinished(4)
    book.trials["b"].status = "running"
    assert book.unfinished(3)


def test_error_reason_is_the_last_error_line():
    trace = "Traceback (most recent call last):\n  File x\nRuntimeError: chaos.fault: injected exception at step 15\n"
    assert error_reason(trace) == "RuntimeError: chaos.fault: injected exception at step 15"
    assert error_reason(None).startswith("unknown error")


def test_error_reason_sees_through_ray_wrappers():
    trace = (
        "ray.train.WorkerGroupError: Training failed due to worker errors:\n[Rank 0 Error Snippet]:\n"
        "trainables.common.NonFiniteLossError: loss is nan at step 15; not training on it\n"
    )
    assert error_reason(trace).startswith("trainables.common.NonFiniteLossError: loss is nan at step 15")
    died = "ray.train.WorkerGroupError: Training failed:\nThe actor is dead because its worker process has died.\n"
    assert error_reason(died).startswith("a worker process died")


def test_unfinished_trials_that_tune_does_not_know_are_lost():
    from types import SimpleNamespace

    from sweeper.progress import BookKeeper

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials = {
        "done": TrialRecord("done", 1, {}, status="completed", history=[{"step": 30, "eval_loss": 3.0}]),
        "resumed": TrialRecord("resumed", 2, {}, status="stopped"),
        # started by a driver that died before Tune saved its state
        "orphan": TrialRecord("orphan", 3, {}, status="stopped"),
    }
    keeper = BookKeeper(book)
    assert keeper.lost_trials() == []  # Tune has not stepped yet: nothing is known
    keeper.on_step_begin(0, [SimpleNamespace(trial_id="done", status="TERMINATED"), SimpleNamespace(trial_id="resumed", status="RUNNING")])
    assert [t.trial_id for t in keeper.lost_trials()] == ["orphan"]
