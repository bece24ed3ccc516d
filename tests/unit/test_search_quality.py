"""The search-quality benchmark's figures (benchmarks/search_quality.py): what they count
decides what benchmarks/README.md says of the default, so they are tested on histories
small enough to work out by hand."""

import math

import pytest

from benchmarks.search_quality import (
    Outcome, anytime, exact_match_correlations, headroom, new_family_example, paired_difference, parse_shape,
    random_exact_matches, rank_correlations, spearman,
)

# Four trials evaluated at steps 1, 2 and 4 (max_steps 4); trial 3 starts slowly and ends best.
HISTORIES = [
    [(1, 2.0), (2, 1.9), (4, 1.8)],
    [(1, 2.1), (2, 2.0), (4, 1.9)],
    [(1, 2.2), (2, 2.2), (4, 2.1)],
    [(1, 2.5), (2, 2.0), (4, 1.5)],
]


def test_a_methods_best_within_a_budget_counts_every_trials_steps_so_far():
    outcome = Outcome("m", 0, [(0, "a", 1, 2.0), (1, "b", 1, 2.5), (2, "a", 2, 1.9), (3, "b", 2, 1.7)])
    # After the first three evaluations 2 + 1 steps are trained; the fourth brings 4.
    assert outcome.best_within(3) == 1.9
    assert outcome.best_within(4) == 1.7
    assert outcome.best_within(0) == float("inf")


def test_the_best_exact_match_within_a_budget_counts_only_answers_scored_by_then():
    # Trials a and b end at step 2 with exact matches 0.25 and 0.5; b's answers come last.
    outcome = Outcome("m", 0, [(0, "a", 1, 2.0), (1, "b", 1, 2.5), (2, "a", 2, 1.9), (3, "b", 2, 1.7)],
                      exact_matches=[("a", 2, 0.25), ("b", 2, 0.5)])
    assert outcome.best_exact_match == 0.5
    assert outcome.best_exact_match_within(2) is None  # no trial at its end yet
    assert outcome.best_exact_match_within(3) == 0.25
    assert outcome.best_exact_match_within(4) == 0.5
    assert Outcome("m", 0, [(0, "a", 1, 2.0)]).best_exact_match is None  # pruned before it answered


def test_exact_match_correlation_turns_the_sign_so_that_1_means_the_rung_ranks_as_the_answers_do():
    # Ranked by loss at step 1: trials 0, 1, 2; by exact match at the end 0, 2, 1; trial 3 has no answers.
    histories = [[(1, 2.0), (4, 1.5)], [(1, 2.1), (4, 1.6)], [(1, 2.2), (4, 1.7)], [(1, 1.0)]]
    found = exact_match_correlations(histories, [0.5, 0.1, 0.3, None], [1, 4])
    assert found == {1: pytest.approx(0.5), 4: pytest.approx(0.5)}  # Spearman of ranks (0, 1, 2) and (0, 2, 1)
    assert exact_match_correlations(histories[:3], [0.5, 0.3, 0.1], [1]) == {1: pytest.approx(1.0)}
    assert exact_match_correlations(histories[:3], [0.1, 0.3, 0.5], [1]) == {1: pytest.approx(-1.0)}


def test_random_searchs_exact_matches_line_up_with_its_trials_order():
    runs = [Outcome("random", 0, exact_matches=[("2", 4, 0.3), ("0", 4, 0.1)]), Outcome("random", 1, exact_matches=[("1", 4, 0.9)])]
    assert random_exact_matches(runs, 0, 3) == [0.1, None, 0.3]
    assert random_exact_matches(runs, 1, 2) == [None, 0.9]


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

    assert set(TASKS) == {"small", "headroom", "misleading", "real"}
    for name, task in TASKS.items():
        assert task["space"] in SPACES, name
        if name != "real":  # a pretrained chat model: no base to build
            assert task["sft"] in SFT_EXAMPLES, name
            parse_shape(task["base_shape"])
    # The misleading task is the headroom task with no learning rate below 1e-4.
    differs = {k for k in TASKS["misleading"] if TASKS["misleading"][k] != TASKS["headroom"][k]}
    assert differs == {"space"}
    assert SPACES["upper_lr"]["training.learning_rate"]["low"] == 1e-4


