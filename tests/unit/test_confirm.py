"""search.confirm: which configs are confirmed, the mean and 95% interval over the new
seeds, the winner by mean (not by the search's single value), the reruns still to run on
resume, the keyed lines for bad settings, and the forecast that counts the reruns."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import polars as pl
import pytest

from sweeper.confirm import Candidate, Rerun, confirm, from_trials, mean_interval, new_seeds, t_quantile, top_configs
from sweeper.confirm import reruns_to_run
from sweeper.errors import UserError
from sweeper.names import TrialState
from sweeper.spec._load import validate_spec
from sweeper.track import SweepBook, TrialRecord
from tests.conftest import REPO, small_sweep

LR = "training.learning_rate"


def lr(value: float) -> dict:
    return {LR: value}


def test_the_top_configs_are_the_best_values_under_the_goal_furthest_step_first():
    trials = [Candidate(1, lr(1e-3), 2.0, 30), Candidate(2, lr(2e-3), 1.5, 30), Candidate(3, lr(3e-3), 1.0, 10),
              Candidate(4, lr(4e-3), 1.8, 30), Candidate(5, lr(5e-3), None, 30), Candidate(6, lr(6e-3), math.nan, 30)]
    assert [c.number for c in top_configs(trials, "minimize", 2)] == [2, 4]
    assert [c.number for c in top_configs(trials, "maximize", 2)] == [1, 4]
    # A trial early stopping left at a lower rung comes after every trial that reached max_steps.
    assert [c.number for c in top_configs(trials, "minimize", 4)] == [2, 4, 1, 3]


def test_ties_go_to_the_earlier_trial_and_a_config_tried_twice_counts_once():
    trials = [Candidate(3, lr(1e-3), 1.0, 30), Candidate(1, lr(2e-3), 1.0, 30), Candidate(2, lr(1e-3), 0.9, 30),
              Candidate(4, lr(4e-3), 1.2, 30)]
    # Trial 2 and 3 are one config: it counts once, by its best trial (2); 1 beats 3 on the tie.
    assert [c.number for c in top_configs(trials, "minimize", 3)] == [2, 1, 4]


def test_the_new_seeds_are_distinct_and_none_is_the_searchs_own():
    assert new_seeds(0, 3) == [1, 2, 3]
    assert new_seeds(2**32 - 2, 3) == [2**32 - 1, 0, 1]  # past the largest seed: from 0
    assert len(set(new_seeds(7, 5))) == 5 and 7 not in new_seeds(7, 5)


def test_the_mean_and_its_95_percent_t_interval():
    mean, half = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)  # t(0.975, 2) x sd / sqrt(n)
    assert mean_interval([1.5, 2.5]) == (2.0, pytest.approx(12.706 * math.sqrt(0.5) / math.sqrt(2)))
    assert mean_interval([4.0])[1] is None


def test_the_t_table_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 10, 29, 30, 31, 40, 60, 120, 1000):
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-3), df
    with pytest.raises(ValueError):
        t_quantile(0)


def reruns(number: int, values: dict[int, float | None], start: int) -> list[Rerun]:
    return [Rerun(number, seed, value, start + i, f"t{start + i}") for i, (seed, value) in enumerate(values.items())]


def test_the_config_best_on_its_search_value_but_worse_by_mean_loses():
    # Trial 1 had the lucky seed in the search (1.00); over the new seeds trial 2 is better.
    search = [Candidate(1, lr(1e-3), 1.00, 20), Candidate(2, lr(2e-3), 1.10, 20), Candidate(3, lr(3e-3), 1.50, 20)]
    rows = reruns(1, {1: 1.30, 2: 1.25, 3: 1.35}, 4) + reruns(2, {1: 1.12, 2: 1.08, 3: 1.15}, 7)
    confirmation = confirm(search, rows, "eval_loss", "minimize", top=2, seeds=[1, 2, 3])
    assert [row.candidate.number for row in confirmation.rows] == [1, 2]  # search order, best first
    assert confirmation.winner.candidate.number == 2
    assert confirmation.winner.mean == pytest.approx((1.12 + 1.08 + 1.15) / 3)
    low, high = confirmation.winner.low, confirmation.winner.high
    assert low < confirmation.winner.mean < high
    assert confirmation.changed_winner
    # Promoted: the winner's rerun with the best value (seed 2, trial 8).
    assert (confirmation.promoted.number, confirmation.promoted.seed) == (8, 2)
    assert confirmation.missing == []


def test_under_maximize_the_higher_mean_wins_and_ties_keep_the_better_search_value():
    search = [Candidate(1, lr(1e-3), 0.9, 20), Candidate(2, lr(2e-3), 0.8, 20)]
    confirmation = confirm(search, reruns(1, {1: 0.5, 2: 0.7}, 3) + reruns(2, {1: 0.6, 2: 0.6}, 5),
                           "gen_exact_match", "maximize", top=2, seeds=[1, 2])
    assert confirmation.winner.candidate.number == 1  # the same mean (0.6): trial 1 was better in the search
    assert not confirmation.changed_winner
    assert confirmation.promoted.seed == 2


def test_a_config_without_a_value_at_every_seed_cannot_win():
    search = [Candidate(1, lr(1e-3), 1.0, 20), Candidate(2, lr(2e-3), 1.1, 20)]
    rows = reruns(1, {1: 0.5, 2: None}, 3) + reruns(2, {1: 1.0, 2: 1.1}, 5)
    confirmation = confirm(search, rows, "eval_loss", "minimize", top=2, seeds=[1, 2])
    assert confirmation.winner.candidate.number == 2
    assert [(m.confirms, m.seed) for m in confirmation.missing] == [(1, 2)]
    assert confirmation.rows[0].mean == 0.5 and confirmation.rows[0].low is None  # one value: no interval
    none_whole = confirm(search, reruns(1, {1: 0.5}, 3), "eval_loss", "minimize", top=2, seeds=[1, 2])
    assert none_whole.winner is None and none_whole.promoted is None


def record(number: int, params: dict, value: float, state=TrialState.COMPLETED, confirms=None, step=20) -> TrialRecord:
    return TrialRecord(trial_id=f"t{number}", number=number, params=params, state=state,
                       history=[{"step": step, "eval_loss": value}], confirms=confirms)


def test_the_book_best_is_the_search_best_until_confirmation_chooses():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=20)
    for r in (record(1, lr(1e-3), 1.0), record(2, lr(2e-3), 1.1),
              record(3, {**lr(1e-3), "training.seed": 1}, 0.2, confirms=1)):
        book.trials[r.trial_id] = r
    assert book.best().number == 1  # the rerun's 0.2 is no search value
    book.chosen = "t3"
    assert book.best().number == 3


def test_on_resume_only_the_reruns_not_finished_run_again_with_the_values_typed():
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=20)
    # As MLflow gives them back to a resumed driver: text.
    for r in (record(1, {LR: "0.001", "lora.r": "8"}, 1.0), record(2, {LR: "0.002", "lora.r": "4"}, 1.1),
              record(3, {LR: "0.001", "lora.r": "8", "training.seed": "1"}, 1.2, confirms=1)):
        book.trials[r.trial_id] = r
    confirmation = confirm([Candidate(1, book.trials["t1"].params, 1.0, 20), Candidate(2, book.trials["t2"].params, 1.1, 20)],
                           [], "eval_loss", "minimize", top=2, seeds=[1, 2])
    points = reruns_to_run(confirmation, book)
    assert points == [(1, {LR: 0.001, "lora.r": 8, "training.seed": 2}),
                      (2, {LR: 0.002, "lora.r": 4, "training.seed": 1}),
                      (2, {LR: 0.002, "lora.r": 4, "training.seed": 2})]


def test_the_store_frame_gives_the_same_confirmation():
    rows = [
        (1, None, {LR: "0.001"}, 1.00), (2, None, {LR: "0.002"}, 1.10), (3, None, {LR: "0.003"}, 1.50),
        (4, 1, {LR: "0.001", "training.seed": "1"}, 1.30), (5, 1, {LR: "0.001", "training.seed": "2"}, 1.20),
        (6, 2, {LR: "0.002", "training.seed": "1"}, 1.12), (7, 2, {LR: "0.002", "training.seed": "2"}, 1.08),
    ]
    frame = pl.DataFrame(
        [{"trial_number": n, "trial_id": f"t{n}", "confirms": c, "params": json.dumps(p), "metric": v,
          "state": "completed", "steps": 20} for n, c, p, v in rows],
        schema={"trial_number": pl.Int64, "trial_id": pl.String, "confirms": pl.Int64, "params": pl.String,
                "metric": pl.Float64, "state": pl.String, "steps": pl.Int64},
    )
    confirmation = from_trials(frame, "eval_loss", "minimize")
    assert confirmation.seeds == [1, 2]
    assert [row.candidate.number for row in confirmation.rows] == [1, 2]
    assert confirmation.winner.candidate.number == 2 and confirmation.promoted.number == 7
    assert from_trials(frame.filter(pl.col("confirms").is_null()), "eval_loss", "minimize") is None


def lines_of(raw: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        validate_spec(raw, base_dir=REPO)
    return caught.value.lines


@pytest.mark.parametrize("search, key", [
    ({"confirm": {"top": 0, "seeds": 2}}, "search.confirm.top:"),
    ({"confirm": {"top": 2, "seeds": 1}}, "search.confirm.seeds: must be >= 2"),
    ({"confirm": {"top": 5, "seeds": 2}}, "search.confirm.top: must be <= search.num_trials (4)"),
    ({"confirm": {"top": 2, "seeds": 2, "trials": 3}}, "search.confirm.trials"),
    ({"confirm": {"top": 2, "seeds": 2}, "parameters": {"training.seed": {"distribution": "categorical", "values": [1, 2]}}},
     "search.parameters.training.seed: search.confirm sets training.seed"),
])
def test_bad_confirm_settings_are_one_keyed_line_each(search, key):
    lines = lines_of(small_sweep("c", search=search))
    assert len(lines) == 1 and lines[0].startswith(key), lines


def test_confirm_without_a_trial_count_is_refused():
    raw = small_sweep("c", search={"confirm": {"top": 1, "seeds": 2}}, budget={"max_steps": 300})
    raw["search"].pop("num_trials")
    lines = lines_of(raw)
    assert len(lines) == 1 and lines[0].startswith("search.confirm: a sweep without search.num_trials"), lines


def test_the_forecast_counts_top_times_seeds_trials_to_max_steps():
    from sweeper.plan import ClusterResources, make_plan
    from sweeper.plan._command import sweep_forecast

    cluster = ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0)
    plain = sweep_forecast(make_plan(validate_spec(small_sweep("c"), base_dir=REPO), cluster), None)
    spec = validate_spec(small_sweep("c", search={"confirm": {"top": 2, "seeds": 3}}), base_dir=REPO)
    confirmed = sweep_forecast(make_plan(spec, cluster), None)
    assert confirmed.confirm_trials == 6
    assert confirmed.expected.steps - plain.expected.steps == 6 * spec.training.max_steps
    assert confirmed.worst.steps - plain.worst.steps == 6 * spec.training.max_steps
    assert confirmed.expected.usd > plain.expected.usd and confirmed.expected.wall_seconds > plain.expected.wall_seconds


def test_best_config_yaml_says_confirmation_chose_it():
    search = [Candidate(1, lr(1e-3), 1.0, 20), Candidate(2, lr(2e-3), 1.1, 20)]
    confirmation = confirm(search, reruns(1, {1: 1.3, 2: 1.2}, 3) + reruns(2, {1: 1.0, 2: 1.1}, 5),
                           "eval_loss", "minimize", top=2, seeds=[1, 2])
    line = confirmation.picked_by("s")
    assert line.startswith("# Chosen by confirmation (search.confirm)") and "mean eval_loss (minimize) over 2 new seeds" in line
    assert "trial 2's" in line and "trial 5, its rerun with seed 1" in line


def test_the_report_shows_the_confirmation_table_and_the_winner_by_mean():
    from dataclasses import replace

    from reports.build import build_report
    from reports.markdown import render_markdown
    from tests.unit.test_reports import make_sweep

    data = make_sweep()
    reruns = [(7, 3, 1, 1.9), (8, 3, 2, 1.7), (9, 5, 1, 1.4), (10, 5, 2, 1.65)]
    base = {row["trial_number"]: row for row in data.trials.to_dicts()}
    rows = [{**row, "confirms": None} for row in base.values()]
    for number, confirms, seed, value in reruns:
        params = {**json.loads(base[confirms]["params"]), "training.seed": str(seed)}
        rows.append({**base[confirms], "trial_number": number, "trial_id": f"t{number}", "confirms": confirms,
                     "metric": value, "params": json.dumps(params)})
    report = build_report([replace(data, trials=pl.DataFrame(rows))])
    text = render_markdown(report, {})
    section = text.split("### Confirmation", 1)[1].split("###", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| ")]
    assert table[0].split(" | ")[-4:] == ["seed 2", "mean", "95% interval", "winner |"]
    winners = [line for line in table if "by mean" in line]
    assert len(winners) == 1 and winners[0].startswith("| 5 |")
    assert "Winner by mean: trial 5's config (eval_loss 1.5250 over 2 seeds)" in section
    assert "the search's single best, trial 3, lost on the mean" in section
    assert "Confirmed by the mean over 2 seeds: trial 5's config" in text
    # The search's best (the headline's) leaves the reruns out: trial 3 (1.5), not rerun 9 (1.4).
    assert "Best: trial 3" in text


def test_the_best_config_of_a_confirmed_sweep_is_one_run_that_confirms_nothing():
    from sweeper.spec import single_run_spec

    spec = validate_spec(small_sweep("c", search={"confirm": {"top": 2, "seeds": 2}}), base_dir=REPO)
    single = single_run_spec(spec, {LR: "0.001", "training.seed": "2"}, name="c-best")
    assert single.search.confirm is None and single.search.num_trials == 1 and single.training.seed == 2


def test_the_live_estimate_counts_the_reruns_still_to_train():
    from sweeper.budget._live_forecast import Measured, estimate
    from sweeper.plan import TrialAt
    from tests.unit.test_live_forecast import plan_and_forecast

    plan, forecast = plan_and_forecast(search={"num_trials": 10, "confirm": {"top": 2, "seeds": 2}})
    assert estimate(plan, forecast, Measured(), []).left == forecast.expected  # before launch: the forecast, reruns in
    search_done = [TrialAt(90, False)] + [TrialAt(30, False)] * 2 + [TrialAt(10, False)] * 7
    left = estimate(plan, forecast, Measured(), search_done).left
    assert left.steps == 4 * 90  # the search has ended: its four reruns are what is left
    one_running = estimate(plan, forecast, Measured(), search_done,
                           reruns=[TrialAt(90, False), TrialAt(40, True)]).left
    assert one_running.steps == 50 + 2 * 90


class _Tracker:
    def __init__(self, book):
        self.book, self.discarded = book, []

    def discard_trials(self, records):
        self.discarded += records
        for record in records:
            self.book.trials.pop(record.trial_id, None)


class _Guard:
    def __init__(self, cap):
        self.cap = cap

    def reached(self):
        return self.cap


class _Budget:
    def __init__(self, cap=None, cut=False):
        self.guard, self._cut = _Guard(cap), cut

    def cut(self):
        return self._cut


def _confirmed_setup(book):
    spec = validate_spec(small_sweep("c", search={"num_trials": 3, "confirm": {"top": 2, "seeds": 2}}), base_dir=REPO)
    return SimpleNamespace(spec=spec, plan=SimpleNamespace(trials=3))


def test_a_spent_budget_skips_confirmation_in_one_line_and_a_stopped_search_is_not_confirmed():
    from sweeper.confirm import confirm_best

    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=30)
    for r in (record(1, lr(1e-3), 1.0, step=30), record(2, lr(2e-3), 1.1, step=30), record(3, lr(3e-3), 1.2, step=30),
              record(4, {**lr(1e-3), "training.seed": 1}, 1.3, state=TrialState.STOPPED, confirms=1, step=10)):
        book.trials[r.trial_id] = r
    tracker = _Tracker(book)
    # A trial is the guard's to start: nothing runs when the cap is spent (the stale rerun is discarded).
    confirmation = confirm_best(_confirmed_setup(book), None, None, tracker, _Budget(cap="max_steps"))
    assert [r.number for r in tracker.discarded] == [4]
    assert confirmation.notes == ["Confirmation skipped: budget.max_steps was spent by the search; the best trial is "
                                  "the search's"]
    assert book.chosen is None and book.best().number == 1 and book.confirmation is confirmation
    # A search stopped before its end (a trial unfinished): sweep resume finishes it, then confirms.
    book.trials["t3"].state = TrialState.STOPPED
    assert confirm_best(_confirmed_setup(book), None, None, tracker, _Budget()) is None
