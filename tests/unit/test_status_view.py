"""`sweep status` on a large sweep: the running trials and the best ones, and a line
saying what was left out and how to see it all (sweeper/views.py)."""

from types import SimpleNamespace

import polars as pl

from sweeper.names import Tag, TrialState
from sweeper.views import ALL_TRIALS_UP_TO, BEST_SHOWN, trials_shown


def sweep(trials: int, goal: str = "minimize"):
    states = [TrialState.RUNNING if n % 100 == 7 else TrialState.PRUNED if n % 3 else TrialState.COMPLETED
              for n in range(1, trials + 1)]
    frame = pl.DataFrame({
        "trial_number": list(range(1, trials + 1)),
        "state": [str(s) for s in states],
        # Trial n's metric is n: the best are the first (minimize) or the last (maximize).
        "metric": [None if s == TrialState.RUNNING else float(n) for n, s in zip(range(1, trials + 1), states)],
    })
    run = SimpleNamespace(data=SimpleNamespace(tags={Tag.METRIC: "eval_loss", Tag.GOAL: goal, Tag.SWEEP_NAME: "big"}))
    return run, frame


def test_a_small_sweep_shows_every_trial():
    run, frame = sweep(ALL_TRIALS_UP_TO)
    shown, note = trials_shown(run, frame)
    assert shown.equals(frame) and note is None


def test_a_large_sweep_shows_the_running_trials_and_the_best_and_says_so():
    run, frame = sweep(2000)
    shown, note = trials_shown(run, frame)
    running = [n for n in range(1, 2001) if n % 100 == 7]
    best = [n for n in range(1, 2001) if n % 100 != 7][:BEST_SHOWN]
    assert shown["trial_number"].to_list() == sorted(running + best)
    assert note.startswith(f"{len(running) + BEST_SHOWN} of 2000 trials shown (")
    assert "the running ones and the 20 best by eval_loss" in note and note.endswith("sweep status big --all")
    every, no_note = trials_shown(run, frame, show_all=True)
    assert every.equals(frame) and no_note is None


def test_the_best_follow_the_goal():
    run, frame = sweep(2000, goal="maximize")
    shown, _ = trials_shown(run, frame)
    finished = shown.filter(pl.col("state") != str(TrialState.RUNNING))
    assert finished["trial_number"].to_list() == [n for n in range(1, 2001) if n % 100 != 7][-BEST_SHOWN:]