def test_the_real_task_searches_its_yamls_space_and_builds_a_spec_that_answers_at_the_end():
    from benchmarks.common import bench_spec
    from benchmarks.search_quality import REAL_YAML, SPACES, TASKS, Settings, sweep_sections
    from sweeper.spec import read_yaml

    assert SPACES["smollm2"] == read_yaml(REAL_YAML)["search"]["parameters"]
    size = TASKS["real"]
    settings = Settings(size["trials"], size["max_steps"], size["eval_every"], None, SPACES["smollm2"], size["loop_warmup"], 0.0)
    spec = bench_spec("bench-sq-asha-0", yaml=settings.yaml, **sweep_sections(settings, 0, "asha"))
    assert spec.model.name_or_path == "builtin:smollm2-135m-instruct" and spec.data.eval_samples
    assert (spec.search.metric, spec.early_stopping.scheduler) == ("eval_loss", "asha")
    assert spec.generation.when == "end" and spec.training.max_steps == size["max_steps"]


def test_every_sweeper_method_builds_a_spec_the_current_schema_accepts():
    # Each METHODS entry's sections, as run_sweeper merges them, validated without a sweep:
    # an entry whose keys the schema no longer has fails here, not an hour into a benchmark.
    from pathlib import Path

    from benchmarks.common import REPO, bench_spec
    from benchmarks.search_quality import METHODS, SPACES, Settings, sweep_sections
    from sweeper.plan import ClusterResources, make_plan

    data = REPO / "data" / "sft"
    settings = Settings(27, 243, 9, (data / "train.jsonl", data / "eval.jsonl", Path("builtin:tiny-llama")), SPACES["upper_lr"], 27, 1.0)
    rungs = {}
    for name, overrides in METHODS.items():
        if overrides is None:
            continue  # run in this process: random search, the Optuna loop
        spec = bench_spec(f"bench-sq-{name}-0", **sweep_sections(settings, 0, name))
        rungs[name] = make_plan(spec, ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0)).rungs
        if "budget_share" in overrides:
            assert spec.search.num_trials is None and spec.budget.max_steps == round(overrides["budget_share"] * 27 * 243), name
    # The ladders docs/concepts/asha.md compares with the default's one rung at step 9.
    assert (rungs["asha"], rungs["asha_ladder"], rungs["asha_keep2_spacing4"]) == ([9], [9, 27, 81], [9, 36, 144])


# --- the prior candidate: PriorBand-style draws from sweep init's ranges ----------------------

def test_the_prior_is_centred_in_sweep_inits_ranges_with_the_range_as_two_sds_either_side():
    from benchmarks.search_quality import PRIOR_CENTRES, sweep_init_prior
    from sweeper.scaffold._writer import _space

    prior = sweep_init_prior(tiny=False)
    rate = prior["training.learning_rate"]
    # sweep init's SFT rate for a real model: 2e-4, searched 4x either side.
    assert rate["log"] and math.exp(rate["mean"]) == pytest.approx(2e-4) and math.exp(2 * rate["sd"]) == pytest.approx(4)
    warmup = prior["training.warmup_ratio"]
    assert (warmup["mean"] - 2 * warmup["sd"], warmup["mean"] + 2 * warmup["sd"]) == pytest.approx((0.03, 0.1))
    tiny_rate = sweep_init_prior(tiny=True)["training.learning_rate"]
    bounds = (math.exp(tiny_rate["mean"] - 2 * tiny_rate["sd"]), math.exp(tiny_rate["mean"] + 2 * tiny_rate["sd"]))
    assert bounds == pytest.approx((1e-4, 3e-2))  # sweep init's rate for builtin:tiny-llama
    # The rank's centre is one of the ranks sweep init searches.
    ranks = dict((key, dist) for key, dist, _ in _space("sft", tiny=False)[0])["lora.r"]["values"]
    assert PRIOR_CENTRES["lora.r"] in ranks


