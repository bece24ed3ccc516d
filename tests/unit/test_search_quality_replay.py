"""The search-quality benchmark's replays (benchmarks/search_quality.py): what they count
decides which placement the README recommends, so their rules are tested on histories
small enough to work out by hand."""

import math

import pytest

from benchmarks.search_quality import (
    Outcome, adaptive_promotion, anytime, capped_promotion, extrapolated_loss, headroom, median_pruning, new_family_example, oracle_screen, paired_difference, parse_shape,
    rank_correlations, resampled_replay, spearman, successive_halving,
)

# Four trials evaluated at steps 1, 2 and 4 (max_steps 4); trial 3 starts slowly and ends best.
HISTORIES = [
    [(1, 2.0), (2, 1.9), (4, 1.8)],
    [(1, 2.1), (2, 2.0), (4, 1.9)],
    [(1, 2.2), (2, 2.2), (4, 2.1)],
    [(1, 2.5), (2, 2.0), (4, 1.5)],
]


def test_startup_trials_train_to_the_end_unranked_and_the_rest_climb_the_rungs():
    # No startup trial: at step 1 the best 2 of 4 (keep 1/2) go on, at step 2 the best 1 of 2;
    # the slow starter is cut at step 1.
    assert successive_halving(HISTORIES, [1, 2], 4, 2) == (1.8, 4 + 2 + 1 + 1)
    # As a startup trial it trains to the end whatever its first evaluation; of the other 3,
    # max(1, floor(3 / 2)) = 1 goes on from step 1, and on from step 2 (at least one always does).
    slow_first = HISTORIES[3:] + HISTORIES[:3]
    assert successive_halving(slow_first, [1, 2], 4, 2, startup=1) == (1.5, 4 + 4 + 1 + 1)


def test_median_pruning_compares_with_the_completed_trials_once_enough_have_completed():
    # With 2 startup trials the first two complete; the third is above their median (2.05) at
    # step 1 and stops there; the fourth too (2.5), though it would have ended best.
    assert median_pruning(HISTORIES, 4, startup=2) == (1.8, 4 + 4 + 1 + 1)
    # With 3 startup trials the fourth is compared at step 1 with 2.0, 2.1, 2.2 (median 2.1): stopped.
    assert median_pruning(HISTORIES, 4, startup=3) == (1.8, 4 + 4 + 4 + 1)
    # Ahead of the median at every step, it completes.
    assert median_pruning(HISTORIES[:3] + [[(1, 2.0), (2, 1.8), (4, 1.5)]], 4, startup=3) == (1.5, 16)


def test_the_resampled_replay_draws_distinct_trials_and_averages_over_draws():
    everything = {"random search": lambda h: (min(v for t in h for _, v in t), len(h) * 4)}
    found = resampled_replay(HISTORIES, 4, everything, draws=10)["random search"]
    # Every draw of all 4 trials holds the best: no draw repeats a trial.
    assert found == {"mean_best": 1.5, "p80_best": 1.5, "mean_steps": 16}
    found = resampled_replay(HISTORIES, 1, everything, draws=400)["random search"]
    assert 1.5 < found["mean_best"] < 2.1 and found["p80_best"] >= found["mean_best"] - 0.5


def test_one_rung_keeping_a_quarter_trains_the_rest_to_the_end():
    # One rung at step 1 keeping max(1, floor(4 / 4)) = 1: the fast starter, to the end.
    assert successive_halving(HISTORIES, [1], 4, 4) == (1.8, 4 + 1 + 1 + 1)


def test_under_a_cap_a_waiting_trial_goes_on_once_among_the_best_share_and_the_cap_cuts_what_is_seen():
    # Keep 1/2 at step 1: trial 0 waits alone (quota 0), trial 1 arrives, then trial 0 goes
    # on (best of 2); trials 2 and 3 arrive, and trial 1 goes on (2nd best of 4). The slow
    # starter (2.5 at step 1) never does: 1.8, however large the cap.
    assert capped_promotion(HISTORIES, 1, 4, 2, cap=100) == 1.8
    # Keeping every trial trains each to the end in turn (16 steps) and finds the slow starter;
    # one step less and its last evaluation falls past the cap.
    assert capped_promotion(HISTORIES, 1, 4, 1, cap=16) == 1.5
    assert capped_promotion(HISTORIES, 1, 4, 1, cap=15) == 1.8
    # A cap of one step: trial 0's first evaluation only.
    assert capped_promotion(HISTORIES, 1, 4, 2, cap=1) == 2.0


