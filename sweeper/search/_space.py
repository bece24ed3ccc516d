"""Search-space translation: `search.parameters` -> Optuna distributions and samplers.
Pure functions, no Ray: the launcher hands these to Ray Tune's OptunaSearch."""

from __future__ import annotations

import optuna

from sweeper.search._reports_so_far import ReportsSoFarSampler
from sweeper.spec import CategoricalDist, LogUniformDist, SearchSpec, SweepSpec, UniformDist, IntUniformDist

__all__ = ["to_optuna_distributions", "parameters_to_optuna", "make_sampler"]


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
        if search.num_trials is None:
            # Until a budget cap no rung closes and no trial is stopped as hopeless: TPE
            # learns from the trials waiting at a rung (sweeper/search/_reports_so_far.py).
            # With a count they reach it pruned soon enough, and reading trials at their
            # first report would rank early values beside full-length ones.
            return ReportsSoFarSampler(seed=search.seed, n_startup_trials=n_startup)
        # No constant liar (Optuna 5 defaults to it): see ReportsSoFarSampler.
        return optuna.samplers.TPESampler(seed=search.seed, n_startup_trials=n_startup, constant_liar=False)
    if search.method == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    grid = {path: list(dist.values) for path, dist in search.parameters.items()}
    return AskTellGridSampler(grid, seed=search.seed)


class AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask-and-tell use. Its after_trial calls study.stop() when the grid
    is exhausted, which raises outside study.optimize(); here Tune stops the sweep after
    search.num_trials, which validation keeps within the grid size (a grid that runs until a
    budget cap: its size, see sweeper/search/_searcher.py)."""

    def after_trial(self, study, trial, state, values) -> None:
        return None