def test_the_first_trial_is_the_priors_mode_and_the_chance_of_the_prior_then_falls_as_trials_accrue():
    from benchmarks.search_quality import SPACES, prior_draw, prior_mode, prior_probability, sweep_init_prior

    assert [prior_probability(n, 2) for n in (0, 1, 2, 6)] == [1.0, 2 / 3, 0.5, 0.25]
    prior, space = sweep_init_prior(tiny=False), SPACES["smollm2"]
    # The mode on the real task's space: sweep init's 2e-4, and rank 16, the space's nearest to 32.
    assert prior_mode(prior, space) == {"training.learning_rate": pytest.approx(2e-4), "lora.r": 16}
    assert prior_draw(prior, space, 0, seed=5, weight=2) == prior_mode(prior, space)
    # Each trial's draw is its own stream's: the same on every call, whatever was asked before.
    draws = [prior_draw(prior, space, n, seed=0, weight=6) for n in range(400)]
    assert draws == [prior_draw(prior, space, n, seed=0, weight=6) for n in range(400)]
    early, late = sum(d is not None for d in draws[1:50]), sum(d is not None for d in draws[200:400])
    # Expected 6 * sum(1 / (6 + n)) over each span: about 13.6 of 49, and 2.1 per 100 late on.
    assert 7 <= early <= 21 and late <= 12


def test_prior_draws_stay_in_the_space_and_weigh_the_centre_as_documented():
    import random
    import statistics

    from benchmarks.search_quality import CENTRE_WEIGHT, SPACES, prior_config, sweep_init_prior

    rng = random.Random(0)
    space = SPACES["issue"]
    draws = [prior_config(sweep_init_prior(tiny=True), space, rng) for _ in range(4000)]
    rates = [d["training.learning_rate"] for d in draws]
    assert all(space["training.learning_rate"]["low"] <= r <= space["training.learning_rate"]["high"] for r in rates)
    # Log-normal about the geometric middle of 1e-4 and 3e-2 (1.7e-3): the median there.
    assert statistics.median(rates) == pytest.approx(math.sqrt(1e-4 * 3e-2), rel=0.1)
    assert all(0.0 <= d["training.warmup_ratio"] <= 0.2 for d in draws)
    # Rank 32 weighs CENTRE_WEIGHT against 1 for each of the four others: half the draws.
    share = sum(d["lora.r"] == 32 for d in draws) / len(draws)
    assert share == pytest.approx(CENTRE_WEIGHT / (CENTRE_WEIGHT + 4), abs=0.03)
    # The real task's space is narrower than the prior on the low side: truncated, not clipped,
    # so no pile of draws on the bound.
    real = [prior_config(sweep_init_prior(tiny=False), SPACES["smollm2"], rng)["training.learning_rate"] for _ in range(2000)]
    assert min(real) >= 1e-4 and sum(r == 1e-4 for r in real) == 0


def test_the_prior_sampler_hands_optuna_the_priors_configs_and_the_default_sampler_the_rest():
    import optuna

    from benchmarks.search_quality import SPACES, PriorSampler, prior_draw, sweep_init_prior
    from sweeper.search import parameters_to_optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space, prior = SPACES["issue"], sweep_init_prior(tiny=True)
    sampler = PriorSampler(optuna.samplers.TPESampler(seed=0, n_startup_trials=3), prior, space, seed=1, weight=3)
    study = optuna.create_study(sampler=sampler)
    for number in range(20):
        trial = study.ask(parameters_to_optuna(space))
        expected = prior_draw(prior, space, number, seed=1, weight=3)
        if expected is not None:
            assert trial.params == pytest.approx(expected), number
        study.tell(trial, trial.params["training.learning_rate"])  # any value: TPE models what it is told
    from_prior = [n for n in range(20) if prior_draw(prior, space, n, seed=1, weight=3) is not None]
    assert 0 in from_prior and len(from_prior) < 20  # some of each


def test_a_prior_sweeps_searcher_samples_through_the_prior_sampler(tmp_path):
    # The candidate enters the product's searcher by the one name it builds its sampler with:
    # a rename there fails here, not in a benchmark run.
    import sweeper.search._searcher as searcher_module
    from benchmarks.common import bench_spec
    from benchmarks.search_quality import SPACES, TASKS, PriorSampler, Settings, prior_sampler, sweep_sections

    size = TASKS["real"]
    settings = Settings(size["trials"], size["max_steps"], size["eval_every"], None, SPACES["smollm2"], size["loop_warmup"], 0.0)
    spec = bench_spec("bench-sq-prior-0", tmp_path, yaml=settings.yaml, **sweep_sections(settings, 0, "prior"))
    with prior_sampler(settings, 0):
        searcher = searcher_module.make_searcher(spec, tmp_path / "sweep")
    assert isinstance(searcher.sampler, PriorSampler) and searcher.sampler.weight == 2  # TPE's startup trials for 6
    assert not isinstance(searcher_module.make_searcher(spec, tmp_path / "after").sampler, PriorSampler)