def test_the_loops_pruning_under_a_cap_waits_its_warmup_steps():
    # 2 startup trials complete (8 steps). Without a warmup the next two stop at step 1,
    # above the completed trials' median there (2.05).
    assert median_pruning(HISTORIES, 4, startup=2, warmup=0, cap=100)[0] == 1.8
    # Waiting to step 4, the slow starter ends at 1.5 after 16 steps; a cap of 15 cuts it first.
    assert median_pruning(HISTORIES, 4, startup=2, warmup=4, cap=16)[0] == 1.5
    assert median_pruning(HISTORIES, 4, startup=2, warmup=4, cap=15)[0] == 1.8


def test_the_reference_screen_trains_only_trials_of_the_best_share_as_far_as_the_steps_allow():
    # The best half by their ends: trials 0 (1.8) and 3 (1.5). A quarter of 4 trials' steps
    # trains one of them, the first in order; half trains both.
    assert oracle_screen(HISTORIES, 4, 0.25, 0.5) == (1.8, 4)
    assert oracle_screen(HISTORIES, 4, 0.5, 0.5) == (1.5, 8)
    # Never none: at least one trial is trained.
    assert oracle_screen(HISTORIES, 4, 0.1, 0.5) == (1.8, 4)


def test_a_methods_best_within_a_budget_counts_every_trials_steps_so_far():
    outcome = Outcome("m", 0, [(0, "a", 1, 2.0), (1, "b", 1, 2.5), (2, "a", 2, 1.9), (3, "b", 2, 1.7)])
    # After the first three evaluations 2 + 1 steps are trained; the fourth brings 4.
    assert outcome.best_within(3) == 1.9
    assert outcome.best_within(4) == 1.7
    assert outcome.best_within(0) == float("inf")


def test_rank_correlation_against_the_best_or_the_final_eval_loss():
    # Trial 0 leads at step 1 and has the best value (step 2), then overfits: last at the end.
    overfitting = [
        [(1, 2.0), (2, 1.0), (4, 3.0)],
        [(1, 2.5), (2, 1.5), (4, 1.6)],
        [(1, 3.0), (2, 2.0), (4, 2.1)],
    ]
    assert rank_correlations(overfitting, [1]) == {1: 1.0}
    # Ranks at step 1 (1, 2, 3) against the final values' ranks (3, 1, 2): Spearman -0.5.
    assert rank_correlations(overfitting, [1], final=True) == {1: -0.5}


def test_the_base_shape_reads_hidden_size_by_layers_and_refuses_what_tiny_cannot_build():
    assert parse_shape("256x4") == (256, 4)
    for shape in ("12x2", "256", "256x0", "x4"):
        with pytest.raises(ValueError, match="HIDDENxLAYERS"):
            parse_shape(shape)


def test_the_paired_difference_compares_seed_by_seed_and_says_when_seeds_cannot_tell():
    # Better by 0.01 on every seed: the interval is that one value, away from 0.
    always = paired_difference([1.00, 2.00, 3.00], [1.01, 2.01, 3.01])
    assert always["mean"] == pytest.approx(-0.01)
    assert always["low"] == pytest.approx(-0.01) and always["high"] == pytest.approx(-0.01)
    assert (always["better"], always["worse"], always["equal"]) == (3, 0, 0)
    # Better on one seed, worse on another by as much, equal on a third: the interval holds 0.
    mixed = paired_difference([1.00, 2.02, 3.00], [1.02, 2.00, 3.00])
    assert mixed["mean"] == pytest.approx(0.0)
    assert mixed["low"] < 0 < mixed["high"]
    assert (mixed["better"], mixed["worse"], mixed["equal"]) == (1, 1, 1)
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_anytime_reads_each_seeds_best_so_far_at_shares_of_random_searchs_steps():
    # Seed 0 finds 1.7 once 4 steps are trained; seed 1 stops after 2 steps at 2.2.
    seed0 = Outcome("m", 0, [(0, "a", 1, 2.0), (1, "b", 1, 2.5), (2, "a", 2, 1.9), (3, "b", 2, 1.7)])
    seed1 = Outcome("m", 1, [(0, "a", 1, 2.4), (1, "a", 2, 2.2)])
    found = anytime([seed0, seed1], random_steps=8, shares=(0.25, 0.5, 1.0))
    assert found == {0.25: [2.0, 2.2], 0.5: [1.7, 2.2], 1.0: [1.7, 2.2]}  # a run that ended sooner keeps its best


