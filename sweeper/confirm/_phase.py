"""The confirmation phase of a sweep (search.confirm), run by the launch once the search's
Tune run has ended: a second Tune run of the same trainable over fixed configs, the
search's best `top` configs each with `seeds` new values of `training.seed`, trained to
`training.max_steps` (no scheduler: nothing stops them early but a budget cap).

- Tune's public `Searcher` interface suggests the configs in order (`FixedConfigs`); the
  sweep's Optuna searcher is not in this run, so the study holds the search's trials only.
- The trials go through the sweep's own Tune callbacks: the driver books them (each marked
  with the search trial it confirms: `TrialRecord.confirms`, the MLflow tag
  `sweeper.confirms`), MLflow tracks them as the sweep's child runs, the live table shows
  them, and the budget's guard counts them; its searcher wrapper and stopper hold and stop
  them at a cap, as in the search.
- Once they end, the book's confirmation is the table of `sweeper.confirm._select.confirm`
  and the book's best trial is the winner's best rerun (`SweepBook.chosen`).
- `sweep resume`: the reruns that finished stay; those an earlier driver left unfinished
  are discarded (their MLflow runs deleted) and run again from step 0, as new trials.
"""

from __future__ import annotations

import functools
import logging
import pickle
import time

from ray import tune
from ray.tune.search import Searcher

from sweeper.cluster import storage
from sweeper.confirm._select import Confirmation
from sweeper.confirm._table import from_book, reruns_to_run

logger = logging.getLogger(__name__)

__all__ = ["CONFIRMS_ATTR", "FixedConfigs", "confirm_best"]

# The mark a confirmation trial carries to the driver (SweepDriver.trial_marks): the number
# of the search trial it reruns.
CONFIRMS_ATTR = "confirms"


class FixedConfigs(Searcher):
    """Suggests each of `points` ((search trial number, config) pairs) once, in order, then
    says FINISHED; `marks(trial_id)` tells the driver which search trial a trial confirms."""

    def __init__(self, points: list[tuple[int, dict]]):
        super().__init__()
        self.points = list(points)
        self.given: dict[str, int] = {}

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        if not self.points:
            return Searcher.FINISHED
        confirms, config = self.points.pop(0)
        self.given[trial_id] = confirms
        return dict(config)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass

    def marks(self, trial_id: str) -> dict:
        return {CONFIRMS_ATTR: self.given[trial_id]} if trial_id in self.given else {}

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as file:
            pickle.dump((self.points, self.given), file)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as file:
            self.points, self.given = pickle.load(file)


def confirm_trial_name(sweep_name: str, trial) -> str:
    """Tune's name for a confirmation trial (the dashboard's Repr of its workers)."""
    return f"sweep-{sweep_name}-confirm-{trial.trial_id}"


def confirm_best(setup, trainable, watch, tracker, budget) -> Confirmation | None:
    """After the search's Tune run (`setup`: the launch's; `watch`: its driver, table and
    callbacks; `budget`: its SweepBudget): the reruns of the best configs, then the
    confirmation on the book (`book.confirmation`, and `book.chosen` once there is a
    winner). Nothing runs when the search was stopped before its end, or a budget cap is
    spent (one line says so); returns the confirmation, None when nothing was confirmed."""
    spec, plan, book = setup.spec, setup.plan, tracker.book
    # Reruns an earlier driver left unfinished start again (sweep resume).
    tracker.discard_trials([t for t in book.trials.values() if t.confirms is not None and not t.finished])
    if book.unfinished(plan.trials) and not budget.cut():
        return None  # the search was stopped: sweep resume finishes it, then confirms
    confirmation = from_book(book, spec)
    book.confirmation = confirmation
    if len(confirmation.rows) < spec.search.confirm.top:
        confirmation.notes.append(
            f"Confirmation: {len(confirmation.rows)} config(s) of the search have a value (search.confirm.top: "
            f"{spec.search.confirm.top}); " + ("those are confirmed" if confirmation.rows else "nothing to confirm"))
    points = reruns_to_run(confirmation, book)
    cap = budget.guard.reached() if budget.guard is not None else None
    if cap is not None and points:
        confirmation.notes.append(f"Confirmation skipped: budget.{cap} was spent by the search; the best trial is "
                                  "the search's")
        return _settled(confirmation, book)
    if points:
        _run(spec, plan, trainable, watch, budget, book, points)
    return _settled(from_book(book, spec), book, confirmation.notes)


def _settled(confirmation: Confirmation, book, notes: list[str] | None = None) -> Confirmation:
    confirmation.notes[:0] = [n for n in (notes or []) if n not in confirmation.notes]
    book.confirmation = confirmation
    book.chosen = confirmation.promoted.trial_id if confirmation.promoted is not None else None
    return confirmation


def _run(spec, plan, trainable, watch, budget, book, points: list[tuple[int, dict]]) -> None:
    """The reruns as a Tune run of their own in the sweep's storage (`confirm-<time>`), with
    the sweep's callbacks, inside the budget's caps."""
    searcher = FixedConfigs(points)
    search_alg, stopper = budget.guarded(searcher, None, book)
    driver = watch.driver
    search_marks, driver.trial_marks = driver.trial_marks, searcher.marks
    logger.info("Confirmation: %d rerun(s) of %d config(s) to step %d", len(points),
                len({n for n, _ in points}), spec.training.max_steps)
    storage_filesystem, storage_path = storage.filesystem(spec.storage_uri)
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=search_alg, num_samples=len(points), max_concurrent_trials=plan.concurrent_trials,
            reuse_actors=spec.resources.in_trial_process, trial_name_creator=functools.partial(confirm_trial_name, spec.name),
        ),
        run_config=tune.RunConfig(
            name=f"confirm-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=storage_path,
            storage_filesystem=storage_filesystem, callbacks=watch.callbacks, verbose=0, stop=stopper,
            failure_config=tune.FailureConfig(max_failures=spec.search.max_failures),
        ),
    )
    try:
        tuner.fit()
    finally:
        driver.trial_marks = search_marks
