"""Search-space translation: `search.parameters` -> Optuna distributions and samplers.
Pure functions, no Ray: the launcher hands these to Ray Tune's OptunaSearch."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from sweeper.spec.schema import CategoricalDist, LogUniformDist, SearchSpec, SweepSpec, UniformDist
from sweeper.spec.sections import IntUniformDist

__all__ = ["to_optuna_distributions", "parameters_to_optuna", "make_sampler", "ReportsSoFarSampler"]


def to_optuna_distributions(spec: SweepSpec) -> dict[str, optuna.distributions.BaseDistribution]:
    """One Optuna distribution per dotted path. Integer bounds are inclusive, as in YAML."""
    return {path: _to_optuna(dist) for path, dist in spec.search.parameters.items()}


def parameters_to_optuna(parameters: dict[str, dict]) -> dict[str, optuna.distributions.BaseDistribution]:
    """The same for `search.parameters` as plain data (the YAML section, or the JSON a sweep
    recorded in MLflow), validated by the schema first."""
    search = SearchSpec.model_validate({"parameters": parameters})
    return {path: _to_optuna(dist) for path, dist in search.parameters.items()}


def _to_optuna(dist) -> optuna.distributions.BaseDistribution:
    if isinstance(dist, LogUniformDist):
        return optuna.distributions.FloatDistribution(dist.low, dist.high, log=True)
    if isinstance(dist, UniformDist):
        return optuna.distributions.FloatDistribution(dist.low, dist.high)
    if isinstance(dist, IntUniformDist):
        return optuna.distributions.IntDistribution(dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, CategoricalDist):
        return optuna.distributions.CategoricalDistribution(dist.values)
    raise TypeError(f"unknown distribution {dist!r}")


def startup_trials(num_trials: int | None) -> int:
    """TPE's random startup trials: a quarter of the budget (at least 2, at most 10), so
    that TPE models the space on small sweeps too. A sweep that runs until a budget cap
    (no num_trials) gets the most, 10, as Optuna's own default: its trial count is not
    known when the sampler is made (the forecast's is a guess that a cap may undercut)."""
    if num_trials is None:
        return 10
    return max(2, min(10, num_trials // 4))


def make_sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for `search.method`, seeded by `search.seed`."""
    search = spec.search
    if search.method == "tpe":
        n_startup = startup_trials(search.num_trials)
        # No constant liar (Optuna 5 defaults to it): it counts every RUNNING trial as
        # bad, and under ASHA by promotion the trials paused at a rung, waiting because
        # they did well, are RUNNING; TPE then steered away from the best regions
        # (benchmarks/search_quality.py, median of 3 seeds: best eval loss 3.418 with
        # it, 3.372 without, same steps).
        tpe = optuna.samplers.TPESampler(seed=search.seed, n_startup_trials=n_startup, constant_liar=False)
        return ReportsSoFarSampler(tpe)
    if search.method == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    grid = {path: list(dist.values) for path, dist in search.parameters.items()}
    return AskTellGridSampler(grid, seed=search.seed)


class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask-and-tell use. Its after_trial calls study.stop() when the grid
    is exhausted, which raises outside study.optimize(); here Tune stops the sweep after
    search.num_trials, which validation keeps within the grid size (a grid that runs until a
    budget cap: its size, see sweeper/search/searcher.py)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


class ReportsSoFarSampler(optuna.samplers.BaseSampler):
    """A sampler that learns from the trials still running as from trials pruned at their
    last report.

    Optuna's TPE models only finished trials (COMPLETE, PRUNED) and stays random until
    `n_startup_trials` of them exist. Under ASHA by promotion most trials are neither: a
    trial waiting at a rung is RUNNING in the study, and in a sweep that runs until a
    budget cap (no num_trials) no rung closes, so none is pruned before the cap. There TPE
    drew its first 27 trials exactly as random search did (benchmarks/README.md, issue 38).
    Such a trial's evaluations so far are the same evidence a pruned trial's are, and TPE
    already ranks pruned trials by the step they reached, then by their last value: the
    sampler it wraps sees a copy of the study in which every RUNNING trial that has
    reported is PRUNED at its last report. The study itself is not changed.
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler):
        self.sampler = sampler
        # (trial number being sampled, the view built for it): one view per suggestion,
        # not one per parameter (TPE samples each parameter on its own).
        self._view: tuple[int, optuna.Study] | None = None

    def __getstate__(self) -> dict:
        return {"sampler": self.sampler, "_view": None}

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()

    def infer_relative_search_space(self, study, trial):
        return self.sampler.infer_relative_search_space(self._study_for(study, trial), trial)

    def sample_relative(self, study, trial, search_space):
        return self.sampler.sample_relative(self._study_for(study, trial), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.sampler.sample_independent(self._study_for(study, trial), trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self._view = None
        self.sampler.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def _study_for(self, study: optuna.Study, trial) -> optuna.Study:
        if self._view is None or self._view[0] != trial.number:
            self._view = (trial.number, reports_so_far(study, trial.number))
        return self._view[1]


def reports_so_far(study: optuna.Study, sampled: int) -> optuna.Study:
    """`study` as the sampler should see it while it samples trial number `sampled`: its
    finished trials, and its other RUNNING trials that have reported as PRUNED at their
    last report (an in-memory copy; `study` itself where no such trial exists)."""
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == TrialState.RUNNING and t.intermediate_values and t.number != sampled]
    if not running:
        return study
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # "A new study created in memory"
    try:
        view = optuna.create_study(directions=study.directions, sampler=optuna.samplers.RandomSampler())
    finally:
        optuna.logging.set_verbosity(verbosity)
    finished = [t for t in trials if t.state.is_finished()]
    view.add_trials(finished + [_pruned_at_last_report(t) for t in running])
    return view


def _pruned_at_last_report(trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=TrialState.PRUNED,
        params=trial.params,
        distributions=trial.distributions,
        intermediate_values=trial.intermediate_values,
        user_attrs=trial.user_attrs,
    )