def test_headroom_is_random_searchs_median_trial_minus_its_best_per_seed():
    room = headroom({0: HISTORIES, 1: []})
    # Each trial's best: 1.8, 1.9, 2.1, 1.5; median 1.85.
    assert room == {0: {"best": 1.5, "median": pytest.approx(1.85), "gap": pytest.approx(0.35)}}


def test_the_headroom_tasks_answers_map_each_letter_of_the_word():
    import random

    rng = random.Random(0)
    seen = set()
    for _ in range(60):
        user, assistant = (m["content"] for m in new_family_example(rng)["messages"])
        family, word = user.split(": ")
        seen.add(family)
        expected = {
            "Upper": word.upper(),
            "Double": "".join(c * 2 for c in word),
            "Next": "".join(chr((ord(c) - ord("a") + 1) % 26 + ord("a")) for c in word),
        }[family]
        assert assistant == expected
    assert seen == {"Upper", "Double", "Next"}


# Six trials (max_steps 4, evaluations at 1, 2, 4): trial 3 starts slowly, leads at step 2 and ends best.
SLOW_STARTER = [
    [(1, 2.0), (2, 1.9), (4, 1.8)],
    [(1, 2.1), (2, 2.0), (4, 1.9)],
    [(1, 2.2), (2, 2.2), (4, 2.1)],
    [(1, 2.5), (2, 1.6), (4, 1.5)],
    [(1, 2.6), (2, 2.6), (4, 2.6)],
    [(1, 2.6), (2, 2.6), (4, 2.6)],
]


def test_the_adaptive_rung_moves_later_when_the_promoted_trials_ranks_at_it_disagree_with_their_ends():
    # Never judged misleading (threshold below any correlation): the one rung at step 1, as
    # capped_promotion replays it; keeping half there never promotes the slow starter.
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=100, threshold=-2, min_pairs=2)[0] == 1.8
    assert capped_promotion(SLOW_STARTER, 1, 4, 2, cap=100) == 1.8
    # Always judged misleading once 2 promoted trials ended (trials 0 and 1, 10 steps): the
    # rung moves to step 2; trials 2 and 3, waiting at step 1, train on to it (steps 11, 12:
    # the slow starter's 1.6), trials 4 and 5 arrive there, and of the 6 ranked at step 2 a
    # third may go on: the slow starter, to 1.5.
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=100, threshold=1.5, min_pairs=2)[0] == 1.5
    # Without a cap every trial is drawn (a sweep with a trial count): 6 to step 1, trials 0
    # and 1 to the end (3 + 3), 2 to 5 on to step 2 (4 x 1), the slow starter to the end (2).
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=math.inf, threshold=1.5, min_pairs=2) == (1.5, 6 + 6 + 4 + 2)
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=math.inf, threshold=-2, min_pairs=2) == (1.8, 6 + 9)
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=12, threshold=1.5, min_pairs=2)[0] == 1.6
    assert adaptive_promotion(SLOW_STARTER, [1, 2], 4, 2, cap=11, threshold=1.5, min_pairs=2)[0] == 1.8


def test_the_adaptive_rung_keeps_more_past_it_when_asked_to():
    trials = SLOW_STARTER + [[(1, 2.7), (2, 2.7), (4, 2.7)], [(1, 2.8), (2, 2.8), (4, 2.8)]]
    # Keeping a quarter of 8 at step 1: trials 0 and 1 go on (1.8). Judged misleading after
    # those two, it keeps half: trials 2 and 3 go on too, and the slow starter ends at 1.5.
    assert adaptive_promotion(trials, [1], 4, 4, cap=100, threshold=-2, min_pairs=2, on_low="keep more")[0] == 1.8
    assert adaptive_promotion(trials, [1], 4, 4, cap=100, threshold=1.5, min_pairs=2, on_low="keep more")[0] == 1.5
    with pytest.raises(ValueError, match="on_low"):
        adaptive_promotion(trials, [1], 4, 4, cap=100, on_low="sooner")


