import math
import optuna
import pytest

from sweeper.errors import UserError
from sweeper.plan._sweep_plan import ClusterResources, TrialResources, concurrency_limit, make_plan
from sweeper.plan._rungs import asha_rungs
from sweeper.search._reports_so_far import ReportsSoFarSampler
from sweeper.search._space import make_sampler, to_optuna_distributions
from sweeper.spec._load import validate_spec
from sweeper.track._mlflow_store import flat_params
from tests.conftest import REPO, small_sweep


def spec_with(parameters: dict, **search):
    raw = small_sweep("x", search={**search, "parameters": parameters})
    return validate_spec(raw, base_dir=REPO)


def test_distributions_translate_with_inclusive_integer_bounds_and_log_scales():
    spec = spec_with({
        "training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2},
        "training.warmup_ratio": {"distribution": "uniform", "low": 0.0, "high": 0.1},
        "lora.r": {"distribution": "int_uniform", "low": 4, "high": 64, "log": True},
        "training.per_device_batch_size": {"distribution": "int_uniform", "low": 2, "high": 8, "step": 2},
        "lora.alpha_per_rank": {"distribution": "categorical", "values": [1, 2, 4]},
    })
    dists = to_optuna_distributions(spec)
    assert dists["training.learning_rate"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert dists["training.warmup_ratio"] == optuna.distributions.FloatDistribution(0.0, 0.1)
    assert dists["lora.r"] == optuna.distributions.IntDistribution(4, 64, log=True)
    assert dists["training.per_device_batch_size"] == optuna.distributions.IntDistribution(2, 8, step=2)
    assert dists["lora.alpha_per_rank"].choices == (1, 2, 4)
    # Both ends of an integer range can be sampled.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = {study.ask({"b": dists["training.per_device_batch_size"]}).params["b"] for _ in range(200)}
    assert seen == {2, 4, 6, 8}


@pytest.mark.parametrize("method, sampler", [("tpe", optuna.samplers.TPESampler), ("random", optuna.samplers.RandomSampler)])
def test_samplers_are_seeded(method, sampler):
    spec = spec_with({"training.learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 1e-2}}, method=method, seed=7)

    def draws():
        study = optuna.create_study(sampler=make_sampler(spec))
        return [study.ask(to_optuna_distributions(spec)).params for _ in range(5)]

    made = make_sampler(spec)
    assert isinstance(made.sampler if isinstance(made, ReportsSoFarSampler) else made, sampler)
    assert draws() == draws()


def test_grid_sampler_covers_the_grid():
    spec = spec_with({"lora.r": {"distribution": "categorical", "values": [4, 8]},
                      "lora.alpha_per_rank": {"distribution": "categorical", "values": [1, 2]}}, method="grid", num_trials=4)
    study = optuna.create_study(sampler=make_sampler(spec))
    seen = set()
    for _ in range(4):
        trial = study.ask(to_optuna_distributions(spec))
        seen.add((trial.params["lora.r"], trial.params["lora.alpha_per_rank"]))
        study.tell(trial, 1.0)
    assert seen == {(4, 1), (4, 2), (8, 1), (8, 2)}


CPU_BOX = ClusterResources(cpus=2, gpus=0, max_node_cpus=2, max_node_gpus=0)


def test_concurrency_comes_from_cluster_and_trial_request():
    assert concurrency_limit(TrialResources(1, 1, 0), CPU_BOX) == 2
    assert concurrency_limit(TrialResources(2, 1, 0), CPU_BOX) == 1
    gpus = ClusterResources(cpus=64, gpus=8, max_node_cpus=32, max_node_gpus=4)
    assert concurrency_limit(TrialResources(2, 4, 1), gpus) == 4


def test_a_trial_that_can_never_fit_is_a_keyed_error():
    with pytest.raises(UserError, match=r"^resources.workers_per_trial: one trial needs 4 CPUs"):
        concurrency_limit(TrialResources(4, 1, 0), CPU_BOX)
    with pytest.raises(UserError, match=r"^resources.gpus_per_worker: 1 GPUs per worker, but the largest node has 0"):
        concurrency_limit(TrialResources(1, 1, 1), CPU_BOX)


def test_custom_resources_per_worker_cap_concurrency_and_one_no_node_has_is_a_keyed_error():
    # Two worker nodes with one "trainer" each, and a head with CPUs but no "trainer".
    cluster = ClusterResources(cpus=8, gpus=0, max_node_cpus=4, max_node_gpus=0, custom={"trainer": (2, 1)})
    assert concurrency_limit(TrialResources(1, 1, 0, {"trainer": 1}), cluster) == 2
    assert concurrency_limit(TrialResources(2, 1, 0, {"trainer": 1}), cluster) == 1
    with pytest.raises(UserError, match=r"^resources.custom.trainer: 2 per worker, but the largest node has 1; start nodes"):
        concurrency_limit(TrialResources(1, 1, 0, {"trainer": 2}), cluster)
    with pytest.raises(UserError, match=r"^resources.custom.a100: 1 per worker, but no node of the cluster has it"):
        concurrency_limit(TrialResources(1, 1, 0, {"a100": 1}), cluster)
    spec = validate_spec(small_sweep("x", resources={"custom": {"trainer": 1}}), base_dir=REPO)
    assert make_plan(spec, cluster).trial_resources.custom_per_worker == {"trainer": 1}


def test_ray_own_resources_are_no_custom_resources():
    with pytest.raises(UserError) as refused:
        validate_spec(small_sweep("x", resources={"custom": {"CPU": 1, "trainer": 0}}), base_dir=REPO)
    assert refused.value.lines == [
        "resources.custom.CPU: is one of Ray's own resources, not a custom one; CPUs and GPUs per worker are "
        "resources.cpus_per_worker and resources.gpus_per_worker",
        "resources.custom.trainer: must be > 0, got 0",
    ]


def test_plan_caps_concurrency_by_request_and_trial_count():
    spec = validate_spec(small_sweep("x", search={"max_concurrent_trials": 1}), base_dir=REPO)
    assert make_plan(spec, CPU_BOX).concurrent_trials == 1
    spec = validate_spec(small_sweep("x", search={"num_trials": 1}), base_dir=REPO)
    assert make_plan(spec, ClusterResources(16, 0, 16, 0)).concurrent_trials == 1


def test_asha_rungs():
    assert asha_rungs(10, 90, 3) == [10, 30]
    assert asha_rungs(1, 27, 3) == [1, 3, 9]


def test_asha_by_promotion_knows_its_step_budget_before_launch():
    def plan(**early_stopping):
        raw = small_sweep("x", search={"num_trials": 9}, training={"max_steps": 90, "eval_every": 10})
        raw["early_stopping"] = early_stopping
        return make_plan(validate_spec(raw, base_dir=REPO), ClusterResources(2, 0, 2, 0))

    # The default: one rung (step 10, 90 / 27 on an evaluation) keeping a quarter: every trial
    # is ranked once and the best 2 of 9 train to the end.
    screen = plan()
    assert screen.rungs == [10]
    assert screen.ladder()[0] == [(10, 9), (90, 2)]
    assert screen.step_budget() == (
        "at most 250 training steps (9 to step 10, 2 to step 90); 810 without early stopping"
    )
    # Every rung below max_steps keeping a third: classic ASHA.
    ladder = plan(reduction_factor=3, rungs="all")
    assert ladder.ladder()[0] == [(10, 9), (30, 3), (90, 1)]
    assert ladder.step_budget().startswith("at most 210 training steps (9 to step 10, 3 to step 30, 1 to step 90)")
    assert plan(reduction_factor=3, rungs=2).rungs == [10, 30]
    # Two startup trials train to step 90 unranked; the other 7 climb the ladder (2 go on from step 10).
    assert plan(reduction_factor=3, rungs="all", startup_trials=2).ladder()[0] == [(10, 9), (30, 4), (90, 3)]
    # Rungs spaced wider than reduction_factor: fewer rungs, more trials on from each
    # (half of 9 at step 10, half of those at step 40; the rung arithmetic keeps 1/eta).
    spaced = plan(reduction_factor=2, rung_spacing=4, rungs="all")
    assert spaced.rungs == [10, 40]
    assert spaced.ladder()[0] == [(10, 9), (40, 4), (90, 2)]
    assert plan(scheduler="asha_stopping").ladder()[1] is False  # Ray's ASHA: no new run per rung
    assert plan(scheduler="none").step_budget() == "810 training steps without early stopping (9 trials x 90)"


def test_a_sweep_until_a_budget_cap_screens_its_trials_later():
    # 243 steps evaluated every 9: with a trial count the screen is at step 9; without one,
    # trials keep coming until the cap, each judged at the rung, and the rung is at step 27.
    def plan(num_trials: int | None, **sections):
        raw = small_sweep("x", training={"max_steps": 243, "eval_every": 9}, **sections)
        raw["early_stopping"] = {}
        raw["search"]["num_trials"] = num_trials
        return make_plan(validate_spec(raw, base_dir=REPO), ClusterResources(2, 0, 2, 0))

    assert plan(27).rungs == [9]
    until_the_cap = plan(None, budget={"max_steps": 3280})
    assert until_the_cap.rungs == [27]
    # What the tracker logs as the sweep's grace period is the rung it ran.
    from sweeper.track._mlflow_store import flat_params

    assert flat_params(until_the_cap.spec)["early_stopping.grace_period"] == "27"


def test_the_rung_arithmetic_counts_whole_trials_and_lets_one_through_a_closed_rung():
    from sweeper.plan._rungs import milestone_counts, promotion_steps, steps_trained

    # 10 trials: floor(10/3) = 3 go on from step 10, max(1, floor(3/3)) = 1 from step 30.
    assert milestone_counts(10, [10, 30], 90, 3) == [(10, 10), (30, 3), (90, 1)]
    assert promotion_steps(10, grace_period=10, max_steps=90, reduction_factor=3) == 10 * 10 + 3 * 20 + 1 * 60
    # 2 trials: floor(2/3) = 0, but a closed rung lets one through.
    assert milestone_counts(2, [10], 30, 3) == [(10, 2), (30, 1)]
    assert steps_trained([(10, 2), (30, 1)]) == 40
    # No rungs: every trial to the end.
    assert promotion_steps(4, grace_period=50, max_steps=30, reduction_factor=3) == 120


def test_tpe_ignores_trials_still_running_such_as_those_paused_at_a_rung():
    """Trials waiting, paused, at an ASHA rung are RUNNING in the study: they must not
    count as bad trials (Optuna 5's constant liar, which then steered TPE away from the
    best region), so TPE suggests the same next config with them as without them."""
    spec = spec_with({"training.learning_rate": {"distribution": "log_uniform", "low": 1e-5, "high": 1e-1}}, num_trials=8)
    space = to_optuna_distributions(spec)

    def next_rate(paused: bool) -> float:
        study = optuna.create_study(sampler=make_sampler(spec))
        for i in range(20):  # finished trials across the range, best near 3e-3
            rate = 10 ** (-5 + 4 * i / 19)
            study.add_trial(optuna.trial.create_trial(params={"training.learning_rate": rate}, distributions=space,
                                                      value=abs(math.log10(rate) + 2.5)))
        for rate in [2e-3, 2.5e-3, 3e-3, 3.5e-3, 4e-3] * 3 if paused else []:
            study.add_trial(optuna.trial.create_trial(params={"training.learning_rate": rate}, distributions=space,
                                                      state=optuna.trial.TrialState.RUNNING))
        return study.ask(space).params["training.learning_rate"]

    assert next_rate(paused=True) == next_rate(paused=False)
    assert 1e-3 < next_rate(paused=True) < 1e-2


def test_tpe_learns_from_trials_that_reported_and_still_run_as_from_trials_pruned_there():
    """A sweep without num_trials (10 random startup trials) whose trials all wait at a
    rung, RUNNING, after one report: TPE leaves its random startup and samples near the
    best of them, as it would had they been pruned there; the study is left as it was."""
    rates = {"training.learning_rate": {"distribution": "log_uniform", "low": 1e-5, "high": 1e-1}}
    raw = small_sweep("x", search={"num_trials": None, "parameters": rates}, budget={"max_steps": 900})
    spec = validate_spec(raw, base_dir=REPO)
    space = to_optuna_distributions(spec)

    def next_rates(state) -> list[float]:
        study = optuna.create_study(sampler=make_sampler(spec))
        for i in range(30):  # one report each, at step 9, across the range; best near 3e-3
            rate = 10 ** (-5 + 4 * i / 29)
            study.add_trial(optuna.trial.create_trial(params={"training.learning_rate": rate}, distributions=space,
                                                      state=state, intermediate_values={9: abs(math.log10(rate) + 2.5)}))
        drawn = []
        for _ in range(8):
            trial = study.ask(space)
            drawn.append(trial.params["training.learning_rate"])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not to be learnt from
        assert [t.state for t in study.get_trials()][:30] == [state] * 30
        return drawn

    waiting = next_rates(optuna.trial.TrialState.RUNNING)
    assert waiting == next_rates(optuna.trial.TrialState.PRUNED)
    assert all(abs(math.log10(rate) + 2.5) < 1 for rate in waiting), waiting


def test_a_sweep_of_one_config_under_asha_plans_every_rung_as_rays_asha_ranks_it():
    # No search.parameters: search.make_scheduler runs Ray's ASHA, which ranks at every rung
    # below max_steps (grace period x eta^k), not the sweeper's one-rung screen.
    raw = small_sweep("x", search={"num_trials": 1, "parameters": {}}, training={"max_steps": 90, "eval_every": 10})
    raw["early_stopping"] = {"scheduler": "asha", "grace_period": 10}
    plan = make_plan(validate_spec(raw, base_dir=REPO), ClusterResources(2, 0, 2, 0))
    assert plan.rungs == [10, 40]
    assert flat_params(plan.spec)["early_stopping.rungs"] == "all below max_steps"
