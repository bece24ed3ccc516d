"""The driver callback keeps the book first and then tells its listeners, in order, about
the record it updated; driven here as Tune drives it, with stand-ins for Tune's trials."""

from types import SimpleNamespace

from sweeper.run._driver import SweepDriver
from sweeper.track._book import SweepBook, TrialRecord
from sweeper.names import TrialState


class Recorder:
    """A listener that notes each event with what the book held when it was told."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def trial_started(self, record):
        self.log.append((self.name, "started", record.trial_id, record.state))

    def trial_result(self, record):
        self.log.append((self.name, "result", record.trial_id, record.history[-1]["eval_loss"]))

    def trial_paused(self, record):
        self.log.append((self.name, "paused", record.trial_id, record.pauses))

    def trial_finished(self, record):
        self.log.append((self.name, "finished", record.trial_id, record.state))


class OnlyFinished:
    def __init__(self, log):
        self.log = log

    def trial_finished(self, record):
        self.log.append(("janitor", "finished", record.trial_id, record.state))


def trial(trial_id, status="RUNNING", number=1):
    # Tune's experiment tag starts with the trial's number in the search.
    return SimpleNamespace(
        trial_id=trial_id, status=status, config={"training.learning_rate": 1e-3}, experiment_tag=f"{number}_lr=0.001", num_failures=0,
        run_metadata=SimpleNamespace(metric_n_steps={}),
    )


def test_the_book_is_updated_before_listeners_are_told_in_order():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    log = []
    driver = SweepDriver(book, [Recorder("tracker", log), OnlyFinished(log), Recorder("table", log)])
    a = trial("a")
    driver.on_trial_start(0, [a], a)
    driver.on_trial_result(0, [a], a, {"step": 10, "eval_loss": 3.0, "training_iteration": 1, "checkpoint_path": "/c/1"})
    a.status = "PAUSED"
    driver.on_step_begin(1, [a])
    driver.on_step_begin(2, [a])  # still paused: told once
    a.status = "RUNNING"
    driver.on_trial_start(3, [a], a)
    driver.on_trial_result(3, [a], a, {"step": 20, "eval_loss": 2.5})
    driver.on_trial_complete(4, [a], a)
    assert log == [
        ("tracker", "started", "a", "running"),
        ("table", "started", "a", "running"),
        ("tracker", "result", "a", 3.0),
        ("table", "result", "a", 3.0),
        ("tracker", "paused", "a", 1),
        ("table", "paused", "a", 1),
        ("tracker", "started", "a", "running"),
        ("table", "started", "a", "running"),
        ("tracker", "result", "a", 2.5),
        ("table", "result", "a", 2.5),
        ("tracker", "finished", "a", "pruned"),
        ("janitor", "finished", "a", "pruned"),
        ("table", "finished", "a", "pruned"),
    ]
    record = book.trials["a"]
    assert (record.number, record.step, record.checkpoint_path, record.pauses) == (1, 20, "/c/1", 1)
    assert record.history[0] == {"step": 10, "eval_loss": 3.0}  # Tune's own keys left out


def test_a_trial_restored_as_finished_is_not_started_again():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials["a"] = TrialRecord("a", 1, {}, state="completed", history=[{"step": 30, "eval_loss": 1.0}])
    log = []
    driver = SweepDriver(book, [Recorder("tracker", log)])
    driver.on_trial_start(0, [trial("a")], trial("a"))
    assert log == [] and book.trials["a"].state == "completed"


def test_a_report_the_book_has_already_is_not_told_again():
    """A trial whose final report the killed driver logged, but Tune had not saved, gives
    it again on resume: MLflow and the listeners get it once."""
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials["a"] = TrialRecord("a", 1, {}, state="stopped", history=[{"step": 20, "eval_loss": 2.0}, {"step": 30, "eval_loss": 1.0}])
    log = []
    driver = SweepDriver(book, [Recorder("tracker", log)])
    a = trial("a")
    driver.on_trial_start(0, [a], a)
    driver.on_trial_result(0, [a], a, {"step": 30, "eval_loss": 1.0, "checkpoint_path": "/c/30"})
    driver.on_trial_complete(1, [a], a)
    assert [entry[1] for entry in log] == ["started", "finished"]
    assert [report["step"] for report in book.trials["a"].history] == [20, 30]
    assert book.trials["a"].state == "completed" and book.trials["a"].checkpoint_path == "/c/30"


def test_unfinished_trials_that_tune_does_not_know_are_lost():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials = {
        "done": TrialRecord("done", 1, {}, state="completed", history=[{"step": 30, "eval_loss": 3.0}]),
        "resumed": TrialRecord("resumed", 2, {}, state="stopped"),
        # started by a driver that died before Tune saved its state
        "orphan": TrialRecord("orphan", 3, {}, state="stopped"),
    }
    driver = SweepDriver(book, [])
    assert driver.lost_trials() == []  # Tune has not stepped yet: nothing is known
    driver.on_step_begin(0, [trial("done", "TERMINATED"), trial("resumed")])
    assert [t.trial_id for t in driver.lost_trials()] == ["orphan"]


def test_trials_are_numbered_as_tune_counts_them_and_a_number_in_use_is_not_given_again():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    driver = SweepDriver(book, [])
    driver.on_trial_start(0, [], trial("b", number=2))
    driver.on_trial_start(0, [], trial("a", number=1))
    assert (book.trials["a"].number, book.trials["b"].number) == (1, 2)
    # Resumed after a driver was killed before Tune saved its state (Tune knows only a):
    # Tune counts from 2 again. b, unfinished, is lost and c takes its number; once b has
    # finished, MLflow keeps it as trial 2 and c gets the next number.
    resumed = SweepDriver(book, [])
    resumed.on_step_begin(0, [trial("a")])
    resumed.on_trial_start(0, [], trial("c", number=2))
    assert book.trials["c"].number == 2
    book.trials.pop("c")
    book.trials["b"].state = TrialState.COMPLETED
    resumed.on_trial_start(0, [], trial("c", number=2))
    assert book.trials["c"].number == 3


def test_the_searchers_marks_reach_the_record_before_any_listener_and_the_live_table_shows_them():
    """The driver reads each trial's marks from the searcher that suggested it, as Tune asks
    the searcher before it starts the trial: a repeat of an earlier sweep's run keeps its
    source, the first other trial is the one startup trial."""
    import optuna
    from rich.console import Console

    from sweeper.search._searcher import StepAwareOptunaSearch
    from sweeper.search._space import to_optuna_distributions
    from sweeper.search._warm_start import WarmStart
    from sweeper.spec._load import validate_spec
    from sweeper.track._console import trial_table
    from tests.conftest import REPO, small_sweep

    searcher = StepAwareOptunaSearch(
        space=to_optuna_distributions(validate_spec(small_sweep("x"), base_dir=REPO)), metric="eval_loss",
        mode="min", sampler=optuna.samplers.RandomSampler(seed=0), max_steps=30, startup_trials=1,
        warm_start=WarmStart(first_configs=[({"training.learning_rate": 1e-3}, "earlier/t1")], repeats={"earlier/t1"}),
    )
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    seen = []

    class Tracker:
        def trial_started(self, record):
            seen.append((record.trial_id, record.startup_trial, record.warm_start))

    driver = SweepDriver(book, [Tracker()], trial_marks=searcher.marks)
    for number, trial_id in enumerate("abc", start=1):
        searcher.suggest(trial_id)
        driver.on_trial_start(0, [], trial(trial_id, number=number))
    assert seen == [("a", False, "earlier/t1"), ("b", True, None), ("c", False, None)]

    console = Console(width=200, record=True)
    console.print(trial_table(book, ["training.learning_rate"]))
    header, *rows = [cells(line) for line in console.export_text().splitlines() if line[:1] in "┃│"]
    assert header[-1] == "startup trial"
    assert [(row[0], row[-1]) for row in rows] == [("1", "-"), ("2", "yes"), ("3", "-")]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.replace("┃", "│").strip("│").split("│")]


def test_the_live_table_has_no_startup_column_when_no_trial_is_one():
    from rich.console import Console

    from sweeper.track._console import trial_table

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    driver = SweepDriver(book, [])
    driver.on_trial_start(0, [], trial("a"))
    console = Console(width=200, record=True)
    console.print(trial_table(book, ["training.learning_rate"]))
    assert "startup" not in console.export_text()


def test_a_restored_trial_pruned_without_running_again_is_not_charged_for_the_wait():
    """`sweep resume` rebuilds an unfinished trial as stopped, its earlier wall time kept;
    pruned at its rung before it runs again, it spent nothing in this driver."""
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    book.trials["a"] = TrialRecord(
        "a", 1, {}, state="stopped", history=[{"step": 10, "eval_loss": 3.0}],
        started_at=1000.0, ended_at=1000.0, prior_wall_seconds=5.0,
    )
    book.trials["b"] = TrialRecord("b", 2, {}, state="stopped", started_at=1000.0, ended_at=1000.0, prior_wall_seconds=4.0)
    driver = SweepDriver(book, [])
    driver.on_trial_complete(0, [trial("a", "TERMINATED")], trial("a", "TERMINATED"))
    assert (book.trials["a"].state, book.trials["a"].wall_seconds) == ("pruned", 5.0)
    b = trial("b", number=2)
    driver.on_trial_start(1, [b], b)  # runs again: its clock goes on from its 4 s
    book.trials["b"].started_at -= 3.0
    driver.on_trial_complete(2, [b], b)
    assert 7.0 <= book.trials["b"].wall_seconds < 7.5


def test_a_trial_that_fails_before_it_starts_is_recorded_as_started_and_failed(monkeypatch):
    """Tune calls back on_trial_error without on_trial_start when a trial's actor never
    ran (the driver once ended in a KeyError there)."""
    from sweeper.run import _driver as driver_module

    monkeypatch.setattr(driver_module, "trial_error", lambda trial: RuntimeError("The actor never ran"))
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    log = []
    driver = SweepDriver(book, [Recorder("tracker", log)])
    a = trial("a", status="ERROR", number=2)
    driver.on_trial_error(0, [a], a)
    assert log == [("tracker", "started", "a", "running"), ("tracker", "finished", "a", "failed")]
    record = book.trials["a"]
    assert record.number == 2 and record.state == TrialState.FAILED and "The actor never ran" in record.error


def test_a_trial_whose_checkpoint_found_the_disk_full_is_stopped_not_failed_and_the_sweep_stops_once(monkeypatch):
    import errno
    import signal

    from sweeper.run import _driver as driver_module

    monkeypatch.setattr(driver_module, "trial_error", lambda trial: OSError(errno.ENOSPC, "No space left on device"))
    signals = []
    monkeypatch.setattr(driver_module.signal, "raise_signal", signals.append)
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    log = []
    driver = SweepDriver(book, [Recorder("tracker", log)])
    a, b = trial("a", number=1), trial("b", number=2)
    for t in (a, b):
        driver.on_trial_start(0, [a, b], t)
        driver.on_trial_error(0, [a, b], t)
    assert signals == [signal.SIGINT]  # Tune's own stop, asked once
    assert driver.stopped_for_disk_full
    assert [event for _, event, _, _ in log] == ["started", "started"]  # not told finished: unfinished
    for record in book.trials.values():
        assert not record.finished and record.error == driver_module.DISK_FULL
        record.state = TrialState.STOPPED  # as finish_sweep ends it
        assert record.status_text == "stopped: disk full"