def test_rank_correlation_by_rung_is_against_the_eval_loss_at_max_steps():
    # Ranks at step 1 (1, 2, 3, 4, 5, 5.5) and at the end: only the slow starter moves (4th -> 1st).
    found = rank_correlations(SLOW_STARTER, [1, 2], final=True)
    assert found[2] > found[1] > 0.5


def test_spearman_ranks_ties_at_their_mean_and_is_undefined_without_spread():
    assert spearman([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == pytest.approx(-1.0)
    # Ranks (0.5, 0.5, 2) against (0, 1, 2): Pearson 0.866.
    assert spearman([5.0, 5.0, 7.0], [1.0, 2.0, 3.0]) == pytest.approx(0.8660254)
    assert math.isnan(spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert math.isnan(spearman([1.0], [2.0]))


def test_every_task_names_a_space_a_fine_tuning_set_and_a_base_the_benchmark_can_build():
    from benchmarks.search_quality import SFT_EXAMPLES, SPACES, TASKS

    assert set(TASKS) == {"small", "headroom", "misleading"}
    for name, task in TASKS.items():
        assert task["space"] in SPACES and task["sft"] in SFT_EXAMPLES, name
        parse_shape(task["base_shape"])
    # The misleading task is the headroom task with no learning rate below 1e-4.
    differs = {k for k in TASKS["misleading"] if TASKS["misleading"][k] != TASKS["headroom"][k]}
    assert differs == {"space"}
    assert SPACES["upper_lr"]["training.learning_rate"]["low"] == 1e-4


def test_the_extrapolated_curve_reads_a_line_in_log_step_at_max_steps():
    # Falling by 0.3 per doubling of the steps: 2.4, 2.1, 1.8 at 1, 2, 4 -> 1.2 at 16.
    falling = [(1, 2.4), (2, 2.1), (4, 1.8), (8, 1.7), (16, 1.6)]
    assert extrapolated_loss(falling, 4, 16) == pytest.approx(1.2)
    # One evaluation: its value.
    assert extrapolated_loss(falling, 1, 16) == 2.4
    # A flat curve stays where it is.
    assert extrapolated_loss([(1, 2.0), (2, 2.0), (4, 2.0)], 4, 16) == pytest.approx(2.0)


def test_under_a_cap_ranking_by_the_extrapolated_curve_promotes_the_trial_still_falling():
    # At step 2 trial 0 leads (1.9 against 2.0) but has flattened; trial 1 is still falling
    # fast and ends best. Keeping 1/2 at step 2, by value trial 0 goes on; by the curve, trial 1.
    trials = [[(1, 1.95), (2, 1.9), (4, 1.85)], [(1, 2.6), (2, 2.0), (4, 1.4)]]
    assert capped_promotion(trials, 2, 4, 2, cap=100) == 1.85
    assert capped_promotion(trials, 2, 4, 2, cap=100, rank_by=extrapolated_loss) == 1.4


def test_every_sweeper_method_builds_a_spec_the_current_schema_accepts():
    # Each METHODS entry's overrides, as run_sweeper merges them, validated without a sweep:
    # an entry whose keys the schema no longer has fails here, not an hour into a benchmark.
    import inspect
    from pathlib import Path

    import optuna

    from benchmarks.common import REPO, bench_spec
    from benchmarks.search_quality import METHODS, SPACES, Settings, sweep_sections

    data = REPO / "data" / "sft"
    settings = Settings(27, 243, 9, 3, (data / "train.jsonl", data / "eval.jsonl", Path("builtin:tiny-llama")), SPACES["upper_lr"], 27, 1.0)
    tpe = set(inspect.signature(optuna.samplers.TPESampler).parameters) | {"rung_model"}
    for name, overrides in METHODS.items():
        if overrides is None:
            continue  # run in this process: random search, the Optuna loop
        spec = bench_spec(f"bench-sq-{name}-0", **sweep_sections(settings, 0, name))
        assert set(overrides.get("sampler", {})) <= tpe, name
        if "budget_share" in overrides:
            assert spec.search.num_trials is None and spec.budget.max_steps == round(overrides["budget_share"] * 27 * 243), name
